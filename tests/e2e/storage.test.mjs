// End-to-end: a model import, and an evaluation's journal, that run out of browser storage stop
// with the numbers and keep what they saved; once there is room, they resume and complete.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { FIX, loadStoredModel, openDataset, SLOW, servedApp, tab } from './steps.mjs';

// The journal cap of the mid-run refusal: one study's answers (3 lines of ~170 bytes) fit, the next
// study's do not.
const JOURNAL_CAP = 700;

const open = servedApp();

test('an import that runs out of storage says how far it got, then resumes with room', async () => {
  const { page, problems } = await open();
  await page.getByTestId('gpu-ready').waitFor({ timeout: 60_000 });
  // Chromium's own test hook for a small quota (DevTools protocol): writes past 10 MB are refused
  // as on a full disk. navigator.storage.estimate() does not see it, so the check made before
  // copying passes and the refusal comes part-way, the harder of the two cases.
  const cdp = await page.context().newCDPSession(page);
  const origin = new URL(page.url()).origin;
  await cdp.send('Storage.overrideQuotaForOrigin', { origin, quotaSize: 10_000_000 });
  await tab(page, 'model');
  await page.getByTestId('model-text-input').setInputFiles(join(FIX, 'tiny-q8_0.gguf'));
  await page.getByTestId('model-mmproj-input').setInputFiles(join(FIX, 'tiny-q8_0-mmproj.gguf'));
  await page.getByTestId('model-import').click();
  const err = page.getByTestId('app-error').filter({ hasText: 'not enough browser storage' });
  await err.waitFor({ timeout: 60_000 });
  const msg = await err.textContent();
  console.log(`refused: ${msg}`);
  assert.match(msg, /tiny-q8_0\.gguf: the browser refused a write after [\d.]+ MB of 24\.7 MB/);
  assert.match(msg, /the copy resumes where it stopped/);
  await page.getByTestId('stored-models').waitFor();
  assert.match(await page.getByTestId('stored-models').textContent(), /partial/);
  await page.getByTestId('app-error').getByRole('button', { name: 'Dismiss' }).click();

  await cdp.send('Storage.overrideQuotaForOrigin', { origin });
  await page.getByTestId('model-import').click();
  await page.getByTestId('model-card').waitFor({ timeout: SLOW });
  const rows = page.getByTestId('stored-models').locator('tbody tr');
  assert.equal(await rows.count(), 2);
  assert.doesNotMatch(await page.getByTestId('stored-models').textContent(), /partial/);
  assert.deepEqual(problems, []);
});

test('a run refused storage stops with the numbers, keeps its answers, and resumes to the same report', async () => {
  const { page, problems } = await open();
  await page.getByTestId('gpu-ready').waitFor({ timeout: 60_000 });
  await loadStoredModel(page);
  await openDataset(page);
  await tab(page, 'eval');

  // No room for the run's first file: it does not start, and says why with the numbers.
  // (Chromium reserves quota per file handle in large steps, so a small quota refuses the first
  // write rather than one in the middle of a run.)
  const usage = await page.evaluate(async () => (await navigator.storage.estimate()).usage);
  const cdp = await page.context().newCDPSession(page);
  const origin = new URL(page.url()).origin;
  await cdp.send('Storage.overrideQuotaForOrigin', { origin, quotaSize: usage + 4_000 });
  await page.getByTestId('eval-start').click();
  const notStarted = page.getByTestId('app-error').filter({ hasText: 'the run could not start' });
  await notStarted.waitFor({ timeout: SLOW });
  assert.match(await notStarted.textContent(), /browser storage is full \([\d.]+ [kMG]?B used of the [\d.]+ [kMG]?B this site may use\)/);
  await page.getByTestId('app-error').getByRole('button', { name: 'Dismiss' }).click();
  await cdp.send('Storage.overrideQuotaForOrigin', { origin });
  assert.ok(await page.getByTestId('eval-start').isEnabled());

  // A journal refused in the middle of the run (the debug build's cap: a short write, then a
  // refusal, as a full disk does): the run stops, keeps every complete answer, and says where
  // it will go on.
  await page.evaluate((cap) => window.rexvqaTestJournalCap(cap), JOURNAL_CAP);
  await page.getByTestId('eval-start').click();
  const err = page.getByTestId('app-error').filter({ hasText: 'the run stopped after saving' });
  await err.waitFor({ timeout: SLOW });
  const msg = await err.textContent();
  console.log(`refused: ${msg}`);
  const saved = Number(msg.match(/the run stopped after saving (\d+) answers, which are kept/)[1]);
  assert.ok(saved > 0 && saved < 9, `saved ${saved}`);
  assert.match(msg, /resume the run: it goes on from the first answer not saved\./);
  await page.getByTestId('eval-count').filter({ hasText: /interrupted$/ }).waitFor();
  const journal = await page.evaluate(async () => {
    const runs = await (await navigator.storage.getDirectory()).getDirectoryHandle('runs');
    for await (const [name, h] of runs.entries()) if (name.endsWith('.jsonl')) return (await h.getFile()).text();
    return '';
  });
  assert.equal(journal.length, JOURNAL_CAP, 'the refused append wrote up to the cap');
  // Every answer reported saved is there as a complete line (the short write may have completed
  // a line of the refused group too), none twice, and the tail is torn.
  const complete = journal.split('\n').slice(0, -1).map((l) => JSON.parse(l).id);
  assert.ok(complete.length >= saved && complete.length < 9, `${complete.length} complete lines`);
  assert.equal(new Set(complete).size, complete.length);
  assert.ok(!journal.endsWith('\n'), 'the refused append left a torn line');
  await page.getByTestId('app-error').getByRole('button', { name: 'Dismiss' }).click();

  // Room again: the run resumes (dropping the torn line) and ends with the CLI's report.
  await page.evaluate(() => window.rexvqaTestJournalCap(null));
  const resume = page.getByTestId('run-resume').first();
  await resume.waitFor({ timeout: 30_000 });
  await resume.click();
  await page.getByTestId('eval-count').filter({ hasText: 'finished' }).waitFor({ state: 'attached', timeout: SLOW });
  await page.getByTestId('report').waitFor({ timeout: 30_000 });
  const r = JSON.parse(readFileSync(join(FIX, 'cli', 'pred.json.report.json'), 'utf8'));
  assert.equal(Number(await page.getByTestId('report-accuracy').textContent()), Number((100 * r.official.overall.accuracy).toFixed(2)));
  assert.equal(Number(await page.getByTestId('report-n').textContent()), r.official.overall.n);
  assert.deepEqual(problems, []);
});
