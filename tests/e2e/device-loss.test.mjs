// End-to-end: the WebGPU device is lost (the debug build's hook destroys it, as a driver reset
// would) in the middle of an evaluation, with a question being answered beside it. The page
// says so, starts a new worker, loads the model from browser storage, reopens the dataset and
// carries on: the answer equals the CLI's, and the run ends with every question answered once
// and the CLI's report. A second loss, with a question about the user's own image in flight,
// opens the image again and asks again, to the CLI's answer.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { assertSameAnswer, BIN, FIX, loadModelFromFiles, servedApp, SLOW, tab } from './steps.mjs';

const openApp = servedApp();
const MODEL = ['--model', join(FIX, 'tiny-q8_0.gguf'), '--mmproj', join(FIX, 'tiny-q8_0-mmproj-224.gguf')];

// A split of 2 studies × 2 questions: each question costs ~20 s on SwiftShader's WebGPU.
const dir = mkdtempSync(join(tmpdir(), 'rexvqa-device-loss-'));
const data = join(dir, 'rexvqa');
const splitFile = join(data, 'metadata', 'test_vqa_data.json');
execFileSync(BIN, ['synth', '--out', data, '--studies', '2', '--questions-per-study', '2', '--min-size', '200', '--max-size', '260', '--seed', '23']);
execFileSync(BIN, ['eval', ...MODEL, '--split', splitFile, '--out', join(dir, 'pred.json')], { stdio: ['ignore', 'ignore', 'inherit'] });
const OWN_IMAGE = join('tests', 'fixtures', 'pictures', 'gray8.jpg');
const OWN_QUESTION = 'Is there a pneumothorax?';
const OWN_OPTIONS = ['Yes, on the left', 'Yes, on the right', 'No', 'Cannot tell'];
const t0 = Date.now();
const mark = (what) => console.log(`[${((Date.now() - t0) / 1000).toFixed(1)} s] ${what}`);

// What a destroyed device makes the browser and wgpu log; anything else is a failure.
const LOSS_NOISE = /device (was )?(lost|destroyed)|Destroyed|Device is lost|Instance dropped|mapAsync|GPUBuffer|OperationError|AbortError/i;

async function journalIds(page) {
  const files = await page.evaluate(async () => {
    const runs = await (await navigator.storage.getDirectory()).getDirectoryHandle('runs', { create: true });
    const out = [];
    for await (const [name, h] of runs.entries()) {
      if (name.endsWith('.jsonl')) out.push(await (await h.getFile()).text());
    }
    return out;
  });
  assert.equal(files.length, 1, 'one run journal');
  return files[0].split('\n').filter((l) => l !== '').map((l) => JSON.parse(l).id);
}

function cliReport() {
  const r = JSON.parse(readFileSync(join(dir, 'pred.json.report.json'), 'utf8'));
  return { accuracy: Number((100 * r.official.overall.accuracy).toFixed(2)), n: r.official.overall.n, failed: r.official.failed_extractions };
}

async function loseDevice(page) {
  await page.evaluate(() => window.rexvqaTestLoseDevice());
  // SwiftShader reports the loss only once the work it is running ends (~30 s into an image).
  await page.getByTestId('device-lost').waitFor({ timeout: SLOW });
  assert.match(await page.getByTestId('device-lost-message').textContent(), /Destroyed/);
  await page.getByTestId('device-recovered').waitFor({ timeout: SLOW });
}

test('a GPU device lost mid-run, mid-answer and mid-own-image-answer is recovered without losing or repeating an answer', { timeout: 1_800_000 }, async () => {
  const { page, problems, offHost } = await openApp();
  await page.getByTestId('gpu-ready').waitFor({ timeout: 60_000 });
  await tab(page, 'model');
  await page.getByTestId('compute').selectOption('webgpu');
  await loadModelFromFiles(page);
  assert.match(await page.getByTestId('model-compute').textContent(), /^WebGPU/);
  await tab(page, 'data');
  await page.getByTestId('dataset-folder-input').setInputFiles(data);
  await page.getByTestId('dataset-summary').waitFor({ timeout: 60_000 });
  mark('model loaded on WebGPU, dataset open');

  // One loss with a run and an answer in flight: the run resumes from its journal, and the
  // question is asked again.
  await tab(page, 'eval');
  await page.getByTestId('eval-start').click();
  await page.getByTestId('eval-count').filter({ hasText: /^[1-3] \/ 4/ }).waitFor({ timeout: SLOW });
  const before = (await page.getByTestId('eval-count').textContent()).trim();
  await tab(page, 'study');
  const row = page.getByTestId('question-row').last();
  const qid = (await row.locator('td').first().textContent()).trim();
  await row.click();
  await page.getByTestId('question-detail').waitFor();
  await page.getByTestId('ask-fast').click();
  await loseDevice(page);
  mark(`device lost at "${before}" with a question in flight; recovered`);
  assert.match(await page.getByTestId('device-recovered').textContent(), /evaluation resumed.*question is being asked again|question is being asked again.*evaluation resumed/);
  assert.equal(await page.getByTestId('model-card').count(), 1, 'the model is loaded again');
  // Attached, not visible: the run may finish first and open the report tab.
  await page.getByTestId('ask-answer').waitFor({ state: 'attached', timeout: SLOW * 2 });
  mark('question answered');
  const cli = JSON.parse(execFileSync(BIN, ['answer', ...MODEL, '--split', splitFile, '--id', qid], { encoding: 'utf8' }));
  await assertSameAnswer(page, qid, cli, 'WebGPU after a lost device');
  await page.getByTestId('eval-count').filter({ hasText: 'finished' }).waitFor({ state: 'attached', timeout: SLOW * 2 });
  mark('run finished');
  const ids = await journalIds(page);
  assert.equal(new Set(ids).size, ids.length, `an answer was journaled twice: ${ids.join(' ')}`);
  assert.equal(ids.length, 4, `journal holds ${ids.length} of 4 answers`);
  await page.getByTestId('report').waitFor({ timeout: 30_000 });
  const shown = {
    accuracy: Number(await page.getByTestId('report-accuracy').textContent()),
    n: Number(await page.getByTestId('report-n').textContent()),
    failed: Number(await page.getByTestId('report-failed').textContent()),
  };
  assert.deepEqual(shown, cliReport());

  // A question about the user's own image in flight: the new worker opens the image again from
  // its file and asks again, with the CLI's answer.
  await page.getByTestId('device-lost').getByRole('button', { name: 'Dismiss' }).click();
  await page.getByTestId('device-lost').waitFor({ state: 'detached' });
  await tab(page, 'study');
  const own = page.getByTestId('own-images');
  await own.getByTestId('own-input').setInputFiles(OWN_IMAGE);
  await own.getByTestId('own-item').first().waitFor();
  await own.getByTestId('own-question').fill(OWN_QUESTION);
  for (const [k, o] of OWN_OPTIONS.entries()) await own.getByTestId(`own-option-${'ABCD'[k]}`).fill(o);
  await own.getByTestId('own-ask-fast').click();
  await loseDevice(page);
  mark('device lost with a question about an own image in flight; recovered');
  assert.match(await page.getByTestId('device-recovered').textContent(), /question about your images is being asked again/);
  await own.getByTestId('own-answer').waitFor({ timeout: SLOW * 2 });
  const ownCli = JSON.parse(execFileSync(BIN, ['ask', ...MODEL, '--image', OWN_IMAGE, '--question', OWN_QUESTION,
    ...OWN_OPTIONS.flatMap((o) => ['--option', o]), '--mode', 'fast', '--policy', 'window', '--json'], { encoding: 'utf8' }));
  const ownLetter = (await own.getByTestId('own-letter').textContent()).trim();
  const ownProbs = [];
  for (const l of 'ABCD') ownProbs.push(Number((await own.getByTestId(`own-prob-${l}`).locator('.bar-value').textContent()).replace('%', '')) / 100);
  console.log(`own image after a lost device: browser ${ownLetter} ${JSON.stringify(ownProbs)}; CLI ${ownCli.prediction} ${JSON.stringify(ownCli.probabilities)}`);
  assert.equal(ownLetter, ownCli.prediction);
  ownProbs.forEach((p, i) => assert.ok(Math.abs(p - ownCli.probabilities[i]) <= 0.0006, `P(${'ABCD'[i]})`));

  const unexpected = problems.filter((p) => !LOSS_NOISE.test(p));
  assert.deepEqual(unexpected, [], 'console errors');
  assert.deepEqual(offHost, []);
});
