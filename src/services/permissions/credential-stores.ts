/**
 * @module services/permissions/credential-stores
 * Where credentials live: the paths below `$HOME` (reference §4.3 plus where Linux tools keep
 * secrets) and the stores environment variables move elsewhere. Read by the tiers (`tiers.ts`) and
 * resolved once at start by the environment (`environment.ts`), so it imports neither.
 */
import { isAbsolute, join, resolve } from 'node:path';
import { isWithin } from './paths.js';

/**
 * Credential paths relative to `$HOME`: never readable or writable without a grant naming them.
 * The first block is the reference's list; the second adds where Linux tools keep secrets.
 */
export const CREDENTIAL_PATHS: readonly string[] = Object.freeze([
  '.ssh',
  '.aws',
  '.gnupg',
  '.kube',
  '.azure',
  '.config/gh',
  '.config/gcloud',
  '.docker/config.json',
  '.netrc',
  '.git-credentials',
  '.npmrc',
  '.pypirc',
  '.cargo/credentials.toml',
  'Library/Keychains',
  'Library/Cookies',
  'Library/Safari',
  'Library/Application Support/Google/Chrome',
  'Library/Application Support/Firefox',
  // Linux: keyrings, password stores, browser profiles and the CLIs that keep tokens in files.
  '.local/share/keyrings',
  '.password-store',
  '.pki',
  '.mozilla',
  '.config/google-chrome',
  '.config/chromium',
  '.config/BraveSoftware',
  '.config/hub',
  '.config/op',
  '.config/containers/auth.json',
  '.cargo/credentials',
  '.gem/credentials',
  '.terraform.d/credentials.tfrc.json',
  '.vault-token',
  '.pgpass',
  // Branch attack5b: token stores of the tools a developer machine commonly has.
  '.config/git/credentials',
  '.cache/huggingface/token',
  '.huggingface/token',
  '.codex/auth.json',
  '.claude/.credentials.json',
  '.config/rclone/rclone.conf',
  '.config/doctl',
  '.m2/settings.xml',
  '.gradle/gradle.properties',
  '.composer/auth.json',
  '.config/composer/auth.json',
  '.oci',
]);

/**
 * Credential stores an environment variable moves away from `$HOME` (branch attack5b). Each entry:
 * the variable, and the paths below its value that are credentials (`''`: the value itself; a
 * variable holding a `:`-separated list, `KUBECONFIG`, names several). The XDG variables move every
 * `CREDENTIAL_PATHS` entry below `.config`, `.local/share` or `.cache` (see `movedCredentialPaths`).
 */
export const CREDENTIAL_ENV_PATHS: ReadonlyArray<readonly [variable: string, below: readonly string[]]> = Object.freeze([
  ['DOCKER_CONFIG', ['config.json']],
  ['KUBECONFIG', ['']],
  ['AWS_SHARED_CREDENTIALS_FILE', ['']],
  ['AWS_CONFIG_FILE', ['']],
  ['GOOGLE_APPLICATION_CREDENTIALS', ['']],
  ['CLOUDSDK_CONFIG', ['']],
  ['GNUPGHOME', ['']],
  ['CARGO_HOME', ['credentials', 'credentials.toml']],
  ['CODEX_HOME', ['auth.json']],
  ['CLAUDE_CONFIG_DIR', ['.credentials.json']],
  ['HF_HOME', ['token']],
  ['HF_TOKEN_PATH', ['']],
  ['AZURE_CONFIG_DIR', ['']],
  ['GH_CONFIG_DIR', ['']],
  ['NPM_CONFIG_USERCONFIG', ['']],
  ['PGPASSFILE', ['']],
  ['NETRC', ['']],
  ['PASSWORD_STORE_DIR', ['']],
  ['REGISTRY_AUTH_FILE', ['']],
  ['TF_CLI_CONFIG_FILE', ['']],
  ['VAULT_CONFIG_PATH', ['']],
]);

const XDG_HOMES: ReadonlyArray<readonly [variable: string, below: string]> = [
  ['XDG_CONFIG_HOME', '.config/'],
  ['XDG_DATA_HOME', '.local/share/'],
  ['XDG_CACHE_HOME', '.cache/'],
];

/**
 * The absolute credential paths of a home directory and a process environment: `CREDENTIAL_PATHS`
 * below `home`, and where the environment's variables move them. A moved value that is not absolute,
 * or that is `/`, `home` or a directory above it, or a temp directory or one above it, is ignored:
 * hiding it would hide the user's files, not a credential.
 */
export function movedCredentialPaths(home: string, env: Readonly<Record<string, string | undefined>>, tempDirs: readonly string[] = []): string[] {
  const paths = CREDENTIAL_PATHS.map((p) => join(home, p));
  const usable = (value: string) => isAbsolute(value) && !isWithin(home, value) && !tempDirs.some((t) => isWithin(t, value)) && !value.includes('\0');
  const add = (path: string) => {
    if (!usable(path)) return;
    const resolved = resolve(path);
    if (!paths.includes(resolved)) paths.push(resolved);
  };
  for (const [variable, below] of XDG_HOMES) {
    const value = env[variable];
    if (!value || !usable(value)) continue;
    for (const relative of CREDENTIAL_PATHS) if (relative.startsWith(below)) add(join(value, relative.slice(below.length)));
  }
  for (const [variable, below] of CREDENTIAL_ENV_PATHS) {
    const value = env[variable];
    if (!value) continue;
    for (const item of variable === 'KUBECONFIG' ? value.split(':') : [value]) {
      if (!item || !usable(item)) continue;
      for (const relative of below) add(relative === '' ? item : join(item, relative));
    }
  }
  return paths;
}
