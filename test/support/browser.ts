/**
 * Headless Chromium for the browser suites: Debian's `chromium` at /usr/bin/chromium (installed by
 * .ci/run), driven by playwright-core, never a downloaded browser. One browser per test file, with
 * a fresh profile directory. Where the browser is missing the suites say why and skip, as the
 * sandbox suites do; with OPENWORK_REQUIRE_BROWSER=1 (set by .ci/run, which installs Chromium)
 * they fail instead.
 */
import { existsSync } from 'node:fs';
import { mkdir, mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { chromium, type BrowserContext } from 'playwright-core';
import type { TestContext } from 'vitest';

export const CHROMIUM = process.env.OPENWORK_CHROMIUM ?? '/usr/bin/chromium';
export const RESULTS_DIR = join(process.cwd(), 'test-results');

/** Why the browser suites cannot run on this machine, or null when they can. */
export function browserUnavailable(): string | null {
  if (existsSync(CHROMIUM)) return null;
  return `${CHROMIUM} is missing (install Debian's chromium package: apt-get install -y chromium; .ci/run does it)`;
}

/**
 * Skips the test, saying why, where the browser is missing; fails it instead where
 * OPENWORK_REQUIRE_BROWSER=1 says the browser must be there.
 */
export function requireBrowser(ctx: TestContext): void {
  const reason = browserUnavailable();
  if (reason === null) return;
  if (process.env.OPENWORK_REQUIRE_BROWSER === '1') throw new Error(`${reason}, but OPENWORK_REQUIRE_BROWSER=1 says the browser tests must run here`);
  console.warn(`[browser] "${ctx.task.name}" cannot run: ${reason}`);
  ctx.skip(reason);
}

export interface TestBrowser {
  context: BrowserContext;
  close(): Promise<void>;
}

export async function launchBrowser(): Promise<TestBrowser> {
  const missing = browserUnavailable();
  if (missing !== null) throw new Error(missing);
  const profile = await mkdtemp(join(tmpdir(), 'openwork-chromium-'));
  await mkdir(RESULTS_DIR, { recursive: true });
  const context = await chromium.launchPersistentContext(profile, {
    executablePath: CHROMIUM,
    headless: true,
    args: [
      '--headless',
      '--no-sandbox',
      '--disable-gpu',
      '--disable-quic',
      '--no-first-run',
      '--disable-background-networking',
      '--disable-component-update',
      '--disable-sync',
    ],
    viewport: { width: 1440, height: 900 },
    timeout: 60_000,
  });
  return {
    context,
    async close() {
      await context.close();
      await rm(profile, { recursive: true, force: true });
    },
  };
}
