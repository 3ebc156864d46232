/**
 * @module services/tools/observations
 * Read-before-edit (reference §11.2 `FileObservations`): per session and in memory only, the hash
 * of each file as the model last read or wrote it. Editing an existing file needs a matching entry.
 */

export const readFirstText = (path: string) => `Read ${path} before editing it.`;
export const changedSinceReadText = (path: string) => `${path} changed since you last read it (by you via bash, or by the user). Read it again before editing.`;

/** Files remembered per session; the oldest entries go first past this bound. */
const MAX_FILES_PER_SESSION = 10_000;

export class FileObservations {
  private readonly sessions = new Map<string, Map<string, string>>();

  record(sessionId: string, path: string, hash: string): void {
    let files = this.sessions.get(sessionId);
    if (!files) {
      files = new Map();
      this.sessions.set(sessionId, files);
    }
    files.delete(path);
    files.set(path, hash);
    if (files.size > MAX_FILES_PER_SESSION) files.delete(files.keys().next().value!);
  }

  /** `null` when the file may be edited, else the refusal text. */
  checkEditable(sessionId: string, path: string, currentHash: string): string | null {
    const seen = this.sessions.get(sessionId)?.get(path);
    if (seen === undefined) return readFirstText(path);
    return seen === currentHash ? null : changedSinceReadText(path);
  }

  forgetSession(sessionId: string): void {
    this.sessions.delete(sessionId);
  }
}
