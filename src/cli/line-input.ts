/**
 * @module cli/line-input
 * Lines from stdin, handed out one at a time to whoever asks next (the prompt loop or a permission
 * question), so that typed-ahead lines are never lost and a pipe works like a terminal.
 */
import { createInterface, type Interface } from 'node:readline';

export class LineInput {
  private readonly lines: string[] = [];
  private readonly waiters: Array<(line: string | null) => void> = [];
  private ended = false;
  readonly rl: Interface;

  constructor(input: NodeJS.ReadableStream, output: NodeJS.WritableStream, terminal: boolean) {
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

  /** The next line, or null once the input has ended. */
  next(): Promise<string | null> {
    const line = this.lines.shift();
    if (line !== undefined) return Promise.resolve(line);
    if (this.ended) return Promise.resolve(null);
    return new Promise((resolve) => this.waiters.push(resolve));
  }

  /** Shows a prompt (on a terminal) and waits for the next line. */
  ask(prompt: string): Promise<string | null> {
    this.rl.setPrompt(prompt);
    if (this.lines.length === 0 && !this.ended) this.rl.prompt();
    return this.next();
  }

  close(): void {
    this.rl.close();
  }
}
