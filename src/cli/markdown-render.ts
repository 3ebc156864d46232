/**
 * @module cli/markdown-render
 * Markdown rendered for a terminal by `marked` with `marked-terminal`. Apart from markdown.ts (the
 * block splitting) because loading it costs a few hundred milliseconds (marked-terminal loads
 * highlight.js and its languages), which `openwork chat` spends after its first prompt is shown,
 * while the user types, instead of before (issue 14.4, docs/benchmarks.md).
 */
import { Marked } from 'marked';
import { markedTerminal } from 'marked-terminal';

/** Renders one or more complete Markdown blocks for a terminal `width` columns wide. */
export function markdownRenderer(width: number): (markdown: string) => string {
  const marked = new Marked();
  // reflowText off: the terminal wraps, and reflowing would break code and long URLs.
  marked.use(markedTerminal({ width, reflowText: false, tab: 2 }) as Parameters<Marked['use']>[0]);
  return (markdown) => {
    const rendered = marked.parse(markdown, { async: false });
    // One blank line between blocks at most, and the block ends its own line.
    return `${rendered.replace(/\n{3,}/g, '\n\n').replace(/\s+$/, '')}\n`;
  };
}
