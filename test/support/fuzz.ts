/**
 * fast-check settings shared by the fuzz suites: CI runs a bounded number of cases, `npm run fuzz`
 * many more (FUZZ_RUNS), and a failure is reproduced from the seed and path fast-check prints
 * (FUZZ_SEED, FUZZ_PATH).
 */
import fc from 'fast-check';

export function fuzzRuns(ci: number): number {
  const runs = Number(process.env.FUZZ_RUNS);
  return Number.isInteger(runs) && runs > 0 ? runs : ci;
}

export function fuzzParameters<T>(ci: number): fc.Parameters<T> {
  const seed = process.env.FUZZ_SEED !== undefined ? Number(process.env.FUZZ_SEED) : undefined;
  const path = process.env.FUZZ_PATH;
  return {
    numRuns: fuzzRuns(ci),
    ...(seed !== undefined ? { seed } : {}),
    ...(path ? { path, endOnFailure: true } : {}),
    // The report names the seed and path; printing them here too makes them easy to find in CI logs.
    reporter(details) {
      if (details.failed) {
        console.error(`fuzz failure: reproduce with FUZZ_SEED=${details.seed} FUZZ_PATH=${JSON.stringify(details.counterexamplePath ?? '')}`);
        const cause = details.errorInstance;
        const message = cause instanceof Error ? `${cause.message}\n${cause.stack ?? ''}` : String(cause);
        throw new Error(`${fc.defaultReportMessage(details)}\nFailure: ${message}`, { cause });
      }
    },
  };
}

/**
 * A vitest timeout that grows with the number of cases: `perCaseMs` each (a second by default; a
 * case that runs a real turn with tools on Postgres takes 2 s and more on a loaded machine).
 */
export function fuzzTimeout(ci: number, perCaseMs = 1_000): number {
  return 60_000 + fuzzRuns(ci) * perCaseMs;
}

/**
 * The seeds of a hand-rolled random suite (seededRandom). CI runs the fixed seeds `first`,
 * `first + 1`, ... (`ci` of them), so a CI run never draws a new case. `npm run fuzz` (FUZZ_RUNS
 * set) runs FUZZ_RUNS seeds from a base drawn at random and printed, so each fuzz run explores new
 * seeds; FUZZ_SEED fixes the base to reproduce one. The failing seed is named by the test's message.
 */
export function fuzzSeeds(ci: number, first = 1): number[] {
  const fixed = process.env.FUZZ_SEED !== undefined ? Number(process.env.FUZZ_SEED) : undefined;
  const exploring = process.env.FUZZ_RUNS !== undefined;
  const base = fixed !== undefined && Number.isInteger(fixed) ? fixed : exploring ? 1 + Math.floor(Math.random() * 2 ** 30) : first;
  if (exploring || fixed !== undefined) console.log(`seeded suite: ${fuzzRuns(ci)} seeds from FUZZ_SEED=${base}`);
  return Array.from({ length: fuzzRuns(ci) }, (_, i) => base + i);
}

/** A vitest timeout for a seeded suite: the default 30 s plus `perSeedMs` for each of its seeds. */
export function fuzzSeedsTimeout(ci: number, perSeedMs: number): number {
  return 30_000 + fuzzRuns(ci) * perSeedMs;
}

/**
 * mulberry32: a small seeded generator for the hand-rolled random suites, so a failure is
 * reproduced from the seed its test names.
 */
export function seededRandom(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}
