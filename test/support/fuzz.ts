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

/** A vitest timeout that grows with the number of cases (a case takes well under a second). */
export function fuzzTimeout(ci: number): number {
  return 60_000 + fuzzRuns(ci) * 1_000;
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
