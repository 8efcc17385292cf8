// A model pair through the served app in headless Chromium, as a user does it: import both files
// into browser storage, load, answer one fast-mode question of a study with its image, then a
// second question of the same study; with the native CLI's answers to the same questions beside.
// Written for the full-size synthetic MedGemma 4B pair (bench/README.md); CI runs it on the tiny
// pair so that it keeps working.
//
//   node bench/browser-fullsize.mjs --model M.gguf --mmproj MM.gguf --data REXVQA_DIR \
//     [--compute webgpu|cpu|auto] [--cli BIN --cli-backends cpu,wgpu] [--machine NAME] \
//     [--dist dist] [--out FILE.json] [--load-only] [--settle-s 3]
//
// Figures: import_mb_per_s (copy into OPFS), sha256_s, load_s (the model card's),
// import_to_card_s (click to card), selftest_checks (each self-test check's ms), first_answer_s
// and second_answer_s (click to answer), wasm_heap_peak_bytes (the worker's WebAssembly memory,
// which never shrinks), device_peak_bytes (the model's device pool after both answers), and the
// Chromium processes' peak resident memory sampled from /proc every 250 ms, and what they hold
// once settled (`--settle-s` seconds idle) before the import and after the load: on SwiftShader the
// GPU process's difference is what the weights cost the browser, beside the model card's device
// bytes (REXVQA_CHROMIUM can name a wrapper that adds Dawn's flags). Read its anonymous part
// (`gpu_anon`): VmRSS also counts shared and file-backed pages, whose part after the 4B pair's load
// moved by 120 MiB between identical runs where RssAnon moved by 1-15 MiB.
import { execFileSync } from 'node:child_process';
import { readFileSync, statSync, writeFileSync } from 'node:fs';
import { cpus, totalmem } from 'node:os';
import { join, resolve } from 'node:path';
import { parseArgs } from 'node:util';
import { serve } from '../tests/e2e/server.mjs';
import { launch, openPage } from '../tests/e2e/browser.mjs';
import { rssSampler } from './rss.mjs';

const { values: a } = parseArgs({
  options: {
    model: { type: 'string' }, mmproj: { type: 'string' }, data: { type: 'string' },
    compute: { type: 'string', default: 'webgpu' }, cli: { type: 'string' },
    'cli-backends': { type: 'string', default: 'cpu' }, machine: { type: 'string', default: 'unnamed' },
    dist: { type: 'string', default: 'dist' }, out: { type: 'string' },
    'timeout-min': { type: 'string', default: '120' }, 'load-only': { type: 'boolean', default: false },
    'settle-s': { type: 'string', default: '3' },
  },
});
for (const k of ['model', 'mmproj', 'data']) if (!a[k]) throw new Error(`--${k} is required`);
const LONG = Number(a['timeout-min']) * 60_000;
const splitPath = join(a.data, 'metadata', 'test_vqa_data.json');
const SETTLE = Number(a['settle-s']) * 1000;

// Two questions of one study (the first study with at least two), as the split lists them.
function twoOfOneStudy() {
  const recs = Object.entries(JSON.parse(readFileSync(splitPath, 'utf8')));
  const by = new Map();
  for (const [id, r] of recs) {
    const k = r.study_id ?? id;
    by.set(k, [...(by.get(k) ?? []), id]);
    if (by.get(k).length === 2) return by.get(k);
  }
  throw new Error(`${splitPath}: no study has two questions`);
}

async function ask(page, qid) {
  await page.getByTestId('study-search').fill(qid);
  const row = page.getByTestId('question-row').filter({ hasText: qid });
  await row.first().click();
  await page.getByTestId('question-detail').filter({ hasText: qid }).waitFor();
  const t0 = Date.now();
  await page.getByTestId('ask-fast').click();
  await page.getByTestId('ask-answer').waitFor({ timeout: LONG });
  const secs = (Date.now() - t0) / 1000;
  const letter = (await page.getByTestId('ask-letter').textContent()).trim();
  const probs = [];
  for (const l of ['A', 'B', 'C', 'D']) {
    const bar = page.getByTestId(`prob-${l}`);
    if (await bar.count()) probs.push(Number((await bar.locator('.bar-value').textContent()).replace('%', '')) / 100);
  }
  console.log(`${qid}: ${letter} ${JSON.stringify(probs)} in ${secs.toFixed(1)} s`);
  return { id: qid, letter, probs, seconds: secs };
}

function cliAnswers(ids) {
  const out = {};
  for (const backend of a['cli-backends'].split(',').filter(Boolean)) {
    out[backend] = ids.map((id) => {
      const t0 = Date.now();
      const r = JSON.parse(execFileSync(a.cli, ['answer', '--model', a.model, '--mmproj', a.mmproj,
        '--split', splitPath, '--id', id, '--backend', backend], { encoding: 'utf8', maxBuffer: 1 << 26 }));
      console.log(`CLI ${backend} ${id}: ${r.prediction} ${JSON.stringify(r.probabilities)}`);
      return { id, letter: r.prediction, probs: r.probabilities, seconds: (Date.now() - t0) / 1000 };
    });
  }
  return out;
}

const [q1, q2] = twoOfOneStudy();
const bytes = statSync(a.model).size + statSync(a.mmproj).size;
const server = await serve(a.dist);
const context = await launch();
const rss = rssSampler();
const result = { machine: a.machine, cpus: cpus().length, memory_bytes: totalmem(), compute: a.compute,
  model: resolve(a.model), mmproj: resolve(a.mmproj), file_bytes: bytes, questions: [q1, q2] };
try {
  const { page, problems } = await openPage(context, server.url);
  await page.getByTestId('gpu-ready').or(page.getByTestId('gpu-unavailable')).first().waitFor({ timeout: 120_000 });
  result.user_agent = await page.evaluate(() => navigator.userAgent);
  const settled = async () => { await page.waitForTimeout(SETTLE); rss.sample(); return { ...rss.last }; };
  result.rss_settled_before_import_bytes = await settled();
  await page.getByTestId('tab-model').click();
  await page.getByTestId('compute').selectOption(a.compute);
  await page.getByTestId('model-text-input').setInputFiles(a.model);
  await page.getByTestId('model-mmproj-input').setInputFiles(a.mmproj);
  const t0 = Date.now();
  rss.phase('import');
  await page.getByTestId('model-import').click();
  // The progress label says which phase runs: copying, hashing (SHA-256), then loading.
  let copied = null;
  let hashed = null;
  const progress = page.getByTestId('progress');
  while (!(await page.getByTestId('model-card').count())) {
    const label = (await progress.count()) ? await progress.first().textContent().catch(() => '') : '';
    if (copied === null && label.includes('SHA-256')) { copied = Date.now(); rss.phase('hash'); }
    if (hashed === null && label.includes('Loading weights')) { hashed = Date.now(); rss.phase('load'); }
    if (Date.now() - t0 > LONG) throw new Error('the model did not load in time');
    if (await page.getByTestId('app-error').count()) throw new Error(await page.getByTestId('app-error').textContent());
    await page.waitForTimeout(250);
  }
  const loaded = Date.now();
  rss.phase('after load');
  result.rss_settled_after_load_bytes = await settled();
  copied ??= hashed ?? loaded;
  result.import_s = (copied - t0) / 1000;
  result.import_mb_per_s = bytes / 1e6 / result.import_s;
  result.sha256_s = ((hashed ?? loaded) - copied) / 1000;
  result.runs_on = (await page.getByTestId('model-compute').textContent()).trim();
  const card = await page.getByTestId('model-card').textContent();
  result.load_s = Number(card.match(/Load time([\d.]+) s/)?.[1]);
  // Click to model card: what the user waits (copy, hash, self-test and load, as they overlap).
  result.import_to_card_s = (loaded - t0) / 1000;
  result.hash_to_card_s = (loaded - copied) / 1000;
  // The device self-test's verdict (on WebGPU, run once per adapter and browser: beside the
  // hash and load since 2026-11-24, before them until then), and its checks' times from the
  // verdict the worker keeps in OPFS.
  const selftest = page.getByTestId('model-selftest');
  if (await selftest.count()) {
    result.selftest = (await selftest.textContent()).trim();
    result.selftest_checks = await page.evaluate(async () => {
      const dir = await (await navigator.storage.getDirectory()).getDirectoryHandle('selftest');
      const all = JSON.parse(await (await (await dir.getFileHandle('verdicts.json')).getFile()).text());
      return Object.values(all).map((r) => ({ elapsed_ms: Math.round(r.elapsed_ms),
        ms: Object.fromEntries(r.checks.map((c) => [c.name, Math.round(c.ms)])) }));
    }).catch((e) => `not readable: ${e}`);
  }
  console.log(`imported at ${result.import_mb_per_s.toFixed(0)} MB/s, loaded in ${result.load_s} s on ${result.runs_on}`);

  if (!a['load-only']) {
    await page.getByTestId('tab-data').click();
    await page.getByTestId('dataset-folder-input').setInputFiles(a.data);
    await page.getByTestId('dataset-summary').waitFor({ timeout: 600_000 });
    await page.getByTestId('tab-study').click();
    const first = await ask(page, q1);
    const second = await ask(page, q2);
    result.first_answer_s = first.seconds;
    result.second_answer_s = second.seconds;
    result.browser = [first, second];
    await page.getByTestId('tab-model').click();
  }
  const mem = page.getByTestId('memory');
  result.memory_text = (await mem.textContent()).trim();
  const attr = async (k) => { const v = await mem.getAttribute(k); return v === null ? null : Number(v); };
  result.wasm_heap_peak_bytes = await attr('data-wasm-bytes');
  result.device_peak_bytes = await attr('data-device-bytes');
  result.console_errors = problems;
} finally {
  rss.stop();
  result.renderer_rss_peak_bytes = rss.peak.renderer;
  result.gpu_process_rss_peak_bytes = rss.peak.gpu;
  result.rss_peak_bytes_by_phase = rss.phases;
  await context.close();
  await server.close();
}
if (a.cli && !a['load-only']) {
  result.native = cliAnswers([q1, q2]);
  result.max_prob_diff_vs_native = Math.max(...Object.values(result.native).flatMap((rows) => rows.flatMap((r, i) => {
    if (r.letter !== result.browser[i].letter) throw new Error(`${r.id}: browser ${result.browser[i].letter}, native ${r.letter}`);
    return r.probs.map((p, j) => Math.abs(p - result.browser[i].probs[j]));
  })));
}
const json = JSON.stringify(result, null, 2);
console.log(json);
if (a.out) writeFileSync(a.out, `${json}\n`);
