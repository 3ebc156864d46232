/**
 * The tool-call machine's pure decisions (issue 19 point 1): how a failure becomes a terminal, and
 * the doom-loop count. They are read over the `errors.ts` classes, not over a `code` string any
 * object may carry, so a thrown value that only looks like a fence refusal does not end the turn
 * `ownership_lost`.
 */
import { describe, expect, it } from 'vitest';
import { CommandError, StorageError } from '../../../src/errors.js';
import { countCall, countValidatedCall, isDoomLoop, isDoomLoopCall, waitTimeoutsReachThreshold } from '../../../src/machines/tool-call/doom-loop.js';
import { actorFailureResult, recordFailureTerminal, stopBeforeRun, storageTerminalCode, terminalAfterRun } from '../../../src/machines/tool-call/outcomes.js';
import { ACTOR_STOPPED_TEXT, CANCELLED_BEFORE_RUN_TEXT } from '../../../src/protocol/model-texts.js';
import { cancelledResult, succeededResult } from '../../../src/protocol/tool-result.js';
import { ChatStateError } from '../../../src/services/context/chat-state.js';

describe('tool-call outcomes', () => {
  it('a refused result write ends the turn by who refused it: the fence, the conversation, or the database', () => {
    const fenced = new CommandError('ownership_lost', 'owned elsewhere');
    expect(recordFailureTerminal(fenced)).toEqual({ code: 'ownership_lost', message: 'owned elsewhere' });
    expect(recordFailureTerminal(new ChatStateError('no such call'))).toEqual({ code: 'chat_state_error', message: 'no such call' });
    expect(recordFailureTerminal(new StorageError('disk full'))).toEqual({ code: 'persistence_error', message: 'disk full' });
    // A value that merely says `ownership_lost` is not the fence's refusal.
    expect(recordFailureTerminal({ code: 'ownership_lost', message: 'forged' })).toEqual({ code: 'persistence_error', message: 'forged' });
    expect(storageTerminalCode(fenced)).toBe('ownership_lost');
    expect(storageTerminalCode(new ChatStateError('x'))).toBe('persistence_error');
  });

  it('an actor that threw answers execution_failed with its message, or the thrown value itself', () => {
    expect(actorFailureResult(new Error('boom'))).toEqual({ status: 'failed', text: 'boom', error: { code: 'execution_failed', message: 'boom', retryable: false } });
    expect(actorFailureResult('plain')).toEqual({ status: 'failed', text: 'plain', error: { code: 'execution_failed', message: 'plain', retryable: false } });
  });

  it('a stop or cancel decides the result and the terminal the same way before and after the tool ran', () => {
    expect(stopBeforeRun(true)).toEqual({
      stopRequest: 'stop',
      result: { status: 'outcome_unknown', text: ACTOR_STOPPED_TEXT, error: { code: 'outcome_unknown', message: ACTOR_STOPPED_TEXT, retryable: false } },
      terminal: { code: 'actor_stopped', message: 'the session actor stopped' },
    });
    expect(stopBeforeRun(false).result).toEqual({ status: 'cancelled', text: CANCELLED_BEFORE_RUN_TEXT, error: { code: 'cancelled', message: CANCELLED_BEFORE_RUN_TEXT, retryable: false } });
    expect(terminalAfterRun(null, succeededResult('ok'))).toBeNull();
    expect(terminalAfterRun(null, cancelledResult('aborted'))).toEqual({ code: 'cancelled', message: 'the turn was cancelled' });
    expect(terminalAfterRun('stop', succeededResult('ok'))).toEqual({ code: 'actor_stopped', message: 'the session actor stopped while a tool was running' });
  });
});

describe('doom loop', () => {
  it('counts the same call with the same arguments in any key order, and starts again on any other call', () => {
    let doom = { signature: null as string | null, count: 0 };
    doom = countCall(doom, 'read', { path: 'a', offset: 1 });
    doom = countCall(doom, 'read', { offset: 1, path: 'a' });
    expect(doom.count).toBe(2);
    expect(isDoomLoop(doom, 3)).toBe(false);
    expect(isDoomLoop(countCall(doom, 'read', { path: 'a', offset: 1 }), 3)).toBe(true);
    expect(countCall(doom, 'read', { path: 'b', offset: 1 }).count).toBe(1);
    expect(countCall(doom, 'grep', { path: 'a', offset: 1 }).count).toBe(1);
  });

  it('the guards\' rule over a validated call: wait_agent is never counted nor refused; its timeouts have a streak of their own', () => {
    const two = countCall(countCall({ signature: null, count: 0 }, 'read', { path: 'a' }), 'read', { path: 'a' });
    expect(isDoomLoopCall(two, 'read', { path: 'a' }, 3)).toBe(true);
    expect(isDoomLoopCall(two, 'read', { path: 'b' }, 3)).toBe(false);
    expect(isDoomLoopCall(two, 'read', { path: 'a' }, 4)).toBe(false);
    expect(countValidatedCall(two, 'read', { path: 'a' })).toEqual({ signature: 'read\u0000{"path":"a"}', count: 3 });
    const waits = countCall(countCall({ signature: null, count: 0 }, 'wait_agent', {}), 'wait_agent', {});
    expect(countValidatedCall(waits, 'wait_agent', {})).toBe(waits);
    expect(isDoomLoopCall(waits, 'wait_agent', {}, 1)).toBe(false);
    expect(waitTimeoutsReachThreshold(1, 3)).toBe(false);
    expect(waitTimeoutsReachThreshold(2, 3)).toBe(true);
  });
});
