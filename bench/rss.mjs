// Peak resident memory of headless Chromium's renderer and GPU processes, sampled from /proc
// every 250 ms (Linux only). On SwiftShader the GPU process holds every WebGPU buffer in its own
// memory, so its figure is the browser's real device memory, garbage included; CubeCL's count
// leaves out the buffers it released that wait for a garbage collection.
// `phase` names the part of the run a sample falls in: each phase's peak is kept too.
import { readFileSync, readdirSync } from 'node:fs';

export function rssSampler() {
  const peak = { renderer: 0, gpu: 0 };
  const phases = {};
  let phase = 'start';
  const sample = () => {
    const now = { renderer: 0, gpu: 0 };
    for (const pid of readdirSync('/proc').filter((d) => /^\d+$/.test(d))) {
      try {
        const cmd = readFileSync(`/proc/${pid}/cmdline`, 'utf8');
        if (!cmd.includes('chromium')) continue;
        const kind = cmd.includes('--type=renderer') ? 'renderer' : cmd.includes('--type=gpu-process') ? 'gpu' : null;
        if (!kind) continue;
        const kb = Number(readFileSync(`/proc/${pid}/status`, 'utf8').match(/VmRSS:\s+(\d+)/)?.[1] ?? 0);
        now[kind] += kb * 1024;
      } catch { /* the process ended */ }
    }
    phases[phase] ??= { renderer: 0, gpu: 0 };
    for (const k of Object.keys(peak)) {
      peak[k] = Math.max(peak[k], now[k]);
      phases[phase][k] = Math.max(phases[phase][k], now[k]);
    }
  };
  const timer = setInterval(sample, 250);
  return { peak, phases, phase: (name) => { sample(); phase = name; }, stop: () => { sample(); clearInterval(timer); } };
}
