// End-to-end: the teaching quiz. The same seed gives the cases `rexvqa quiz` draws; answers are
// given with the keyboard; a reload mid-quiz resumes it; the results table equals values this
// test computes itself from what the app revealed (accuracy, Cohen's κ, confusion counts).
//
// Needs the fixtures scripts/test.sh prepares (REXVQA_E2E, REXVQA_BIN), like flows.test.mjs.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { SHOTS } from './browser.mjs';
import { BIN, FIX, loadModelFromFiles, loadStoredModel, openDataset, servedApp, SLOW, tab } from './steps.mjs';

const SPLIT = () => join(FIX, 'rexvqa', 'metadata', 'test_vqa_data.json');

const openApp = servedApp();

async function prepare(page, stored) {
  await page.getByTestId('gpu-ready').waitFor({ timeout: 60_000 });
  await (stored ? loadStoredModel(page) : loadModelFromFiles(page));
  await openDataset(page);
  await tab(page, 'quiz');
}

// Cohen's κ over the categories A–D and "none", as in the paper's reader study.
function kappa(a, b) {
  const cats = ['A', 'B', 'C', 'D', '—'];
  const n = a.length;
  const po = a.filter((x, i) => x === b[i]).length / n;
  const pe = cats.reduce((s, c) => s + (a.filter((x) => x === c).length / n) * (b.filter((x) => x === c).length / n), 0);
  return pe === 1 ? (po === 1 ? 1 : 0) : (po - pe) / (1 - pe);
}

// Answers the case on screen with `letter` by keyboard and returns what the reveal shows.
async function answerCase(page, letter) {
  const kase = page.getByTestId('quiz-case');
  await page.getByTestId('quiz-question').waitFor({ timeout: 60_000 });
  const id = await kase.getAttribute('data-id');
  await kase.press(letter.toLowerCase());
  await kase.press('Enter');
  await page.getByTestId('quiz-reveal').waitFor();
  const model = (await page.getByTestId('quiz-model').textContent({ timeout: SLOW })).trim();
  const truth = (await page.getByTestId('quiz-truth').textContent()).trim();
  assert.equal((await page.getByTestId('quiz-student').textContent()).trim(), letter);
  return { id, student: letter, truth, model };
}

test('a seeded quiz answered by keyboard, resumed after a reload, scored like an independent computation', { timeout: 900_000 }, async () => {
  const expected = JSON.parse(execFileSync(BIN, ['quiz', '--split', SPLIT(), '--count', '3', '--seed', '4'], { encoding: 'utf8' })).ids;
  // Right on the first and last case, wrong on the second, so every statistic is non-trivial.
  const truth = JSON.parse(readFileSync(SPLIT(), 'utf8'));
  const next = (l) => 'ABCD'[('ABCD'.indexOf(l) + 1) % 4];
  const plan = expected.map((id, i) => (i === 1 ? next(truth[id].correct_answer) : truth[id].correct_answer));
  const { page, problems, offHost } = await openApp();
  await prepare(page, false);
  await page.getByTestId('quiz-count').fill('3');
  await page.getByTestId('quiz-seed').fill('4');
  await page.getByTestId('quiz-reader').fill('Ana');
  await page.getByTestId('quiz-start').click();
  const cases = [await answerCase(page, plan[0])];
  await page.screenshot({ path: join(SHOTS, 'quiz-case.png'), fullPage: true });

  // A reload keeps the quiz: resume shows the answered first case, Enter moves on. The save
  // after the model's answer is a message to the worker; give it a moment to reach storage.
  await page.waitForTimeout(1000);
  await page.reload();
  await prepare(page, true);
  await page.getByTestId('quiz-resume').click();
  assert.equal(await page.getByTestId('quiz-position').textContent(), '1 / 3');
  await page.getByTestId('quiz-reveal').waitFor();
  await page.getByTestId('quiz-case').press('Enter');
  assert.equal(await page.getByTestId('quiz-position').textContent(), '2 / 3');
  cases.push(await answerCase(page, plan[1]));
  await page.getByTestId('quiz-case').press('Enter');
  cases.push(await answerCase(page, plan[2]));
  await page.getByTestId('quiz-case').press('Enter');
  await page.getByTestId('quiz-results').waitFor({ timeout: 60_000 });
  await page.screenshot({ path: join(SHOTS, 'quiz-results.png'), fullPage: true });

  assert.deepEqual(cases.map((c) => c.id), expected, 'same seed, same cases as rexvqa quiz');
  const right = cases.filter((c) => c.student === c.truth).length;
  assert.equal(right, 2);
  const modelRight = cases.filter((c) => c.model === c.truth).length;
  console.log(`quiz cases ${JSON.stringify(cases)}`);
  assert.equal(await page.getByTestId('quiz-n').textContent(), '3');
  assert.equal(await page.getByTestId('quiz-student-accuracy').textContent(), (100 * right / 3).toFixed(1));
  assert.equal(await page.getByTestId('quiz-model-accuracy').textContent(), (100 * modelRight / 3).toFixed(1));
  const k = (a, b) => kappa(cases.map((c) => c[a]), cases.map((c) => c[b])).toFixed(3);
  assert.equal(await page.getByTestId('quiz-kappa-truth').textContent(), k('student', 'truth'));
  assert.equal(await page.getByTestId('quiz-kappa-model').textContent(), k('student', 'model'));
  for (const [t, tl] of ['A', 'B', 'C', 'D'].entries()) {
    for (const [s, sl] of ['A', 'B', 'C', 'D'].entries()) {
      const want = cases.filter((c) => c.truth === tl && c.student === sl).length;
      assert.equal(await page.getByTestId(`quiz-confusion-${t}-${s}`).textContent(), String(want), `truth ${tl} student ${sl}`);
    }
  }
  // The results file, merged twice, makes a reader-study table: two readers and the model.
  const [download] = await Promise.all([page.waitForEvent('download'), page.getByTestId('quiz-export-json').click()]);
  const saved = await download.path();
  const results = JSON.parse(readFileSync(saved, 'utf8'));
  assert.deepEqual(results.answers.map((a) => a.student), cases.map((c) => c.student));
  await page.getByText('Reader study: merge').click();
  await page.getByTestId('quiz-merge').setInputFiles([saved, saved]);
  const rows = page.getByTestId('reader-study').locator('tbody tr');
  await rows.nth(2).waitFor();
  assert.deepEqual(await rows.locator('td:first-child').allTextContents(), ['Ana', 'Ana′', 'model']);
  assert.equal((await rows.nth(0).locator('td').nth(1).textContent()), (100 * right / 3).toFixed(1));
  await page.screenshot({ path: join(SHOTS, 'quiz-reader-study.png'), fullPage: true });
  assert.deepEqual(problems, [], 'console errors');
  assert.deepEqual(offHost, [], 'requests that left 127.0.0.1');
});
