/**
 * @module inspector/model-config
 * Which model `npm run inspector` uses: the scripted scenario by default, or a model module named
 * by `--model-module <file>` / `OPENWORK_INSPECTOR_MODEL_MODULE`. The module's default export is a
 * `ModelPort` or a function `(env) => ModelPort | Promise<ModelPort>`, so any OpenAI-compatible
 * adapter can be plugged in without changing the inspector.
 */
import { resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import { InputError, errorMessage } from '../errors.js';
import type { ModelPort } from '../services/model/port.js';
import type { ModelSource } from './runtime.js';

function isModelPort(value: unknown): value is ModelPort {
  return (
    typeof value === 'object' &&
    value !== null &&
    typeof (value as ModelPort).id === 'string' &&
    typeof (value as ModelPort).stream === 'function'
  );
}

/**
 * Loads the model module at `path` (relative to `cwd`); `invalid_request` when it is missing or
 * does not export a model.
 */
export async function loadModelModule(path: string, env: NodeJS.ProcessEnv, cwd = process.cwd()): Promise<ModelSource> {
  const url = pathToFileURL(resolve(cwd, path)).href;
  let mod: { default?: unknown };
  try {
    mod = (await import(url)) as { default?: unknown };
  } catch (cause) {
    throw new InputError('invalid_request', `cannot load the model module ${path}: ${errorMessage(cause)}`, { cause });
  }
  const exported = mod.default;
  if (isModelPort(exported)) return exported;
  if (typeof exported === 'function') {
    return async () => {
      const model: unknown = await (exported as (env: NodeJS.ProcessEnv) => unknown)(env);
      if (!isModelPort(model)) throw new InputError('invalid_request', `the model module ${path} did not return a ModelPort`);
      return model;
    };
  }
  throw new InputError('invalid_request', `the model module ${path} must default-export a ModelPort or a function returning one`);
}

/** The configured model, or undefined for the scripted scenario. */
export async function configuredModel(modulePath: string | undefined, env: NodeJS.ProcessEnv): Promise<ModelSource | undefined> {
  const path = modulePath ?? env.OPENWORK_INSPECTOR_MODEL_MODULE;
  if (!path) return undefined;
  return loadModelModule(path, env);
}
