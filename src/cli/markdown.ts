/**
 * @module cli/markdown
 * The answer as Markdown on a terminal (`marked` with `marked-terminal`: headings, emphasis, lists,
 * tables, code blocks highlighted). A streamed answer is rendered one completed block at a time: a
 * block is complete at a blank line outside a code fence, so a paragraph appears when it is
 * finished, a code block when its fence closes, and the rest when the message ends. On a pipe the
 * CLI does not use this module: the text streams raw, as the model wrote it. The renderer itself
 * (`marked`, whose terminal renderer loads highlight.js) is in markdown-render.ts, which `chat` loads
 * only after its first prompt is on screen (issue 14.4).
 */

/** Whether `line` opens or closes a fenced code block (``` or ~~~, up to 3 spaces of indent). */
function isFence(line: string): boolean {
  return /^ {0,3}(```|~~~)/.test(line);
}

/**
 * Where the completed blocks of `text` end: the offset just after the last blank line that lies
 * outside a code fence, or 0 when no block is complete yet.
 */
export function completedBlocksEnd(text: string): number {
  let inFence = false;
  let end = 0;
  let offset = 0;
  const lines = text.split('\n');
  // The last element is a line still being written: it can neither close a fence nor be blank yet.
  for (let i = 0; i < lines.length - 1; i++) {
    const line = lines[i]!;
    offset += line.length + 1;
    if (isFence(line)) {
      inFence = !inFence;
      // A closed fence completes its block at once.
      if (!inFence) end = offset;
      continue;
    }
    if (!inFence && line.trim() === '' && offset > 1) end = offset;
  }
  return end;
}

/** Collects a streamed answer and hands out its completed blocks, rendered. */
export class MarkdownStream {
  private buffer = '';

  constructor(private readonly render: (markdown: string) => string) {}

  /** Adds a delta; returns the rendered blocks it completed ('' when none). */
  push(delta: string): string {
    this.buffer += delta;
    const end = completedBlocksEnd(this.buffer);
    if (end === 0) return '';
    const done = this.buffer.slice(0, end);
    this.buffer = this.buffer.slice(end);
    return done.trim() === '' ? '' : this.render(done);
  }

  /** The message ended: the rest, rendered ('' when nothing is left). */
  flush(): string {
    const rest = this.buffer;
    this.buffer = '';
    return rest.trim() === '' ? '' : this.render(rest);
  }

  /** The message was discarded: its unrendered rest goes with it. */
  drop(): void {
    this.buffer = '';
  }

  get pending(): boolean {
    return this.buffer.trim() !== '';
  }
}
