/**
 * @module protocol/iso-time
 * Times as they cross the API: ISO-8601 UTC with milliseconds (DECISIONS §4), formatted without
 * `Date.prototype.toISOString` on the step path. Used by the clock (`services/clock.ts`) and by
 * storage for the times it reads back (`storage/sql.ts`).
 */

const pad2 = (n: number): string => (n < 10 ? `0${n}` : `${n}`);

/** `.000Z` to `.999Z`: the end of an ISO time, by its milliseconds. */
const MILLIS_SUFFIX = Array.from({ length: 1000 }, (_, i) => `.${String(i).padStart(3, '0')}Z`);

/** The second whose `YYYY-MM-DDTHH:MM:SS` prefix `secondPrefix` holds. */
let prefixSecond = -1;
let secondPrefix = '';

/**
 * `new Date(ms).toISOString()` for the years 1970-9999, formatted with integer arithmetic (the
 * civil-from-days algorithm): V8's `toISOString` goes through its date cache in C++ and cost about
 * 2 µs a call, a step's spans take several (issue 14 point 2). Any other time is left to `Date`.
 * The text up to the second is kept for the next call within the same second, so most calls join two
 * strings instead of building a dozen pieces (issue 14, perf-alloc).
 */
export function isoString(ms: number): string {
  if (!Number.isSafeInteger(ms) || ms < 0 || ms >= 253402300800000) return new Date(ms).toISOString();
  const second = Math.floor(ms / 1000);
  if (second !== prefixSecond) {
    secondPrefix = formatSecond(second);
    prefixSecond = second;
  }
  return secondPrefix + MILLIS_SUFFIX[ms - second * 1000]!;
}

/** `YYYY-MM-DDTHH:MM:SS` of a second since 1970 (non-negative, before year 10000). */
function formatSecond(second: number): string {
  const days = Math.floor(second / 86400);
  const secondOfDay = second - days * 86400;
  // Howard Hinnant's days_from_civil inverse, for days since 1970-01-01 (all non-negative here).
  const z = days + 719468;
  const era = Math.floor(z / 146097);
  const doe = z - era * 146097;
  const yoe = Math.floor((doe - Math.floor(doe / 1460) + Math.floor(doe / 36524) - Math.floor(doe / 146096)) / 365);
  const doy = doe - (365 * yoe + Math.floor(yoe / 4) - Math.floor(yoe / 100));
  const mp = Math.floor((5 * doy + 2) / 153);
  const day = doy - Math.floor((153 * mp + 2) / 5) + 1;
  const month = mp < 10 ? mp + 3 : mp - 9;
  const year = yoe + era * 400 + (month <= 2 ? 1 : 0);
  const hours = Math.floor(secondOfDay / 3600);
  const minutes = Math.floor((secondOfDay % 3600) / 60);
  const seconds = secondOfDay % 60;
  return `${year}-${pad2(month)}-${pad2(day)}T${pad2(hours)}:${pad2(minutes)}:${pad2(seconds)}`;
}

