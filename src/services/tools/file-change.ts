/**
 * @module services/tools/file-change
 * The `file_change` artifact of `write` and `edit` (reference §10.2 tool-result-channels, §11.2):
 * stored with the tool result, never sent to the model. Hunks have 3 lines of context (Myers via
 * the `diff` package); past 4,000,000 trace units the diff falls back to one prefix/suffix hunk.
 */
import { createHash } from 'node:crypto';
import { structuredPatch } from 'diff';

export const DIFF_TRACE_LIMIT = 4_000_000;

export interface Hunk {
  oldStart: number;
  oldLines: number;
  newStart: number;
  newLines: number;
  lines: string[];
}

export interface FileChangeArtifact {
  type: 'file_change';
  changeId: string;
  path: string;
  kind: 'created' | 'modified';
  additions: number;
  deletions: number;
  hunks: Hunk[];
  beforeHash: string | null;
  afterHash: string;
  beforeContent: string | null;
  afterContent: string;
  undone: boolean;
  [key: string]: unknown;
}

export function sha256(text: string | Buffer): string {
  return createHash('sha256').update(text).digest('hex');
}

function splitLines(text: string): string[] {
  if (text === '') return [];
  const lines = text.split('\n');
  if (lines[lines.length - 1] === '') lines.pop();
  return lines;
}

/** One hunk replacing the middle that differs: the fallback when Myers would be too costly. */
function prefixSuffixHunk(before: string, after: string): Hunk[] {
  const a = splitLines(before);
  const b = splitLines(after);
  let prefix = 0;
  while (prefix < a.length && prefix < b.length && a[prefix] === b[prefix]) prefix += 1;
  let suffix = 0;
  while (suffix < a.length - prefix && suffix < b.length - prefix && a[a.length - 1 - suffix] === b[b.length - 1 - suffix]) suffix += 1;
  const removed = a.slice(prefix, a.length - suffix);
  const added = b.slice(prefix, b.length - suffix);
  if (removed.length === 0 && added.length === 0) return [];
  const start = Math.max(0, prefix - 3);
  const before3 = a.slice(start, prefix);
  const after3 = a.slice(a.length - suffix, Math.min(a.length, a.length - suffix + 3));
  return [
    {
      oldStart: start + 1,
      oldLines: before3.length + removed.length + after3.length,
      newStart: start + 1,
      newLines: before3.length + added.length + after3.length,
      lines: [...before3.map((l) => ` ${l}`), ...removed.map((l) => `-${l}`), ...added.map((l) => `+${l}`), ...after3.map((l) => ` ${l}`)],
    },
  ];
}

export function diffHunks(before: string, after: string): Hunk[] {
  const units = splitLines(before).length + splitLines(after).length + 1;
  const patch = structuredPatch('a', 'b', before, after, undefined, undefined, { context: 3, maxEditLength: Math.max(1, Math.floor(DIFF_TRACE_LIMIT / units)) });
  if (!patch) return prefixSuffixHunk(before, after);
  return patch.hunks.map((h) => ({ oldStart: h.oldStart, oldLines: h.oldLines, newStart: h.newStart, newLines: h.newLines, lines: h.lines.filter((l) => !l.startsWith('\\')) }));
}

export function fileChangeArtifact(input: { changeId: string; path: string; before: string | null; after: string }): FileChangeArtifact {
  const hunks = diffHunks(input.before ?? '', input.after);
  let additions = 0;
  let deletions = 0;
  for (const hunk of hunks) {
    for (const line of hunk.lines) {
      if (line.startsWith('+')) additions += 1;
      else if (line.startsWith('-')) deletions += 1;
    }
  }
  return {
    type: 'file_change',
    changeId: input.changeId,
    path: input.path,
    kind: input.before === null ? 'created' : 'modified',
    additions,
    deletions,
    hunks,
    beforeHash: input.before === null ? null : sha256(input.before),
    afterHash: sha256(input.after),
    beforeContent: input.before,
    afterContent: input.after,
    undone: false,
  };
}
