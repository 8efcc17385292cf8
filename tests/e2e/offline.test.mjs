// End-to-end: the installable app. Once opened it starts with the network off (the service
// worker serves the shell), loads the model from storage and answers; a new build is offered on
// the page and taken when the user asks.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { cpSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { serveNginx } from './server.mjs';
import { launch, openPage } from './browser.mjs';
import { writeServiceWorker } from '../../scripts/sw-hook.mjs';
import { DIST, FIX, askFirstQuestion, assertSameAnswer, cliAnswer, loadModelFromFiles, loadStoredModel, openDataset } from './steps.mjs';

let context;
const servers = [];
const copies = [];
before(async () => {
  assert.ok(FIX, 'REXVQA_E2E must be set (scripts/test.sh sets it)');
  context = await launch();
});
after(async () => {
  await context?.close();
  for (const s of servers) await s.close();
  for (const d of copies) rmSync(d, { recursive: true, force: true });
});

// The version of the shell cache that serves the page (one cache per build).
async function shellCaches(page) {
  return page.evaluate(async () => (await caches.keys()).filter((k) => k.startsWith('rexvqa-shell-')));
}

async function controlled(page) {
  await page.waitForFunction(() => navigator.serviceWorker.controller !== null, null, { timeout: 60_000 });
}

test('once opened, the app starts, loads its model and answers with the network off', { timeout: 600_000 }, async () => {
  const server = await serveNginx(DIST);
  servers.push(server);
  const { page, problems, offHost } = await openPage(context, server.url);
  await page.getByTestId('gpu-ready').waitFor({ timeout: 60_000 });
  await controlled(page);
  await loadModelFromFiles(page);
  await openDataset(page);

  await context.setOffline(true);
  const fromWorker = [];
  const failed = [];
  page.on('response', (r) => fromWorker.push([r.url(), r.fromServiceWorker()]));
  page.on('requestfailed', (r) => failed.push(r.url()));
  await page.reload();
  await page.getByTestId('gpu-ready').waitFor({ timeout: 60_000 });
  await loadStoredModel(page);
  await openDataset(page);
  const qid = await askFirstQuestion(page);
  await assertSameAnswer(page, qid, cliAnswer(qid), 'the offline page');

  const shell = fromWorker.filter(([u]) => u.startsWith(server.url) && !u.startsWith('blob:'));
  console.log(`offline: ${shell.length} responses, ${shell.filter(([, w]) => w).length} from the service worker; failed: ${failed.length}`);
  assert.ok(shell.length >= 3, 'the page, its script and its wasm at least');
  assert.deepEqual(shell.filter(([, w]) => !w), [], 'every response came from the service worker');
  assert.deepEqual(failed, []);
  assert.deepEqual(problems, []);
  assert.deepEqual(offHost, []);
  await context.setOffline(false);
  await page.close();
});

test('a new build is offered on the page and taken when asked', { timeout: 300_000 }, async () => {
  const dir = mkdtempSync(join(tmpdir(), 'rexvqa-build-'));
  copies.push(dir);
  cpSync(DIST, dir, { recursive: true });
  const server = await serveNginx(dir);
  servers.push(server);
  const { page, problems, offHost } = await openPage(context, server.url);
  await page.getByTestId('gpu-ready').waitFor({ timeout: 60_000 });
  await controlled(page);
  const [first] = await shellCaches(page);
  const manifest = () => page.evaluate(async () => (await (await fetch('./manifest.webmanifest')).json()).description);
  const oldDescription = await manifest();

  // A new build: one file changed, the service worker written again for it.
  const path = join(dir, 'manifest.webmanifest');
  const m = JSON.parse(readFileSync(path, 'utf8'));
  m.description = `${m.description} (new build)`;
  writeFileSync(path, JSON.stringify(m));
  const version = writeServiceWorker(dir);
  assert.notEqual(`rexvqa-shell-${version}`, first);

  // The next load finds it; the page still runs the old build and says a new one is ready.
  await page.reload();
  await page.getByTestId('update-ready').waitFor({ timeout: 60_000 });
  assert.equal(await manifest(), oldDescription, 'the old build serves until the update is taken');
  await page.getByTestId('update-reload').click();
  await page.waitForFunction((v) => caches.keys().then((k) => k.includes(`rexvqa-shell-${v}`)), version, { timeout: 60_000 });
  await page.getByTestId('gpu-ready').waitFor({ timeout: 60_000 });
  await page.waitForFunction(async (v) => {
    const keys = (await caches.keys()).filter((k) => k.startsWith('rexvqa-shell-'));
    return keys.length === 1 && keys[0] === `rexvqa-shell-${v}`;
  }, version, { timeout: 60_000 });
  assert.equal(await manifest(), m.description, 'the new build serves once taken');
  assert.equal(await page.getByTestId('update-ready').count(), 0, 'no notice once updated');
  assert.deepEqual(problems, []);
  assert.deepEqual(offHost, []);
});
