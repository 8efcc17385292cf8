// End-to-end: compare two prediction files in the Report tab: two CLI runs of the tiny pair on
// the synthetic split under different image policies, the second missing one question and
// marking another unanswerable. The page's figures and its Markdown, CSV and
// JSON downloads equal `rexvqa compare`'s byte for byte (whose figures a native test checks
// against statsmodels), and a question answered differently opens in the study viewer.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { SHOTS } from './browser.mjs';
import { BIN, FIX, openDataset, servedApp, tab } from './steps.mjs';

const openApp = servedApp();

// A: the CLI's run of the split (images mapped 16 -> 8 bit by `scale`); B: the same model with
// `pillow-clamp`, which the tiny random model answers differently, as a shard that lacks one
// question and could not use another's image.
function runFiles() {
  const dir = mkdtempSync(join(tmpdir(), 'rexvqa-compare-'));
  const split = join(FIX, 'rexvqa', 'metadata', 'test_vqa_data.json');
  const paths = { a: join(dir, 'scale.json'), b: join(dir, 'pillow-clamp.json') };
  writeFileSync(paths.a, readFileSync(join(FIX, 'cli', 'pred.json')));
  execFileSync(BIN, ['eval', '--model', join(FIX, 'tiny-q8_0.gguf'), '--mmproj', join(FIX, 'tiny-q8_0-mmproj-224.gguf'),
    '--split', split, '--policy', 'pillow-clamp', '--out', join(dir, 'run-b.json')], { stdio: ['ignore', 'ignore', 'inherit'] });
  const b = JSON.parse(readFileSync(join(dir, 'run-b.json'), 'utf8'));
  const ids = Object.keys(b);
  assert.ok(ids.length >= 8, `${ids.length} questions in the CLI's predictions`);
  delete b[ids[4]];
  b[ids[5]].unanswerable = 'no usable image: synthetic';
  writeFileSync(paths.b, JSON.stringify(b, null, 1));
  return { paths, ids };
}

const cli = (paths, format) => execFileSync(BIN, ['compare', paths.a, paths.b, '--format', format], { encoding: 'utf8' });

test('two prediction files compared in the browser give the CLI\'s figures and files', { timeout: 300_000 }, async () => {
  const { page, problems, offHost } = await openApp();
  const { paths, ids } = runFiles();
  const expected = JSON.parse(cli(paths, 'json'));
  assert.ok(expected.disagreements.length > 0, 'the two runs disagree somewhere');
  assert.deepEqual(expected.only_a, [ids[4]]);
  assert.deepEqual(expected.unanswerable_b, [ids[5]]);

  await openDataset(page);
  await tab(page, 'report');
  assert.ok(await page.getByTestId('compare-go').isDisabled(), 'nothing to compare yet');
  await page.getByTestId('compare-a-file').setInputFiles(paths.a);
  await page.getByTestId('compare-b-file').setInputFiles(paths.b);
  await page.getByTestId('compare-go').click();
  await page.getByTestId('comparison').waitFor({ timeout: 30_000 });

  const summary = await page.getByTestId('compare-summary').textContent();
  assert.match(summary, new RegExp(`^A: scale\\.json · B: pillow-clamp\\.json — ${expected.shared} questions in both; only in A: 1; only in B: 0; unanswerable in A: 0, in B: 1;`));
  const kappa = expected.kappa === null ? 'n/a' : expected.kappa.toFixed(4);
  assert.equal(await page.getByTestId('compare-agreement').textContent(),
    `Agreement ${(100 * expected.agreement).toFixed(2)} % · Cohen's κ ${kappa}`);
  const rows = await page.getByTestId('compare-table').locator('tbody tr').allTextContents();
  assert.equal(rows.length, 1 + Object.keys(expected.per_task).length);
  const overall = await page.getByTestId('compare-table').locator('tbody tr').first().locator('td').allTextContents();
  const o = expected.overall;
  assert.deepEqual(overall.slice(0, 5), ['overall', String(o.n), (100 * o.accuracy_a).toFixed(2), (100 * o.accuracy_b).toFixed(2),
    `${o.difference >= 0 ? '+' : '-'}${Math.abs(100 * o.difference).toFixed(2)}`]);
  await page.screenshot({ path: join(SHOTS, 'compare-panel.png'), fullPage: true });

  // The downloads are the CLI's output, byte for byte.
  for (const [format, id] of [['md', 'compare-export-md'], ['csv', 'compare-export-csv'], ['json', 'compare-export-json']]) {
    const [download] = await Promise.all([page.waitForEvent('download'), page.getByTestId(id).click()]);
    assert.equal(download.suggestedFilename(), `comparison.${format}`);
    assert.equal(readFileSync(await download.path(), 'utf8'), cli(paths, format), format);
  }

  // A question answered differently opens in the study viewer.
  const first = expected.disagreements[0].id;
  await page.getByTestId('compare-disagreements').locator('button', { hasText: first }).click();
  await page.getByTestId('question-detail').filter({ hasText: first }).waitFor({ timeout: 30_000 });
  assert.equal(await page.getByTestId('tab-study').getAttribute('aria-selected'), 'true');

  // A file that is not predictions says so.
  await tab(page, 'report');
  await page.getByTestId('compare-b-file').setInputFiles(join(FIX, 'rexvqa', 'metadata', 'test_vqa_data.json'));
  await page.getByTestId('compare-go').click();
  await page.getByTestId('app-error').filter({ hasText: 'test_vqa_data.json: not a predictions file' }).waitFor({ timeout: 30_000 });

  assert.deepEqual(problems.filter((p) => !p.includes('not a predictions file')), [], 'console errors');
  assert.deepEqual(offHost, [], 'requests that left 127.0.0.1');
});
