// Peak resident memory of headless Chromium's renderer and GPU processes, sampled from /proc
// every 250 ms (Linux only), counting this script's own browser only. On SwiftShader the GPU
// process holds every WebGPU buffer in its own memory, so its figure is the browser's real
// device memory, garbage included, where CubeCL's count leaves out buffers it released.
// `phase` names the part of the run a sample falls in: each phase's peak is kept too.
import { readFileSync, readdirSync } from 'node:fs';

export function rssSampler() {
  const peak = { renderer: 0, gpu: 0 };
  const phases = {};
  let phase = 'start';
  const sample = () => {
    const now = { renderer: 0, gpu: 0 };
    // Only this script's own browser: another one running beside it must not count.
    const parent = new Map();
    const pids = readdirSync('/proc').filter((d) => /^\d+$/.test(d));
    for (const pid of pids) {
      try {
        // The parent is the 4th field of /proc/PID/stat, after the command's closing paren.
        const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
        parent.set(pid, stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
      } catch { /* the process ended */ }
    }
    const ours = (pid) => {
      for (let p = pid, hops = 0; p && p !== '0' && hops < 64; p = parent.get(p), hops++) {
        if (p === String(process.pid)) return true;
      }
      return false;
    };
    for (const pid of pids) {
      if (!ours(pid)) continue;
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
