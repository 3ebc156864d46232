/**
 * Tests generated from the statecharts (issue 6, item 1). xstate/graph traverses the REAL Session,
 * Turn and tool-call machines (the Turn runs a call that needs nobody itself, `tools.run`), composed as they run (test/support/model/sim.ts), under several world
 * configurations; a greedy cover picks paths that together fire every transition a stimulus can
 * reach. Each path is replayed on the real runtime on PGlite with every effect produced for real,
 * and after every step the runtime must be in exactly the state the path expects, with the same
 * answer to the command and the same updates; after every path the invariants hold and the session
 * accepts a new turn. Transition coverage per machine is printed, measured in the running runtime.
 */
import { afterAll, describe, expect, it } from 'vitest';
import type { AnyStateMachine } from 'xstate';
import { sessionMachine } from '../../src/machines/session/machine.js';
import { toolCallMachine } from '../../src/machines/tool-call.js';
import { turnMachine } from '../../src/machines/turn.js';
import type { SqlSessionStorage } from '../../src/storage/sql-storage.js';
import { CONFIGS, DEEP_CONFIGS } from '../support/model/configs.js';
import { coveringPaths, traverse, type ModelPath } from '../support/model/model-paths.js';
import { describeStimuli, replay } from '../support/model/replay.js';
import { atRest } from '../support/model/stimuli.js';
import { coverageReport, formatCoverage, machineOf } from '../support/model/transitions.js';
import { World } from '../support/model/world.js';
import { assertNoRunningAfterTerminal, assertRequestsFollowResults, assertSequences, assertStoredInvariants } from '../support/invariants.js';
import { usePglite } from '../support/databases.js';

/** Why no stimulus reaches the state that writes the end of a Turn actor that failed. */
const CRASHED_TURN =
  'reached only after the Turn actor fails, which it does only on a bug in its chart; test/core/turn-crash.test.ts drives it on the real runtime (hostile tool arguments, a refused end, a shutdown during the end), test/core/crashed-turn-facts.test.ts what the end keeps';

/** Transitions no stimulus can fire, and why (docs/verification.md lists them too). */
export const UNREACHABLE: Record<string, string> = {
  'session.active|session.start_turn|0':
    'reload_required is set only when a maintenance or a turn ends, and an idle session with it refuses every turn, so no turn is ever active with it',
  'session.active|xstate.error.actor.turn|0':
    'the Turn actor fails only on a bug in the chart (every effect has an error path); test/core/turn-crash.test.ts makes it fail through hostile tools',
  'session.ending_crashed_turn|session.answer_user_input|0': CRASHED_TURN,
  'session.ending_crashed_turn|session.begin_maintenance|0': CRASHED_TURN,
  'session.ending_crashed_turn|session.cancel_turn|0': CRASHED_TURN,
  'session.ending_crashed_turn|session.cancel_turn|1': CRASHED_TURN,
  'session.ending_crashed_turn|session.deliver_agent_message|0': CRASHED_TURN,
  'session.ending_crashed_turn|session.resolve_permission|0': CRASHED_TURN,
  'session.ending_crashed_turn|session.shutdown|0': CRASHED_TURN,
  'session.ending_crashed_turn|session.start_turn|0': CRASHED_TURN,
  'session.ending_crashed_turn|session.start_turn|1': CRASHED_TURN,
  'session.ending_crashed_turn|session.start_turn|2': CRASHED_TURN,
  'session.ending_crashed_turn|session.steer_turn|0': CRASHED_TURN,
  'session.ending_crashed_turn|xstate.done.actor.finishCrashedTurn|0': CRASHED_TURN,
  'session.ending_crashed_turn|xstate.done.actor.finishCrashedTurn|1': CRASHED_TURN,
  'session.ending_crashed_turn|xstate.error.actor.finishCrashedTurn|0': CRASHED_TURN,
  'session.ending_crashed_turn|xstate.error.actor.finishCrashedTurn|1': CRASHED_TURN,
  'turn.running_model.streaming.persisting|model.persisted|1':
    'structured output (outputSchema) is not part of the model world: its turns carry no schema; test/host/run.test.ts drives output_invalid',
  'turn.ending|xstate.error.actor.finishTurn|1':
    'a completed outcome reaches ending only with its end already written by the final answer\'s statement (the actor then writes nothing and cannot fail) or from a judged structured-output answer, which the model world does not carry; test/storage/answer-end.test.ts fails the end of a judged answer',
  'turn.ending|xstate.error.actor.finishTurn|0':
    'ownership_lost at the turn\'s end needs a session lease, and leases are Postgres-only while the model world runs on PGlite; test/services/ownership/ownership.test.ts drives ownership_lost through a running turn',
  'turn.tools.call|xstate.error.actor.toolCall|0':
    'the tool-call actor fails only on a bug in the chart (every effect has an error path); test/core/tool-call-crash.test.ts makes a helper of it throw on the real runtime',
  'turn.tools.abandoned|xstate.done.actor.record|0': 'reached only after the tool-call actor fails (above); test/core/tool-call-crash.test.ts drives it',
  'turn.tools.abandoned|xstate.error.actor.record|0':
    'reached only after the tool-call actor fails (above) and its result write then fails too; the same write\'s failure is driven from `tools.run.recording`',
  'toolCall.executing|xstate.error.actor.execute|0': 'executeTool reports every tool failure as a result; it throws only if the session is gone',
  'turn.tools.run.executing|tool.execute_failed|0':
    'the same tool run, by the Turn\'s run actor for a call that needs nobody: it reports every tool failure as a result and answers tool.execute_failed only if the session is gone; test/machines/turn.test.ts drives it',
  'toolCall.executing.stopping|xstate.after.toolCancelGrace.toolCall.executing.stopping|0':
    'every tool of the model world confirms its stop at once; the grace is driven on a SimulatedClock in test/machines/tool-call.test.ts and on the real runtime in test/machines/turn/direct-tool-call.test.ts',
  'turn.tools.run.executing.stopping|xstate.after.toolCancelGrace.turn.tools.run.executing.stopping|0':
    'the same grace on the Turn\'s own run of a call: every tool of the model world confirms its stop at once; test/machines/turn.test.ts and test/machines/turn/direct-tool-call.test.ts drive it',
  'toolCall.control.agent|xstate.error.actor.runAgentTool|0':
    'agent control reports every failure as a failed result; wait_agent rejects only on its abort, after the call has left this state',
};

const MACHINES: AnyStateMachine[] = [sessionMachine, turnMachine, toolCallMachine] as unknown as AnyStateMachine[];

/**
 * Every configuration gets its own full cover, so each transition is fired in every context that
 * reaches it. `MODEL_DEPTH=deep` (`npm run fuzz`) adds the larger configurations of configs.ts.
 */
const DEEP = process.env.MODEL_DEPTH === 'deep';

// Generation happens at collection time: the paths become the test cases.
const generatedAt = Date.now();
const covered = new Set<string>();
const generated: ModelPath[] = [];
const graphs: string[] = [];
for (const config of [...CONFIGS, ...(DEEP ? DEEP_CONFIGS : [])]) {
  const traversal = traverse(config);
  const paths = coveringPaths(traversal, new Set());
  for (const path of paths) for (const key of path.fired) covered.add(key);
  generated.push(...paths);
  graphs.push(`${config.name}: ${traversal.states} states, ${traversal.edges} edges, ${paths.length} paths`);
}
const generationMs = Date.now() - generatedAt;

describe('statechart paths on the real runtime (PGlite)', () => {
  let storage: SqlSessionStorage;
  const fired = new Set<string>();
  let serial = 0;

  usePglite((s) => (storage = s));

  afterAll(async () => {
    const lines = [`statechart paths${DEEP ? ' (deep)' : ''}: ${generated.length} generated in ${generationMs} ms`, ...graphs.map((g) => `  ${g}`)];
    for (const machine of MACHINES) {
      const own = new Set([...fired].filter((k) => machineOf(k) === machine.id));
      lines.push(formatCoverage(coverageReport(machine, own), UNREACHABLE));
    }
    console.log(lines.join('\n'));
  });

  it('the generated paths reach every transition except the documented unreachable ones', () => {
    const missing = MACHINES.flatMap((m) => coverageReport(m, covered).uncovered.map((t) => t.key));
    expect(missing.sort()).toEqual(Object.keys(UNREACHABLE).sort());
  });

  for (const path of generated) {
    it(`${path.config.name}: ${path.target} — ${describeStimuli(path)}`, async () => {
      serial += 1;
      const local = new Set<string>();
      const world = await World.create({ storage, config: path.config, sessionId: `ses_path_${serial}`, onTransition: (k) => local.add(k) });
      try {
        await replay(world, path);
        // The runtime fired exactly the transitions the path fired.
        expect([...local].sort()).toEqual([...new Set(path.fired)].sort());
        for (const k of local) fired.add(k);

        expect(atRest(path.steps.at(-1)!.state)).toBe(true);
        const stored = await assertStoredInvariants(storage, world.sessionId);
        assertRequestsFollowResults(world.requests, stored);
        assertSequences(world.updates, { fromOne: true });
        const status = world.session.status();
        assertNoRunningAfterTerminal(stored.turns, status, world.failedEnds);

        // Whatever happened, a session that is idle accepts a new turn once the ports work again.
        const session = world.actors().session;
        if (session.status === 'active' && session.value === 'idle' && !session.context.reloadRequired && !path.config.assembleFails) {
          world.autopilot = true;
          world.release();
          const { turnId } = await world.session.startTurn({ clientRequestId: `${world.sessionId}-after`, input: [{ type: 'text', text: 'again' }] });
          expect(await world.session.waitForTurn(turnId)).toEqual({ status: 'completed', finalText: 'fine' });
          const after = await assertStoredInvariants(storage, world.sessionId);
          assertNoRunningAfterTerminal(after.turns, world.session.status());
          expect(world.session.status()).toEqual({ type: 'idle' });
        }
      } finally {
        await world.shutdown();
      }
    });
  }
});
