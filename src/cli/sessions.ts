/**
 * @module cli/sessions
 * `openwork sessions`: the stored sessions that have a turn, newest first, with what `--session`
 * needs. A session that never started a turn (a chat left at once, a `/new` unused) is not listed.
 */
import { existsSync } from 'node:fs';
import { errorMessage } from '../errors.js';
import type { SessionsOptions } from './options.js';
import { openStorage, storageLabel, storeLockedLine } from './storage.js';
import { terminalText } from './terminal-text.js';

export async function runSessions(options: SessionsOptions, out: NodeJS.WritableStream, err: NodeJS.WritableStream): Promise<number> {
  if (!options.databaseUrl && !existsSync(options.dataDir)) {
    out.write(`no sessions yet (${storageLabel(options)} does not exist; \`openwork chat\` creates it)\n`);
    return 0;
  }
  const storage = openStorage(options);
  try {
    await storage.migrate();
    const sessions = await storage.listSessions({ limit: options.limit, withTurns: true });
    if (sessions.length === 0) {
      out.write(`no sessions with a turn in ${storageLabel(options)}\n`);
      return 0;
    }
    for (const s of sessions) {
      const when = (s.lastTurnAt ?? s.updatedAt).replace(/\.\d+Z$/, 'Z');
      const title = terminalText(s.title ?? '(untitled)', { singleLine: true });
      out.write(`${s.id}  ${when}  ${s.defaultModelId ?? '-'}  ${title}  [${s.workingDirectory}]\n`);
    }
    out.write(`continue one with: openwork chat --session <id>\n`);
    return 0;
  } catch (error) {
    err.write(`openwork: ${storeLockedLine(options, error) ?? `cannot read the session store (${storageLabel(options)}): ${errorMessage(error)}`}\n`);
    return 2;
  } finally {
    await storage.close().catch(() => undefined);
  }
}
