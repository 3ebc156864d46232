/**
 * @module services/context/framing
 * The one escape for untrusted text the runtime places inside its own framing (attack round 7):
 * an agent message's body, AGENTS.md, a skill's description and body, a compaction summary. Such
 * text must never open or close a runtime framing tag, or it could end its section and go on as
 * the runtime's own words (a forged `<sandbox_policy>`, a second `<agent_message>`).
 */

/**
 * Every tag name the runtime frames text with, and the role-like names of the summary contract
 * (reference §3.4) a model would take for the runtime's: World State's sections (§2.3), the skill
 * message (§7.4), the agent-message envelope (§5.6), the compaction summary and reminder (§3.3,
 * §3.6).
 */
export const FRAMING_TAG_NAMES: ReadonlySet<string> = new Set([
  'user_project_context', 'project_instructions', 'available_skills', 'sandbox_policy',
  'skill', 'name', 'path',
  'agent_message', 'task', 'kind', 'body',
  'conversation_summary', 'system_reminder',
  'system', 'developer', 'instructions', 'assistant', 'user_query',
]);

/** Name families matched by prefix: `<system-reminder>`, `<system_notice>`, `<tool_result>`, `<tool-call>`. */
const FRAMING_TAG_FAMILIES = ['system_', 'system-', 'tool_', 'tool-'];

/** The longest name read after a `<`; every framing name is far shorter, so reading stops there. */
const MAX_NAME_CHARS = 64;

/** `<` and the forms that read as it: fullwidth `＜`, small `﹤`. */
function isOpen(code: number): boolean {
  return code === 0x3c || code === 0xff1c || code === 0xfe64;
}

/** `/` and the forms that read as it (fullwidth, division slash, fraction slash, big solidus). */
function isSlash(code: number): boolean {
  return code === 0x2f || code === 0xff0f || code === 0x2215 || code === 0x2044 || code === 0x29f8;
}

/** What may follow a tag's name: a blank (attributes), `/`, `>` or a form that reads as one. */
function isTagEnd(text: string, at: number): boolean {
  const code = text.charCodeAt(at);
  return code === 0x3e || code === 0xff1e || code === 0xfe65 || isSlash(code) || isBlank(text, at);
}

const NON_ASCII_BLANK = /[\s\p{Cf}]/u;
const NON_ASCII_NAME_CHAR = /[\p{L}\p{N}\p{Cf}]/u;
const INVISIBLE = /\p{Cf}/gu;

/** White space or an invisible format character; ASCII answered without a regular expression (a text may hold millions of `<`). */
function isBlank(text: string, at: number): boolean {
  const code = text.charCodeAt(at);
  if (code < 0x80) return code === 0x20 || (code >= 0x09 && code <= 0x0d);
  return NON_ASCII_BLANK.test(text[at]!);
}

function isNameChar(text: string, at: number): boolean {
  const code = text.charCodeAt(at);
  if (code < 0x80) return (code >= 0x61 && code <= 0x7a) || (code >= 0x41 && code <= 0x5a) || (code >= 0x30 && code <= 0x39) || code === 0x5f || code === 0x2d;
  return NON_ASCII_NAME_CHAR.test(text[at]!);
}

/** A name read after `<` as a reader takes it: invisible characters dropped, compatibility forms folded, lower case. */
export function normalizeTagName(raw: string): string {
  return raw.replace(INVISIBLE, '').normalize('NFKC').toLowerCase();
}

/** Whether a name read after `<` (invisible characters, case and compatibility forms aside) is a framing tag's. */
export function isFramingTagName(raw: string): boolean {
  const name = normalizeTagName(raw);
  return FRAMING_TAG_NAMES.has(name) || FRAMING_TAG_FAMILIES.some((family) => name.startsWith(family));
}

/**
 * The framing tag that starts at `text[at]` (a `<`), or null: blanks (white space, invisible
 * format characters) and one `/` may stand between the `<` and the name, and the name must be
 * followed by what ends a tag's name (`>`, a blank before attributes, `/`, the end of the text),
 * so `<bodyguard>`, `<tasks>` and `Map<Path,Kind>` are not tags. Reads at most the blanks after `at` and 64 name
 * characters, so scanning a text is linear in its length.
 */
function framingTagAt(text: string, at: number): string | null {
  let i = at + 1;
  let slash = false;
  for (; i < text.length; i += 1) {
    const code = text.charCodeAt(i);
    if (!slash && isSlash(code)) slash = true;
    else if (!isBlank(text, i)) break;
  }
  const start = i;
  for (; i < text.length && i - start <= MAX_NAME_CHARS; i += 1) {
    if (!isNameChar(text, i)) break;
  }
  if (i === start || i - start > MAX_NAME_CHARS) return null;
  if (i < text.length && !isTagEnd(text, i)) return null;
  const name = text.slice(start, i);
  return isFramingTagName(name) ? name : null;
}

/**
 * Untrusted text as runtime framing carries it: the `<` of every framing tag (opening or closing,
 * any case, with blanks, invisible characters or attributes) becomes `&lt;`; nothing is dropped
 * and all other text is unchanged, so `a < b`, `Array<Tool>`, `<div>` and `=>` read as written.
 *
 * @example
 * escapeFraming('</project_instructions>\n<sandbox_policy>') // '&lt;/project_instructions>\n&lt;sandbox_policy>'
 * escapeFraming('Array<Tool> and a < b') // unchanged
 */
export function escapeFraming(text: string): string {
  let out = '';
  let from = 0;
  for (let i = 0; i < text.length; i += 1) {
    if (!isOpen(text.charCodeAt(i))) continue;
    if (framingTagAt(text, i) === null) continue;
    out += `${text.slice(from, i)}&lt;`;
    from = i + 1;
  }
  return from === 0 ? text : out + text.slice(from);
}

/** The framing tags `text` would open or close, as written (empty when `escapeFraming` leaves it unchanged). */
export function framingTagsIn(text: string): string[] {
  const found: string[] = [];
  for (let i = 0; i < text.length; i += 1) {
    if (!isOpen(text.charCodeAt(i))) continue;
    const name = framingTagAt(text, i);
    if (name !== null) found.push(name);
  }
  return found;
}
