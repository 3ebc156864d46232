/**
 * Loaded with `--import` into the `openwork chat` child of bench/startup.bench.ts: prints, on exit,
 * the child's peak resident set and the CPU time (user + system, all threads) it had used when the
 * first prompt line appeared and when the session header (the store open) did. CPU time moves far
 * less than wall time when other processes load the machine, so it is the figure to compare
 * between sittings on a shared machine.
 */
const READY = 'reading prompts from stdin';
// The session header: the store is open and the session exists (after the prompt when chat shows
// its prompt first, before it otherwise).
const STORE_READY = /openwork chat · session ses_/;
let firstPromptCpuMs = -1;
let storeReadyCpuMs = -1;
const cpuMs = () => {
  const used = process.cpuUsage();
  return (used.user + used.system) / 1000;
};
const write = process.stdout.write.bind(process.stdout);
process.stdout.write = (chunk, ...rest) => {
  const text = String(chunk);
  if (firstPromptCpuMs < 0 && text.includes(READY)) firstPromptCpuMs = cpuMs();
  if (storeReadyCpuMs < 0 && STORE_READY.test(text)) storeReadyCpuMs = cpuMs();
  return write(chunk, ...rest);
};
process.on('exit', () => {
  process.stderr.write(`MAXRSS ${process.resourceUsage().maxRSS}\nFIRSTCPU ${firstPromptCpuMs.toFixed(0)}\nREADYCPU ${storeReadyCpuMs.toFixed(0)}\n`);
});
