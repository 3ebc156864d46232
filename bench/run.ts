/**
 * `npm run bench`: every benchmark, each printing ratios against a baseline measured in the same run.
 * Not part of `npm test`; see docs/benchmarks.md for figures and how to reproduce them.
 */
import { runAssemblyBench } from './assembly.bench.js';
import { runOpenAIBench } from './openai.bench.js';
import { runRuntimeBench } from './runtime.bench.js';
import { runScaleBench } from './scale.bench.js';
import { runScaleOutBench } from './scale-out.bench.js';
import { runStartupBench } from './startup.bench.js';

const only = process.argv[2];
const suites: Record<string, () => Promise<string[]>> = { runtime: runRuntimeBench, openai: runOpenAIBench, assembly: runAssemblyBench, startup: runStartupBench, scale: runScaleBench, 'scale-out': runScaleOutBench };

for (const [name, run] of Object.entries(suites)) {
  if (only && only !== name) continue;
  console.log(`== ${name}`);
  for (const line of await run()) console.log(line);
}
process.exit(0);
