/**
 * Starts a throw-away PostgreSQL server for the peers benchmark with the server's default durability
 * (fsync on, synchronous_commit on, full_page_writes on): the figures are about durable steps, so
 * the server must pay for them. The start-up logic mirrors test/support/postgres-server.ts (which
 * turns durability off for test speed); as root, the server runs as the `postgres` (or `nobody`)
 * user because Postgres refuses to run as root.
 */
import { execFileSync, spawnSync } from 'node:child_process';
import { chmodSync, chownSync, existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

function findBinDir() {
  const which = spawnSync('sh', ['-c', 'command -v pg_ctl'], { encoding: 'utf8' });
  if (which.status === 0 && which.stdout.trim()) return join(which.stdout.trim(), '..');
  const base = '/usr/lib/postgresql';
  if (existsSync(base)) {
    const versions = readdirSync(base).filter((v) => existsSync(join(base, v, 'bin', 'pg_ctl'))).sort((a, b) => Number(b) - Number(a));
    if (versions[0]) return join(base, versions[0], 'bin');
  }
  throw new Error('PostgreSQL server binaries (initdb, pg_ctl) were not found on PATH or under /usr/lib/postgresql/*/bin');
}

function serviceUser() {
  if (process.getuid?.() !== 0) return null;
  for (const name of ['postgres', 'nobody']) {
    const id = spawnSync('id', ['-u', name], { encoding: 'utf8' });
    const gid = spawnSync('id', ['-g', name], { encoding: 'utf8' });
    if (id.status === 0) return { name, uid: Number(id.stdout.trim()), gid: Number(gid.stdout.trim()) };
  }
  throw new Error('running as root, but neither a postgres nor a nobody user exists to run the server');
}

async function freePort() {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const address = server.address();
      server.close(() => resolve(typeof address === 'object' && address ? address.port : 0));
    });
  });
}

/**
 * @param {{ settings?: Record<string, string> }} [extra] more server settings (`-c name=value`), e.g.
 *   `shared_preload_libraries` for bench/step-statements.ts; never a durability setting.
 * @returns {Promise<{ url: (db: string) => string, dataDir: string, postmasterPid: () => number, stop: () => void }>}
 */
export async function startDurablePostgres(extra = {}) {
  const bin = findBinDir();
  const user = serviceUser();
  const root = mkdtempSync(join(tmpdir(), 'openwork-peers-pg-'));
  const dataDir = join(root, 'data');
  chmodSync(root, 0o755);
  if (user) chownSync(root, user.uid, user.gid);
  const run = (cmd, args) => {
    const full = join(bin, cmd);
    const [file, argv] = user ? ['runuser', ['-u', user.name, '--', full, ...args]] : [full, args];
    execFileSync(file, argv, { stdio: 'pipe', cwd: root });
  };
  run('initdb', ['-D', dataDir, '-U', 'openwork', '--auth=trust', '-E', 'UTF8', '--no-locale']);
  const port = await freePort();
  // Only connection settings: every durability setting keeps the server's default.
  const settings = Object.entries(extra.settings ?? {}).map(([name, value]) => ` -c ${name}=${value}`).join('');
  const options = `-p ${port} -k ${root} -c listen_addresses=127.0.0.1 -c max_connections=300${settings}`;
  run('pg_ctl', ['-D', dataDir, '-o', options, '-l', join(root, 'server.log'), '-w', '-t', '60', 'start']);
  return {
    url: (db) => `postgres://openwork@127.0.0.1:${port}/${db}`,
    dataDir,
    postmasterPid: () => Number(readFileSync(join(dataDir, 'postmaster.pid'), 'utf8').split('\n')[0]),
    stop() {
      try {
        run('pg_ctl', ['-D', dataDir, '-m', 'fast', '-w', 'stop']);
      } catch {
        // Already stopped.
      }
      rmSync(root, { recursive: true, force: true });
    },
  };
}

const TICKS = 100; // USER_HZ on Linux

/**
 * CPU time (ms) of the Postgres server so far: every live server process's own time plus the time
 * of the backends that already exited, which the postmaster has reaped into its cutime/cstime.
 */
export function postgresCpuMs(postmasterPid) {
  let ticks = 0;
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    let stat;
    try {
      stat = readFileSync(`/proc/${entry}/stat`, 'utf8');
    } catch {
      continue; // exited meanwhile
    }
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    // fields[0] is state (field 3); ppid is field 4, utime 14, stime 15, cutime 16, cstime 17.
    const pid = Number(entry);
    const ppid = Number(fields[1]);
    const own = Number(fields[11]) + Number(fields[12]);
    if (pid === postmasterPid) ticks += own + Number(fields[13]) + Number(fields[14]);
    else if (ppid === postmasterPid) ticks += own;
  }
  return (ticks * 1000) / TICKS;
}
