/**
 * The live heap after a full collection, for the attack tests that bound what a flood leaves in
 * memory (test/security/*-flood*.test.ts, slow-update-reader). `gc` is exposed at run time, so the
 * suite needs no `--expose-gc` on its command line.
 */
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';

setFlagsFromString('--expose-gc');
/** V8's `gc`, taken from a fresh context (exposing it does not add it to contexts made before). */
export const gc = runInNewContext('gc') as () => void;

/** Bytes of heap in use after two full collections (the second frees what the first's finalisers let go). */
export function heapAfterGc(): number {
  gc();
  gc();
  return process.memoryUsage().heapUsed;
}
