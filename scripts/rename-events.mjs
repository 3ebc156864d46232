#!/usr/bin/env node
/**
 * Issue 19 point 4: event names say who sends them. A command is named for its receiver and is
 * imperative; a fact is named for its sender and is past tense (docs/decisions.md, "Event names say
 * who sends them"). This renames the facts whose names read like commands. Only quoted literals
 * ('x', "x", `x`) are replaced, in src/, test/, inspector/, bench/, README.md and docs/.
 *
 * Idempotent: run it again after merging a branch that still uses the old names.
 *   node scripts/rename-events.mjs
 */
import { readFileSync, readdirSync, writeFileSync } from 'node:fs';
import { join, relative } from 'node:path';

const root = join(import.meta.dirname, '..');

/** Old name -> new name. */
export const RENAMES = {
  // The Turn tells its Session: a grant was given, the provider's rate limits were read.
  'turn.grant': 'turn.granted',
  'turn.rate_limits': 'turn.rate_limits_reported',
  // The tool-call machine tells its Turn: a grant was given.
  'toolcall.grant': 'toolcall.granted',
  // The model actor tells its Turn: the provider's rate-limit headers were read.
  'model.rate_limits': 'model.rate_limits_reported',
  // The Session tells its host: a command was answered, an update was sequenced and published.
  'session.reply': 'session.replied',
  'session.update': 'session.published',
};

const EXTENSIONS = /\.(ts|mts|mjs|js|md|html)$/;
const SKIP_DIRS = new Set(['node_modules', 'dist', '.git']);
const SELF = relative(root, import.meta.filename);

function* files(path) {
  for (const entry of readdirSync(path, { withFileTypes: true })) {
    if (SKIP_DIRS.has(entry.name)) continue;
    const child = join(path, entry.name);
    if (entry.isDirectory()) yield* files(child);
    else if (EXTENSIONS.test(entry.name)) yield child;
  }
}

const escape = (text) => text.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
const rules = Object.entries(RENAMES).map(([from, to]) => [new RegExp(`(['"\`])${escape(from)}\\1`, 'g'), `$1${to}$1`]);

let changed = 0;
const targets = ['src', 'test', 'inspector', 'bench', 'docs'].map((dir) => join(root, dir));
for (const path of [...targets.flatMap((dir) => [...files(dir)]), join(root, 'README.md')]) {
  const rel = relative(root, path);
  // The spec copies in docs/spec are the reference's words; this script's own table is its input.
  if (rel.startsWith('docs/spec/') || rel === SELF) continue;
  const before = readFileSync(path, 'utf8');
  let after = before;
  for (const [pattern, replacement] of rules) after = after.replace(pattern, replacement);
  if (after !== before) {
    writeFileSync(path, after);
    changed += 1;
    console.log(rel);
  }
}
console.log(`${changed} files changed`);
