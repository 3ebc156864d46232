/**
 * @module protocol/shown-card
 * A permission card as a human is shown it. Every field a host renders as text (the summary, the
 * command, the path, the reason, the danger note, an earlier denial, an MCP tool's title and
 * arguments) is strict visible text (`protocol/visible-text`): a bidirectional override, a
 * zero-width space, a tag character or a no-break space in a command shows as `<U+XXXX>`, a run of
 * blanks that would push the command's tail past the edge of its field is folded to
 * `<500 spaces>`. So a host that prints these fields as they are shows what will run.
 *
 * What decides anything stays the text itself: the grant key (a grant covers the exact command,
 * invisible characters included), the requested paths the sandbox is widened by, the environment.
 * The danger span is moved to where the match sits in the shown command.
 */
import type { PermissionCard } from './updates.js';
import { visibleSpan, visibleText } from './visible-text.js';

function shown(text: string): string {
  return visibleText(text, { strict: true });
}

/** `card` with its shown fields made visible; keys, paths and decisions unchanged. */
export function shownCard(card: PermissionCard): PermissionCard {
  return {
    ...card,
    toolName: visibleText(card.toolName, { strict: true, singleLine: true }),
    summary: shown(card.summary),
    ...(card.command !== undefined ? { command: shown(card.command) } : {}),
    ...(card.command !== undefined && card.dangerSpan !== undefined ? { dangerSpan: visibleSpan(card.command, card.dangerSpan, { strict: true }) } : {}),
    ...(card.path !== undefined ? { path: shown(card.path) } : {}),
    ...(card.reason !== undefined ? { reason: shown(card.reason) } : {}),
    ...(card.dangerNote !== undefined ? { dangerNote: shown(card.dangerNote) } : {}),
    ...(card.previousDenial !== undefined ? { previousDenial: shown(card.previousDenial) } : {}),
    ...(card.mcp !== undefined
      ? { mcp: { ...card.mcp, arguments: shown(card.mcp.arguments), ...(card.mcp.title !== undefined ? { title: shown(card.mcp.title) } : {}) } }
      : {}),
  };
}
