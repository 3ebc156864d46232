/**
 * @module services/model/response-budget
 * The bounds of `stream-events` applied while an OpenAI decoder assembles a response, not after:
 * the characters of text, reasoning and argument deltas a response has streamed in all, the number
 * of tool calls it opens, and each call's arguments. A hostile provider that streams 500 MB of
 * argument deltas for one call used to have all of it joined into one string before the 4 Mi bound
 * saw it; now the call keeps at most `MAX_TOOL_ARGUMENTS_CHARS` characters (past that only their
 * count, which becomes the oversized marker), and the response ends as `model_protocol_error` once
 * its deltas pass `MAX_RESPONSE_CHARS`.
 */
import { protocolError } from './openai-wire.js';
import { MAX_RESPONSE_CHARS, MAX_TOOL_ARGUMENTS_CHARS, MAX_TOOL_CALLS_PER_RESPONSE, oversizedArguments } from './stream-events.js';

/** Counts one response's streamed characters and tool calls; throws `model_protocol_error` past a bound. */
export class ResponseBudget {
  private chars = 0;
  private calls = 0;

  /** Counts `n` characters of a text, reasoning or arguments delta. */
  count(n: number, semantic: boolean): void {
    this.chars += n;
    if (this.chars > MAX_RESPONSE_CHARS) {
      throw protocolError(`the model response carried more than ${MAX_RESPONSE_CHARS} characters of text, reasoning and tool-call arguments`, semantic);
    }
  }

  /** Counts a tool call the response opens. */
  openCall(semantic: boolean): void {
    this.calls += 1;
    if (this.calls > MAX_TOOL_CALLS_PER_RESPONSE) throw protocolError(`the model response made more than ${MAX_TOOL_CALLS_PER_RESPONSE} tool calls`, semantic);
  }
}

/**
 * One tool call's arguments as they stream: the text while it fits `MAX_TOOL_ARGUMENTS_CHARS`,
 * afterwards only its length.
 */
export class BoundedArguments {
  private text = '';
  private chars = 0;

  constructor(initial = '') {
    this.set(initial);
  }

  append(delta: string): void {
    this.chars += delta.length;
    this.text = this.chars > MAX_TOOL_ARGUMENTS_CHARS ? '' : this.text + delta;
  }

  /** Replaces the whole text (a `done` event that repeats it). */
  set(whole: string): void {
    this.chars = whole.length;
    this.text = this.chars > MAX_TOOL_ARGUMENTS_CHARS ? '' : whole;
  }

  /** The arguments, or the oversized marker that validation answers with `invalid_arguments`. */
  value(): string {
    return this.chars > MAX_TOOL_ARGUMENTS_CHARS ? oversizedArguments(this.chars) : this.text;
  }
}
