// End-to-end: a request made while the worker is still starting is not lost. The import is
// clicked straight after navigation (before the worker has said it is ready); it shows progress at
// once and still imports and loads the model.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { FIX, SLOW, servedApp, tab } from './steps.mjs';

const open = servedApp();

test('an import clicked during start-up is queued, shows progress at once, and completes', async () => {
  const { page, problems } = await open();
  // Hold the worker's wasm back for 4 s (a slow machine compiling a large release wasm) and
  // reload: the click below then certainly comes before the worker is ready. The service worker
  // would serve it from its cache, where no route can hold it: the page unregisters it first, so
  // the reload goes to the network (a first visit, as on a slow machine).
  await page.evaluate(async () => {
    for (const r of await navigator.serviceWorker.getRegistrations()) await r.unregister();
  });
  let held = false;
  await page.route(/worker[^/]*_bg\.wasm$/, async (route) => {
    held = true;
    await new Promise((ok) => setTimeout(ok, 4000));
    await route.continue();
  });
  await page.reload();
  await tab(page, 'model');
  await page.getByTestId('model-text-input').setInputFiles(join(FIX, 'tiny-q8_0.gguf'));
  await page.getByTestId('model-mmproj-input').setInputFiles(join(FIX, 'tiny-q8_0-mmproj-224.gguf'));
  await page.getByTestId('model-import').click();
  // Visible feedback within 100 ms of the click.
  await page.getByTestId('progress').waitFor({ timeout: 100 });
  await page.getByTestId('model-card').waitFor({ timeout: SLOW });
  assert.ok(held, 'the worker wasm was requested and held back');
  assert.equal(await page.getByTestId('stored-models').locator('tbody tr').count(), 2);
  assert.deepEqual(problems, []);
});

test('a panic in the worker is shown, stops the engine cleanly, and a reload recovers', async () => {
  const { page, problems } = await open();
  await page.getByTestId('gpu-ready').or(page.getByTestId('gpu-unavailable')).first().waitFor({ timeout: 120_000 });
  await tab(page, 'model');
  await page.getByTestId('stored-models').waitFor({ timeout: 30_000 });
  // The debug build's test hook: the worker panics as a bug would.
  await page.evaluate(() => window.rexvqaTestPanic());
  await page.getByTestId('engine-fatal').waitFor({ timeout: 10_000 });
  assert.match(await page.getByTestId('engine-fatal-message').textContent(), /test-only panic requested by the page/);
  // A later request is refused with the reason instead of vanishing into a dead worker.
  await page.getByTestId('stored-text').selectOption('tiny-q8_0.gguf');
  await page.getByTestId('load-stored').click();
  await page.getByTestId('app-error').filter({ hasText: 'the engine has stopped after an internal error: reload the page' }).waitFor({ timeout: 5_000 });
  // The panic itself was logged; nothing else went wrong.
  assert.ok(problems.length >= 1 && problems.every((p) => /test-only panic/.test(p)), problems.join('\n'));
  await page.getByTestId('engine-reload').click();
  await page.getByTestId('gpu-ready').or(page.getByTestId('gpu-unavailable')).first().waitFor({ timeout: 120_000 });
  assert.equal(await page.getByTestId('engine-fatal').count(), 0);
  await page.getByTestId('stored-text').selectOption('tiny-q8_0.gguf');
  await page.getByTestId('stored-mmproj').selectOption('tiny-q8_0-mmproj-224.gguf');
  await page.getByTestId('load-stored').click();
  await page.getByTestId('model-card').waitFor({ timeout: SLOW });
});
