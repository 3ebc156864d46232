/**
 * The world configurations the statechart paths are generated under. Each keeps its graph small by
 * varying one area (the model stream, the tool calls, the host commands, compaction, ...); together
 * they reach every transition that a stimulus can fire.
 */
import type { CommandKind, ToolKind, WorldConfig } from './stimuli.js';

const ALL_TOOLS: ToolKind[] = ['ok_a', 'ok_b', 'bad_json', 'bad_args', 'unknown', 'explode', 'plan', 'bad_plan'];
const DECISIONS: CommandKind[] = ['resolve_allow_once', 'resolve_deny', 'resolve_allow_for_turn', 'resolve_allow_for_session'];

const base: WorldConfig = {
  name: 'base',
  maxTurns: 1,
  limits: { maxModelCalls: 2, doomLoopThreshold: 3 },
  compaction: false,
  assembleFails: false,
  nonInteractive: false,
  maxCallsPerResponse: 1,
  toolKinds: ['ok_a'],
  model: ['completed', 'end'],
  commands: ['start'],
  ports: {},
};

const OK_TURN: WorldConfig['ports'] = { beginTurn: ['ok'], recordModelCallStart: ['ok'], persistAssistantMessage: ['ok'], finishTurn: ['ok'], record: ['ok'] };

export const CONFIGS: WorldConfig[] = [
  { ...base, name: 'model stream', model: ['text', 'reasoning', 'opaque', 'completed', 'end', 'protocol', 'error'], commands: ['start', 'cancel', 'shutdown'] },
  {
    ...base,
    name: 'tool calls',
    limits: { maxModelCalls: 2, doomLoopThreshold: 2 },
    toolKinds: ALL_TOOLS,
    commands: ['start', 'cancel', 'shutdown', ...DECISIONS],
    ports: { ...OK_TURN, record: ['ok', 'fail'] },
  },
  {
    ...base,
    name: 'batches',
    maxCallsPerResponse: 2,
    toolKinds: ['ok_a', 'plan', 'unknown'],
    commands: ['start', 'cancel', 'resolve_deny', 'resolve_allow_for_turn'],
    ports: { ...OK_TURN, authorize: ['execute', 'card'], execute: ['succeed', 'cancelled'], recordCancelledCalls: ['ok', 'fail'] },
  },
  {
    ...base,
    name: 'answers',
    commands: ['start', 'start_dup', 'cancel_other', 'steer_other', 'resolve_wrong_call', 'resolve_other_turn', 'shutdown'],
    ports: { ...OK_TURN, authorize: ['card'], execute: ['succeed'] },
  },
  {
    ...base,
    name: 'steering and mailbox',
    commands: ['start', 'steer', 'deliver', 'cancel'],
    ports: { ...OK_TURN, drainInbox: ['ok', 'fail'], authorize: ['execute'], execute: ['succeed'] },
  },
  {
    ...base,
    name: 'maintenance and modes',
    commands: ['start', 'maintenance_begin', 'maintenance_end', 'maintenance_end_reload', 'deliver', 'set_mode', 'cancel_other', 'steer_other', 'resolve_other_turn', 'shutdown'],
    model: ['completed', 'end'],
    toolKinds: [],
    ports: { ...OK_TURN, finishTurn: ['ok', 'not_running', 'fail'] },
  },
  {
    ...base,
    name: 'grants and modes in a turn',
    commands: ['start', 'set_mode', 'resolve_allow_for_session', 'resolve_allow_once'],
    ports: { ...OK_TURN, authorize: ['card'], execute: ['succeed'] },
  },
  { ...base, name: 'compaction', compaction: true, model: ['completed', 'end', 'overflow', 'text'], commands: ['start', 'cancel', 'shutdown'] },
  { ...base, name: 'assembly failure', assembleFails: true },
  { ...base, name: 'sub-agent', nonInteractive: true, ports: { authorize: ['card'] } },
  { ...base, name: 'model call limit', limits: { maxModelCalls: 1, doomLoopThreshold: 3 } },
  { ...base, name: 'cancel while assembling', interrupt: { machine: 'turn', state: JSON.stringify({ running_model: 'assembling' }), cmd: 'cancel' } },
  { ...base, name: 'shutdown while assembling', interrupt: { machine: 'turn', state: JSON.stringify({ running_model: 'assembling' }), cmd: 'shutdown' } },
  { ...base, name: 'cancel while validating', interrupt: { machine: 'toolCall', state: JSON.stringify('validating'), cmd: 'cancel' } },
  { ...base, name: 'shutdown while validating', interrupt: { machine: 'toolCall', state: JSON.stringify('validating'), cmd: 'shutdown' } },
];

/** Larger worlds for `npm run fuzz` (MODEL_DEPTH=deep): more interleavings, minutes rather than seconds. */
export const DEEP_CONFIGS: WorldConfig[] = [
  {
    ...base,
    name: 'deep: stream and tools',
    limits: { maxModelCalls: 2, doomLoopThreshold: 2 },
    toolKinds: ALL_TOOLS,
    model: ['text', 'reasoning', 'opaque', 'completed', 'end', 'protocol', 'error', 'overflow'],
    commands: ['start', 'cancel', 'shutdown', 'resolve_allow_once', 'resolve_deny', 'resolve_allow_for_turn'],
  },
  {
    ...base,
    name: 'deep: batches with every outcome',
    maxCallsPerResponse: 2,
    toolKinds: ['ok_a', 'ok_b', 'plan', 'bad_json'],
    commands: ['start', 'cancel', 'shutdown', ...DECISIONS],
  },
  {
    ...base,
    name: 'deep: two turns with commands',
    maxTurns: 2,
    commands: ['start', 'start_dup', 'cancel', 'steer', 'deliver', 'set_mode', 'maintenance_begin', 'maintenance_end', 'shutdown', 'resolve_allow_for_session'],
    ports: { ...OK_TURN, finishTurn: ['ok', 'fail'], drainInbox: ['ok', 'fail'], authorize: ['card', 'execute'], execute: ['succeed'] },
  },
];
