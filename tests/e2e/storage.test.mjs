// End-to-end: a model import, an evaluation's journal and an image unpack that run out of
// browser storage stop with the numbers and keep what they saved; once there is room, they resume
// and complete.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { mkdtempSync, readdirSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { BIN, FIX, loadStoredModel, openDataset, SLOW, servedApp, tab } from './steps.mjs';

// The journal cap of the mid-run refusal: one study's answers (3 lines of ~170 bytes) fit, the next
// study's do not.
const JOURNAL_CAP = 700;
// Room for the unpack: Chromium reserves quota for a file handle in growing steps (a room of 2 MB
// refuses the first 120 kB image), so the unpack test's split has 9 images of ~1.6 MB (14 MB) and
// room for a few of them.
const UNPACK_ROOM = Number(process.env.UNPACK_ROOM ?? 5_000_000);

// That split, and its images as the archive ships them (tar | zstd, split into numbered parts).
function bigArchive() {
  const dir = mkdtempSync(join(tmpdir(), 'rexvqa-unpack-'));
  execFileSync(BIN, ['synth', '--out', join(dir, 'rexvqa'), '--studies', '4', '--questions-per-study', '1', '--min-size', '900', '--max-size', '1000', '--seed', '5']);
  execFileSync('bash', ['-c', `tar -C rexvqa -cf - deid_png | zstd -q -c | split -d -b 4000000 - deid_png.part`], { cwd: dir });
  return dir;
}

const open = servedApp();

test('an import that runs out of storage says how far it got, then resumes with room', async () => {
  const { page, problems } = await open();
  await page.getByTestId('gpu-ready').waitFor({ timeout: 60_000 });
  // Chromium's own test hook for a small quota (DevTools protocol): writes past 10 MB more than
  // the app shell's cache are refused as on a full disk. navigator.storage.estimate() does not see
  // it, so the check made before copying passes and the refusal comes part-way, the harder of the
  // two cases.
  const cdp = await page.context().newCDPSession(page);
  const origin = new URL(page.url()).origin;
  const shell = await page.evaluate(async () => (await navigator.storage.estimate()).usage);
  await cdp.send('Storage.overrideQuotaForOrigin', { origin, quotaSize: shell + 10_000_000 });
  await tab(page, 'model');
  await page.getByTestId('model-text-input').setInputFiles(join(FIX, 'tiny-q8_0.gguf'));
  await page.getByTestId('model-mmproj-input').setInputFiles(join(FIX, 'tiny-q8_0-mmproj-224.gguf'));
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
  // The copy hashes what it writes: the load after it shows no separate SHA-256 pass.
  await page.evaluate(() => {
    window.hashPass = false;
    new MutationObserver(() => { window.hashPass ||= document.body.textContent.includes('(SHA-256)'); })
      .observe(document.body, { subtree: true, childList: true, characterData: true });
  });
  await page.getByTestId('model-import').click();
  await page.getByTestId('model-card').waitFor({ timeout: SLOW });
  const rows = page.getByTestId('stored-models').locator('tbody tr');
  assert.equal(await rows.count(), 2);
  assert.doesNotMatch(await page.getByTestId('stored-models').textContent(), /partial/);
  assert.equal(await page.evaluate(() => window.hashPass), false, 'a SHA-256 pass after the copy');
  // The resumed copy's digest (the stored part hashed, then the rest as it was written) is the file's.
  const shown = await page.getByTestId('model-sha256').allTextContents();
  const want = ['tiny-q8_0.gguf', 'tiny-q8_0-mmproj-224.gguf']
    .map((f) => createHash('sha256').update(readFileSync(join(FIX, f))).digest('hex'));
  assert.deepEqual(shown, want);
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

test('an image unpack that runs out of storage says so with the numbers, keeps its images, and resumes with room', async () => {
  const big = bigArchive();
  const { page, problems } = await open();
  await page.getByTestId('gpu-ready').waitFor({ timeout: 60_000 });
  await tab(page, 'data');
  await page.getByTestId('dataset-files-input').setInputFiles(join(big, 'rexvqa', 'metadata', 'test_vqa_data.json'));
  await page.getByTestId('dataset-summary').waitFor({ timeout: 60_000 });
  const missing = async () => Number((await page.getByTestId('split-test-missing').textContent()).match(/^(\d+)/)[1]);
  const images = await missing();
  assert.ok(images >= 3, `${images} images referenced`);
  const parts = readdirSync(big).filter((n) => n.startsWith('deid_png.part')).map((n) => join(big, n));

  const usage = await page.evaluate(async () => (await navigator.storage.estimate()).usage);
  const cdp = await page.context().newCDPSession(page);
  const origin = new URL(page.url()).origin;
  await cdp.send('Storage.overrideQuotaForOrigin', { origin, quotaSize: usage + UNPACK_ROOM });
  await page.getByTestId('dataset-archive-input').setInputFiles(parts);
  const err = page.getByTestId('app-error').filter({ hasText: 'the unpack stopped' });
  await err.waitFor({ timeout: SLOW });
  const msg = await err.textContent();
  console.log(`refused: ${msg}`);
  assert.match(msg, /browser storage is full \([\d.]+ [kMG]?B used of the [\d.]+ [kMG]?B this site may use\): the unpack stopped; the (\d+) images? unpacked in this pass (is|are) kept/);
  assert.match(msg, /pick the parts again: the unpack goes on from the first image not saved\./);
  const kept = Number(msg.match(/the (\d+) images? unpacked in this pass (is|are) kept/)[1]);
  assert.ok(kept > 0 && kept < images, `kept ${kept} of ${images}`);
  await page.getByTestId('split-test-missing').filter({ hasText: new RegExp(`^${images - kept} referenced`) }).waitFor();
  await page.getByTestId('app-error').getByRole('button', { name: 'Dismiss' }).click();

  // Room again: the same parts picked again unpack only what is missing.
  await cdp.send('Storage.overrideQuotaForOrigin', { origin });
  await page.getByTestId('dataset-archive-input').setInputFiles(parts);
  await page.locator('[data-testid="unpack"][data-state="finished"]').waitFor({ timeout: SLOW });
  assert.match(await page.getByTestId('unpack-line').textContent(), new RegExp(`^Archive read: ${images - kept} images unpacked, ${kept} already there`));
  await page.getByTestId('split-test-missing').filter({ hasText: /^0 referenced/ }).waitFor();
  assert.deepEqual(problems, []);
});
