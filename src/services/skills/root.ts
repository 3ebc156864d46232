/**
 * @module services/skills/root
 * The one skill root of a runtime (reference §7.2): the same root is discovered (catalog, explicit
 * selection, `listSkills`, `readSkill`) and hard-protected from writes (§7.5). The root comes from
 * the core's `skills.root` option; the roots the permission policy protects come from the tool
 * runtime (`prepareToolRuntime({ skillRoots })`, passed on by `workspaceToolOptions`). When both
 * are known and the discovered root is not protected, the runtime refuses to start: a skill root
 * the model could rewrite would let it change its own instructions.
 */
import { isAbsolute, join } from 'node:path';
import { InputError } from '../../errors.js';
import { canonicalize, isWithin } from '../permissions/paths.js';

export interface SkillRootOptions {
  /** The configured root; `null` turns skills off; undefined means the default. */
  root?: string | null;
  /** The roots the permission policy hard-protects, when a real policy is in use. */
  protectedRoots?: readonly string[];
  /** `$HOME` (only the default reads it); unset means no default root. */
  home?: string | undefined;
}

/**
 * The root to discover: `root` when given, else `<home>/.agents/skills`, else null.
 * Throws `configuration_invalid` for a relative root, or one outside every protected root.
 */
export function resolveSkillRoot(options: SkillRootOptions): string | null {
  const root = options.root !== undefined ? options.root : options.home ? join(options.home, '.agents', 'skills') : null;
  if (root === null) return null;
  if (typeof root !== 'string' || !isAbsolute(root)) {
    throw new InputError('configuration_invalid', `the skill root must be an absolute path, got ${JSON.stringify(root)}`);
  }
  if (options.protectedRoots) {
    let canonical: string;
    let protectedRoots: string[];
    try {
      canonical = canonicalize(root);
      protectedRoots = options.protectedRoots.map((r) => canonicalize(r));
    } catch (error) {
      throw new InputError('configuration_invalid', `the skill root ${root} cannot be resolved: ${(error as Error).message}`, { cause: error });
    }
    if (!protectedRoots.some((p) => isWithin(canonical, p))) {
      throw new InputError(
        'configuration_invalid',
        `the skill root ${root} is not write-protected by the tool runtime (it protects ${protectedRoots.join(', ')}); ` +
          `configure it once, with prepareToolRuntime({ skillRoots: [${JSON.stringify(root)}] }), and let workspaceToolOptions pass it on`,
      );
    }
  }
  return root;
}
