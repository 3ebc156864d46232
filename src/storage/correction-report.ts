/**
 * @module storage/correction-report
 * What correcting running turns reports: at start-up (`markRunningInterrupted`) and when a core
 * acquires or takes over an expired lease (`storage/leases`). It has a file of its own because both
 * the storage port and the lease store name it, and the port names the lease store: kept in either,
 * the two would import each other.
 */

/** How many running turns were ended as `interrupted`, and how many running spans as `outcome_unknown`. */
export interface CorrectionReport {
  turns: number;
  spans: number;
}
