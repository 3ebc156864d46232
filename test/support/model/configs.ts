/**
 * The world configurations the statechart paths are generated under. Each keeps its graph small by
 * varying one area (the model stream, the tool calls, the host commands, World State, compaction,
 * sub-agents, ...); together they reach every transition that a stimulus can fire.
 */
import type { CommandKind, ToolKind, WorldConfig } from './stimuli.js';

const ALL_TOOLS: ToolKind[] = ['ok_a', 'ok_b', 'bad_json', 'bad_args', 'unknown', 'explode', 'plan', 'bad_plan'];
const DECISIONS: CommandKind[] = ['resolve_allow_once', 'resolve_deny', 'resolve_allow_for_turn', 'resolve_allow_for_session'];

const base: WorldConfig = {
  name: 'base',
  maxTurns: 1,
  limits: { maxModelCalls: 2, doomLoopThreshold: 3 },
  // The runtime's default: compaction on, the model's window unknown (only an explicit overflow compacts).
  compaction: 'overflow',
  worldState: false,
  assembleFails: false,
  nonInteractive: false,
  maxCallsPerResponse: 1,
  toolKinds: ['ok_a'],
  model: ['completed', 'end'],
  commands: ['start'],
  ports: {},
};

const OK_TURN: WorldConfig['ports'] = { beginTurn: ['ok'], recordModelCallStart: ['ok'], persistAssistantMessage: ['ok'], finishTurn: ['ok'], record: ['ok'] };
const RUN_TOOLS: WorldConfig['ports'] = { authorize: ['execute'], execute: ['succeed'] };

export const CONFIGS: WorldConfig[] = [
  {
    ...base,
    name: 'model stream',
    // Without automatic compaction an overflow is an ordinary model failure.
    compaction: 'off',
    model: ['text', 'reasoning', 'opaque', 'completed', 'end', 'protocol', 'error', 'overflow'],
    commands: ['start', 'cancel', 'shutdown'],
  },
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
    commands: ['start', 'start_dup', 'cancel_other', 'steer_other', 'resolve_wrong_call', 'resolve_other_turn', 'compact', 'shutdown'],
    ports: { ...OK_TURN, authorize: ['card'], execute: ['succeed'], manual: ['ok'] },
  },
  {
    ...base,
    name: 'steering and mailbox',
    commands: ['start', 'steer', 'deliver', 'cancel'],
    ports: { ...OK_TURN, ...RUN_TOOLS, drainInbox: ['ok', 'fail'] },
  },
  {
    ...base,
    name: 'manual compaction and modes',
    commands: ['start', 'compact', 'deliver', 'set_mode', 'cancel_other', 'steer_other', 'resolve_other_turn', 'shutdown'],
    toolKinds: [],
    ports: { ...OK_TURN, finishTurn: ['ok', 'not_running', 'fail'] },
  },
  {
    ...base,
    name: 'grants and modes in a turn',
    commands: ['start', 'set_mode', 'resolve_allow_for_session', 'resolve_allow_once'],
    ports: { ...OK_TURN, authorize: ['card'], execute: ['succeed'] },
  },
  {
    ...base,
    name: 'World State',
    worldState: true,
    commands: ['start', 'cancel', 'shutdown'],
    ports: { ...OK_TURN, ...RUN_TOOLS },
  },
  {
    ...base,
    name: 'overflow compaction',
    model: ['completed', 'end', 'overflow', 'text'],
    toolKinds: [],
    commands: ['start', 'cancel', 'shutdown'],
    ports: { ...OK_TURN },
  },
  // Begin turn and a batch's last result reserve the next call's counters; a resubmission after an
  // overflow writes its own, and that write can fail.
  {
    ...base,
    name: 'unreserved model call',
    model: ['completed', 'end', 'overflow'],
    toolKinds: [],
    commands: ['start'],
    ports: { ...OK_TURN, recordModelCallStart: ['ok', 'fail'] },
  },
  {
    ...base,
    name: 'threshold compaction',
    compaction: 'threshold',
    model: ['completed', 'end', 'overflow'],
    commands: ['start', 'cancel', 'shutdown'],
    ports: { ...OK_TURN, ...RUN_TOOLS, compactConversation: ['ok', 'fail', 'reload'] },
  },
  {
    ...base,
    name: 'sub-agent tools',
    limits: { maxModelCalls: 3, doomLoopThreshold: 2 },
    toolKinds: ['spawn', 'wait', 'list'],
    commands: ['start', 'cancel', 'deliver', 'stop_child', 'shutdown'],
    ports: { ...OK_TURN },
  },
  {
    ...base,
    name: 'questions to the user',
    limits: { maxModelCalls: 2, doomLoopThreshold: 2 },
    toolKinds: ['ask'],
    commands: ['start', 'answer', 'answer_wrong_call', 'answer_other_turn', 'compact', 'cancel', 'shutdown'],
    ports: { ...OK_TURN, manual: ['ok'] },
  },
  { ...base, name: 'assembly failure', assembleFails: true },
  { ...base, name: 'explorer session', nonInteractive: true, toolKinds: ['ok_a', 'spawn'], limits: { maxModelCalls: 3, doomLoopThreshold: 3 }, ports: { ...OK_TURN, authorize: ['card'] } },
  { ...base, name: 'model call limit', limits: { maxModelCalls: 1, doomLoopThreshold: 3 } },
  { ...base, name: 'cancel while sampling', interrupt: { machine: 'turn', state: JSON.stringify({ running_model: { streaming: 'sampling' } }), cmd: 'cancel' } },
  // Only a call that writes its own counters shows `requesting` (a call the fact before reserved goes
  // from `sampling` to its request's outcome in one event, branch perf-steps): the resubmission after
  // an overflow, or the call after steering input.
  {
    ...base,
    name: 'cancel while requesting',
    model: ['completed', 'end', 'overflow'],
    toolKinds: [],
    interrupt: { machine: 'turn', state: JSON.stringify({ running_model: { streaming: 'requesting' } }), cmd: 'cancel' },
  },
  // Over the compaction line, the model actor asks for compaction at once: a cancel noted on entry wins.
  {
    ...base,
    name: 'cancel while requesting, over the line',
    compaction: 'threshold',
    toolKinds: [],
    commands: ['start', 'steer'],
    interrupt: { machine: 'turn', state: JSON.stringify({ running_model: { streaming: 'requesting' } }), cmd: 'cancel' },
  },
  { ...base, name: 'threshold compaction after steering', compaction: 'threshold', toolKinds: [], commands: ['start', 'steer'] },
  // A reserved call over the line asks for compaction straight from `sampling`: a cancel noted there wins.
  {
    ...base,
    name: 'cancel while sampling, over the line',
    compaction: 'threshold',
    interrupt: { machine: 'turn', state: JSON.stringify({ running_model: { streaming: 'sampling' } }), cmd: 'cancel' },
  },
  // A cancel while the resubmission after an overflow samples World State: it ends on `model.sampled`.
  { ...base, name: 'World State on a resubmission', worldState: true, toolKinds: [], model: ['completed', 'end', 'overflow'], commands: ['start', 'cancel'], ports: { ...OK_TURN } },
  {
    ...base,
    name: 'shutdown while requesting',
    model: ['completed', 'end', 'overflow'],
    toolKinds: [],
    interrupt: { machine: 'turn', state: JSON.stringify({ running_model: { streaming: 'requesting' } }), cmd: 'shutdown' },
  },
  { ...base, name: 'cancel while validating', interrupt: { machine: 'turn', state: JSON.stringify({ tools: { run: 'validating' } }), cmd: 'cancel' } },
  { ...base, name: 'shutdown while validating', interrupt: { machine: 'turn', state: JSON.stringify({ tools: { run: 'validating' } }), cmd: 'shutdown' } },
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
    commands: ['start', 'start_dup', 'cancel', 'steer', 'deliver', 'set_mode', 'compact', 'shutdown', 'resolve_allow_for_session'],
    ports: { ...OK_TURN, finishTurn: ['ok', 'fail'], drainInbox: ['ok', 'fail'], authorize: ['card', 'execute'], execute: ['succeed'], manual: ['ok', 'reload'] },
  },
  {
    ...base,
    name: 'deep: World State, threshold compaction and sub-agents',
    maxTurns: 2,
    worldState: true,
    compaction: 'threshold',
    limits: { maxModelCalls: 2, doomLoopThreshold: 2 },
    toolKinds: ['spawn', 'wait', 'ok_a'],
    commands: ['start', 'cancel', 'deliver', 'stop_child', 'compact', 'shutdown'],
    ports: { ...OK_TURN, ...RUN_TOOLS, sampleWorldState: ['ok', 'fail'], compactConversation: ['ok', 'invalid'], manual: ['ok'] },
  },
];
