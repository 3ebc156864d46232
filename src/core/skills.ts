/**
 * @module core/skills
 * The core's skills API: the configured skill root, which skills the user disabled (stored, and
 * mirrored in memory for the turns), listing and reading skills, and the catalog and selection
 * resolution the sessions use.
 */
import { realpath } from 'node:fs/promises';
import { InputError } from '../errors.js';
import type { NewMessage } from '../protocol/content.js';
import type { IdGenerator } from '../services/clock.js';
import { renderCatalog, resolveSelectedSkills } from '../services/skills/catalog.js';
import { discoverSkills, type SkillDetail, type SkillSummary, type SkillWarning } from '../services/skills/discovery.js';
import type { SessionStorage } from '../storage/storage.js';

/** Materialises explicit skill selections into `skill_instruction` messages (see `CoreOptions.resolveSkills`). */
export type ResolveSkills = (inputs: Array<{ type: 'skill'; name: string; path: string }>, disabledSkillNames: string[]) => Promise<NewMessage[]>;

/** Every discovered skill (enabled and disabled) and every load warning. */
export interface SkillListing {
  skills: SkillSummary[];
  warnings: SkillWarning[];
}

/** The skills of one core; the disabled set is read from storage once, at start-up. */
export class SkillService {
  /** Selections of a turn as messages: the host's resolver, or the skill root's own. */
  readonly resolveSkills: ResolveSkills;

  private constructor(
    /** The configured skill root (hard-protected from writes by the permission policy), or null. */
    readonly root: string | null,
    private readonly storage: SessionStorage,
    private readonly disabled: Set<string>,
    resolveSkills: ResolveSkills | undefined,
    ids: IdGenerator,
  ) {
    this.resolveSkills =
      resolveSkills ??
      ((inputs: Array<{ type: 'skill'; name: string; path: string }>, disabled: string[]) =>
        resolveSelectedSkills(root, inputs, new Set(disabled), () => ids.next('msg')));
  }

  /** Reads the stored disabled skills and returns the service. */
  static async load(storage: SessionStorage, root: string | null, resolveSkills: ResolveSkills | undefined, ids: IdGenerator): Promise<SkillService> {
    const disabled = new Set((await storage.listSkillStatus()).filter((r) => r.disabled).map((r) => r.name));
    return new SkillService(root, storage, disabled, resolveSkills, ids);
  }

  /** Every discovered skill (enabled and disabled) and every load warning, scanned now. */
  readonly list = async (): Promise<SkillListing> => {
    const scan = await discoverSkills(this.root, this.disabled);
    return { skills: scan.skills.map(({ body: _body, ...summary }) => summary), warnings: [...scan.warnings, ...renderCatalog(scan.skills).warnings] };
  };

  /** The catalog the World State shows the model, without the given skills. */
  readonly catalog = async (disabled: readonly string[]): Promise<string | null> => renderCatalog((await discoverSkills(this.root, new Set(disabled))).skills).body;

  /** The names of the disabled skills, sorted. */
  disabledNames(): string[] {
    return [...this.disabled].sort();
  }

  /** Shows or hides a skill from the model by name; stored first, then applied to later turns. */
  async setDisabled(name: string, disabled: boolean): Promise<SkillListing> {
    if (typeof name !== 'string' || name.trim() === '' || typeof disabled !== 'boolean') {
      throw new InputError('invalid_request', 'setSkillDisabled needs a skill name and a boolean');
    }
    const normalized = name.split(/\s+/).filter(Boolean).join(' ');
    await this.storage.setSkillDisabled(normalized, disabled); // Database first; memory only once it is stored.
    if (disabled) this.disabled.add(normalized);
    else this.disabled.delete(normalized);
    return this.list();
  }

  /** One skill's detail; only `<root>/<name>/SKILL.md` paths are accepted (`invalid_request`). */
  async read(path: string): Promise<SkillDetail> {
    const scan = await discoverSkills(this.root, this.disabled);
    let canonical: string | null = null;
    try {
      canonical = await realpath(path);
    } catch {
      canonical = null;
    }
    const skill = scan.skills.find((s) => s.path === canonical);
    if (!skill) throw new InputError('invalid_request', `${path} is not the SKILL.md of a skill under the configured skill root`);
    return skill;
  }
}
