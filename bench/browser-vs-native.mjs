// The browser against the native engine on the same Vulkan driver and the same files: the app's
// Benchmark card in headless Chromium (WebGPU on Chromium's SwiftShader without a GPU) and
// `rexvqa bench --backend wgpu` natively on that same SwiftShader ICD, with one JSON of both
// reports and the browser / native ratios (issue #33's measure; no timing is asserted anywhere).
//
//   node bench/browser-vs-native.mjs --dist DIST --bin target/release/rexvqa --model M.gguf
//     [--mmproj MM.gguf] [--prefill 64] [--decode 16] [--official 4] [--kernel-rows ''] [--runs 1]
//     [--profile] [--icd /usr/lib/chromium/vk_swiftshader_icd.json] [--flags='--enable-dawn-features=...']
//     --out r.json
//
// --flags are Chromium's extra command-line flags for the browser side (browser-bench.mjs's).
//
// --profile has both sides time every launch of a token, a prefill pass and an image encode on its
// own, and adds `kernels`: each pass's device time by kernel on the two sides (the first run of
// each), with its browser / native speed, so that a gap is named by kernel.
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, writeFileSync, existsSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, dirname } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';

const { values: a } = parseArgs({
  options: {
    dist: { type: 'string', default: 'dist' }, bin: { type: 'string' }, model: { type: 'string' },
    mmproj: { type: 'string' }, prefill: { type: 'string', default: '64' },
    decode: { type: 'string', default: '16' }, official: { type: 'string', default: '4' },
    runs: { type: 'string', default: '1' }, 'kernel-rows': { type: 'string', default: '' },
    icd: { type: 'string', default: '/usr/lib/chromium/vk_swiftshader_icd.json' }, out: { type: 'string' },
    profile: { type: 'boolean', default: false }, flags: { type: 'string', default: '' },
  },
});
if (!a.bin || !a.model || !a.out) throw new Error('--bin, --model and --out are required');
if (!existsSync(a.icd)) throw new Error(`no Vulkan ICD file at ${a.icd} (Debian's chromium ships SwiftShader's)`);
const here = dirname(fileURLToPath(import.meta.url));
const tmp = mkdtempSync(join(tmpdir(), 'rexvqa-bvn-'));

function browser(run) {
  const out = join(tmp, `browser-${run}.json`);
  const args = [join(here, 'browser-bench.mjs'), '--dist', a.dist, '--model', a.model, '--compute', 'webgpu',
    '--prefill', a.prefill, '--decode', a.decode, '--official', a.official, '--kernel-rows', a['kernel-rows'], '--out', out];
  if (a.mmproj) args.push('--mmproj', a.mmproj);
  if (a.profile) args.push('--profile');
  if (a.flags) args.push(`--flags=${a.flags}`);
  execFileSync(process.execPath, args, { stdio: 'inherit' });
  return JSON.parse(readFileSync(out, 'utf8'));
}

function native(run) {
  const out = join(tmp, `native-${run}.json`);
  const args = ['bench', '--backend', 'wgpu', '--model', a.model, '--prefill', a.prefill, '--decode', a.decode,
    '--official-max-tokens', a.official, '--kernel-rows', a['kernel-rows'], '--out', out];
  if (a.mmproj) args.push('--mmproj', a.mmproj);
  if (a.profile) args.push('--profile');
  // The same driver as the browser's: only the ICD named is loaded, so wgpu cannot pick lavapipe.
  const env = { ...process.env, VK_ICD_FILENAMES: a.icd, VK_DRIVER_FILES: a.icd };
  execFileSync(a.bin, args, { stdio: ['ignore', 'ignore', 'inherit'], env });
  return JSON.parse(readFileSync(out, 'utf8'));
}

// The figures compared, each a rate (higher is better) or a time (lower is better), so that every
// ratio reads "browser / native speed": 1 is parity, below 1 the browser is slower.
function figures(j) {
  const r = j.results;
  const f = {
    decode_tokens_per_s: r.decode_tokens_per_s,
    image_encode_ms: r.image_encode_ms || null,
    fast_questions_per_s: r.fast_questions_per_s || null,
    // The app's official cap is at least 1 token, the CLI's may be 0: then the two differ.
    official_questions_per_s: Number(a.official) > 0 ? r.official_questions_per_s || null : null,
    decode_issue_ms_per_token: r.decode_issue_ms_per_token,
    host_us_per_dispatch: r.host_us_per_dispatch,
    chain_us_per_dispatch: r.chain_us_per_dispatch,
    chain_issue_us_per_dispatch: r.chain_issue_us_per_dispatch,
    peak_device_bytes: r.peak_device_bytes,
  };
  for (const [n, v] of r.prefill ?? []) f[`prefill_${n}_tokens_per_s`] = v;
  for (const [n, v] of r.prefill_first ?? []) f[`prefill_first_${n}_tokens_per_s`] = v;
  return f;
}

const median = (xs) => { const s = [...xs].sort((x, y) => x - y); return s[Math.floor((s.length - 1) / 2)]; };
const runs = Math.max(1, Number(a.runs));
const b = [], n = [];
// Interleaved, so that a slower stretch of the machine hits both sides alike.
for (let i = 0; i < runs; i++) { n.push(native(i)); b.push(browser(i)); }
const fb = b.map(figures), fn = n.map(figures);
const keys = Object.keys(fn[0]);
const med = (fs) => Object.fromEntries(keys.map((k) => [k, fs.every((f) => f[k] != null) ? median(fs.map((f) => f[k])) : null]));
const mb = med(fb), mn = med(fn);
const lowerIsBetter = new Set(['image_encode_ms', 'decode_issue_ms_per_token', 'host_us_per_dispatch',
  'chain_us_per_dispatch', 'chain_issue_us_per_dispatch', 'peak_device_bytes']);
const ratios = {};
for (const k of keys) {
  if (mb[k] == null || mn[k] == null || mb[k] === 0 || mn[k] === 0) continue;
  ratios[k] = lowerIsBetter.has(k) ? mn[k] / mb[k] : mb[k] / mn[k];
}
// Each profiled pass's device time by kernel, side by side (first runs): {pass: {gpu_ms, kernels}}.
function kernelTable(br, nr) {
  const passes = (j) => Object.fromEntries((j.results.profile?.passes ?? []).map((p) => [p.pass, p]));
  const pb = passes(br), pn = passes(nr);
  const speed = (x, y) => (x > 0 && y > 0 ? y / x : null);
  const out = {};
  for (const name of Object.keys(pb).filter((p) => p in pn)) {
    const us = (p) => Object.fromEntries(p.kernels.map((k) => [k.kernel, k.gpu_us]));
    const kb = us(pb[name]), kn = us(pn[name]);
    const kernels = [...new Set([...Object.keys(kb), ...Object.keys(kn)])]
      .map((kernel) => ({ kernel, browser_us: kb[kernel] ?? null, native_us: kn[kernel] ?? null,
        speed: speed(kb[kernel], kn[kernel]) }))
      .sort((x, y) => Math.max(y.browser_us ?? 0, y.native_us ?? 0) - Math.max(x.browser_us ?? 0, x.native_us ?? 0));
    out[name] = { browser_gpu_ms: pb[name].gpu_ms, native_gpu_ms: pn[name].gpu_ms,
      speed: speed(pb[name].gpu_ms, pn[name].gpu_ms), kernels };
  }
  return out;
}
const kernels = a.profile ? kernelTable(b[0], n[0]) : null;
const report = {
  what: 'browser (Chromium WebGPU) / native (rexvqa bench --backend wgpu) on the same Vulkan ICD and files',
  icd: a.icd, model: a.model, mmproj: a.mmproj ?? null, prefill: a.prefill, decode: Number(a.decode),
  official_max_tokens: Number(a.official), runs, browser: mb, native: mn, ratios, kernels,
  browser_runs: b, native_runs: n,
};
writeFileSync(a.out, `${JSON.stringify(report, null, 2)}\n`);
console.log('figure'.padEnd(30), 'browser'.padStart(12), 'native'.padStart(12), 'browser/native speed'.padStart(22));
for (const k of keys) {
  const fmt = (v) => (v == null ? '–' : Number(v).toPrecision(4)).padStart(12);
  console.log(k.padEnd(30), fmt(mb[k]), fmt(mn[k]), (ratios[k] == null ? '–' : `${ratios[k].toFixed(2)}×`).padStart(22));
}
for (const [pass, t] of Object.entries(kernels ?? {})) {
  const ms = (v) => (v == null ? '–' : Number(v).toPrecision(4)).padStart(12);
  const x = (v) => (v == null ? '–' : `${v.toFixed(2)}×`).padStart(22);
  console.log(`${pass}: device ms`.padEnd(30), ms(t.browser_gpu_ms), ms(t.native_gpu_ms), x(t.speed));
  for (const k of t.kernels.slice(0, 6)) {
    const us = (v) => (v == null ? '–' : (v / 1000).toPrecision(4)).padStart(12);
    console.log(`  ${k.kernel.slice(0, 28)}`.padEnd(30), us(k.browser_us), us(k.native_us), x(k.speed));
  }
}
