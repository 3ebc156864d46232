/**
 * @module storage/pg-generations
 * Which pooled connections to distrust after one of them died (integrity-outage).
 *
 * A connection that dies under a statement is rarely alone: a server restart, a failover or a
 * middlebox that forgot its idle flows ends every connection of the pool at once. `pg`'s pool only
 * learns of an idle connection's end when its socket reports it; one killed silently (no FIN, no
 * reset until written to) looks healthy and is handed to the next checkout, whose statement then
 * fails too. A fact write runs again at most twice after such a failure (`sql/outcome-unknown.ts`),
 * so a pool holding three or more dead connections failed an acknowledged write `persistence_error`
 * although the database was back.
 *
 * So connections are counted in generations: each connection is stamped with the generation it was
 * opened in, and a connection found dead starts a new generation. A connection of an older
 * generation is suspect: the lanes give it no new statement and a checkout discards it and asks the
 * pool again, so the repeat of the failed write runs on a connection opened after the failure. The
 * cost, when only one connection had died (`pg_terminate_backend` of one backend), is one reconnect
 * per connection the pool held then; deaths are rare, and the pool refills on demand.
 */
import { isAnswerTimeout } from './postgres-timeouts.js';
import { outcomeUnknown } from './sql/outcome-unknown.js';

export class ConnectionGenerations {
  /** Bumped each time a connection is found dead. */
  private current = 0;
  private readonly births = new WeakMap<object, number>();

  /** Stamps a newly opened connection with the current generation. */
  born(client: object): void {
    this.births.set(client, this.current);
  }

  /** The current generation: it changes when a connection is found dead. */
  get generation(): number {
    return this.current;
  }

  /**
   * Notes a failure of `client`: a connection lost under it (see `diedOf`) starts a new generation,
   * so that every connection opened before is suspect. Only the first report of a connection counts,
   * so that its statements failing one after another do not make the connections opened since suspect.
   */
  failed(client: object | undefined, error: unknown): void {
    if (!diedOf(error)) return;
    if (client !== undefined) {
      const birth = this.births.get(client);
      // Already reported (its birth is older than the current generation), or opened after it.
      if (birth !== undefined && birth < this.current) return;
      this.births.set(client, -1);
    }
    this.current += 1;
  }

  /** True for a connection opened before the last connection found dead (or one found dead itself). */
  suspect(client: object): boolean {
    const birth = this.births.get(client);
    return birth !== undefined && birth < this.current;
  }
}

/**
 * True when `error` means the connection itself is gone (lost, ended by the server, or silent past
 * the answer bound), rather than a statement the server refused.
 */
export function diedOf(error: unknown): boolean {
  return outcomeUnknown(error) || isAnswerTimeout(error);
}
