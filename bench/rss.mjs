// Peak resident memory of headless Chromium's renderer and GPU processes, sampled from /proc
// every 250 ms (Linux only), counting this script's own browser only. On SwiftShader the GPU
// process holds every WebGPU buffer in its own memory, so its figure is the browser's real
// device memory, garbage included, where CubeCL's count leaves out buffers it released.
// `phase` names the part of the run a sample falls in: each phase's peak is kept too, and `last`
// is the latest sample (what a process holds once it has settled, where a peak also counts what
// a phase held only for a moment).
import { readFileSync, readdirSync } from 'node:fs';

// This script's own Chromium renderer and GPU processes (another browser running beside it must
// not count), each with its kind and its resident and mapped bytes (VmRSS, VmSize), and the
// anonymous part of the resident bytes (RssAnon: the heap and buffers, not the mapped libraries).
export function ownChromiumProcesses() {
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
  const found = [];
  for (const pid of pids) {
    if (!ours(pid)) continue;
    try {
      const cmd = readFileSync(`/proc/${pid}/cmdline`, 'utf8');
      if (!cmd.includes('chromium')) continue;
      const kind = cmd.includes('--type=renderer') ? 'renderer' : cmd.includes('--type=gpu-process') ? 'gpu' : null;
      if (!kind) continue;
      const status = readFileSync(`/proc/${pid}/status`, 'utf8');
      const kb = (field) => Number(status.match(new RegExp(`${field}:\\s+(\\d+)`))?.[1] ?? 0);
      found.push({ pid, kind, rss_bytes: kb('VmRSS') * 1024, size_bytes: kb('VmSize') * 1024,
        anon_bytes: kb('RssAnon') * 1024 });
    } catch { /* the process ended */ }
  }
  return found;
}

export function rssSampler() {
  const peak = { renderer: 0, gpu: 0 };
  const phases = {};
  // `last` also gives each kind's anonymous bytes (`gpu_anon`, `renderer_anon`).
  const last = { renderer: 0, gpu: 0, renderer_anon: 0, gpu_anon: 0 };
  let phase = 'start';
  const sample = () => {
    const now = { renderer: 0, gpu: 0 };
    const anon = { renderer_anon: 0, gpu_anon: 0 };
    for (const p of ownChromiumProcesses()) {
      now[p.kind] += p.rss_bytes;
      anon[`${p.kind}_anon`] += p.anon_bytes;
    }
    phases[phase] ??= { renderer: 0, gpu: 0 };
    Object.assign(last, now, anon);
    for (const k of Object.keys(peak)) {
      peak[k] = Math.max(peak[k], now[k]);
      phases[phase][k] = Math.max(phases[phase][k], now[k]);
    }
  };
  const timer = setInterval(sample, 250);
  return { peak, phases, last, sample, phase: (name) => { sample(); phase = name; }, stop: () => { sample(); clearInterval(timer); } };
}
