/**
 * @module services/permissions/texts
 * The permission system's model-visible texts live in `protocol/model-texts.ts` with every other
 * text the model sees; this path re-exports them for the code and tests that name it.
 */
export {
  bashDenialText,
  bashUnavailablePolicyLine,
  DENIAL_IS_FINAL_TEXT,
  DENIAL_IS_POLICY_TEXT,
  denialRuleText,
  fileDenialText,
  GIT_GRANT_NOTE,
  modeLabel,
  networkDenialText,
  NON_INTERACTIVE_REFUSAL_TEXT,
  protectedPathText,
  renderSandboxPolicySection,
  runtimePathText,
  sandboxUnavailableText,
  type SandboxPolicySectionInput,
} from '../../protocol/model-texts.js';
