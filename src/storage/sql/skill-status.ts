/**
 * @module storage/sql/skill-status
 * The `skill_status` rows: which skills the user disabled.
 *
 * Each exported function is the `SessionStorage` method of the same name (its contract is in
 * `storage.ts`), taking the storage object's `SqlContext` first.
 */
import type { SqlContext } from './context.js';

export function listSkillStatus(ctx: SqlContext): Promise<Array<{ name: string; disabled: boolean }>> {
  return ctx.run('list skill status', async () => {
    const { rows } = await ctx.db.query<{ name: string; disabled: boolean }>('SELECT name, disabled FROM skill_status ORDER BY name');
    return rows.map((r) => ({ name: r.name, disabled: Boolean(r.disabled) }));
  });
}

export function setSkillDisabled(ctx: SqlContext, name: string, disabled: boolean): Promise<void> {
  return ctx.run('set skill status', async () => {
    await ctx.db.query(
      'INSERT INTO skill_status (name, disabled) VALUES ($1, $2) ON CONFLICT (name) DO UPDATE SET disabled = EXCLUDED.disabled',
      [name, disabled],
    );
  });
}
