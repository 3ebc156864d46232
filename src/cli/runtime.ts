/**
 * @module cli/runtime
 * What `openwork chat` and `openwork exec` open before their first turn: the OpenAI model from the
 * flags, then the store and the built-in tools. Each failure comes back as the one line the command
 * prints before it exits with "could not start".
 */
import { createCore, type Core } from '../core.js';
import { errorMessage, isOpenworkError } from '../errors.js';
import { openaiModel, type OpenAIModel } from '../services/model/openai.js';
import type { ChatOptions } from './options.js';
import { openStorage, storageLabel, storeLockedLine } from './storage.js';
import { cliToolOptions } from './tools.js';

export type Opened<T> = { ok: true; value: T } | { ok: false; line: string };

/** The model the flags name; a missing key is said the way a user can fix it. */
export function openCliModel(options: Omit<ChatOptions, 'prompt'>): Opened<OpenAIModel> {
  try {
    return {
      ok: true,
      value: openaiModel({
        model: options.model,
        api: options.api,
        ...(options.baseURL ? { baseURL: options.baseURL } : {}),
        ...(options.reasoningEffort ? { reasoningEffort: options.reasoningEffort } : {}),
        ...(options.maxOutputTokens ? { maxOutputTokens: options.maxOutputTokens } : {}),
      }),
    };
  } catch (error) {
    if (isOpenworkError(error) && error.code === 'invalid_request' && /API key/.test(error.message)) {
      return { ok: false, line: 'no OpenAI API key: set OPENAI_API_KEY, or use --base-url with a local OpenAI-compatible server (vLLM, Ollama, llama.cpp, LM Studio)' };
    }
    return { ok: false, line: errorMessage(error) };
  }
}

/** The core on the store the flags name, with the CLI's tools; `userInput` offers request_user_input. */
export async function openCliCore(options: Omit<ChatOptions, 'prompt'>, model: OpenAIModel, userInput: boolean): Promise<Opened<Core>> {
  try {
    const storage = openStorage(options);
    // Opening the store (PGlite: about a second) and preparing the tools (the sandbox probe) wait on
    // different things, so they overlap; createCore's own migrate then finds everything applied.
    const [toolOptions] = await Promise.all([cliToolOptions(), storage.migrate()]);
    return { ok: true, value: await createCore({ storage, model, ...toolOptions, resolveModel: () => model, userInput, plan: true, conversationHistory: true, agents: true }) };
  } catch (error) {
    return { ok: false, line: storeLockedLine(options, error) ?? `cannot open the session store (${storageLabel(options)}): ${errorMessage(error)}` };
  }
}
