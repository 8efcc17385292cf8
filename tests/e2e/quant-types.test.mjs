// End-to-end: the smaller downloads in the browser. The Q4_0 file llama-quantize makes with an
// importance matrix (its first ffn_down is Q4_1), an IQ4_XS file and an IQ2_M file (IQ2_S and IQ3_S,
// codebook types), each with the BF16 mmproj
// (at 224 px, tests/reference/small_image_mmproj.py), load on WebGPU; the model card says how
// each type is decoded, and each pair answers a question of the synthetic split as the native
// CLI does on the same files.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { askFirstQuestion, assertSameAnswer, cliAnswer, FIX, openDataset, servedApp, SLOW, tab } from './steps.mjs';

const openApp = servedApp();
const MMPROJ = 'tinyq-mmproj-224.gguf';

async function loadPair(page, text) {
  await tab(page, 'model');
  await page.getByTestId('compute').selectOption('webgpu');
  await page.getByTestId('model-text-input').setInputFiles(join(FIX, text));
  await page.getByTestId('model-mmproj-input').setInputFiles(join(FIX, MMPROJ));
  await page.getByTestId('model-import').click();
  await page.getByTestId('model-card').filter({ hasText: text }).waitFor({ timeout: SLOW });
  return {
    runsOn: await page.getByTestId('model-compute').textContent(),
    decoding: await page.getByTestId('model-decoding').textContent(),
  };
}

test('a Q4_0 file with Q4_1 tensors, an IQ4_XS and an IQ2_M file load and answer as the CLI does', { timeout: 1_200_000 }, async () => {
  const { page, problems, offHost } = await openApp();
  await page.getByTestId('gpu-ready').waitFor({ timeout: 60_000 });
  let dataset = false;
  for (const [text, types] of [['tinyq-q4_0.gguf', ['Q4_0', 'Q4_1']], ['tinyq-iq4_xs.gguf', ['IQ4_XS']],
    ['tinyq-iq2_m.gguf', ['IQ2_S', 'IQ3_S']]]) {
    const { runsOn, decoding } = await loadPair(page, text);
    console.log(`${text}: runs on ${runsOn}; decoding ${decoding}`);
    assert.match(runsOn, /^WebGPU/);
    for (const ty of types) assert.ok(decoding.includes(`${ty}: weight by weight`) || decoding.includes(`${ty}: runs of 4`), `${ty} in "${decoding}"`);
    if (!dataset) {
      await openDataset(page);
      dataset = true;
    }
    const qid = await askFirstQuestion(page);
    await assertSameAnswer(page, qid, cliAnswer(qid, text, MMPROJ), `${text} on ${runsOn}`);
  }
  assert.deepEqual(problems, []);
  assert.deepEqual(offHost, []);
});
