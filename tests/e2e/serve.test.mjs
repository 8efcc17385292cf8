// End-to-end: the app served the README's way (scripts/serve.sh) loads with no console error.
// The debug profile builds the same page quicker than the README's release build; the
// difference that matters here (what trunk serve injects, and the CSP) is the same in both.
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { launch, openPage } from './browser.mjs';
import { freePort } from './server.mjs';

async function waitForPage(url, child, ms) {
  const end = Date.now() + ms;
  while (Date.now() < end) {
    if (child.exitCode !== null) throw new Error(`scripts/serve.sh exited with ${child.exitCode}`);
    const r = await fetch(url).catch(() => null);
    if (r?.ok && (await r.text()).includes('Content-Security-Policy')) return;
    await new Promise((ok) => setTimeout(ok, 1000));
  }
  throw new Error(`scripts/serve.sh served nothing at ${url} within ${ms / 1000} s`);
}

let child;
let context;
const dist = mkdtempSync(join(tmpdir(), 'rexvqa-serve-'));
after(async () => {
  await context?.close();
  // serve.sh execs trunk in its own process group: end the group, trunk's children included.
  if (child?.exitCode === null) process.kill(-child.pid, 'SIGTERM');
  rmSync(dist, { recursive: true, force: true });
});

test('the page served by scripts/serve.sh loads with no console error', { timeout: 600_000 }, async () => {
  const port = await freePort();
  const url = `http://127.0.0.1:${port}/`;
  let log = '';
  child = spawn('scripts/serve.sh', [], {
    detached: true,
    env: { ...process.env, PORT: String(port), REXVQA_SERVE_PROFILE: 'debug', REXVQA_SERVE_DIST: dist },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  child.stdout.on('data', (d) => { log += d; });
  child.stderr.on('data', (d) => { log += d; });
  try {
    await waitForPage(url, child, 540_000);
  } catch (e) {
    throw new Error(`${e.message}\n${log.slice(-4000)}`);
  }
  context = await launch();
  const { page, problems, offHost } = await openPage(context, url);
  await page.getByTestId('gpu-ready').waitFor({ timeout: 60_000 });
  // trunk's autoreload would try its socket right after start-up: give it the time to fail.
  await page.waitForTimeout(2000);
  assert.deepEqual(problems, []);
  assert.deepEqual(offHost, []);
  const html = await (await fetch(url)).text();
  assert.doesNotMatch(html, /__trunk_address__|__TRUNK/);
});
