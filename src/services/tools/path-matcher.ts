/**
 * @module services/tools/path-matcher
 * glob's pattern and grep's `include`, matched off the main thread. picomatch compiles a glob to a
 * JavaScript regular expression, which backtracks: the extglob `+(+(a|aa))b` takes 40 s on a
 * 20-character file name, and plain stars (`*a*a*a*a*a*b`) grow polynomially to hours on a long
 * name, one the model can create itself. On the main thread that froze every session, the
 * inspector and the lease heartbeats. So the walk only collects the candidate paths, and their
 * matching runs in grep's worker (`grep-matcher.ts`), one path per line, which is terminated at the
 * call's deadline or on cancel.
 */
import picomatch from 'picomatch';
import { LineMatcher } from './grep-matcher.js';

export type PathPattern = { ok: true; regex: RegExp; basename: boolean } | { ok: false; message: string };

/**
 * The regular expression of a glob, as picomatch builds it (dot files included, `!` negation
 * honoured). A pattern without `/` matches file names at any depth, so it is matched against the
 * last component of each path.
 */
export function pathPattern(pattern: string): PathPattern {
  try {
    return { ok: true, regex: picomatch.makeRe(pattern, { dot: true }), basename: !pattern.includes('/') };
  } catch (error) {
    return { ok: false, message: (error as Error).message };
  }
}

export type PathMatchOutcome = { kind: 'matched'; matched: boolean[] } | { kind: 'deadline' } | { kind: 'aborted' } | { kind: 'failed'; message: string };

/**
 * Which of `paths` (relative, `/`-separated) the pattern matches, computed in a worker that is
 * terminated at `deadline` or on abort. A name containing a newline cannot be sent as one line; it
 * is left unmatched.
 */
export async function matchPaths(pattern: Extract<PathPattern, { ok: true }>, paths: readonly string[], stop: { signal: AbortSignal; deadline: number }): Promise<PathMatchOutcome> {
  if (paths.length === 0) return { kind: 'matched', matched: [] };
  const keys = paths.map((p) => {
    const key = pattern.basename ? p.slice(p.lastIndexOf('/') + 1) : p;
    // A line that can never match: the key is left out of the match.
    return key.includes('\n') ? '' : key;
  });
  const matcher = new LineMatcher(pattern.regex.source, pattern.regex.flags);
  try {
    const outcome = await matcher.match(Buffer.from(keys.join('\n'), 'utf8'), keys.length, stop);
    if (outcome.kind !== 'matched') return outcome;
    const matched = keys.map(() => false);
    for (const match of outcome.matches) {
      const i = match.line - 1;
      if (paths[i] !== undefined && keys[i] !== '' && !paths[i]!.includes('\n')) matched[i] = true;
    }
    return { kind: 'matched', matched };
  } finally {
    matcher.close();
  }
}
