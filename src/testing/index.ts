/**
 * @module testing
 * Fakes that are product code: the scripted model and small tools for tests and demos.
 */
export { scriptedModel, ScriptError } from '../services/model/scripted.js';
export type { ScriptedModel, ScriptedModelOptions, ScriptedStep, ScriptedToolCall } from '../services/model/scripted.js';
export { echoTool, failTool, approvalTool, slowTool, journalTool } from './tools.js';
export { sequentialIds } from '../services/clock.js';
