// End-to-end: a model loaded on WebGPU runs the device self-test first and its card shows the
// verdict; a kernel form broken on purpose (debug hook) is caught, turned off with the reason and
// avoided, and the verdict is kept: after a reload it is applied again without running; with every
// matmul form broken the model loads on the CPU and the card says why.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { SLOW, loadModelFromFiles, loadStoredModel, servedApp, tab } from './steps.mjs';

const open = servedApp();
const t0 = Date.now();
const mark = (what) => console.log(`[${((Date.now() - t0) / 1000).toFixed(1)} s] ${what}`);

async function selftestText(page, hasText) {
  const dd = page.getByTestId('model-selftest').filter({ hasText });
  await dd.waitFor({ timeout: SLOW });
  return dd.textContent();
}

test('the self-test verdict is on the card, a broken form is caught and avoided, and the verdict is kept', { timeout: 1_200_000 }, async () => {
  const { page, problems } = await open();
  await page.getByTestId('gpu-ready').waitFor({ timeout: 120_000 });
  await tab(page, 'model');
  await page.getByTestId('compute').selectOption('webgpu');
  await loadModelFromFiles(page);
  const clean = await selftestText(page, 'Self-test');
  mark(clean);
  assert.match(clean, /^Self-test: \d+ checks passed in \d+\.\d s on /);
  // A fresh verdict: the test ran beside the weights' hash and load.
  assert.match(clean, / \(run while the weights loaded\)$/);
  assert.match(await page.getByTestId('model-compute').textContent(), /^WebGPU/);

  // The naive matmul (the automatic choice for decoding on a software adapter) gives wrong results.
  await page.evaluate(() => window.rexvqaInjectFault('naive'));
  await loadStoredModel(page);
  const broken = await selftestText(page, 'turned off');
  mark(broken);
  assert.match(broken, /naive matmul turned off \(matmul\.naive\.\w+: error 1\.0e0 > bound [\d.]+e-?\d+\); using (gemv|subgroup gemv) for decoding/);
  assert.match(await page.getByTestId('model-compute').textContent(), /^WebGPU/);

  // A new page (no injected fault): the kept verdict is applied again, not re-run.
  await page.reload();
  await page.getByTestId('gpu-ready').waitFor({ timeout: 120_000 });
  await tab(page, 'model');
  await page.getByTestId('compute').selectOption('webgpu');
  await loadStoredModel(page);
  const kept = await selftestText(page, 'kept');
  mark(kept);
  assert.match(kept, /naive matmul turned off .*using (gemv|subgroup gemv) for decoding.*\(verdict kept from an earlier run on this adapter and browser\)$/);

  // Every matmul form broken: nothing can run the model on WebGPU, so it loads on the CPU, saying why.
  await page.evaluate(() => ['naive', 'gemv', 'gemv_subgroup', 'tiled'].forEach((f) => window.rexvqaInjectFault(f)));
  await loadStoredModel(page);
  const compute = await page.getByTestId('model-compute').filter({ hasText: 'self-test' }).textContent({ timeout: SLOW });
  mark(compute);
  assert.match(compute, /^CPU \(WebAssembly\): WebGPU failed its self-test \(every matmul kernel failed\)$/);
  assert.match(await page.getByTestId('model-selftest').textContent(), /^Self-test failed on .*: every matmul kernel failed/);
  assert.deepEqual(problems, []);
});
