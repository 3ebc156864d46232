/**
 * @module inspector/runtime
 * `startInspectorRuntime`: the runtime that `npm run inspector` embeds: a core on PGlite (in memory
 * unless a data directory is given), the actor tracker as its inspection observer (plus Stately's
 * relay when asked for), and the loopback inspector server. The model is the scripted scenario
 * (one instance per session) unless a model or a model factory is configured. With the scenario's
 * own tools, its explorers (the `explore` prompt) may use `list_directory`.
 */
import { resolve } from 'node:path';
import { filter } from 'rxjs';
import type { InspectionEvent, Observer } from 'xstate';
import { createCore, type CoreOptions, type Core } from '../core.js';
import { createActorTracker, type ActorTracker } from './server/actor-tracker.js';
import { combineInspectors } from './server/combine.js';
import { startInspectorServer, type InspectorServer } from './server/server.js';
import { connectStatelyInspector, type StatelyInspectorConnection } from './server/stately.js';
import type { ModelPort } from '../services/model/port.js';
import type { AnyTool } from '../services/tools/define.js';
import { pgliteStorage } from '../storage/pglite.js';
import type { SessionStorage } from '../storage/storage.js';
import { prepareToolRuntime, type ToolRuntimeOptions } from '../services/tools/tool-runtime.js';
import { workspaceToolOptions } from '../services/tools/workspace.js';
import { scenarioModel, type ScenarioModel } from './scenario.js';
import { scenarioTools } from './scenario-tools.js';

/** A configured model, or a factory called once at start (e.g. `() => openaiModel({ model })`). */
export type ModelSource = ModelPort | (() => ModelPort | Promise<ModelPort>);

export interface InspectorRuntimeOptions {
  /** PGlite data directory; in memory when absent. */
  dataDir?: string;
  /** A storage of your own (Postgres, say); `dataDir` is then ignored. */
  storage?: SessionStorage;
  /** The working directory of new sessions (default `process.cwd()`). */
  workingDirectory?: string;
  /** A real model; without it every session gets the scripted scenario model. */
  model?: ModelSource;
  /**
   * Tools of the sessions (default: the scenario's `list_directory`, `run_checks`, `write_note`,
   * plus the built-in `bash` in the platform sandbox when it starts here).
   */
  tools?: AnyTool[];
  /**
   * The scenario's sandbox (default `auto`: the platform sandbox's self-check decides; `disabled`
   * leaves bash out). The World State then tells the model the truth either way.
   */
  sandbox?: ToolRuntimeOptions;
  /** More `createCore` options (a real model brings the built-in tools, permission policy and sandbox). */
  coreOptions?: Partial<CoreOptions>;
  /** Multiplies the scenario's delays (default 1). */
  timeScale?: number;
  host?: string;
  port?: number;
  /** Also send every inspection event to a `@statelyai/inspect` relay at this URL. */
  statelyUrl?: string;
  /** An extra inspection observer (tests use it to see the raw events). */
  inspect?: Observer<InspectionEvent> | ((event: InspectionEvent) => void);
}

export interface InspectorRuntime {
  readonly core: Core;
  readonly tracker: ActorTracker;
  readonly server: InspectorServer;
  readonly url: string;
  /** What the page header says about the model. */
  readonly label: string;
  /** Stops the server, the sessions (running turns end), Stately's connection and the storage. */
  close(): Promise<void>;
}

/**
 * Starts a core and the inspector page for it.
 *
 * @example
 * const inspector = await startInspectorRuntime({ port: 4477 });
 * console.log(`open ${inspector.url}`);
 */
export async function startInspectorRuntime(options: InspectorRuntimeOptions = {}): Promise<InspectorRuntime> {
  const workingDirectory = resolve(options.workingDirectory ?? process.cwd());
  const timeScale = options.timeScale ?? 1;
  const configured = typeof options.model === 'function' ? await options.model() : options.model;
  const scenarios = new Map<string, ScenarioModel>();
  // Sessions loaded from a persistent data directory share one scenario instance.
  const loadedScenario = configured ? null : scenarioModel({ timeScale });
  const label = configured ? `model ${configured.id}` : 'scripted scenario model (offline)';

  const tracker = createActorTracker();
  let stately: StatelyInspectorConnection | null = null;
  if (options.statelyUrl) stately = await connectStatelyInspector({ url: options.statelyUrl });

  // The scenario's own tools, and bash in the real sandbox when its self-check passes here: the
  // sandbox status, the policy and the World State's sandbox section then come from that check.
  const storage = options.storage ?? pgliteStorage(options.dataDir ? { dataDir: options.dataDir } : {});
  let toolOptions: Partial<CoreOptions> = {};
  let tools: AnyTool[];
  if (options.tools) {
    tools = options.tools;
  } else {
    // The sandbox self-check and the store's start wait on different things, so they overlap;
    // createCore's own migrate then finds everything applied.
    const [toolRuntime] = await Promise.all([prepareToolRuntime(options.sandbox ?? {}), storage.migrate()]);
    const scenario = scenarioTools({ timeScale });
    toolOptions = toolRuntime.sandbox.available ? workspaceToolOptions(toolRuntime, { only: ['bash'], extraTools: scenario }) : { sandbox: toolRuntime.sandbox };
    tools = (toolOptions.tools as AnyTool[] | undefined) ?? scenario;
  }
  const core = await createCore({
    ...toolOptions,
    storage,
    model: configured ?? loadedScenario!,
    tools,
    inspect: combineInspectors(tracker.inspect, stately?.inspect, options.inspect),
    ...(configured ? {} : { resolveModel: () => loadedScenario! }),
    // The page shows the model's questions and answers them.
    userInput: true,
    // The scenario's explorers list the directory; the built-in read-only tools have other names.
    agents: options.tools ? true : { explorerTools: tools.filter((t) => t.name === 'list_directory') },
    // The inspector shows plans and every control tool: it turns on what it demonstrates (issue 16.3).
    plan: true,
    conversationHistory: true,
    ...options.coreOptions,
  });

  // An explorer's turn is not its root's: it runs on the root's model but must not reset it.
  const turnStarts = core.updates$
    .pipe(filter((e) => e.update.type === 'turn_started' && core.session(e.sessionId)?.info.parentSessionId == null))
    .subscribe((e) => {
      (scenarios.get(e.sessionId) ?? loadedScenario)?.beginTurn();
    });

  let server: InspectorServer;
  try {
    server = await startInspectorServer({
      core,
      tracker,
      label,
      workingDirectory,
      ...(options.host !== undefined ? { host: options.host } : {}),
      ...(options.port !== undefined ? { port: options.port } : {}),
      async createSession({ title }) {
        if (configured) return core.createSession({ workingDirectory, ...(title !== undefined ? { title } : {}) });
        const model = scenarioModel({ timeScale });
        const handle = await core.createSession({ workingDirectory, model, ...(title !== undefined ? { title } : {}) });
        scenarios.set(handle.sessionId, model);
        return handle;
      },
    });
  } catch (error) {
    turnStarts.unsubscribe();
    await core.shutdown();
    stately?.stop();
    throw error;
  }

  return {
    core,
    tracker,
    server,
    url: server.url,
    label,
    async close() {
      await server.close();
      turnStarts.unsubscribe();
      await core.shutdown();
      tracker.complete();
      stately?.stop();
    },
  };
}
