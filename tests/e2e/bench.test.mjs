// End-to-end: the in-browser benchmark runs the engine's harness on the loaded tiny model and
// saves the same JSON shape `rexvqa bench` writes (every figure measured, none zero or missing);
// on WebGPU, its kernel profile.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { SHOTS } from './browser.mjs';
import { loadModelFromFiles, servedApp, SLOW } from './steps.mjs';

const openApp = servedApp();

test('benchmark page: the harness in the browser, saved as JSON', { timeout: 600_000 }, async () => {
  const { page, problems, offHost } = await openApp();
  await page.getByTestId('gpu-ready').waitFor({ timeout: 60_000 });
  await loadModelFromFiles(page);
  await page.getByTestId('bench-prefill').fill('64,128');
  await page.getByTestId('bench-decode').fill('8');
  await page.getByTestId('bench-official').fill('4');
  await page.getByTestId('bench-run').click();
  await page.getByTestId('bench-results').waitFor({ timeout: SLOW });
  await page.screenshot({ path: join(SHOTS, 'bench-panel.png'), fullPage: true });
  const [download] = await Promise.all([page.waitForEvent('download'), page.getByTestId('bench-save').click()]);
  const j = JSON.parse(readFileSync(await download.path(), 'utf8'));
  console.log(JSON.stringify(j.results));
  const r = j.results;
  assert.deepEqual(r.prefill.map((p) => p[0]), [64, 128]);
  for (const [, tps] of r.prefill) assert.ok(tps > 0);
  assert.deepEqual(r.prefill_first.map((p) => p[0]), [64, 128]);
  for (const [, tps] of r.prefill_first) assert.ok(tps > 0);
  for (const k of ['image_encode_first_ms', 'image_encode_ms', 'decode_tokens_per_s', 'fast_questions_per_s',
    'fast_questions_per_s_cold', 'fast_questions_per_s_batched', 'official_questions_per_s',
    'official_questions_per_s_batched']) assert.ok(r[k] > 0, k);
  assert.equal(r.official_max_tokens, 4);
  // Where a token's time goes on the host: issuing it, and the one wait after the loop.
  assert.ok(r.decode_issue_ms_per_token > 0 && r.decode_wait_ms >= 0);
  assert.ok(r.decode_issue_ms_per_token * 8 < 1000 * 8 / r.decode_tokens_per_s + 1, 'issue time within the decode time');
  assert.deepEqual(r.prefill_issue_ms.map((p) => p[0]), [64, 128]);
  assert.ok(r.image_issue_ms > 0 && r.image_issue_ms <= r.image_encode_ms);
  // Kernel timings: every weight shape at 1 and 256 input rows (the head at 1 only), all measured,
  // and one table row each on the page.
  assert.ok(r.kernels.some((k) => k.matrix === 'blk.0.ffn_down' && k.m === 256));
  assert.ok(r.kernels.some((k) => k.matrix === 'v.blk.0.ffn_up' && k.m === 1));
  // A timing repeats until its span outlasts the clock's 0.1 ms resolution (or 4,096 reps), so
  // no kernel reads 0 ms however fast it is.
  for (const k of r.kernels) {
    assert.ok(k.ms > 0 && k.gflop_per_s > 0 && k.weight_gb_per_s > 0, JSON.stringify(k));
    assert.ok(k.reps >= 3 && (k.reps === 4096 || k.ms * k.reps >= 10), JSON.stringify(k));
  }
  assert.equal(await page.getByTestId('bench-kernels').locator('tbody tr').count(), r.kernels.length);
  // The kernel profile is asked for by its box only, and only a GPU device has launches to time.
  assert.equal(r.profile, null);
  assert.ok(j.wasm_heap_bytes > 0);
  assert.match(j.backend, /^(CPU|WebGPU)/);
  assert.equal(j.sha256.length, 2);
  assert.deepEqual(problems, [], 'console errors');
  assert.deepEqual(offHost, [], 'requests that left 127.0.0.1');
});

test('benchmark page: the kernel profile on WebGPU', { timeout: 600_000 }, async () => {
  const { page, problems, offHost } = await openApp();
  await page.getByTestId('gpu-ready').waitFor({ timeout: 60_000 });
  await page.getByTestId('tab-model').click();
  await page.getByTestId('compute').selectOption('webgpu');
  await loadModelFromFiles(page);
  await page.getByTestId('bench-prefill').fill('32');
  await page.getByTestId('bench-decode').fill('4');
  await page.getByTestId('bench-official').fill('2');
  await page.getByTestId('bench-kernel-rows').fill('');
  await page.getByTestId('bench-profile').check();
  await page.getByTestId('bench-run').click();
  await page.getByTestId('bench-results').waitFor({ timeout: SLOW });
  const [download] = await Promise.all([page.waitForEvent('download'), page.getByTestId('bench-save').click()]);
  const r = JSON.parse(readFileSync(await download.path(), 'utf8')).results;
  // Every launch of a token, the 32-token prefill, an image encode, a question on a cached study
  // and a study's 4 questions batched timed on its own (Chromium's SwiftShader adapter has timestamp
  // queries), each as many as the dispatch count of the same work, every noted byte on one of the
  // pass's kernels, and one table row per kernel and pass.
  assert.equal(r.profile.unavailable, null);
  const passes = r.profile.passes;
  assert.deepEqual(passes.map((p) => p.pass),
    ['token', 'prefill 32', 'image', 'question', 'study of 4 questions']);
  assert.equal(passes[0].dispatches, r.dispatches_per_token);
  assert.equal(passes[3].dispatches, r.dispatches_per_question);
  assert.equal(passes[4].dispatches, Math.round(4 * r.dispatches_per_question_batched));
  for (const p of passes) {
    assert.equal(p.timing, 'device');
    assert.equal(p.timed, p.dispatches, `${p.pass}: every launch timed`);
    assert.equal(p.kernels.reduce((n, k) => n + k.dispatches, 0), p.dispatches);
    assert.equal(p.kernels.reduce((n, k) => n + k.bytes, 0), p.bytes);
    for (const k of p.kernels) assert.ok(k.gpu_us >= 0, JSON.stringify(k));
    assert.ok(p.gpu_ms > 0, p.pass);
  }
  assert.equal(await page.getByTestId('bench-profile-table').locator('tbody tr').count(),
    passes.reduce((n, p) => n + p.kernels.length, 0));
  assert.deepEqual(problems, [], 'console errors');
  assert.deepEqual(offHost, [], 'requests that left 127.0.0.1');
});
