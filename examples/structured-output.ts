import { createCore, pgliteStorage } from 'openwork-core';
import { scriptedModel } from 'openwork-core/testing';
import { z } from 'zod';

const Review = z.object({ verdict: z.enum(['approve', 'request_changes']), comments: z.array(z.string()) });

const core = await createCore({
  storage: pgliteStorage(),
  model: scriptedModel([{ text: '{"verdict":"approve","comments":["clear names"]}' }, { text: 'looks fine to me' }]),
});
const session = await core.createSession();

// The model is asked for this JSON schema; the answer is checked before the turn completes.
const review = await session.run('Review the patch', { outputSchema: Review });
console.log(review.output?.verdict, review.output?.comments.length); // approve 1

// An answer that does not fit fails the turn with a typed code (the answer itself is stored).
const bad = await session.run('Review it again', { outputSchema: Review });
console.log(bad.outcome.status, bad.outcome.status === 'failed' && bad.outcome.code); // failed output_invalid
await core.shutdown();
