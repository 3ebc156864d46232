/**
 * @module inspector/command
 * `openwork inspect [--database-url URL] [--port 4477] [--data-dir DIR] [--model-module FILE] [--stately ws://127.0.0.1:8080]`
 * (and `npm run inspector` in a clone): starts the embedded runtime and the inspector page on
 * 127.0.0.1, prints the address, and stops cleanly on Ctrl-C. It runs from the built `dist/` with
 * no dev dependency: the page's files are copied into `dist/inspector/page` by the build. The address carries the server's per-launch secret (`?token=…`); it is
 * printed to the terminal only, never written to a file, so a sandboxed tool cannot use the API.
 */
import { parseArgs } from 'node:util';
import { cliVersion } from '../cli/version.js';
import { postgresStorage } from '../storage/postgres.js';
import { errorMessage } from '../errors.js';
import { configuredModel } from './model-config.js';
import type { CoreOptions } from '../core.js';
import { openaiModel } from '../services/model/openai.js';
import type { AnyTool } from '../services/tools/define.js';
import { prepareToolRuntime } from '../services/tools/tool-runtime.js';
import { workspaceToolOptions } from '../services/tools/workspace.js';
import { startInspectorRuntime } from './runtime.js';

export const INSPECT_USAGE = `usage: openwork inspect [options]   (in a clone: npm run inspector -- [options])

  The web inspector on 127.0.0.1: sessions, the live update stream, the actors and statecharts,
  and the stored trace of every turn. Offline by default, with a scripted scenario model.

  --port <n>            port on 127.0.0.1 (default 4477; 0 = any free port)
  --database-url <url>  keep sessions in Postgres (default: DATABASE_URL, else PGlite)
  --data-dir <dir>      keep sessions in a PGlite directory (default: in memory)
  --cwd <dir>           working directory of new sessions (default: the current one)
  --model <name>        a real OpenAI-compatible model, as in \`openwork chat\` (env OPENWORK_MODEL);
                        with it the sessions get the built-in file and shell tools
  --api <responses|chat>, --base-url <url>
                        the API and server (OPENAI_BASE_URL, OPENAI_API_KEY as in the CLI)
  --model-module <file> a module whose default export is a ModelPort or (env) => ModelPort
                        (env OPENWORK_INSPECTOR_MODEL_MODULE); default: the scripted scenario
  --stately <ws-url>    also send inspection events to a @statelyai/inspect relay
                        (env OPENWORK_STATELY_RELAY)

The printed address carries a secret made for this launch (?token=...): open that address;
the page keeps the secret in a cookie. Anything without it gets 401/403.
`;

/**
 * Runs the inspector until SIGINT or SIGTERM; the exit code (2 for bad flags).
 *
 * @example
 * process.exitCode = await runInspect(['--port', '0']);
 */
export async function runInspect(args: string[]): Promise<number> {
  let parsed;
  try {
    parsed = parseArgs({
      args,
      options: {
        port: { type: 'string' },
        'database-url': { type: 'string' },
        'data-dir': { type: 'string' },
        cwd: { type: 'string' },
        'model-module': { type: 'string' },
        model: { type: 'string' },
        api: { type: 'string' },
        'base-url': { type: 'string' },
        stately: { type: 'string' },
        help: { type: 'boolean', short: 'h' },
        version: { type: 'boolean', short: 'V' },
      },
    });
  } catch (error) {
    process.stderr.write(`openwork inspect: ${errorMessage(error)}\n${INSPECT_USAGE}`);
    return 2;
  }
  const { values } = parsed;
  if (values.help) {
    process.stdout.write(INSPECT_USAGE);
    return 0;
  }
  if (values.version) {
    process.stdout.write(`openwork ${cliVersion()}\n`);
    return 0;
  }
  const port = Number(values.port ?? process.env.OPENWORK_INSPECTOR_PORT ?? 4477);
  if (!Number.isInteger(port) || port < 0 || port > 65_535) {
    process.stderr.write(`openwork inspect: invalid port ${values.port}\n${INSPECT_USAGE}`);
    return 2;
  }
  const modelName = values.model ?? process.env.OPENWORK_MODEL;
  let model = await configuredModel(values['model-module'], process.env);
  let coreOptions: Partial<CoreOptions> = {};
  if (!model && modelName) {
    const api = (values.api ?? (values['base-url'] ? 'chat' : 'responses')) as 'responses' | 'chat';
    if (api !== 'responses' && api !== 'chat') {
      // A usage error like a bad port (branch trust-typed): it threw a bare Error.
      process.stderr.write(`openwork inspect: --api must be "responses" or "chat", not ${JSON.stringify(values.api)}\n${INSPECT_USAGE}`);
      return 2;
    }
    model = openaiModel({ model: modelName, api, ...(values['base-url'] ? { baseURL: values['base-url'] } : {}) });
    coreOptions = workspaceToolOptions(await prepareToolRuntime());
  }
  const statelyUrl = values.stately ?? process.env.OPENWORK_STATELY_RELAY;
  const databaseUrl = values['database-url'] ?? process.env.DATABASE_URL;
  const runtime = await startInspectorRuntime({
    port,
    ...(databaseUrl && !values['data-dir'] ? { storage: postgresStorage({ connectionString: databaseUrl }) } : {}),
    ...(values['data-dir'] ? { dataDir: values['data-dir'] } : {}),
    ...(values.cwd ? { workingDirectory: values.cwd } : {}),
    ...(model ? { model } : {}),
    ...(coreOptions.tools ? { tools: coreOptions.tools as AnyTool[], coreOptions } : {}),
    ...(statelyUrl ? { statelyUrl } : {}),
  });
  process.stdout.write(`openwork inspector: ${runtime.label}\n`);
  if (statelyUrl) process.stdout.write(`inspection events also go to the Stately relay at ${statelyUrl}\n`);
  process.stdout.write(`open ${runtime.url}  (Ctrl-C to stop)\n`);
  await new Promise<void>((resolve) => {
    process.once('SIGINT', resolve);
    process.once('SIGTERM', resolve);
  });
  process.stdout.write('stopping…\n');
  await runtime.close();
  return 0;
}
