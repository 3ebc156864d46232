/**
 * @module services/host-slice
 * Slices of the host's main thread (branch trust-stall). A host runs many sessions in one Node
 * process; a turn whose work chains through promises only (a buffered model stream, the commit of a
 * large answer, the validation of its tool calls) never lets a timer run, so one hostile response of
 * 12 MB held every other session's updates, lease renewals and tool timeouts for seconds. The
 * runtime's actors ask `sliceDue()` between steps of such work and, when the current synchronous
 * stretch has run past `SLICE_MS`, `await nextSlice()`: a `setImmediate`, so timers and I/O of
 * every session run before the turn goes on. The answer is the same; only the order against other
 * sessions' work changes.
 *
 * A stretch is measured from the first `sliceDue()` asked in it: that call schedules an immediate
 * that marks the stretch over when the event loop next reaches its check phase. The timer and the
 * clock are the ones of the process at load, so test fake timers installed later never hold a turn.
 */

/** How long a stretch of the runtime's own synchronous work may run before it yields, in milliseconds. */
export const SLICE_MS = 20;

const immediate = globalThis.setImmediate;
const now = performance.now.bind(performance);

let stretchStart: number | null = null;

/** True when the synchronous stretch this call runs in has lasted more than `SLICE_MS`. */
export function sliceDue(): boolean {
  if (stretchStart === null) {
    stretchStart = now();
    immediate(() => {
      stretchStart = null;
    });
    return false;
  }
  return now() - stretchStart > SLICE_MS;
}

/** Resolves once the event loop has run its timers and I/O (a macrotask later). */
export function nextSlice(): Promise<void> {
  return new Promise((resolve) => immediate(resolve));
}

/** Yields to the event loop when the stretch is due; otherwise resolves at once. */
export function yieldIfDue(): Promise<void> | undefined {
  return sliceDue() ? nextSlice() : undefined;
}
