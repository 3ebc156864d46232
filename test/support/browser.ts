/**
 * Headless Chromium for the browser suites: Debian's `chromium` at /usr/bin/chromium (installed by
 * .ci/run), driven by playwright-core, never a downloaded browser. One browser per test file, with
 * a fresh profile directory.
 */
import { existsSync } from 'node:fs';
import { mkdir, mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { chromium, type BrowserContext } from 'playwright-core';

export const CHROMIUM = process.env.OPENWORK_CHROMIUM ?? '/usr/bin/chromium';
export const RESULTS_DIR = join(process.cwd(), 'test-results');

export interface TestBrowser {
  context: BrowserContext;
  close(): Promise<void>;
}

export async function launchBrowser(): Promise<TestBrowser> {
  if (!existsSync(CHROMIUM)) {
    throw new Error(`${CHROMIUM} is missing: install Debian's chromium package (apt-get install -y chromium; .ci/run does it)`);
  }
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
