// End-to-end: the images come from the archive as ReXGradient-160K ships it (deid_png.partNN,
// made here by GNU tar + the zstd CLI + split), not from a folder. The split JSON is opened on
// its own (every image missing), the parts are picked in the wrong order, the referenced images
// are unpacked into browser storage, a question's answer equals the native CLI's on the folder
// copy of the same images, the unpacked images survive a reload, and a missing part is named.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readdirSync } from 'node:fs';
import { join } from 'node:path';
import { SHOTS } from './browser.mjs';
import { assertSameAnswer, cliAnswer, FIX, loadModelFromFiles, servedApp, SLOW, tab } from './steps.mjs';

const openApp = servedApp();

const PARTS = () => readdirSync(join(FIX, 'archive')).filter((n) => n.startsWith('deid_png.part')).sort();
const JSON_FILE = () => join(FIX, 'rexvqa', 'metadata', 'test_vqa_data.json');

async function openJsonOnly(page) {
  await tab(page, 'data');
  await page.getByTestId('dataset-files-input').setInputFiles(JSON_FILE());
  await page.getByTestId('dataset-summary').waitFor({ timeout: 60_000 });
  return missing(page);
}

async function missing(page) {
  return Number((await page.getByTestId('split-test-missing').textContent()).match(/^(\d+)/)[1]);
}

test('images unpacked from deid_png.part* archives, kept across reloads', { timeout: 900_000 }, async () => {
  const parts = PARTS();
  assert.ok(parts.length >= 3, `the fixture archive has ${parts.length} parts`);
  const { page, problems, offHost } = await openApp();
  await page.getByTestId('gpu-ready').waitFor({ timeout: 60_000 });

  // The JSON alone: every referenced image is missing.
  const images = Number((await (async () => { await openJsonOnly(page); return page.getByTestId('split-test-counts').textContent(); })()).match(/(\d+) images/)[1]);
  assert.equal(await missing(page), images);

  // A part left out: named, nothing unpacked.
  const gap = parts.filter((_, i) => i !== 1).map((n) => join(FIX, 'archive', n));
  await page.getByTestId('dataset-archive-input').setInputFiles(gap);
  await page.getByTestId('app-error').filter({ hasText: 'part 1 is missing' }).waitFor({ timeout: 30_000 });
  assert.equal(await missing(page), images);
  await page.getByTestId('app-error').getByRole('button', { name: 'Dismiss' }).click();

  // Every part, in reverse order: the referenced images are unpacked.
  await page.getByTestId('dataset-archive-input').setInputFiles([...parts].reverse().map((n) => join(FIX, 'archive', n)));
  await page.locator('[data-testid="unpack"][data-state="finished"]').waitFor({ timeout: SLOW });
  const line = await page.getByTestId('unpack-line').textContent();
  console.log(`unpack: ${line}`);
  assert.match(line, new RegExp(`^Archive read: ${images} images unpacked, 0 already there`));
  await page.getByTestId('split-test-missing').filter({ hasText: /^0 referenced/ }).waitFor();
  assert.match(await page.getByTestId('unpacked-count').textContent(), new RegExp(`^${images} images unpacked`));
  await page.screenshot({ path: join(SHOTS, 'dataset-archive.png'), fullPage: true });

  // An answer from unpacked images equals the CLI's on the folder copy.
  await loadModelFromFiles(page);
  await tab(page, 'study');
  const row = page.getByTestId('question-row').first();
  const qid = (await row.locator('td').first().textContent()).trim();
  await row.click();
  await page.getByTestId('question-detail').waitFor();
  await page.getByTestId('xray').first().locator('canvas').waitFor({ timeout: 30_000 });
  await page.getByTestId('ask-fast').click();
  await page.getByTestId('ask-answer').waitFor({ timeout: SLOW });
  await assertSameAnswer(page, qid, cliAnswer(qid), 'unpacked archive images');

  // After a reload the JSON alone finds every image in browser storage.
  await page.reload();
  await page.getByTestId('gpu-ready').waitFor({ timeout: 60_000 });
  assert.equal(await openJsonOnly(page), 0);
  // Picking the parts again keeps what is there.
  await page.getByTestId('dataset-archive-input').setInputFiles(parts.map((n) => join(FIX, 'archive', n)));
  await page.locator('[data-testid="unpack"][data-state="finished"]').waitFor({ timeout: SLOW });
  assert.match(await page.getByTestId('unpack-line').textContent(), new RegExp(`^Archive read: 0 images unpacked, ${images} already there`));

  // Deleting them brings the missing count back.
  await page.getByTestId('unpacked-delete').click();
  await page.getByTestId('split-test-missing').filter({ hasText: new RegExp(`^${images} referenced`) }).waitFor({ timeout: 30_000 });
  assert.equal(await page.getByTestId('unpacked-count').count(), 0);

  assert.deepEqual(problems, [], 'console errors');
  assert.deepEqual(offHost, [], 'requests that left 127.0.0.1');
});
