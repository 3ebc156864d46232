/**
 * @module cli/line-input
 * Lines from stdin, handed out one at a time to whoever asks next (the prompt loop or a permission
 * question), so that typed-ahead lines are never lost and a pipe works like a terminal.
 */
import { clearLine, createInterface, cursorTo, type Interface } from 'node:readline';

export class LineInput {
  private readonly lines: string[] = [];
  private readonly waiters: Array<(line: string | null) => void> = [];
  private ended = false;
  readonly rl: Interface;

  constructor(
    input: NodeJS.ReadableStream,
    private readonly output: NodeJS.WritableStream,
    private readonly terminal: boolean,
  ) {
    this.rl = createInterface({ input, output, terminal });
    this.rl.on('line', (line) => {
      const waiter = this.waiters.shift();
      if (waiter) waiter(line);
      else this.lines.push(line);
    });
    this.rl.on('close', () => {
      this.ended = true;
      for (const waiter of this.waiters.splice(0)) waiter(null);
    });
  }

  /**
   * The next line, or null once the input has ended, or undefined when `signal` aborts first
   * (then the line, when it comes, stays for the next reader).
   */
  next(signal?: AbortSignal): Promise<string | null | undefined> {
    const line = this.lines.shift();
    if (line !== undefined) return Promise.resolve(line);
    if (this.ended) return Promise.resolve(null);
    if (signal?.aborted) return Promise.resolve(undefined);
    return new Promise((resolve) => {
      const waiter = (value: string | null) => {
        signal?.removeEventListener('abort', onAbort);
        resolve(value);
      };
      const onAbort = () => {
        const i = this.waiters.indexOf(waiter);
        if (i >= 0) this.waiters.splice(i, 1);
        resolve(undefined);
      };
      signal?.addEventListener('abort', onAbort, { once: true });
      this.waiters.push(waiter);
    });
  }

  /** Shows a prompt and waits for the next line (see `next`). */
  ask(prompt: string, signal?: AbortSignal): Promise<string | null | undefined> {
    this.rl.setPrompt(prompt);
    if (this.lines.length === 0 && !this.ended) this.rl.prompt();
    return this.next(signal);
  }

  /**
   * Writes whole lines. While a prompt waits on a terminal, they go above it, and the prompt is
   * drawn again with what was typed so far (the chat's header arriving while the store opens).
   */
  printAbovePrompt(text: string): void {
    if (!this.terminal || this.waiters.length === 0) {
      this.output.write(text);
      return;
    }
    clearLine(this.output, 0);
    cursorTo(this.output, 0);
    this.output.write(text);
    this.rl.prompt(true);
  }

  close(): void {
    this.rl.close();
  }
}
