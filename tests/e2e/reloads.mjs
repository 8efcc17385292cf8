// Repeated reloads during an evaluation: the page is reloaded at N random points of one run
// (each time the model is loaded again from browser storage, the split reopened and the run
// resumed), and the script checks that no answer is lost or duplicated and that the final report
// and predictions equal an uninterrupted run's (the native CLI's `rexvqa eval` on the same split).
//
//   node tests/e2e/reloads.mjs --reloads N [--studies S] [--seed K] [--dist dist] [--out r.json]
//
// Needs REXVQA_E2E (the tiny GGUF pair, as scripts/test.sh prepares it) and REXVQA_BIN (the CLI).
// It makes its own synthetic split (S studies of 3 questions; default 4N + 4) so that every reload
// lands in the middle of the run. CI runs it with N = 5 (tests/e2e/reloads.test.mjs).
//
// After every reload, before resuming, the run's journal is read straight from the origin's
// private file system: its complete lines must name distinct questions, and every question
// journaled before the reload must still be there (a torn last line is allowed: the worker drops
// it when it resumes).
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { launch, openPage } from './browser.mjs';
import { serveNginx } from './server.mjs';
import { loadStoredModel, SLOW, tab } from './steps.mjs';

const { values: a } = parseArgs({
  options: {
    reloads: { type: 'string', default: '5' }, studies: { type: 'string' }, seed: { type: 'string' },
    dist: { type: 'string', default: process.env.REXVQA_DIST ?? 'dist' }, out: { type: 'string' },
  },
});
const FIX = process.env.REXVQA_E2E;
const BIN = process.env.REXVQA_BIN;
if (!FIX || !BIN) throw new Error('REXVQA_E2E and REXVQA_BIN must be set (scripts/test.sh sets them)');
const N = Number(a.reloads);
const PER_STUDY = 3;
const studies = Number(a.studies ?? 4 * N + 4);
const seed = Number(a.seed ?? Math.floor(Math.random() * 2 ** 31));
const MODEL = join(FIX, 'tiny-q8_0.gguf');
const MMPROJ = join(FIX, 'tiny-q8_0-mmproj-224.gguf');

// mulberry32: a seeded generator, so a failing run can be repeated with --seed.
let s = seed >>> 0;
function random() {
  s = (s + 0x6d2b79f5) >>> 0;
  let t = s;
  t = Math.imul(t ^ (t >>> 15), t | 1);
  t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
  return ((t ^ (t >>> 14)) >>> 0) / 2 ** 32;
}
const t0 = Date.now();
const mark = (what) => console.log(`[${((Date.now() - t0) / 1000).toFixed(1)} s] ${what}`);

// The split and the uninterrupted reference run.
const dir = mkdtempSync(join(tmpdir(), 'rexvqa-reloads-'));
const data = join(dir, 'rexvqa');
execFileSync(BIN, ['synth', '--out', data, '--studies', String(studies), '--questions-per-study', String(PER_STUDY),
  '--min-size', '200', '--max-size', '260', '--seed', String(seed % 1000)], { stdio: 'inherit' });
const predPath = join(dir, 'pred.json');
execFileSync(BIN, ['eval', '--model', MODEL, '--mmproj', MMPROJ, '--split', join(data, 'metadata', 'test_vqa_data.json'),
  '--out', predPath], { stdio: ['ignore', 'ignore', 'inherit'] });
const cliPred = JSON.parse(readFileSync(predPath, 'utf8'));
const cliReport = JSON.parse(readFileSync(`${predPath}.report.json`, 'utf8'));
const total = Object.keys(cliPred).length;
mark(`split: ${studies} studies, ${total} questions; seed ${seed}; CLI reference run done`);

async function openDataset(page) {
  await tab(page, 'data');
  await page.getByTestId('dataset-folder-input').setInputFiles(data);
  await page.getByTestId('dataset-summary').waitFor({ timeout: 60_000 });
}

// The answered count on the progress line ("k / T answered — …"), or -1 without one.
async function waitAnswered(page, atLeast) {
  await page.waitForFunction((c) => {
    const m = document.querySelector('[data-testid="eval-count"]')?.textContent.match(/^(\d+) \//);
    return m !== null && m !== undefined && Number(m[1]) >= c;
  }, atLeast, { timeout: SLOW, polling: 20 });
  const text = await page.getByTestId('eval-count').textContent();
  return { answered: Number(text.match(/^(\d+) \//)[1]), finished: /finished$/.test(text) };
}

// Every run journal in the origin's private file system, as text.
async function journals(page) {
  return page.evaluate(async () => {
    const runs = await (await navigator.storage.getDirectory()).getDirectoryHandle('runs', { create: true });
    const out = {};
    for await (const [name, h] of runs.entries()) {
      if (name.endsWith('.jsonl')) out[name] = await (await h.getFile()).text();
    }
    return out;
  });
}

// The ids of a journal's complete lines (asserted distinct) and whether its last line is torn.
function journalIds(text) {
  const lines = text.split('\n');
  const torn = lines.pop() !== '';
  const ids = lines.map((l) => JSON.parse(l).id);
  assert.equal(new Set(ids).size, ids.length, `duplicate answers in the journal: ${ids.join(' ')}`);
  return { ids, torn };
}

const server = await serveNginx(a.dist);
const context = await launch();
const result = { reloads: N, studies, questions: total, seed, points: [] };
try {
  const { page, problems, offHost } = await openPage(context, server.url);
  await page.getByTestId('gpu-ready').or(page.getByTestId('gpu-unavailable')).first().waitFor({ timeout: 120_000 });
  await tab(page, 'model');
  await page.getByTestId('model-text-input').setInputFiles(MODEL);
  await page.getByTestId('model-mmproj-input').setInputFiles(MMPROJ);
  await page.getByTestId('model-import').click();
  await page.getByTestId('model-card').waitFor({ timeout: SLOW });
  await openDataset(page);
  await tab(page, 'eval');
  await page.getByTestId('eval-start').click();
  mark('run started');

  let kept = new Set();
  let answered = 0;
  for (let i = 0; i < N; i += 1) {
    // A random count between here and the end, leaving two studies of room for each reload
    // still to come (progress arrives a study, 3 questions, at a time, and another study may
    // finish during the delay) and three for the last; then a random delay of up to 400 ms, so
    // some reloads land while a question is in flight or its journal line is being written.
    const last = total - PER_STUDY * (2 * (N - 1 - i) + 3);
    assert.ok(last > answered, `the split is too small for ${N} reloads (${total} questions)`);
    const spread = Math.max(1, Math.ceil((2 * (last - answered)) / (N - i + 1)));
    const target = Math.min(last, answered + 1 + Math.floor(random() * spread));
    const seen = await waitAnswered(page, target);
    assert.ok(!seen.finished, `reload ${i + 1}: the run finished before the reload point (${seen.answered} / ${total})`);
    const delay = Math.floor(random() * 400);
    await page.waitForTimeout(delay);
    await page.reload();
    // Attached, not visible: the adapter card is on the Model tab only.
    await page.getByTestId('gpu-ready').or(page.getByTestId('gpu-unavailable')).first().waitFor({ state: 'attached', timeout: 120_000 });

    const files = Object.values(await journals(page));
    assert.equal(files.length, 1, 'one run journal');
    const { ids, torn } = journalIds(files[0]);
    for (const id of kept) assert.ok(ids.includes(id), `reload ${i + 1}: ${id} was journaled before and is gone`);
    kept = new Set(ids);
    answered = ids.length;
    result.points.push({ shown_answered: seen.answered, delay_ms: delay, journaled: ids.length, torn_line: torn });
    mark(`reload ${i + 1}/${N}: at ${seen.answered} shown (+${delay} ms); journal holds ${ids.length}${torn ? ' and a torn line' : ''}`);

    await loadStoredModel(page);
    await openDataset(page);
    await tab(page, 'eval');
    const resume = page.getByTestId('run-resume').first();
    await resume.waitFor({ timeout: 30_000 });
    await resume.click();
  }

  await page.getByTestId('eval-count').filter({ hasText: 'finished' }).waitFor({ state: 'attached', timeout: SLOW * 2 });
  const { ids } = journalIds(Object.values(await journals(page))[0]);
  assert.equal(ids.length, total, `journal holds ${ids.length} of ${total} answers`);
  mark('run finished');

  // The report and every prediction equal the uninterrupted run's.
  await page.getByTestId('report').waitFor({ timeout: 30_000 });
  const shown = {
    accuracy: Number(await page.getByTestId('report-accuracy').textContent()),
    n: Number(await page.getByTestId('report-n').textContent()),
    failed: Number(await page.getByTestId('report-failed').textContent()),
  };
  const expected = {
    accuracy: Number((100 * cliReport.official.overall.accuracy).toFixed(2)),
    n: cliReport.official.overall.n, failed: cliReport.official.failed_extractions,
  };
  assert.deepEqual(shown, expected);
  const [download] = await Promise.all([page.waitForEvent('download'), page.getByTestId('report-export-leaderboard').click()]);
  const exported = JSON.parse(readFileSync(await download.path(), 'utf8'));
  assert.deepEqual(Object.keys(exported).sort(), Object.keys(cliPred).sort());
  for (const [id, rec] of Object.entries(cliPred)) assert.equal(exported[id].model_prediction, rec.model_prediction, id);
  assert.deepEqual(problems, [], 'console errors');
  assert.deepEqual(offHost, [], 'requests that left 127.0.0.1');
  Object.assign(result, { report: shown, same_as_uninterrupted: true, torn_lines: result.points.filter((p) => p.torn_line).length,
    seconds: (Date.now() - t0) / 1000 });
  mark(`report ${JSON.stringify(shown)} equals the uninterrupted run's; ${total} predictions equal`);
} finally {
  await context.close();
  await server.close();
  rmSync(dir, { recursive: true, force: true });
}
const json = JSON.stringify(result, null, 2);
console.log(json);
if (a.out) writeFileSync(a.out, `${json}\n`);
