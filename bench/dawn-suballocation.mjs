// What Dawn's suballocation of small buffers costs a page that holds many of them, in a real
// Chromium (#33). Dawn places a buffer under 4 MiB in a power-of-two block of a shared heap; the
// H200 measured 214 MiB between Chromium with and without suballocation after loading the 4B pair
// a matrix a buffer, and engine/src/destroying_device.rs models it (235 MiB). This holds
// `--buffers` storage buffers of `--bytes` bytes each (default: the vision tower's 1152x1152 F16
// projections at 4B), written with writeBuffer as weights are, either apart (a buffer each) or
// shared (the same bytes in buffers of up to 256 MiB, as `Loader::qmatrices_shared` shares a
// layer's), in one browser with Dawn's defaults and one with
// `--enable-dawn-features=disable_resource_suballocation`. It reports the GPU process's resident
// and mapped memory (VmRSS, VmSize) over what it held before: on SwiftShader the GPU process holds
// every WebGPU buffer in its own memory.
//
//   node bench/dawn-suballocation.mjs [--buffers 400] [--bytes 2654208] [--out r.json]

import { writeFileSync } from 'node:fs';
import { parseArgs } from 'node:util';
import { chromium } from 'playwright-core';
import { servePage } from './page-server.mjs';
import { ownChromiumProcesses } from './rss.mjs';

const { values: args } = parseArgs({
  options: {
    buffers: { type: 'string', default: '400' },
    bytes: { type: 'string', default: '2654208' },
    out: { type: 'string' },
  },
});
const buffers = Number(args.buffers);
const bytes = Number(args.bytes);

const page = `<!doctype html><script>
window.hold = async (n, size, shared) => {
  const adapter = await navigator.gpu.requestAdapter();
  const device = await adapter.requestDevice({
    requiredLimits: { maxBufferSize: adapter.limits.maxBufferSize },
  });
  // Written as weights are: through the queue, every byte non-zero.
  const data = new Uint8Array(size).fill(7);
  const make = (s) => device.createBuffer({ size: s, usage: GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_DST });
  const held = [];
  if (shared) {
    const per = Math.max(1, Math.floor((256 << 20) / size));
    for (let i = 0; i < n; i += per) {
      const k = Math.min(per, n - i);
      const b = make(k * size);
      for (let j = 0; j < k; j++) device.queue.writeBuffer(b, j * size, data);
      held.push(b);
    }
  } else {
    for (let i = 0; i < n; i++) {
      const b = make(size);
      device.queue.writeBuffer(b, 0, data);
      held.push(b);
    }
  }
  await device.queue.onSubmittedWorkDone();
  window.held = { device, held };
  return held.length;
};
window.release = async () => {
  const { device, held } = window.held;
  for (const b of held) b.destroy();
  await device.queue.onSubmittedWorkDone();
  device.destroy();
  window.held = null;
};
</script>`;

const server = await servePage(page);

// Resident and mapped bytes of this script's GPU process.
const gpuProcess = () => ownChromiumProcesses().filter((p) => p.kind === 'gpu')
  .reduce((t, p) => ({ rss: t.rss + p.rss_bytes, size: t.size + p.size_bytes }), { rss: 0, size: 0 });
const settle = () => new Promise((r) => setTimeout(r, 1500));

const results = [];
for (const suballocation of [true, false]) {
  const browser = await chromium.launch({
    executablePath: '/usr/bin/chromium',
    args: ['--no-sandbox', '--enable-unsafe-webgpu', '--disable-background-networking',
      '--disable-component-update',
      ...(suballocation ? [] : ['--enable-dawn-features=disable_resource_suballocation'])],
  });
  try {
    for (const shared of [false, true]) {
      const tab = await browser.newPage();
      await tab.goto(server.url);
      await tab.evaluate(async () => {
        const a = await navigator.gpu.requestAdapter();
        await a.requestDevice();
      });
      await settle();
      const before = gpuProcess();
      const made = await tab.evaluate(([n, s, sh]) => window.hold(n, s, sh), [buffers, bytes, shared]);
      await settle();
      const held = gpuProcess();
      await tab.evaluate(() => window.release());
      await tab.close();
      const r = {
        suballocation, shared, buffers, bytes, device_buffers: made,
        payload_mib: (buffers * bytes) / 2 ** 20,
        rss_over_before_mib: (held.rss - before.rss) / 2 ** 20,
        vmsize_over_before_mib: (held.size - before.size) / 2 ** 20,
      };
      results.push(r);
      console.log(`suballocation ${suballocation ? 'on ' : 'off'}, ${shared ? 'shared' : 'apart '}: ` +
        `${made} buffers, ${r.payload_mib.toFixed(0)} MiB written; GPU process +${r.rss_over_before_mib.toFixed(0)} MiB ` +
        `resident, +${r.vmsize_over_before_mib.toFixed(0)} MiB mapped`);
    }
  } finally {
    await browser.close();
  }
}
server.close();
if (args.out) writeFileSync(args.out, JSON.stringify({ results }, null, 1));
