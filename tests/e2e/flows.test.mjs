// End-to-end: load the tiny model from files, open a synthetic split folder, answer a question
// and compare with the native CLI, evaluate the split and compare the report with `rexvqa eval`,
// reload mid-evaluation and resume to the same numbers; no request leaves 127.0.0.1.
//
// Needs the fixtures scripts/test.sh prepares (REXVQA_E2E: a folder with the tiny GGUF pair, a
// synthetic split under rexvqa/, and the CLI's eval outputs under cli/) and REXVQA_BIN.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { SHOTS } from './browser.mjs';
import { assertSameAnswer, cliAnswer, FIX, loadModelFromFiles, loadStoredModel, openDataset, servedApp, SLOW, tab } from './steps.mjs';


const openApp = servedApp();

const shot = (page, name) => page.screenshot({ path: join(SHOTS, `${name}.png`), fullPage: true });
const t0 = Date.now();
const mark = (what) => console.log(`[${((Date.now() - t0) / 1000).toFixed(1)} s] ${what}`);

async function waitFinished(page) {
  // The report tab opens as soon as a run finishes, so the progress line may be hidden by then.
  await page.getByTestId('eval-count').filter({ hasText: 'finished' }).waitFor({ state: 'attached', timeout: SLOW * 2 });
}

async function reportNumbers(page) {
  await page.getByTestId('report').waitFor({ timeout: 30_000 });
  return {
    accuracy: Number(await page.getByTestId('report-accuracy').textContent()),
    n: Number(await page.getByTestId('report-n').textContent()),
    failed: Number(await page.getByTestId('report-failed').textContent()),
  };
}

function cliReport(file = 'pred.json') {
  const r = JSON.parse(readFileSync(join(FIX, 'cli', `${file}.report.json`), 'utf8'));
  return { accuracy: Number((100 * r.official.overall.accuracy).toFixed(2)), n: r.official.overall.n, failed: r.official.failed_extractions };
}

test('model, dataset, answer, evaluate, reload and resume — all in the browser', { timeout: 1_800_000 }, async () => {
  const { page, problems, offHost } = await openApp();
  await page.getByTestId('gpu-ready').waitFor({ timeout: 60_000 });

  // Automatic compute: a software adapter (SwiftShader here) is slower than the CPU path.
  const software = /swiftshader|llvmpipe|lavapipe/i.test(await page.getByTestId('gpu-name').textContent())
    || (await page.getByTestId('gpu-fallback').textContent()) === 'yes';
  await loadModelFromFiles(page);
  mark('model loaded from files');
  const params = await page.getByTestId('model-params').textContent();
  assert.match(params, /M$/);
  const runsOn = await page.getByTestId('model-compute').textContent();
  console.log(`runs on: ${runsOn}`);
  assert.match(runsOn, software ? /^CPU \(WebAssembly\): the only WebGPU adapter/ : /^WebGPU/);
  await shot(page, 'model-panel');

  await openDataset(page);
  mark('dataset opened');
  const counts = await page.getByTestId('split-test-counts').textContent();
  assert.match(counts, /^9 questions, 3 studies/);
  assert.match(await page.getByTestId('split-test-missing').textContent(), /^0 referenced images missing/);
  await shot(page, 'dataset-panel');

  // One question: the browser's letter and probabilities equal the native CLI's.
  await tab(page, 'study');
  const row = page.getByTestId('question-row').first();
  const qid = (await row.locator('td').first().textContent()).trim();
  await row.click();
  await page.getByTestId('question-detail').waitFor();
  await page.getByTestId('xray').first().locator('canvas').waitFor();
  await page.getByTestId('ask-fast').click();
  await page.getByTestId('ask-answer').waitFor({ timeout: SLOW });
  mark('question answered');
  const cli = cliAnswer(qid);
  await assertSameAnswer(page, qid, cli, runsOn);
  await page.getByTestId('reveal').click();
  await page.getByTestId('truth').waitFor();
  await shot(page, 'study-panel');

  // The whole split in fast mode: the report equals `rexvqa eval`'s.
  await tab(page, 'eval');
  await page.getByTestId('eval-start').click();
  await waitFinished(page);
  mark('split evaluated');
  await shot(page, 'eval-panel');
  const first = await reportNumbers(page);
  await shot(page, 'report-panel');
  console.log(`browser report ${JSON.stringify(first)}; CLI ${JSON.stringify(cliReport())}`);
  assert.deepEqual(first, cliReport());
  // The leaderboard export holds the CLI's predictions for every question.
  const [download] = await Promise.all([page.waitForEvent('download'), page.getByTestId('report-export-leaderboard').click()]);
  const exported = JSON.parse(readFileSync(await download.path(), 'utf8'));
  const cliPred = JSON.parse(readFileSync(join(FIX, 'cli', 'pred.json'), 'utf8'));
  assert.deepEqual(Object.keys(exported).sort(), Object.keys(cliPred).sort());
  for (const [id, rec] of Object.entries(cliPred)) {
    assert.equal(exported[id].model_prediction, rec.model_prediction, id);
    assert.equal(exported[id].correct_answer, rec.correct_answer, id);
  }

  // The run stored in the browser compared with the CLI's predictions file: the same answers.
  await page.getByTestId('compare-a-run').selectOption({ index: 1 });
  await page.getByTestId('compare-b-file').setInputFiles(join(FIX, 'cli', 'pred.json'));
  await page.getByTestId('compare-go').click();
  await page.getByTestId('comparison').waitFor({ timeout: 30_000 });
  assert.match(await page.getByTestId('compare-summary').textContent(), /— 9 questions in both; only in A: 0; only in B: 0;/);
  assert.match(await page.getByTestId('compare-agreement').textContent(), /^Agreement 100\.00 % · Cohen's κ /);
  assert.match(await page.getByTestId('compare-disagreements').locator('summary').textContent(), /^Answered differently \(0\)/);

  // The Markdown report names the exact weights: the files' SHA-256, as the CLI's report does.
  const [md] = await Promise.all([page.waitForEvent('download'), page.getByTestId('report-export-markdown').click()]);
  const mdText = readFileSync(await md.path(), 'utf8');
  const cliMd = readFileSync(join(FIX, 'cli', 'pred.json.report.md'), 'utf8');
  for (const [label, file] of [['text model', 'tiny-q8_0.gguf'], ['mmproj', 'tiny-q8_0-mmproj-224.gguf']]) {
    const hex = createHash('sha256').update(readFileSync(join(FIX, file))).digest('hex');
    const row = `| ${label} SHA-256 | ${hex} |`;
    assert.ok(mdText.includes(row), `browser report lacks ${row}`);
    assert.ok(cliMd.includes(row), `CLI report lacks ${row}`);
  }

  // The split in official mode: replies stop at their settled letter unless asked for in full,
  // and score as the CLI's full replies (`rexvqa eval --mode official --full-replies`) do.
  await tab(page, 'eval');
  await page.getByTestId('eval-mode').selectOption('official');
  assert.equal(await page.getByTestId('eval-full-replies').isChecked(), false);
  await page.getByTestId('eval-start').click();
  const replies = page.getByTestId('report-replies');
  await replies.waitFor({ timeout: SLOW * 2 });
  mark('split evaluated in official mode');
  const official = await reportNumbers(page);
  console.log(`official: ${await replies.textContent()} ${JSON.stringify(official)}; CLI, full replies ${JSON.stringify(cliReport('official.json'))}`);
  assert.deepEqual(official, cliReport('official.json'));
  assert.match(await replies.textContent(), /^Replies: stopped at the official letter .*: [1-9] of 9 stopped, [\d.]+ tokens per question\.$/);
  assert.match(await page.getByTestId('report-robust').textContent(), /robust extraction/);
  await tab(page, 'eval');
  const officialRun = (await page.getByTestId('run-row').filter({ hasText: 'stopped at letter' }).locator('td').first().textContent()).trim();
  await page.getByTestId('eval-mode').selectOption('fast');
  await tab(page, 'report');
  await page.getByTestId('compare-a-run').selectOption(officialRun);
  await page.getByTestId('compare-b-file').setInputFiles(join(FIX, 'cli', 'official.json'));
  await page.getByTestId('compare-go').click();
  await page.getByTestId('compare-summary').filter({ hasText: 'B: official.json' }).waitFor({ timeout: 30_000 });
  assert.match(await page.getByTestId('compare-summary').textContent(), /— 9 questions in both; only in A: 0; only in B: 0;/);
  assert.match(await page.getByTestId('compare-disagreements').locator('summary').textContent(), /^Answered differently \(0\)/);

  // A calibration run times whole studies (here all 3, 9 questions) and projects the split.
  await tab(page, 'eval');
  await page.getByTestId('eval-calibrate').click();
  await page.getByTestId('calibration').waitFor({ timeout: SLOW });
  const calib = await page.getByTestId('calibration').textContent();
  console.log(`calibration: ${calib}`);
  assert.match(calib, /^Measured on this device \(9 questions from 3 studies, after a warm-up\): \d+ ms per study .* \+ \d+ ms per question\./);
  assert.equal(await page.getByTestId('calibration-scope-n').textContent(), '9');
  assert.match(await page.getByTestId('calibration-split-eta').textContent(), /\d/);
  mark('calibrated');

  // The same question with WebGPU chosen explicitly: the app's GPU path gives the same answer.
  await tab(page, 'model');
  await page.getByTestId('compute').selectOption('webgpu');
  await loadStoredModel(page);
  const onGpu = await page.getByTestId('model-compute').filter({ hasText: /^WebGPU/ }).textContent({ timeout: SLOW });
  await tab(page, 'study');
  await page.getByTestId('question-row').filter({ hasText: qid }).first().click();
  await page.getByTestId('question-detail').waitFor();
  await page.getByTestId('ask-fast').click();
  await page.getByTestId('ask-answer').waitFor({ timeout: SLOW });
  mark('question answered on WebGPU');
  await assertSameAnswer(page, qid, cli, onGpu);

  // Reload in the middle of a second run, then resume it to the same numbers. The run starts on
  // WebGPU, where SwiftShader takes seconds a question: the CPU path answers the 224-px tiny
  // pair's 9 questions in well under a second, between two polls. It resumes on the automatic
  // choice (the CPU path here), so a run also carries over from one compute path to another.
  await tab(page, 'eval');
  await page.getByTestId('eval-start').click();
  await page.getByTestId('eval-count').filter({ hasText: /^[1-5] \/ 9/ }).waitFor({ timeout: SLOW });
  mark('reloading mid-run');
  await page.reload();
  // Attached, not visible: the adapter card is on the Model tab only.
  await page.getByTestId('gpu-ready').waitFor({ state: 'attached', timeout: 60_000 });
  await tab(page, 'model');
  await page.getByTestId('compute').selectOption('auto');
  await loadStoredModel(page);
  await openDataset(page);
  await tab(page, 'eval');
  const resume = page.getByTestId('run-resume').first();
  await resume.waitFor({ timeout: 30_000 });
  await resume.click();
  await waitFinished(page);
  mark('resumed run finished');
  const resumed = await reportNumbers(page);
  assert.deepEqual(resumed, cliReport());

  await tab(page, 'about');
  await shot(page, 'about-panel');
  assert.deepEqual(problems, [], 'console errors');
  assert.deepEqual(offHost, [], 'requests that left 127.0.0.1');
});
