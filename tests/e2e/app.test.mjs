// End-to-end: the served app reports its WebGPU adapter with no console error.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { serveNginx } from './server.mjs';
import { launch, openPage, SHOTS } from './browser.mjs';

const DIST = process.env.REXVQA_DIST ?? 'dist';
let server;
let context;

before(async () => {
  server = await serveNginx(DIST);
  context = await launch();
});
after(async () => {
  await context?.close();
  await server?.close();
});

test('the app shows the WebGPU adapter with its limits and no console error', async () => {
  const { page, problems, offHost } = await openPage(context, server.url);
  await page.getByTestId('gpu-ready').waitFor({ timeout: 60_000 });
  const name = await page.getByTestId('gpu-name').textContent();
  const f16 = await page.getByTestId('gpu-f16').textContent();
  const binding = await page.getByTestId('gpu-max-binding').textContent();
  const device = await page.getByTestId('gpu-device').textContent();
  console.log(`adapter: ${name}; shader-f16: ${f16}; max storage binding: ${binding}; device: ${device}`);
  assert.ok(name.length > 0);
  assert.match(f16, /^(yes|no)$/);
  assert.match(binding, /^\d+ MiB$/);
  assert.equal(device, 'created');
  await page.screenshot({ path: join(SHOTS, 'gpu-panel.png'), fullPage: true });
  assert.deepEqual(problems, []);
  assert.deepEqual(offHost, []);
});
