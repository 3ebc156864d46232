/**
 * The Turn's pure failure mapping (issue 19 point 1): how what the model actor and the compaction
 * throw becomes the turn's outcome, read over the `errors.ts` classes (`ModelError`,
 * `OpenworkError` and its subclasses) and the model actor's `ModelCallSetupFailure` stage, never
 * over a `code` a plain object carries. Every model, sampling and assembly failure code the
 * reference names for a turn is mapped here once.
 */
import { describe, expect, it } from 'vitest';
import { CommandError, ModelError, OpenworkError, StorageError } from '../../../src/errors.js';
import {
  assemblyFailure,
  compactionFailure,
  counterWriteFailure,
  isContextOverflow,
  modelCallStage,
  modelFailure,
  samplingFailure,
} from '../../../src/machines/turn/outcomes.js';
import { ModelCallSetupFailure } from '../../../src/machines/turn/ports.js';
import { ReloadRequiredError } from '../../../src/services/compaction/compaction.js';
import { CompactionError } from '../../../src/services/compaction/runtime-state.js';
import { AssemblyError } from '../../../src/services/context/assemble.js';
import { ChatStateError } from '../../../src/services/context/chat-state.js';
import { WorldStateError } from '../../../src/services/context/world-state.js';

const failed = (code: string, message: string) => ({ status: 'failed', code, message });
const WORLD_STATE_CODES = ['user_project_context_error', 'project_instruction_error', 'skill_catalog_task_error'] as const;

describe('turn outcomes: the model call', () => {
  it('a failure before the model was asked carries its stage; anything else is a failure of the call itself', () => {
    for (const stage of ['sample', 'assemble', 'record'] as const) expect(modelCallStage(new ModelCallSetupFailure(stage, new Error('x')))).toBe(stage);
    expect(modelCallStage(new ModelError('model_error', 'x'))).toBe(null);
    expect(modelCallStage({ stage: 'record', cause: new Error('x') })).toBe(null);
    expect(new ModelCallSetupFailure('sample', new Error('disk'))).toMatchObject({ stage: 'sample', message: 'disk', cause: new Error('disk') });
  });

  it('World State that cannot be sampled fails the turn with its source\'s code, else as the storage failure that stopped it', () => {
    for (const code of WORLD_STATE_CODES) {
      expect(samplingFailure(new ModelCallSetupFailure('sample', new WorldStateError(code, `${code} text`)))).toEqual(failed(code, `${code} text`));
    }
    expect(samplingFailure(new ModelCallSetupFailure('sample', new StorageError('down')))).toEqual(failed('persistence_error', 'down'));
    expect(samplingFailure(new ModelCallSetupFailure('sample', new CommandError('ownership_lost', 'taken')))).toEqual(failed('ownership_lost', 'taken'));
    expect(samplingFailure(new ModelCallSetupFailure('sample', new ChatStateError('refused')))).toEqual(failed('chat_state_error', 'refused'));
    // A plain object that carries a World State code is not the sampler's failure.
    expect(samplingFailure(new ModelCallSetupFailure('sample', { code: 'project_instruction_error', message: 'plain' }))).toEqual(failed('persistence_error', 'plain'));
  });

  it('a request that cannot be assembled fails with a World State code or chat_state_error, else model_protocol_error', () => {
    for (const code of WORLD_STATE_CODES) {
      expect(assemblyFailure(new ModelCallSetupFailure('assemble', new WorldStateError(code, 'w')))).toEqual(failed(code, 'w'));
    }
    expect(assemblyFailure(new ModelCallSetupFailure('assemble', new ChatStateError('orphan result')))).toEqual(failed('chat_state_error', 'orphan result'));
    expect(assemblyFailure(new ModelCallSetupFailure('assemble', new AssemblyError('too large')))).toEqual(failed('model_protocol_error', 'request assembly failed: too large'));
    expect(assemblyFailure(new ModelCallSetupFailure('assemble', new OpenworkError('mcp_server_unavailable', 'gone')))).toEqual(failed('model_protocol_error', 'gone'));
    expect(assemblyFailure(new ModelCallSetupFailure('assemble', { code: 'chat_state_error', message: 'plain' }))).toEqual(failed('model_protocol_error', 'plain'));
  });

  it('counters that cannot be written fail the turn as the write failed', () => {
    expect(counterWriteFailure(new ModelCallSetupFailure('record', new StorageError('disk')))).toEqual(failed('persistence_error', 'disk'));
    expect(counterWriteFailure(new ModelCallSetupFailure('record', new CommandError('ownership_lost', 'taken')))).toEqual(failed('ownership_lost', 'taken'));
    expect(counterWriteFailure(new ModelCallSetupFailure('record', { code: 'ownership_lost', message: 'plain' }))).toEqual(failed('persistence_error', 'plain'));
  });

  it('the call itself: model_protocol_error when the provider broke the protocol, model_error for anything else, context_overflow before output may compact', () => {
    expect(modelFailure(new ModelError('model_protocol_error', 'bad frame'))).toEqual(failed('model_protocol_error', 'bad frame'));
    expect(modelFailure(new ModelError('model_error', '503', { retryable: true }))).toEqual(failed('model_error', '503'));
    expect(modelFailure(new ModelError('context_overflow', 'too long'))).toEqual(failed('model_error', 'too long'));
    expect(modelFailure({ code: 'model_protocol_error', message: 'plain' })).toEqual(failed('model_error', 'plain'));
    expect(modelFailure('a string')).toEqual(failed('model_error', 'a string'));
    expect(isContextOverflow(new ModelError('context_overflow', 'too long'))).toBe(true);
    expect(isContextOverflow(new ModelError('context_overflow', 'late', { semanticOutput: true }))).toBe(false);
    expect(isContextOverflow(new ModelError('model_error', 'x'))).toBe(false);
    expect(isContextOverflow({ code: 'context_overflow', message: 'plain' })).toBe(false);
  });
});

describe('turn outcomes: compaction', () => {
  it('a failed compaction is compaction_error; one committed but not installed also asks for a reload', () => {
    expect(compactionFailure(new CompactionError('summary invalid'))).toEqual({ outcome: failed('compaction_error', 'summary invalid'), reloadRequired: false });
    expect(compactionFailure(new ReloadRequiredError('cp_1', new Error('no')))).toEqual({
      outcome: failed('compaction_error', 'checkpoint cp_1 was committed but could not be installed: no'),
      reloadRequired: true,
    });
    expect(compactionFailure({ code: 'reload_required', message: 'plain' })).toEqual({ outcome: failed('compaction_error', 'plain'), reloadRequired: false });
    // trust-leftovers: a lease lost before the summary request, or a checkpoint the fence refused.
    expect(compactionFailure(new CommandError('ownership_lost', 'taken over'))).toEqual({ outcome: failed('ownership_lost', 'taken over'), reloadRequired: false });
    expect(compactionFailure({ code: 'ownership_lost', message: 'plain' })).toEqual({ outcome: failed('compaction_error', 'plain'), reloadRequired: false });
  });
});
