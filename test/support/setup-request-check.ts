/**
 * Vitest setup file (every test file): wraps `scriptedModel` so that every model a test creates —
 * through the harness, directly, or through `src/testing` — is registered, and checks every request
 * those models recorded after each test (see request-check.ts).
 */
import { afterEach, vi } from 'vitest';
import { checkRecordedRequests } from './request-check.js';

vi.mock('../../src/services/model/scripted.js', async (importOriginal) => {
  const actual = await importOriginal<typeof import('../../src/services/model/scripted.js')>();
  const { registerScriptedModel: register } = await import('./request-check.js');
  return {
    ...actual,
    scriptedModel: (...args: Parameters<typeof actual.scriptedModel>) => {
      const model = actual.scriptedModel(...args);
      register(model);
      return model;
    },
  };
});

// Registered first, so it runs after every test file's own afterEach hooks (runtimes shut down).
afterEach(() => {
  checkRecordedRequests();
});
