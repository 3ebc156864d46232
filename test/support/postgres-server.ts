/**
 * Starts a throw-away PostgreSQL server for the test suite from the binaries on this machine
 * (`initdb`, `pg_ctl` on PATH or under /usr/lib/postgresql/<version>/bin). As root, the server runs
 * as the unprivileged `postgres` user (or `nobody`), because Postgres refuses to run as root.
 */
import { execFileSync, spawnSync } from 'node:child_process';
import { chmodSync, chownSync, existsSync, mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

export interface PostgresServer {
  url: string;
  port: number;
  dataDir: string;
  stop(): void;
  /** Stops the server process (fast shutdown) without removing its data. */
  halt(): void;
  /** Starts it again on the same port and data directory. */
  restart(): void;
  /** Stops the server at once (`-m immediate`, as a crash would): backends are killed mid-statement. */
  crash(): void;
  /** `pg_ctl restart -m immediate`: killed and started again on the same port and data directory. */
  crashRestart(): void;
}

function findBinDir(): string {
  const which = spawnSync('sh', ['-c', 'command -v pg_ctl'], { encoding: 'utf8' });
  if (which.status === 0 && which.stdout.trim()) return join(which.stdout.trim(), '..');
  const base = '/usr/lib/postgresql';
  if (existsSync(base)) {
    const versions = readdirSync(base).filter((v) => existsSync(join(base, v, 'bin', 'pg_ctl'))).sort((a, b) => Number(b) - Number(a));
    if (versions[0]) return join(base, versions[0], 'bin');
  }
  throw new Error(
    'PostgreSQL server binaries (initdb, pg_ctl) were not found on PATH or under /usr/lib/postgresql/*/bin. ' +
      'Install them (Debian: apt-get install postgresql) or set TEST_DATABASE_URL to an existing server.',
  );
}

function serviceUser(): { name: string; uid: number; gid: number } | null {
  if (process.getuid?.() !== 0) return null;
  for (const name of ['postgres', 'nobody']) {
    const id = spawnSync('id', ['-u', name], { encoding: 'utf8' });
    const gid = spawnSync('id', ['-g', name], { encoding: 'utf8' });
    if (id.status === 0) return { name, uid: Number(id.stdout.trim()), gid: Number(gid.stdout.trim()) };
  }
  throw new Error('running as root, but neither a postgres nor a nobody user exists to run the test server');
}

export async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const address = server.address();
      const port = typeof address === 'object' && address ? address.port : 0;
      server.close(() => resolve(port));
    });
  });
}

export interface StartPostgresOptions {
  /**
   * Keep the server's default durability (fsync, synchronous_commit, full_page_writes on). The test
   * suite turns them off for speed; benchmarks keep them, because a durable step must pay for them.
   */
  durable?: boolean;
}

export async function startPostgres(startOptions: StartPostgresOptions = {}): Promise<PostgresServer> {
  const bin = findBinDir();
  const user = serviceUser();
  const root = mkdtempSync(join(tmpdir(), 'openwork-pg-'));
  const dataDir = join(root, 'data');
  const socketDir = root;
  chmodSync(root, 0o755);
  if (user) chownSync(root, user.uid, user.gid);
  const run = (cmd: string, args: string[]) => {
    const full = join(bin, cmd);
    const [file, argv] = user ? ['runuser', ['-u', user.name, '--', full, ...args]] : [full, args];
    execFileSync(file, argv, { stdio: 'pipe', cwd: root });
  };
  run('initdb', ['-D', dataDir, '-U', 'openwork', '--auth=trust', '-E', 'UTF8', '--no-locale']);
  const port = await freePort();
  const durability = startOptions.durable ? '' : ' -c fsync=off -c synchronous_commit=off -c full_page_writes=off';
  const options = `-p ${port} -k ${socketDir} -c listen_addresses=127.0.0.1${durability} -c max_connections=200`;
  const start = () => run('pg_ctl', ['-D', dataDir, '-o', options, '-l', join(root, 'server.log'), '-w', '-t', '60', 'start']);
  const halt = () => {
    try {
      run('pg_ctl', ['-D', dataDir, '-m', 'fast', '-w', 'stop']);
    } catch {
      // Already stopped.
    }
  };
  const crash = () => {
    try {
      run('pg_ctl', ['-D', dataDir, '-m', 'immediate', '-w', 'stop']);
    } catch {
      // Already stopped.
    }
  };
  const crashRestart = () => run('pg_ctl', ['-D', dataDir, '-o', options, '-l', join(root, 'server.log'), '-m', 'immediate', '-w', '-t', '60', 'restart']);
  start();
  return {
    url: `postgres://openwork@127.0.0.1:${port}/postgres`,
    port,
    dataDir,
    halt,
    restart: start,
    crash,
    crashRestart,
    stop() {
      halt();
      rmSync(root, { recursive: true, force: true });
    },
  };
}
