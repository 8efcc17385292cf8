// Headless Debian Chromium with WebGPU (SwiftShader without a GPU), driven by playwright-core.
// Never downloads a browser: the executable comes from apt (scripts/setup.sh).
import { chromium } from 'playwright-core';
import { mkdtempSync, mkdirSync, existsSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

export const SHOTS = process.env.REXVQA_SCREENSHOTS ?? join(process.cwd(), 'test-results', 'screenshots');

// REXVQA_CHROMIUM: another executable (the browser GPU kit's headless shell behind a wrapper that
// appends its GPU flags after Playwright's; bench/device/run-browser.sh).
const EXECUTABLE = process.env.REXVQA_CHROMIUM || ['/usr/bin/chromium', '/usr/lib/chromium/chromium'].find((p) => existsSync(p));

export async function launch(extraArgs = []) {
  if (!EXECUTABLE) throw new Error('Debian chromium is not installed: run scripts/setup.sh');
  mkdirSync(SHOTS, { recursive: true });
  const userDataDir = mkdtempSync(join(tmpdir(), 'rexvqa-chromium-'));
  const context = await chromium.launchPersistentContext(userDataDir, {
    executablePath: EXECUTABLE,
    headless: true,
    viewport: { width: 1280, height: 900 },
    args: ['--no-sandbox', '--enable-unsafe-webgpu', '--disable-quic', '--no-first-run',
      '--disable-background-networking', '--disable-component-update', '--disable-sync',
      '--disable-dev-shm-usage', ...extraArgs],
  });
  // Each profile holds tens of MB (OPFS copies of the model files): remove it once the browser
  // has exited (on 'close' Chromium may still be writing to it).
  const close = context.close.bind(context);
  context.close = async (...args) => {
    await close(...args);
    rmSync(userDataDir, { recursive: true, force: true, maxRetries: 10, retryDelay: 100 });
  };
  return context;
}

// Opens a page that records console errors, page errors and every request leaving 127.0.0.1.
export async function openPage(context, url) {
  const page = await context.newPage();
  const problems = [];
  const offHost = [];
  page.on('console', (m) => { if (m.type() === 'error') problems.push(`console: ${m.text()}`); });
  page.on('pageerror', (e) => problems.push(`pageerror: ${e.message}`));
  context.on('request', (r) => {
    const u = new URL(r.url());
    if (!['127.0.0.1', 'localhost'].includes(u.hostname) && !['data:', 'blob:'].includes(u.protocol)) offHost.push(r.url());
  });
  await page.goto(url);
  return { page, problems, offHost };
}
