/**
 * @module services/permissions/environment
 * `SandboxEnvironment`: the machine facts every policy of a runtime shares (reference §4.4): the
 * home directory, the temp directories, the skill roots, the runtime's own directory
 * (`~/.openwork`) and its private paths (the session store, its configuration). All paths are
 * canonical.
 */
import { homedir, tmpdir } from 'node:os';
import { isAbsolute, join } from 'node:path';
import { InputError } from '../../errors.js';
import { canonicalize, isWithin } from './paths.js';
import { movedCredentialPaths } from './credential-stores.js';

export type SandboxPlatform = 'linux' | 'darwin' | 'unsupported';

export interface SandboxEnvironment {
  /** The user's home directory (canonical). */
  readonly home: string;
  /** Writable by bash and the file tools in both modes; `$TMPDIR` is last (reference §4.5). */
  readonly tempDirs: readonly string[];
  /** Skill roots: hard-protected (readable, never writable). */
  readonly skillRoots: readonly string[];
  /** `~/.openwork`: hard-protected; spill files live below it. */
  readonly openworkHome: string;
  /**
   * The runtime's private paths: its session store (a PGlite data directory) and its configuration.
   * No tool may read or write them, in whatever directory they are, and no grant unlocks them.
   */
  readonly runtimePaths: readonly string[];
  /**
   * Credential paths (absolute): `CREDENTIAL_PATHS` below the home directory, and where the
   * environment's variables (`XDG_CONFIG_HOME`, `DOCKER_CONFIG`, `KUBECONFIG`, ...) moved them when
   * the environment was detected. The file tools and bash's sandbox both read this one list.
   */
  readonly credentialRoots: readonly string[];
  readonly platform: SandboxPlatform;
}

export interface SandboxEnvironmentOptions {
  /** Defaults to `os.homedir()`; tests point it at a temp directory. */
  home?: string;
  /** Defaults to `/tmp` (`/private/tmp` on macOS) and `$TMPDIR`. */
  tempDirs?: string[];
  /** Configured skill roots, protected in addition to `~/.agents/skills`. */
  skillRoots?: string[];
  /** Private paths of the runtime (configuration files, a store the core is not told about). */
  runtimePaths?: string[];
  platform?: NodeJS.Platform;
  /** The variables that move credential stores; defaults to `process.env`, read once here. */
  env?: Readonly<Record<string, string | undefined>>;
}

function absolute(label: string, path: string): string {
  if (typeof path !== 'string' || !isAbsolute(path)) throw new InputError('invalid_request', `${label} must be an absolute path, got ${JSON.stringify(path)}`);
  return canonicalize(path);
}

function platformOf(platform: NodeJS.Platform): SandboxPlatform {
  return platform === 'linux' ? 'linux' : platform === 'darwin' ? 'darwin' : 'unsupported';
}

/** Detects (or takes from `options`) the environment; paths are canonicalised once here. */
export function detectEnvironment(options: SandboxEnvironmentOptions = {}): SandboxEnvironment {
  const platform = platformOf(options.platform ?? process.platform);
  const home = absolute('home', options.home ?? homedir());
  const temps = options.tempDirs ?? [platform === 'darwin' ? '/private/tmp' : '/tmp', process.env.TMPDIR ?? tmpdir()];
  const tempDirs: string[] = [];
  for (const dir of temps.map((t) => absolute('tempDirs', t))) {
    // Keep the last occurrence so that `$TMPDIR` stays last even when it equals `/tmp`.
    const at = tempDirs.indexOf(dir);
    if (at >= 0) tempDirs.splice(at, 1);
    tempDirs.push(dir);
  }
  const skillRoots = [...new Set([join(home, '.agents', 'skills'), ...(options.skillRoots ?? [])].map((s) => absolute('skillRoots', s)))];
  return Object.freeze({
    home,
    tempDirs: Object.freeze(tempDirs),
    skillRoots: Object.freeze(skillRoots),
    openworkHome: join(home, '.openwork'),
    runtimePaths: Object.freeze(uniqueCanonical('runtimePaths', options.runtimePaths ?? [])),
    credentialRoots: Object.freeze(credentialRootsOf(home, options.env ?? process.env, tempDirs)),
    platform,
  });
}

/** The credential paths, each also where a symbolic link on its way leads (the tools see that path). */
function credentialRootsOf(home: string, env: Readonly<Record<string, string | undefined>>, tempDirs: readonly string[]): string[] {
  const roots: string[] = [];
  for (const path of movedCredentialPaths(home, env, tempDirs)) {
    roots.push(path);
    try {
      const real = canonicalize(path);
      if (real !== path && !isWithin(home, real) && !tempDirs.some((t) => isWithin(t, real))) roots.push(real);
    } catch {
      // A path the kernel would refuse names no file to protect.
    }
  }
  return [...new Set(roots)];
}

function uniqueCanonical(label: string, paths: readonly string[]): string[] {
  return [...new Set(paths.map((p) => absolute(label, p)))];
}

/**
 * The same environment with more private runtime paths (the store a core opened, for instance).
 * Paths must be absolute; they are canonicalised, so a store reached through a symlink is
 * protected where it really is.
 */
export function withRuntimePaths(environment: SandboxEnvironment, paths: readonly string[]): SandboxEnvironment {
  const runtimePaths = uniqueCanonical('runtimePaths', [...environment.runtimePaths, ...paths]);
  if (runtimePaths.length === environment.runtimePaths.length) return environment;
  return Object.freeze({ ...environment, runtimePaths: Object.freeze(runtimePaths) });
}
