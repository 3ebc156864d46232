/**
 * The longest the event loop was held while `run` ran: a 20 ms timer notes the gap between its
 * ticks, so a synchronous stretch of the host (a parse, a walk, a render) shows as a gap this long.
 */
export async function longestStall<T>(run: () => Promise<T>): Promise<{ value: T; stallMs: number }> {
  let last = Date.now();
  let stallMs = 0;
  const timer = setInterval(() => {
    stallMs = Math.max(stallMs, Date.now() - last);
    last = Date.now();
  }, 20);
  try {
    const value = await run();
    stallMs = Math.max(stallMs, Date.now() - last);
    return { value, stallMs };
  } finally {
    clearInterval(timer);
  }
}
