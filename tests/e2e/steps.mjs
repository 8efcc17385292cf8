// Steps the end-to-end tests share: the fixtures scripts/test.sh prepares (REXVQA_E2E: the tiny
// GGUF pair, a synthetic split under rexvqa/, the CLI's outputs under cli/; REXVQA_BIN: the CLI)
// and the clicks that load the model and open the split.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { join } from 'node:path';
import { before, after } from 'node:test';
import { serveNginx } from './server.mjs';
import { launch, openPage } from './browser.mjs';

export const FIX = process.env.REXVQA_E2E;
export const BIN = process.env.REXVQA_BIN;
export const DIST = process.env.REXVQA_DIST ?? 'dist';
export const SLOW = 240_000;

// Serves dist/ on 127.0.0.1 (nginx, deploy/nginx/) and launches Chromium around the calling test
// file; returns a function that opens a fresh page of the app (with its console problems and
// off-host requests) once its service worker is active, so that the shell's cache is in the
// origin's storage usage before a test measures it.
export function servedApp() {
  let server;
  let context;
  before(async () => {
    assert.ok(FIX && BIN, 'REXVQA_E2E and REXVQA_BIN must be set (scripts/test.sh sets them)');
    server = await serveNginx(DIST);
    context = await launch();
  });
  after(async () => {
    await context?.close();
    await server?.close();
  });
  return async () => {
    const opened = await openPage(context, server.url);
    await opened.page.evaluate(() => navigator.serviceWorker.ready.then(() => true));
    return opened;
  };
}

export async function tab(page, id) {
  await page.getByTestId(`tab-${id}`).click();
}

export async function loadModelFromFiles(page) {
  await tab(page, 'model');
  await page.getByTestId('model-text-input').setInputFiles(join(FIX, 'tiny-q8_0.gguf'));
  await page.getByTestId('model-mmproj-input').setInputFiles(join(FIX, 'tiny-q8_0-mmproj-224.gguf'));
  await page.getByTestId('model-import').click();
  await page.getByTestId('model-card').waitFor({ timeout: SLOW });
}

export async function loadStoredModel(page) {
  await tab(page, 'model');
  await page.getByTestId('stored-models').waitFor({ timeout: 30_000 });
  await page.getByTestId('stored-text').selectOption('tiny-q8_0.gguf');
  await page.getByTestId('stored-mmproj').selectOption('tiny-q8_0-mmproj-224.gguf');
  await page.getByTestId('load-stored').click();
  await page.getByTestId('model-card').waitFor({ timeout: SLOW });
}

export async function openDataset(page) {
  await tab(page, 'data');
  await page.getByTestId('dataset-folder-input').setInputFiles(join(FIX, 'rexvqa'));
  await page.getByTestId('dataset-summary').waitFor({ timeout: 60_000 });
}

// Opens the Study tab's first question and asks it in fast mode; returns its id once answered.
export async function askFirstQuestion(page) {
  await tab(page, 'study');
  const row = page.getByTestId('question-row').first();
  const qid = (await row.locator('td').first().textContent()).trim();
  await row.click();
  await page.getByTestId('question-detail').waitFor();
  await page.getByTestId('ask-fast').click();
  await page.getByTestId('ask-answer').waitFor({ timeout: SLOW });
  return qid;
}

// The letter on screen equals the CLI's, and each shown probability (rounded to 0.1 %) is
// within 0.0006 of the CLI's.
export async function assertSameAnswer(page, qid, cli, where) {
  const letter = (await page.getByTestId('ask-letter').textContent()).trim();
  const probs = {};
  for (const l of ['A', 'B', 'C', 'D']) probs[l] = Number((await page.getByTestId(`prob-${l}`).locator('.bar-value').textContent()).replace('%', '')) / 100;
  console.log(`question ${qid} on ${where}: browser ${letter} ${JSON.stringify(probs)}; CLI ${cli.prediction} ${JSON.stringify(cli.probabilities)}`);
  assert.equal(letter, cli.prediction);
  ['A', 'B', 'C', 'D'].forEach((l, i) => assert.ok(Math.abs(probs[l] - cli.probabilities[i]) <= 0.0006, `P(${l})`));
}

// The native CLI's answer (letter and probabilities) to one question of the synthetic split,
// with the tiny pair or the pair given.
export function cliAnswer(qid, model = 'tiny-q8_0.gguf', mmproj = 'tiny-q8_0-mmproj-224.gguf') {
  return JSON.parse(execFileSync(BIN, ['answer', '--model', join(FIX, model), '--mmproj', join(FIX, mmproj),
    '--split', join(FIX, 'rexvqa', 'metadata', 'test_vqa_data.json'), '--id', qid], { encoding: 'utf8' }));
}
