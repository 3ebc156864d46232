/**
 * Loaded with `--import` into the `openwork chat` child of bench/startup.bench.ts: prints, on exit,
 * the child's peak resident set and the CPU time (user + system, all threads) it had used when the
 * first prompt line appeared. CPU time moves far less than wall time when other processes load the
 * machine, so it is the figure to compare between sittings on a shared machine.
 */
const READY = 'reading prompts from stdin';
let firstPromptCpuMs = -1;
const write = process.stdout.write.bind(process.stdout);
process.stdout.write = (chunk, ...rest) => {
  if (firstPromptCpuMs < 0 && String(chunk).includes(READY)) {
    const used = process.cpuUsage();
    firstPromptCpuMs = (used.user + used.system) / 1000;
  }
  return write(chunk, ...rest);
};
process.on('exit', () => {
  process.stderr.write(`MAXRSS ${process.resourceUsage().maxRSS}\nFIRSTCPU ${firstPromptCpuMs.toFixed(0)}\n`);
});
