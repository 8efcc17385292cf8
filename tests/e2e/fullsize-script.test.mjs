// The full-size browser benchmark script (bench/browser-fullsize.mjs) run on the tiny pair, so
// that the script a 4B run depends on keeps working: every figure present, the browser's answers
// equal to the native CLI's, and the second question of a study cheaper than the first.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { BIN, DIST, FIX } from './steps.mjs';

test('bench/browser-fullsize.mjs measures the tiny pair and agrees with the CLI', { timeout: 900_000 }, () => {
  const dir = mkdtempSync(join(tmpdir(), 'rexvqa-fullsize-'));
  const out = join(dir, 'result.json');
  try {
    execFileSync('node', ['bench/browser-fullsize.mjs', '--model', join(FIX, 'tiny-q8_0.gguf'),
      '--mmproj', join(FIX, 'tiny-q8_0-mmproj.gguf'), '--data', join(FIX, 'rexvqa'), '--compute', 'webgpu',
      '--cli', BIN, '--cli-backends', 'cpu,wgpu', '--machine', 'ci', '--dist', DIST, '--out', out],
    { stdio: 'inherit', timeout: 880_000 });
    const r = JSON.parse(readFileSync(out, 'utf8'));
    for (const k of ['import_mb_per_s', 'load_s', 'first_answer_s', 'second_answer_s', 'wasm_heap_peak_bytes',
      'device_peak_bytes', 'renderer_rss_peak_bytes']) {
      assert.ok(Number.isFinite(r[k]) && r[k] > 0, `${k} = ${r[k]}`);
    }
    assert.match(r.runs_on, /^WebGPU/);
    // A fresh profile: the self-test runs, beside the hash and the load, and the script reads
    // each check's time from the verdict the worker keeps.
    assert.match(r.selftest, /^Self-test: \d+ checks passed in [\d.]+ s on .* \(run while the weights loaded\)$/);
    assert.equal(r.selftest_checks.length, 1, JSON.stringify(r.selftest_checks));
    assert.ok(r.selftest_checks[0].ms['forward.tiny'] > 0, JSON.stringify(r.selftest_checks));
    assert.ok(r.import_to_card_s >= r.load_s, `click to card ${r.import_to_card_s} s, load ${r.load_s} s`);
    assert.ok(r.hash_to_card_s > 0, `hash to card ${r.hash_to_card_s} s`);
    assert.ok(r.rss_peak_bytes_by_phase.load.renderer > 0, JSON.stringify(r.rss_peak_bytes_by_phase));
    assert.deepEqual(r.console_errors, []);
    // Both backends of the CLI give the browser's letters; probabilities agree to the 0.1 % the
    // page shows (rounding: at most 5e-4).
    assert.deepEqual(Object.keys(r.native).sort(), ['cpu', 'wgpu']);
    assert.ok(r.max_prob_diff_vs_native <= 6e-4, `max |Δp| ${r.max_prob_diff_vs_native}`);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
