// Whether a GPUBuffer that is dropped without destroy() gives its memory back before JavaScript's
// garbage collector runs (#33). wgpu's web backend drops a Buffer without calling destroy()
// (gfx-rs/wgpu#4092, #5045), and so does everything CubeCL frees in a browser: this measures what
// that costs. It creates `--buffers` storage buffers of `--mb` MB in a page, clears each on the
// GPU and drops it, once calling destroy() and once not, and samples the resident memory of
// Chromium's GPU process (where SwiftShader keeps buffers) every 100 ms.
//
//   node bench/gpubuffer-gc.mjs [--buffers 60] [--mb 64] [--dispatches 0] [--after-s 0] [--out r.json]
//
// --dispatches N issues N small compute dispatches after each buffer, each with a bind group and
// a command encoder of its own, submitted 32 at a time (as CubeCL launches), and --after-s keeps
// dispatching that way for that long after the last buffer, sampling the GPU process every
// 500 ms: whether a page busy with WebGPU work collects the dropped buffers on its own, and when.
//
// 2-core VM, Chromium 156 headless on SwiftShader, 60 × 64 MB: 222,536 kB at most with destroy(),
// 4,090,824 kB without (nothing was collected during the run). With 500 or 2,000 dispatches after each
// buffer, the dropped ones were collected at 9-10 s (3.4-4.0 GiB until then); with destroy(), 0.35 GiB.

import { execFileSync } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';
import { parseArgs } from 'node:util';
import { chromium } from 'playwright-core';
import { servePage } from './page-server.mjs';

const { values: args } = parseArgs({
  options: {
    buffers: { type: 'string', default: '60' },
    mb: { type: 'string', default: '64' },
    dispatches: { type: 'string', default: '0' },
    'after-s': { type: 'string', default: '0' },
    out: { type: 'string' },
  },
});
const buffers = Number(args.buffers);
const mb = Number(args.mb);
const dispatches = Number(args.dispatches);
const afterS = Number(args['after-s']);

const page = `<!doctype html><script>
window.churn = async (n, mb, destroy, dispatches, afterS) => {
  const adapter = await navigator.gpu.requestAdapter();
  const device = await adapter.requestDevice({
    requiredLimits: { maxBufferSize: adapter.limits.maxBufferSize },
  });
  const small = device.createBuffer({ size: 256, usage: GPUBufferUsage.STORAGE });
  const pipeline = device.createComputePipeline({
    layout: 'auto',
    compute: {
      module: device.createShaderModule({
        code: '@group(0) @binding(0) var<storage, read_write> o: array<f32>; ' +
          '@compute @workgroup_size(1) fn main() { o[0] = o[0] + 1.0; }',
      }),
      entryPoint: 'main',
    },
  });
  const work = async (count) => {
    let cbs = [];
    for (let k = 0; k < count; k++) {
      const bg = device.createBindGroup({
        layout: pipeline.getBindGroupLayout(0),
        entries: [{ binding: 0, resource: { buffer: small } }],
      });
      const e = device.createCommandEncoder();
      const pass = e.beginComputePass();
      pass.setPipeline(pipeline);
      pass.setBindGroup(0, bg);
      pass.dispatchWorkgroups(1);
      pass.end();
      cbs.push(e.finish());
      if (cbs.length === 32) { device.queue.submit(cbs); cbs = []; }
    }
    if (cbs.length) device.queue.submit(cbs);
    await device.queue.onSubmittedWorkDone();
  };
  let garbage = [];
  for (let i = 0; i < n; i++) {
    const b = device.createBuffer({
      size: mb << 20,
      usage: GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_DST | GPUBufferUsage.COPY_SRC,
    });
    const e = device.createCommandEncoder();
    e.clearBuffer(b);
    device.queue.submit([e.finish()]);
    await device.queue.onSubmittedWorkDone();
    if (destroy) b.destroy();
    // Small JavaScript garbage, as wasm-bindgen's glue makes per dispatch.
    for (let j = 0; j < 2000; j++) garbage.push({ j, s: 'x' + j });
    if (garbage.length > 20000) garbage = [];
    if (dispatches) await work(dispatches);
  }
  const end = performance.now() + afterS * 1000;
  while (performance.now() < end) await work(Math.max(dispatches, 256));
  device.destroy();
};
</script>`;

const server = await servePage(page);

const gpuProcessKb = () => {
  let pids = [];
  try {
    pids = execFileSync('pgrep', ['-f', '--', '--type=gpu-process']).toString().trim().split('\n');
  } catch {
    return 0;
  }
  let kb = 0;
  for (const pid of pids.filter(Boolean)) {
    try {
      kb += Number(readFileSync(`/proc/${pid}/status`, 'utf8').match(/VmRSS:\s+(\d+)/)[1]);
    } catch {
      // The process ended between the listing and the read.
    }
  }
  return kb;
};

const browser = await chromium.launch({
  executablePath: '/usr/bin/chromium',
  args: ['--no-sandbox', '--enable-unsafe-webgpu', '--disable-background-networking',
    '--disable-component-update'],
});
const results = [];
try {
  for (const destroy of [true, false]) {
    const tab = await browser.newPage();
    await tab.goto(server.url);
    const before = gpuProcessKb();
    let max = before;
    const t0 = Date.now();
    const series = [];
    const timer = setInterval(() => {
      const kb = gpuProcessKb();
      max = Math.max(max, kb);
      if (series.length === 0 || Date.now() - t0 >= series[series.length - 1][0] + 500) series.push([Date.now() - t0, kb]);
    }, 100);
    await tab.evaluate(([n, size, d, k, s]) => window.churn(n, size, d, k, s), [buffers, mb, destroy, dispatches, afterS]);
    clearInterval(timer);
    const last = gpuProcessKb();
    max = Math.max(max, last);
    results.push({ destroy, buffers, mb, dispatches, after_s: afterS, gpu_process_kb_before: before,
      gpu_process_kb_max: max, gpu_process_kb_last: last, series_ms_kb: series });
    console.log(`destroy() ${destroy ? 'called' : 'not called'}: GPU process ${before} kB before, ` +
      `${max} kB at most (${buffers} buffers of ${mb} MB)`);
    await tab.close();
  }
} finally {
  await browser.close();
  server.close();
}
if (args.out) writeFileSync(args.out, JSON.stringify({ results }, null, 1));
