// The app's Benchmark card (the `rexvqa bench` harness run in the page's worker) in headless
// Chromium on a given build and model, saved as the card's JSON: for comparing builds (e.g. with
// and without SIMD128) and the browser with the native CLI on the same machine.
//
//   node bench/browser-bench.mjs --dist DIST --model M.gguf [--mmproj MM.gguf] [--compute cpu|webgpu]
//     [--prefill 64,256] [--decode 16] [--official 4] [--kernel-rows 1,256] [--profile] [--trace trace.json]
//     [--flags='--enable-dawn-features=...'] --out r.json
//
// --profile ticks the card's kernel profile: a token, a prefill pass and an image encode, every
// launch timed on its own (timestamp queries), in the JSON's results.profile.
//
// The JSON also gains chromium_rss: the renderer's and the GPU process's peak resident memory
// (bench/rss.mjs), over the import and load and over the Benchmark run apart. On SwiftShader the
// GPU process's figure is the browser's real device memory, buffers waiting for a garbage
// collection included.
//
// --trace records a Chrome trace of the Benchmark run (every process: the worker's JavaScript and
// WebAssembly samples, the GPU process's Dawn work), for bench/trace_summary.py to break down,
// instead of the JSON (--out is still required, and left unwritten).
import { readFileSync, writeFileSync } from 'node:fs';
import { parseArgs } from 'node:util';
import { serve } from '../tests/e2e/server.mjs';
import { chromium } from 'playwright-core';
import { launch, openPage } from '../tests/e2e/browser.mjs';
import { rssSampler } from './rss.mjs';

const { values: a } = parseArgs({
  options: {
    dist: { type: 'string', default: 'dist' }, model: { type: 'string' }, mmproj: { type: 'string' },
    compute: { type: 'string', default: 'cpu' }, prefill: { type: 'string', default: '64,256' },
    decode: { type: 'string', default: '16' }, official: { type: 'string', default: '4' }, out: { type: 'string' },
    'kernel-rows': { type: 'string', default: '1,256' }, trace: { type: 'string' }, flags: { type: 'string', default: '' },
    profile: { type: 'boolean', default: false },
  },
});
if (!a.model || !a.out) throw new Error('--model and --out are required');
const server = await serve(a.dist);
// Tracing is a browser-wide CDP domain: a second client reaches it through a debugging port.
const tracePort = 9300 + (process.pid % 600);
const extra = a.flags.split(' ').filter(Boolean);
const context = await launch(a.trace ? [...extra, `--remote-debugging-port=${tracePort}`] : extra);
const rss = rssSampler();
try {
  const { page, problems } = await openPage(context, server.url);
  await page.getByTestId('gpu-ready').or(page.getByTestId('gpu-unavailable')).first().waitFor({ timeout: 120_000 });
  // Without an adapter the card would run on nothing and never finish: say so at once.
  if (a.compute === 'webgpu' && await page.getByTestId('gpu-unavailable').isVisible()) {
    throw new Error(`no WebGPU adapter in this browser: ${await page.getByTestId('gpu-unavailable').innerText()}`);
  }
  await page.getByTestId('tab-model').click();
  await page.getByTestId('compute').selectOption(a.compute);
  await page.getByTestId('model-text-input').setInputFiles(a.model);
  if (a.mmproj) await page.getByTestId('model-mmproj-input').setInputFiles(a.mmproj);
  rss.phase('import and load');
  await page.getByTestId('model-import').click();
  await page.getByTestId('model-card').waitFor({ timeout: 1_800_000 });
  await page.getByTestId('bench-prefill').fill(a.prefill);
  await page.getByTestId('bench-decode').fill(a.decode);
  await page.getByTestId('bench-official').fill(a.official);
  await page.getByTestId('bench-kernel-rows').fill(a['kernel-rows']);
  if (a.profile) await page.getByTestId('bench-profile').check();
  const tracing = a.trace ? await startTrace(tracePort) : null;
  rss.phase('benchmark');
  const clicked = Date.now();
  await page.getByTestId('bench-run').click();
  await page.getByTestId('bench-results').waitFor({ timeout: 3_600_000 });
  const done = Date.now();
  rss.stop();
  if (tracing) {
    // A second CDP client takes over the browser's download behaviour, so a traced run keeps the
    // trace only: the figures come from an untraced run.
    await tracing.stop(a.trace);
    console.log(`trace written to ${a.trace}`);
    process.exit(0);
  }
  const [download] = await Promise.all([page.waitForEvent('download'), page.getByTestId('bench-save').click()]);
  const j = JSON.parse(readFileSync(await download.path(), 'utf8'));
  j.dist = a.dist;
  j.console_errors = problems;
  j.chromium_rss = { peak_bytes: rss.peak, peak_bytes_by_phase: rss.phases };
  // Wall-clock bounds of the run, to set results.memory_by_stage (times from the run's start)
  // against a memory trace taken outside the browser (bench/device's nvidia-smi samples).
  j.bench_window_unix_ms = [clicked, done];
  writeFileSync(a.out, `${JSON.stringify(j, null, 2)}\n`);
  const r = j.results;
  console.log(`${a.dist}: prefill ${JSON.stringify(r.prefill)} tok/s, decode ${r.decode_tokens_per_s?.toFixed(2)} tok/s, ` +
    `image ${r.image_encode_ms?.toFixed(0)} ms, fast ${r.fast_questions_per_s?.toFixed(3)} q/s`);
} finally {
  rss.stop();
  await context.close();
  await server.close();
}

// Starts a Chrome trace over CDP with the categories that say where a worker's time goes: V8's
// sampling profiler (JavaScript and WebAssembly frames of every thread), the timeline, and the GPU
// process's WebGPU (Dawn) work. Returns { stop(path) }.
async function startTrace(port) {
  const browser = await chromium.connectOverCDP(`http://127.0.0.1:${port}`);
  const cdp = await browser.newBrowserCDPSession();
  await cdp.send('Tracing.start', {
    transferMode: 'ReturnAsStream',
    traceConfig: {
      recordMode: 'recordContinuously',
      includedCategories: ['devtools.timeline', 'disabled-by-default-devtools.timeline', 'v8', 'v8.execute',
        'disabled-by-default-v8.cpu_profiler', 'gpu', 'dawn', 'disabled-by-default-dawn', 'webgpu',
        'disabled-by-default-webgpu', 'toplevel', 'ipc', 'mojom', 'blink', 'gpu.service',
        'disabled-by-default-gpu.service'],
    },
  });
  return {
    async stop(path) {
      const done = new Promise((resolve) => cdp.once('Tracing.tracingComplete', resolve));
      await cdp.send('Tracing.end');
      const { stream } = await done;
      const parts = [];
      for (;;) {
        const r = await cdp.send('IO.read', { handle: stream, size: 1 << 22 });
        parts.push(r.base64Encoded ? Buffer.from(r.data, 'base64') : Buffer.from(r.data));
        if (r.eof) break;
      }
      await cdp.send('IO.close', { handle: stream });
      writeFileSync(path, Buffer.concat(parts));
      await cdp.detach();
    },
  };
}
