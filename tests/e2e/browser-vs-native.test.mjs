// End-to-end: bench/browser-vs-native.mjs (issue #33's measure) runs the Benchmark card in Chromium
// and `rexvqa bench` natively on the same SwiftShader ICD, and writes one JSON of both with their
// ratios. Run here on the tiny text GGUF so the script cannot rot (without the mmproj: the image
// and question figures would add minutes on SwiftShader, and bench.test.mjs covers them in the
// card); no timing is asserted, only that every figure was measured on both sides and its ratio
// computed, and with --profile that each pass's kernels were timed on both sides.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { BIN, DIST, FIX } from './steps.mjs';

test('browser-vs-native: both sides measured, ratios written', { timeout: 600_000 }, () => {
  assert.ok(FIX && BIN, 'REXVQA_E2E and REXVQA_BIN must be set (scripts/test.sh sets them)');
  const tmp = mkdtempSync(join(tmpdir(), 'rexvqa-bvn-test-'));
  try {
    const out = join(tmp, 'bvn.json');
    execFileSync(process.execPath, ['bench/browser-vs-native.mjs', '--dist', DIST, '--bin', BIN,
      '--model', join(FIX, 'tiny-q8_0.gguf'), '--prefill', '32', '--decode', '4', '--official', '1', '--kernel-rows', '',
      '--profile', '--out', out],
    { stdio: ['ignore', 'inherit', 'inherit'], timeout: 540_000 });
    const r = JSON.parse(readFileSync(out, 'utf8'));
    assert.equal(r.browser_runs.length, 1);
    assert.equal(r.native_runs.length, 1);
    // The two sides ran where they should: the app on WebGPU, the CLI on wgpu.
    assert.equal(r.browser_runs[0].compute_choice, 'webgpu');
    assert.match(r.native_runs[0].backend, /wgpu/i);
    for (const k of ['decode_tokens_per_s', 'decode_issue_ms_per_token', 'host_us_per_dispatch',
      'chain_us_per_dispatch', 'chain_issue_us_per_dispatch', 'prefill_32_tokens_per_s', 'prefill_first_32_tokens_per_s', 'peak_device_bytes']) {
      for (const side of ['browser', 'native']) {
        assert.ok(Number.isFinite(r[side][k]) && r[side][k] > 0, `${side} ${k}: ${r[side][k]}`);
      }
      assert.ok(Number.isFinite(r.ratios[k]) && r.ratios[k] > 0, `ratio ${k}: ${r.ratios[k]}`);
    }
    // Memory by stage: the browser's WebGPU device is the wrapped one, so it reports the buffers
    // it holds, which never fall below the pages CubeCL reserves; natively nothing is wrapped.
    const b = r.browser_runs[0];
    assert.ok(b.bench_window_unix_ms[1] > b.bench_window_unix_ms[0]);
    assert.ok(b.results.peak_buffer_bytes >= b.results.peak_device_bytes, JSON.stringify(b.results.peak_buffer_bytes));
    assert.ok(b.results.memory_by_stage.length >= 4);
    for (const p of b.results.memory_by_stage) {
      assert.ok(p.reserved > 0 && p.live >= p.reserved && p.t_ms > 0, JSON.stringify(p));
    }
    assert.equal(r.native_runs[0].results.peak_buffer_bytes, null);
    // The weights' buffers under 4 MiB and their modelled suballocation slack, in the browser.
    const [small, slack] = b.results.small_buffers_at_start;
    assert.ok(small > 0 && slack >= 0, JSON.stringify(b.results.small_buffers_at_start));
    assert.equal(r.native_runs[0].results.small_buffers_at_start, null);
    assert.ok(r.native_runs[0].results.memory_by_stage.every((p) => p.reserved > 0 && p.live === null));
    // --profile: a token's and the prefill's device time by kernel on both sides, the same
    // kernels on each (one engine), every one timed.
    assert.deepEqual(Object.keys(r.kernels), ['token', 'prefill 32']);
    for (const [pass, t] of Object.entries(r.kernels)) {
      assert.ok(t.browser_gpu_ms > 0 && t.native_gpu_ms > 0 && t.speed > 0, `${pass}: ${JSON.stringify(t)}`);
      assert.ok(t.kernels.length > 0, pass);
      for (const k of t.kernels) {
        assert.ok(k.browser_us >= 0 && k.native_us >= 0, `${pass}: ${JSON.stringify(k)}`);
      }
    }
  } finally {
    rmSync(tmp, { recursive: true, force: true });
  }
});
