/**
 * @module services/ownership/lease-keeper
 * One core's side of session ownership (issue 15): the tokens it holds, the renewal of all its
 * leases in one statement every `leaseMs / 3`, and the takeover scan that corrects the running turns
 * of processes whose leases expired. It is the `WriteFence` the storage checks every write against.
 */
import { hostname } from 'node:os';
import { randomUUID } from 'node:crypto';
import { InputError, StorageError } from '../../errors.js';
import { ownershipLost, type WriteFence } from '../../storage/fence.js';
import type { LeaseAcquisition, SessionLeaseStore } from '../../storage/leases.js';
import type { CorrectionReport } from '../../storage/storage.js';

/** `createCore({ ownership })`: on by default for `postgresStorage`, off for PGlite (one process by its lock). */
export interface OwnershipOptions {
  /** How long a lease lasts without renewal (default 5,000 ms); renewed every third of it. */
  leaseMs?: number;
  /**
   * How often this core looks for sessions whose owner's lease expired during a turn (default
   * `leaseMs / 2`): such a turn is corrected at most this long (plus one statement) after expiry.
   */
  scanIntervalMs?: number;
  /**
   * This process's owner id (default: host, pid and a random suffix). It must be unique among live
   * processes. A stable id (a pod name) lets a restarted process free its previous incarnation's
   * leases at once instead of waiting for them to expire.
   */
  ownerId?: string;
}

export const DEFAULT_LEASE_MS = 5_000;

/** Counts of lease statements, for the lease traffic a host pays (issue 15.5). */
export interface LeaseStats {
  acquisitions: number;
  renewals: number;
  releases: number;
  scans: number;
  /** Sessions whose expired lease a scan took over, and the running turns it corrected. */
  takenOver: number;
  correctedTurns: number;
  /** Sessions this core found it no longer owned. */
  lost: number;
}

export interface ResolvedOwnership {
  ownerId: string;
  leaseMs: number;
  scanIntervalMs: number;
  /** True when the host named the owner id (a restart may free that id's leases at once). */
  stableOwnerId: boolean;
}

/** Validates `ownership` options; `configuration_invalid` for anything but positive finite numbers and a non-empty id. */
export function resolveOwnership(options: OwnershipOptions): ResolvedOwnership {
  const leaseMs = options.leaseMs ?? DEFAULT_LEASE_MS;
  if (typeof leaseMs !== 'number' || !Number.isFinite(leaseMs) || leaseMs < 50) {
    throw new InputError('configuration_invalid', `ownership.leaseMs must be a number of milliseconds of at least 50, got ${String(leaseMs)}`);
  }
  const scanIntervalMs = options.scanIntervalMs ?? leaseMs / 2;
  if (typeof scanIntervalMs !== 'number' || !Number.isFinite(scanIntervalMs) || scanIntervalMs < 10) {
    throw new InputError('configuration_invalid', `ownership.scanIntervalMs must be a number of milliseconds of at least 10, got ${String(scanIntervalMs)}`);
  }
  if (options.ownerId !== undefined && (typeof options.ownerId !== 'string' || options.ownerId.trim() === '' || options.ownerId.length > 200)) {
    throw new InputError('configuration_invalid', 'ownership.ownerId must be a non-empty string of at most 200 characters');
  }
  return {
    ownerId: options.ownerId ?? `${hostname()}:${process.pid}:${randomUUID().slice(0, 8)}`,
    leaseMs,
    scanIntervalMs,
    stableOwnerId: options.ownerId !== undefined,
  };
}

export class LeaseKeeper implements WriteFence {
  readonly ownerId: string;
  /** Leases held now, by session. */
  private readonly tokens = new Map<string, number>();
  /** The last token of every session this core ever leased: writes under a lost one are refused, never unfenced. */
  private readonly known = new Map<string, number>();
  /**
   * When (the keeper's clock) the statement that last confirmed each held lease was sent: its
   * acquisition or a renewal that answered it. The database's expiry is at least `leaseMs` after
   * that, so until then the lease is this core's whatever the database is doing (see `confirm`).
   */
  private readonly confirmedAt = new Map<string, number>();
  private readonly counts: LeaseStats = { acquisitions: 0, renewals: 0, releases: 0, scans: 0, takenOver: 0, correctedTurns: 0, lost: 0 };
  private timers: NodeJS.Timeout[] = [];
  private renewing: Promise<void> | null = null;
  /**
   * Since when this core has reached the database without a failure (null: its last attempt
   * failed). During an outage no owner can renew, so every lease on the database expires; a lease
   * that expired then says nothing about its owner being dead. So this core takes nothing over
   * until it has reached the database for a whole lease period, in which live owners renew. A
   * stall of this process counts as an outage (see `look`).
   */
  private reachableSince: number | null = Number.NEGATIVE_INFINITY;
  /** When either timer last fired (the keeper's clock), to notice that this process was stalled. */
  private lastTick: number | null = null;
  private scanning: Promise<void> | null = null;
  private closing = false;
  /** Set at shutdown: closing handles do not free their leases one by one, `releaseAll` frees them together. */
  private draining = false;

  constructor(
    private readonly store: SessionLeaseStore,
    readonly settings: ResolvedOwnership,
    /** Called once per session this core finds it no longer owns (a renewal or a write said so). */
    private readonly onLost: (sessionId: string) => void,
    /** A monotonic clock in milliseconds (injectable for tests). */
    private readonly clock: () => number = () => performance.now(),
  ) {
    this.ownerId = settings.ownerId;
  }

  tokenOf(sessionId: string): number | undefined {
    return this.known.get(sessionId);
  }

  /** True while this core holds the session's lease. */
  holds(sessionId: string): boolean {
    return this.tokens.has(sessionId);
  }

  refused(sessionId: string, token: number | null): void {
    // Only the holder of the refused token lost anything: a newer acquisition of this core stands.
    if (token === null || this.tokens.get(sessionId) === token) this.lose(sessionId);
  }

  stats(): LeaseStats {
    return { ...this.counts };
  }

  /** Sessions held now. */
  get held(): number {
    return this.tokens.size;
  }

  private lose(sessionId: string): void {
    this.confirmedAt.delete(sessionId);
    if (!this.tokens.delete(sessionId)) return;
    this.counts.lost += 1;
    // Never inside the storage call that noticed it: the session's shutdown awaits that very turn.
    queueMicrotask(() => this.onLost(sessionId));
  }

  async acquire(sessionId: string): Promise<LeaseAcquisition> {
    this.counts.acquisitions += 1;
    const sentAt = this.clock();
    const result = await this.store.acquire(sessionId, this.ownerId, this.settings.leaseMs);
    if (result.type === 'acquired') {
      this.tokens.set(sessionId, result.token);
      this.known.set(sessionId, result.token);
      this.confirmedAt.set(sessionId, sentAt);
    }
    return result;
  }

  /**
   * A lease the storage took for this core in the statement that created the session
   * (`createLeasedSession`): held from now on, as if `acquire` had answered it.
   */
  adopt(sessionId: string, token: number): void {
    this.counts.acquisitions += 1;
    this.tokens.set(sessionId, token);
    this.known.set(sessionId, token);
    // Just answered: the creating statement's own send time is a few milliseconds earlier at most.
    this.confirmedAt.set(sessionId, this.clock());
  }

  /**
   * Resolves once this core is sure it still owns `sessionId`, before a side effect that no fence can
   * take back (a tool's run). Within the lease period since the lease was last confirmed, at once:
   * nobody can have taken it. Past it (an outage, or a stall, longer than the renewals' slack), the
   * lease may have expired on the database and been taken by another core, whose takeover closed
   * this turn; so the lease is renewed first, and the side effect waits for the answer: still held,
   * it goes ahead; lost, `ownership_lost`; unreachable, `persistence_error` (the tool's result could
   * not be recorded either). (integrity-outage, docs/decisions.md "A lease past its period".)
   * Answers `undefined` within the period, so that the common case waits for nothing.
   */
  confirm(sessionId: string): Promise<void> | undefined {
    return this.confirmedWithin(sessionId) ? undefined : this.reconfirm(sessionId);
  }

  private async reconfirm(sessionId: string): Promise<void> {
    // A session this core never leased is not fenced by it: there is nothing to confirm.
    if (!this.known.has(sessionId)) return;
    if (!this.tokens.has(sessionId)) throw ownershipLost(sessionId);
    // A renewal in flight was sent before this look, maybe before the lapse: wait for it, then send one.
    if (this.renewing) await this.renewing;
    await this.renewNow();
    if (this.confirmedWithin(sessionId)) return;
    if (!this.tokens.has(sessionId)) throw ownershipLost(sessionId);
    throw new StorageError(`the lease of session ${sessionId} could not be confirmed: the database did not answer its renewal`);
  }

  private confirmedWithin(sessionId: string): boolean {
    const at = this.confirmedAt.get(sessionId);
    return at !== undefined && this.tokens.has(sessionId) && this.clock() - at < this.settings.leaseMs;
  }

  /** Frees one session's lease (its handle closed); during shutdown `releaseAll` frees them together. */
  async release(sessionId: string): Promise<void> {
    const token = this.tokens.get(sessionId);
    if (token === undefined) return;
    this.tokens.delete(sessionId);
    this.confirmedAt.delete(sessionId);
    if (this.draining) return;
    this.counts.releases += 1;
    await this.store.release(sessionId, this.ownerId, token).catch(() => undefined);
  }

  /**
   * Startup: with a stable owner id, the leases of this id's previous incarnation are freed; and
   * the takeover scan corrects every running turn whose lease is expired, free or missing (the
   * startup correction, scoped to what no live process owns). Both in one transaction: freed in a
   * statement of their own, the sessions were another core's to take and correct before this
   * scan, and the report read 0 corrected turns (trust-lease).
   */
  async startupCorrection(): Promise<CorrectionReport> {
    const report = await this.store.takeOverExpired(undefined, this.settings.stableOwnerId ? this.ownerId : undefined);
    this.counts.scans += 1;
    this.counts.takenOver += report.sessions.length;
    this.counts.correctedTurns += report.turns;
    return { turns: report.turns, spans: report.spans };
  }

  start(): void {
    const every = (ms: number, fn: () => void) => {
      const timer = setInterval(fn, ms);
      timer.unref();
      this.timers.push(timer);
    };
    every(this.renewEveryMs, () => void this.renewNow());
    every(this.settings.scanIntervalMs, () => void this.scanNow());
  }

  private get renewEveryMs(): number {
    return Math.max(10, this.settings.leaseMs / 3);
  }

  /**
   * Every renewal and scan is a look at the database. A gap of more than two renewal intervals
   * between two looks means this process was stalled (a blocked event loop, a GC or VM pause,
   * SIGSTOP): it has not watched the database meanwhile, and the leases that expired then, its
   * own process's siblings' among them, say nothing about their owners being dead. So a stall
   * counts as an outage: the scan waits a lease period, in which live owners renew.
   */
  private look(): void {
    const now = this.clock();
    if (this.lastTick !== null && now - this.lastTick > 2 * this.renewEveryMs) this.reachableSince = null;
    this.lastTick = now;
  }

  /** One statement renews every lease held; a lease missing from its answer, or under another token, is lost. */
  renewNow(): Promise<void> {
    this.look();
    if (this.renewing || this.closing || this.tokens.size === 0) return this.renewing ?? Promise.resolve();
    const held = new Map(this.tokens);
    this.renewing = (async () => {
      try {
        this.counts.renewals += 1;
        const sentAt = this.clock();
        const rows = await this.store.renew(this.ownerId, [...held.keys()], this.settings.leaseMs);
        this.reached(true);
        const renewed = new Map(rows.map((r) => [r.sessionId, r.token]));
        for (const [sessionId, token] of held) {
          // Only what is still held under the same token: a release or re-acquisition meanwhile is not a loss.
          if (this.tokens.get(sessionId) !== token) continue;
          if (renewed.get(sessionId) !== token) this.lose(sessionId);
          else if ((this.confirmedAt.get(sessionId) ?? -Infinity) < sentAt) this.confirmedAt.set(sessionId, sentAt);
        }
      } catch {
        // The database is unreachable: the next interval tries again. Writes are fenced regardless.
        this.reached(false);
      } finally {
        this.renewing = null;
      }
    })();
    return this.renewing;
  }

  private reached(ok: boolean): void {
    if (!ok) this.reachableSince = null;
    else this.reachableSince ??= this.clock();
  }

  /** The takeover scan (issue 15.3). */
  scanNow(): Promise<void> {
    this.look();
    if (this.scanning || this.closing) return this.scanning ?? Promise.resolve();
    this.scanning = (async () => {
      try {
        if (this.reachableSince === null || this.clock() - this.reachableSince < this.settings.leaseMs) {
          // Just after an outage or a stall: wait until live owners have had a lease period to renew.
          await this.store.ping();
          this.reached(true);
          return;
        }
        this.counts.scans += 1;
        // Never its own sessions: a renewal that is merely late is not a dead owner.
        const report = await this.store.takeOverExpired(this.ownerId);
        this.counts.takenOver += report.sessions.length;
        this.counts.correctedTurns += report.turns;
      } catch {
        // As for renewals: the next interval scans again.
        this.reached(false);
      } finally {
        this.scanning = null;
      }
    })();
    return this.scanning;
  }

  /** Shutdown begins: leases stay renewed while the sessions stop, and are freed together afterwards. */
  beginShutdown(): void {
    this.draining = true;
  }

  /** Stops the timers; the caller releases the leases once its sessions have stopped writing. */
  async stop(): Promise<void> {
    this.closing = true;
    for (const timer of this.timers) clearInterval(timer);
    this.timers = [];
    await Promise.all([this.renewing, this.scanning]);
  }

  /** Shutdown: frees every lease of this owner in one statement. */
  async releaseAll(): Promise<void> {
    this.draining = true;
    this.tokens.clear();
    this.confirmedAt.clear();
    this.counts.releases += 1;
    await this.store.releaseAll(this.ownerId);
  }
}
