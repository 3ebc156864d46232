/**
 * @module cli/spinner
 * The one status line of `openwork chat` on a terminal: a spinner, what the turn waits for (the
 * model, a retry, a tool, an approval) and the time it has waited. It owns the bottom line while it
 * spins and clears it before anything else is written, so that output never lands after a frame.
 * Not on a pipe: there it is a no-op, and the output stays free of carriage returns.
 */

const FRAMES = ['⠋', '⠙', '⠹', '⠸', '⠼', '⠴', '⠦', '⠧', '⠇', '⠏'];
const FRAME_MS = 100;

/** "4.2s", "1m 05s": the elapsed time as the status line shows it. */
export function formatElapsed(ms: number): string {
  const seconds = Math.max(0, ms) / 1000;
  if (seconds < 60) return `${seconds.toFixed(1)}s`;
  const whole = Math.floor(seconds);
  return `${Math.floor(whole / 60)}m ${String(whole % 60).padStart(2, '0')}s`;
}

export class Spinner {
  private label: string | null = null;
  /** When the current wait began; a new label for the same wait keeps it. */
  private since = 0;
  /** When a retry fires, for its countdown. */
  private retryAt: number | null = null;
  private frame = 0;
  private timer: NodeJS.Timeout | null = null;
  private drawn = false;

  constructor(
    private readonly out: NodeJS.WritableStream,
    /** False on a pipe: every method does nothing. */
    readonly enabled: boolean,
    private readonly now: () => number = Date.now,
  ) {}

  /** Spins with `label`; `restart` begins a new wait (the elapsed time starts at zero). */
  show(label: string, options: { restart?: boolean; retryInMs?: number } = {}): void {
    if (!this.enabled) return;
    if (this.label === null || options.restart) this.since = this.now();
    this.label = label;
    this.retryAt = options.retryInMs !== undefined ? this.now() + options.retryInMs : null;
    this.draw();
    if (!this.timer) {
      this.timer = setInterval(() => this.draw(), FRAME_MS);
      this.timer.unref();
    }
  }

  /** Stops spinning and clears the line. */
  stop(): void {
    this.clear();
    this.label = null;
    this.retryAt = null;
    if (this.timer) clearInterval(this.timer);
    this.timer = null;
  }

  /** Clears the line for other output; the next frame draws it again below that output. */
  clear(): void {
    if (!this.drawn) return;
    this.out.write('\r\u001b[2K');
    this.drawn = false;
  }

  get active(): boolean {
    return this.label !== null;
  }

  private draw(): void {
    if (this.label === null) return;
    this.frame = (this.frame + 1) % FRAMES.length;
    const now = this.now();
    const label = this.retryAt !== null ? this.label.replace('{retry}', String(Math.max(0, Math.ceil((this.retryAt - now) / 1000)))) : this.label;
    this.out.write(`\r\u001b[2K\u001b[2m${FRAMES[this.frame]} ${label} · ${formatElapsed(now - this.since)}\u001b[22m`);
    this.drawn = true;
  }
}
