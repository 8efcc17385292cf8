// The app's Benchmark card (the `rexvqa bench` harness run in the page's worker) in headless
// Chromium on a given build and model, saved as the card's JSON: for comparing builds (e.g. with
// and without SIMD128) and the browser with the native CLI on the same machine.
//
//   node bench/browser-bench.mjs --dist DIST --model M.gguf [--mmproj MM.gguf] [--compute cpu|webgpu]
//     [--prefill 64,256] [--decode 16] [--official 4] --out r.json
import { readFileSync, writeFileSync } from 'node:fs';
import { parseArgs } from 'node:util';
import { serve } from '../tests/e2e/server.mjs';
import { launch, openPage } from '../tests/e2e/browser.mjs';

const { values: a } = parseArgs({
  options: {
    dist: { type: 'string', default: 'dist' }, model: { type: 'string' }, mmproj: { type: 'string' },
    compute: { type: 'string', default: 'cpu' }, prefill: { type: 'string', default: '64,256' },
    decode: { type: 'string', default: '16' }, official: { type: 'string', default: '4' }, out: { type: 'string' },
  },
});
if (!a.model || !a.out) throw new Error('--model and --out are required');
const server = await serve(a.dist);
const context = await launch();
try {
  const { page, problems } = await openPage(context, server.url);
  await page.getByTestId('gpu-ready').or(page.getByTestId('gpu-unavailable')).first().waitFor({ timeout: 120_000 });
  await page.getByTestId('tab-model').click();
  await page.getByTestId('compute').selectOption(a.compute);
  await page.getByTestId('model-text-input').setInputFiles(a.model);
  if (a.mmproj) await page.getByTestId('model-mmproj-input').setInputFiles(a.mmproj);
  await page.getByTestId('model-import').click();
  await page.getByTestId('model-card').waitFor({ timeout: 1_800_000 });
  await page.getByTestId('bench-prefill').fill(a.prefill);
  await page.getByTestId('bench-decode').fill(a.decode);
  await page.getByTestId('bench-official').fill(a.official);
  await page.getByTestId('bench-run').click();
  await page.getByTestId('bench-results').waitFor({ timeout: 3_600_000 });
  const [download] = await Promise.all([page.waitForEvent('download'), page.getByTestId('bench-save').click()]);
  const j = JSON.parse(readFileSync(await download.path(), 'utf8'));
  j.dist = a.dist;
  j.console_errors = problems;
  writeFileSync(a.out, `${JSON.stringify(j, null, 2)}\n`);
  const r = j.results;
  console.log(`${a.dist}: prefill ${JSON.stringify(r.prefill)} tok/s, decode ${r.decode_tokens_per_s?.toFixed(2)} tok/s, ` +
    `image ${r.image_encode_ms?.toFixed(0)} ms, fast ${r.fast_questions_per_s?.toFixed(3)} q/s`);
} finally {
  await context.close();
  await server.close();
}
