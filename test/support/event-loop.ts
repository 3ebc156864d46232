/**
 * The longest the event loop was held while `run` ran: a 20 ms timer notes the gap between its
 * ticks, so a synchronous stretch of the host (a parse, a walk, a render) shows as a gap this long.
 */
export async function longestStall<T>(run: () => Promise<T>): Promise<{ value: T; stallMs: number }> {
  let last = Date.now();
  let stallMs = 0;
  const timer = setInterval(() => {
    stallMs = Math.max(stallMs, Date.now() - last);
    last = Date.now();
  }, 20);
  try {
    const value = await run();
    stallMs = Math.max(stallMs, Date.now() - last);
    return { value, stallMs };
  } finally {
    clearInterval(timer);
  }
}

/**
 * Like `longestStall`, in the process's CPU time (user and system, every thread) between two ticks
 * of the 20 ms timer instead of wall time (branch trust-stall). A synchronous stretch of the host
 * spends CPU while no timer runs; a machine so loaded that the process waits for a core does not,
 * so this bound holds on a loaded 2-core machine where the wall-time gap measures the load.
 */
export async function longestCpuStall<T>(run: () => Promise<T>): Promise<{ value: T; stallMs: number; wallStallMs: number }> {
  const cpuMs = () => {
    const { user, system } = process.cpuUsage();
    return (user + system) / 1000;
  };
  let lastCpu = cpuMs();
  let lastWall = Date.now();
  let stallMs = 0;
  let wallStallMs = 0;
  const tick = () => {
    const cpu = cpuMs();
    stallMs = Math.max(stallMs, cpu - lastCpu);
    wallStallMs = Math.max(wallStallMs, Date.now() - lastWall);
    lastCpu = cpu;
    lastWall = Date.now();
  };
  const timer = setInterval(tick, 20);
  try {
    const value = await run();
    tick();
    return { value, stallMs, wallStallMs };
  } finally {
    clearInterval(timer);
  }
}
