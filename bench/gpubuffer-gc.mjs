// Whether a GPUBuffer that is dropped without destroy() gives its memory back before JavaScript's
// garbage collector runs (#33). wgpu's web backend drops a Buffer without calling destroy()
// (gfx-rs/wgpu#4092, #5045), and so does everything CubeCL frees in a browser: this measures what
// that costs. It creates `--buffers` storage buffers of `--mb` MB in a page, clears each on the
// GPU and drops it, once calling destroy() and once not, and samples the resident memory of
// Chromium's GPU process (where SwiftShader keeps buffers) every 100 ms.
//
//   node bench/gpubuffer-gc.mjs [--buffers 60] [--mb 64] [--out r.json]
//
// 2-core VM, Chromium 156 headless on SwiftShader, 60 × 64 MB: 222,536 kB at most with destroy(),
// 4,090,824 kB without (nothing was collected during the run).

import { createServer } from 'node:http';
import { execFileSync } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';
import { parseArgs } from 'node:util';
import { chromium } from 'playwright-core';

const { values: args } = parseArgs({
  options: {
    buffers: { type: 'string', default: '60' },
    mb: { type: 'string', default: '64' },
    out: { type: 'string' },
  },
});
const buffers = Number(args.buffers);
const mb = Number(args.mb);

const page = `<!doctype html><script>
window.churn = async (n, mb, destroy) => {
  const adapter = await navigator.gpu.requestAdapter();
  const device = await adapter.requestDevice({
    requiredLimits: { maxBufferSize: adapter.limits.maxBufferSize },
  });
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
  }
  device.destroy();
};
</script>`;

const server = createServer((_, res) => {
  res.setHeader('content-type', 'text/html');
  res.end(page);
}).listen(0, '127.0.0.1');
await new Promise((r) => server.once('listening', r));

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
    await tab.goto(`http://127.0.0.1:${server.address().port}/`);
    const before = gpuProcessKb();
    let max = before;
    const timer = setInterval(() => { max = Math.max(max, gpuProcessKb()); }, 100);
    await tab.evaluate(([n, size, d]) => window.churn(n, size, d), [buffers, mb, destroy]);
    clearInterval(timer);
    max = Math.max(max, gpuProcessKb());
    results.push({ destroy, buffers, mb, gpu_process_kb_before: before, gpu_process_kb_max: max });
    console.log(`destroy() ${destroy ? 'called' : 'not called'}: GPU process ${before} kB before, ` +
      `${max} kB at most (${buffers} buffers of ${mb} MB)`);
    await tab.close();
  }
} finally {
  await browser.close();
  server.close();
}
if (args.out) writeFileSync(args.out, JSON.stringify({ results }, null, 1));
