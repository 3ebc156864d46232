#!/usr/bin/env node
/**
 * Issue 19 point 4: one TypeScript name for a session's permission mode. The storage side said
 * `sandboxMode` / `sandboxModeOrigin` / `setSandboxMode` where everything else says `permissionMode`;
 * this renames the TypeScript identifiers. The database columns (`sandbox_mode`,
 * `sandbox_mode_origin`, the reference schema's names) and the trace attribute `sandboxMode` (a
 * recorded key of reference §6.5, written by tool-call-actors.ts) keep their names.
 *
 * Idempotent: run it again after merging a branch that still uses the old names.
 *   node scripts/rename-permission-mode.mjs
 */
import { readFileSync, readdirSync, writeFileSync } from 'node:fs';
import { join, relative } from 'node:path';

const root = join(import.meta.dirname, '..');
/** Files whose `sandboxMode` is the trace attribute, not the session's mode. */
const SKIP = new Set(['src/services/tool-call-actors.ts', 'src/machines/tool-call.ts', 'src/machines/tool-call/machine.ts']);
const RULES = [
  [/\bsetSandboxMode\b/g, 'setPermissionMode'],
  [/(?<!attributes\.)(?<!['"`])\bsandboxModeOrigin\b(?!['"`])/g, 'permissionModeOrigin'],
  [/(?<!attributes\.)(?<!['"`])\bsandboxMode\b(?!['"`])/g, 'permissionMode'],
];
/** The port's doc comment on the origin names the field. */
const DOC = [/Where `sandboxMode` came from/g, 'Where `permissionMode` came from'];
// The fault injector lists storage methods by name as strings.
const QUOTED = [[/(['"])setSandboxMode\1/g, '$1setPermissionMode$1']];

function* files(dir) {
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) yield* files(path);
    else if (entry.name.endsWith('.ts')) yield path;
  }
}

let changed = 0;
for (const top of ['src', 'test']) {
  for (const path of files(join(root, top))) {
    const rel = relative(root, path);
    if (SKIP.has(rel)) continue;
    const before = readFileSync(path, 'utf8');
    // Comment lines keep `sandboxMode` where they speak of the trace attribute; the method is renamed everywhere.
    const after = before
      .split('\n')
      .map((line) => {
        let out = line.replace(QUOTED[0][0], QUOTED[0][1]).replace(RULES[0][0], RULES[0][1]).replace(DOC[0], DOC[1]);
        if (/^\s*(\/\/|\*|\/\*)/.test(out)) return out;
        for (const [pattern, replacement] of RULES.slice(1)) out = out.replace(pattern, replacement);
        return out;
      })
      .join('\n');
    if (after !== before) {
      writeFileSync(path, after);
      changed += 1;
      console.log(rel);
    }
  }
}
console.log(`${changed} files changed`);
