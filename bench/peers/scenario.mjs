/**
 * The one scenario every system of the peers benchmark runs (issue 14): a fake in-process model with
 * zero latency that asks for one tool call while fewer than K tool results are in its request, then
 * answers; one instant tool; a fresh session or thread per turn. Each system adapts only the
 * shapes (its own message types), never the decision, so every system does K tool steps per turn.
 */

/** Tool steps per turn (K): the model asks for a tool while fewer than K results are in the request. */
export const K = Number(process.env.BENCH_K ?? 10);

/**
 * The fake model's decision from the number of tool results it sees. Returns the index of the next
 * tool call, or null for the final answer.
 *
 * @param {number} toolResults
 * @returns {number | null}
 */
export function decide(toolResults) {
  return toolResults < K ? toolResults : null;
}

/** The instant tool's whole work. */
export function instantTool(i) {
  return `ok ${i}`;
}

export const FINAL_TEXT = 'finished';
export const USER_TEXT = 'go';
