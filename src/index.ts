/**
 * @module openwork-core
 * Durable, inspectable agent sessions. See README.md.
 */
export { createCore, DEFAULT_LIMITS, DEFAULT_SYSTEM_PROMPT } from './core.js';
export type { Core, CoreOptions, CreateSessionOptions } from './core.js';
export { SessionHandle } from './session-handle.js';
export type { StartTurnResult } from './session-handle.js';
export { runTurn, streamTurn } from './host/run.js';
export type { RunOptions, RunResult, StreamOptions, TurnStream, TurnInput, TurnHost } from './host/run.js';
export { toResponse, toSSE, SSE_HEADERS } from './host/http.js';

export { pgliteStorage } from './storage/pglite.js';
export type { PgliteStorageOptions } from './storage/pglite.js';
export { postgresStorage } from './storage/postgres.js';
export type { PostgresStorageOptions, PostgresPoolOptions } from './storage/postgres.js';
export type { SessionStorage, SessionRecord, TurnRecord, TraceSpanRecord, TokenUsage } from './storage/storage.js';
export type { TelemetryOptions } from './services/telemetry/otel.js';

export { OpenworkError, CommandError, BusyError, InputError, StorageError, StoreLockedError, ModelError, McpServerError, UpdatesLaggedError, isOpenworkError } from './errors.js';
export type { ErrorCode, CommandErrorCode, InputErrorCode, TurnFailureCode } from './errors.js';

export { defineTool, toolDefinition, InvalidToolNameError } from './services/tools/define.js';
export { workspaceToolOptions } from './services/tools/workspace.js';
export type { WorkspaceToolOptions } from './services/tools/workspace.js';
export type { Tool, AnyTool, ToolContext, ToolResult, Authorization, AuthorizationCard, AuthorizeContext } from './services/tools/define.js';
export type { Authorizer } from './services/runtime.js';
export type { ModelPort, ModelRequest, ModelMessage, ModelStreamEvent, ToolDefinition, RateLimitSnapshot } from './services/model/port.js';
export { openaiModel } from './services/model/openai.js';
export type { OpenAIModel, OpenAIModelOptions } from './services/model/openai.js';
export { mergeRateLimits, DEFAULT_RATE_LIMIT_ID } from './protocol/rate-limits.js';
export type { RateLimitWindow } from './protocol/rate-limits.js';
export type { AgentMessage, AgentMessageKind } from './services/agents/mailbox.js';
export { agentMessageId } from './services/agents/mailbox.js';
export { prepareToolRuntime } from './services/tools/tool-runtime.js';
export type { ToolRuntime, ToolRuntimeOptions } from './services/tools/tool-runtime.js';
export { builtinTools, BUILTIN_TOOL_NAMES } from './services/tools/builtin.js';
export type { BuiltinToolName } from './services/tools/builtin.js';
export type { FileChangeArtifact } from './services/tools/file-change.js';
export { isToolSource } from './services/tools/source.js';
export type { ToolSource, ToolEntry } from './services/tools/source.js';
export { mcpTools, MCP_CALL_TIMEOUT_MS } from './services/mcp/tools.js';
export type { McpTools, McpToolsOptions } from './services/mcp/tools.js';
export { mcpToolsFromConfig } from './services/mcp/from-config.js';
export type { McpServerSet } from './services/mcp/from-config.js';
export { loadMcpConfigFile, parseMcpServers, mcpServersSchema, mcpServerConfigSchema, mcpTrustSchema } from './services/mcp/config.js';
export type { McpServers, McpServerConfig, McpStdioServerConfig, McpHttpServerConfig, McpTrust } from './services/mcp/config.js';
export { permissionPolicy } from './services/permissions/authorizer.js';
export { SandboxPolicy } from './services/permissions/policy.js';
export type { Access, Actor, GrantScope, PathGrant } from './services/permissions/policy.js';
export type { Tier } from './services/permissions/tiers.js';
export { CREDENTIAL_ENV_PATHS, CREDENTIAL_PATHS } from './services/permissions/tiers.js';
export { detectEnvironment } from './services/permissions/environment.js';
export type { SandboxEnvironment, SandboxEnvironmentOptions } from './services/permissions/environment.js';
export { loadDangerDetector } from './services/permissions/danger.js';
export type { DangerDetector, DangerHit, DangerKey } from './services/permissions/danger.js';
export { MAX_GRANTS } from './services/permissions/escalation.js';
export {
  bashDenialText,
  fileDenialText,
  protectedPathText,
  runtimePathText,
  GIT_GRANT_NOTE,
  sandboxUnavailableText,
  renderSandboxPolicySection,
  NON_INTERACTIVE_REFUSAL_TEXT,
} from './protocol/model-texts.js';
export { INTERRUPTED_RESULT_TEXT } from './services/context/assemble.js';
export { REMAINING_CALL_TEXT } from './protocol/model-texts.js';

export { sessionMachine } from './machines/session/machine.js';
export { turnMachine } from './machines/turn/machine.js';
export { toolCallMachine } from './machines/tool-call/machine.js';

export type { UserInput, PermissionDecision, PermissionMode, PermissionModeOrigin, StartTurnParams } from './protocol/input.js';
export type { UserInputRequest, UserInputQuestion, UserInputAnswers, PendingUserInput } from './protocol/user-input.js';
export type { SessionUpdate, SessionUpdateEnvelope, TurnOutcome, Phase, PermissionCard, ToolProgress } from './protocol/updates.js';
export type { ResponseFormat } from './services/model/port.js';
export type { SandboxStatus, SessionSnapshot, SessionStatus, SessionRuntimeSnapshot, LiveToolCall, PendingApproval } from './protocol/snapshot.js';
export type { PlanStep, TurnPlanSnapshot } from './protocol/plan.js';
export type { ContentBlock, StoredMessage, ToolResultStatus } from './protocol/content.js';
