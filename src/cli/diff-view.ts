/**
 * @module cli/diff-view
 * What `write` and `edit` changed, as a unified diff (the `diff` package): added lines green,
 * removed lines red, hunk headers dim on a colour terminal, plain text otherwise. Beyond a
 * screenful the rest is counted, not printed ("… 120 more lines").
 */
import { structuredPatch } from 'diff';
import type { Style } from './style.js';
import { terminalText } from './terminal-text.js';

/** The diff lines shown at most: a terminal's height less room for the prompt, 40 on a pipe. */
export function diffLineBudget(rows: number | undefined): number {
  return rows && rows > 0 ? Math.max(8, rows - 6) : 40;
}

/**
 * The lines that show `before` → `after` of `path` (before null: a new file), at most `maxLines`
 * of diff body; empty when nothing changed.
 */
export function diffLines(path: string, before: string | null, after: string, style: Style & { cyan(text: string): string }, maxLines: number): string[] {
  const patch = structuredPatch(path, path, before ?? '', after, '', '', { context: 3 });
  const body: string[] = [];
  let added = 0;
  let removed = 0;
  for (const hunk of patch.hunks) {
    body.push(style.cyan(`@@ -${hunk.oldStart},${hunk.oldLines} +${hunk.newStart},${hunk.newLines} @@`));
    for (const line of hunk.lines) {
      if (line.startsWith('\\')) continue; // "\ No newline at end of file": noise in a terminal.
      // File contents are the model's (or a hostile file's): their control characters are shown, not run.
      const shown = terminalText(line);
      if (line.startsWith('+')) {
        added += 1;
        body.push(style.green(shown));
      } else if (line.startsWith('-')) {
        removed += 1;
        body.push(style.red(shown));
      } else body.push(style.dim(shown));
    }
  }
  if (body.length === 0) return [];
  const header = style.bold(`${before === null ? 'created' : 'changed'} ${terminalText(path, { singleLine: true })} (+${added} -${removed})`);
  const shown = body.slice(0, maxLines);
  const more = body.length - shown.length;
  return [header, ...shown.map((l) => `  ${l}`), ...(more > 0 ? [style.dim(`  … ${more} more line${more === 1 ? '' : 's'}`)] : [])];
}
