// End-to-end: "Your images" in the Study tab. Malformed files show their error in the page; two
// DICOM files and a JPEG open as one study, with the identifying attributes in a collapsed
// panel and the viewer at each DICOM file's own window (MONOCHROME1 shown inverted), filling
// the viewer however small the image, its reset bringing the window back; a
// multiple-choice question in fast mode gets the letter and probabilities `rexvqa ask` prints
// under the same policy, and the model's input is shown with the policy named; a free question
// streams an answer. No request leaves 127.0.0.1.
//
// Needs REXVQA_E2E (the tiny GGUF pair) and REXVQA_BIN, as scripts/test.sh sets them.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { basename, join } from 'node:path';
import { SHOTS } from './browser.mjs';
import { BIN, FIX, loadModelFromFiles, servedApp, SLOW, tab } from './steps.mjs';

const openApp = servedApp();
const PICS = join('tests', 'fixtures', 'pictures');
const STUDY = ['explicit_le_12bit.dcm', 'implicit_le_16bit_mono1.dcm', 'gray8.jpg'].map((f) => join(PICS, f));
const QUESTION = 'Is there a pneumothorax?';
const OPTIONS = ['Yes, on the left', 'Yes, on the right', 'No', 'Cannot tell'];

test('your own DICOM and JPEG files: errors, viewer window, identifying panel, same answer as rexvqa ask', { timeout: 120_000 }, async () => {
  const t0 = Date.now();
  const mark = (what) => console.log(`[${((Date.now() - t0) / 1000).toFixed(1)} s] ${what}`);
  const { page, problems, offHost } = await openApp();
  await page.getByTestId('gpu-ready').waitFor({ timeout: 60_000 });
  await loadModelFromFiles(page);
  mark('model loaded');
  await tab(page, 'study');
  const own = page.getByTestId('own-images');

  // Malformed files: each is listed with what is wrong, and nothing else breaks.
  await own.getByTestId('own-input').setInputFiles([join(PICS, 'bad_empty.dcm'), join(PICS, 'bad_png_renamed.dcm')]);
  const errors = own.getByTestId('own-error');
  await errors.nth(1).waitFor();
  assert.match(await errors.nth(0).textContent(), /the file is empty \(0 bytes\)/);
  assert.match(await errors.nth(1).textContent(), /named \.dcm but not a DICOM file.*PNG image: rename it to \.png/);
  assert.ok(await own.getByTestId('own-ask-fast').isDisabled(), 'nothing to ask about');

  // The study: two DICOM views and a JPEG, dropped on the card (the file input took the bad ones).
  const dropped = await page.evaluateHandle((files) => {
    const dt = new DataTransfer();
    for (const [name, b64] of files) dt.items.add(new File([Uint8Array.from(atob(b64), (c) => c.charCodeAt(0))], name));
    return dt;
  }, STUDY.map((f) => [basename(f), readFileSync(f).toString('base64')]));
  await own.dispatchEvent('drop', { dataTransfer: dropped });
  await own.getByTestId('own-item').nth(2).waitFor();
  assert.equal(await errors.count(), 0);
  const views = own.getByTestId('xray');
  await views.nth(2).locator('canvas').waitFor();
  // Identifying attributes are there, collapsed (their values not on screen until opened).
  const ids = own.getByTestId('own-identifying');
  assert.equal(await ids.evaluate((d) => d.open), false);
  assert.equal(await ids.getByText('DOE^JANE').first().isVisible(), false);
  // The viewer opens at the file's window (samples equal rescaled values here), MONOCHROME1
  // inverted, and at min..max without a window.
  const initial = async (i) => views.nth(i).evaluate((f) => [f.dataset.initialWindow, f.dataset.inverted]);
  assert.deepEqual(await initial(0), ['2048/3000', 'false']);
  assert.deepEqual(await initial(1), ['31871/53836', 'true']);
  assert.deepEqual(await initial(2), ['124.5/209', 'false']);
  // Drawn so: the 12-bit view is mostly dark at its window (mean about 88 of 255), and the
  // MONOCHROME1 one, whose values are as dark (about 97 at min..max), shows mostly light.
  const meanGrey = (i) => views.nth(i).locator('canvas').evaluate((c) => {
    const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
    let s = 0;
    for (let k = 0; k < d.length; k += 4) s += d[k];
    return s / (d.length / 4);
  });
  const greys = [await meanGrey(0), await meanGrey(1)];
  console.log(`mean grey on screen: ${greys.map((g) => g.toFixed(1)).join(', ')}`);
  assert.ok(Math.abs(greys[0] - 88) < 8 && Math.abs(greys[1] - (255 - 97)) < 8, `${greys}`);
  // A 48×40 image fills the 420-px viewer (it showed at 48×40 before): the lit part of the
  // viewer's screenshot spans nearly its width.
  const litWidth = async (i) => page.evaluate(async (b64) => {
    const bmp = await createImageBitmap(new Blob([Uint8Array.from(atob(b64), (c) => c.charCodeAt(0))], { type: 'image/png' }));
    const g = new OffscreenCanvas(bmp.width, bmp.height).getContext('2d');
    g.drawImage(bmp, 0, 0);
    const d = g.getImageData(0, 0, bmp.width, bmp.height).data;
    let [lo, hi] = [bmp.width, -1];
    for (let k = 0; k < d.length; k += 4) {
      if (d[k] + d[k + 1] + d[k + 2] === 0) continue;
      const x = (k / 4) % bmp.width;
      [lo, hi] = [Math.min(lo, x), Math.max(hi, x)];
    }
    return (hi - lo + 1) / bmp.width;
  }, (await views.nth(i).locator('.viewport').screenshot()).toString('base64'));
  const dims = await views.nth(0).locator('figcaption').textContent();
  const lit = await litWidth(0);
  console.log(`viewer: ${dims.match(/\d+×\d+/)?.[0]} image lit across ${(100 * lit).toFixed(0)} % of the viewport`);
  assert.ok(lit > 0.9, `lit across ${lit}`);
  // Reset view brings the window/level back with the zoom and pan.
  const win = views.nth(0).getByTestId('xray-window');
  const level = views.nth(0).getByTestId('xray-level');
  await win.fill('500');
  await level.fill('100');
  assert.deepEqual([await win.inputValue(), await level.inputValue()], ['500', '100']);
  await views.nth(0).locator('.viewport').focus();
  await page.keyboard.press('+');
  await views.nth(0).getByTestId('xray-reset').click();
  assert.deepEqual([await win.inputValue(), await level.inputValue()], ['3000', '2048']);
  assert.match(await views.nth(0).locator('canvas').getAttribute('style'), /scale\(1\)/);
  await page.screenshot({ path: join(SHOTS, 'own-images.png'), fullPage: true });
  mark('images open');

  // Multiple choice, fast mode, the file's window: the CLI's letter and probabilities.
  await own.getByTestId('own-question').fill(QUESTION);
  for (const [k, o] of OPTIONS.entries()) await own.getByTestId(`own-option-${'ABCD'[k]}`).fill(o);
  await own.getByTestId('own-ask-fast').click();
  await own.getByTestId('own-answer').waitFor({ timeout: SLOW });
  mark('multiple choice answered');
  const cli = JSON.parse(execFileSync(BIN, ['ask', '--model', join(FIX, 'tiny-q8_0.gguf'), '--mmproj', join(FIX, 'tiny-q8_0-mmproj-224.gguf'),
    ...STUDY.flatMap((f) => ['--image', f]), '--question', QUESTION, ...OPTIONS.flatMap((o) => ['--option', o]),
    '--mode', 'fast', '--policy', 'window', '--json'], { encoding: 'utf8' }));
  const letter = (await own.getByTestId('own-letter').textContent()).trim();
  const probs = [];
  for (const l of 'ABCD') probs.push(Number((await own.getByTestId(`own-prob-${l}`).locator('.bar-value').textContent()).replace('%', '')) / 100);
  console.log(`browser ${letter} ${JSON.stringify(probs)}; CLI ${cli.prediction} ${JSON.stringify(cli.probabilities)}`);
  assert.equal(letter, cli.prediction);
  probs.forEach((p, i) => assert.ok(Math.abs(p - cli.probabilities[i]) <= 0.0006, `P(${'ABCD'[i]})`));

  // What the model saw, each input with the mapping that made it, as the CLI names them.
  const how = own.getByTestId('own-input-policy');
  await how.nth(2).waitFor();
  assert.deepEqual(await how.allTextContents(), cli.images.map((im, i) => `Input ${i + 1}: ${im.model_input}`));
  assert.match(cli.images[0].model_input, /^window \(center 2048, width 3000\)$/);
  assert.match(cli.images[1].model_input, /inverted \(MONOCHROME1\)$/);
  await own.getByTestId('own-model-input').locator('canvas').nth(2).waitFor();
  // The e2e mmproj sees 224 px (tests/reference/small_image_mmproj.py); MedGemma's sees 896.
  assert.equal(await own.getByTestId('own-model-input-title').textContent(), 'What the model sees (224×224)');

  // The same question in official mode: the paper's prompt and extraction, as the CLI runs them.
  await own.getByTestId('own-ask-official').click();
  await own.getByTestId('own-answer').waitFor({ state: 'detached' });
  await own.getByTestId('own-answer').waitFor({ timeout: SLOW });
  mark('official mode answered');
  const official = JSON.parse(execFileSync(BIN, ['ask', '--model', join(FIX, 'tiny-q8_0.gguf'), '--mmproj', join(FIX, 'tiny-q8_0-mmproj-224.gguf'),
    ...STUDY.flatMap((f) => ['--image', f]), '--question', QUESTION, ...OPTIONS.flatMap((o) => ['--option', o]),
    '--mode', 'official', '--policy', 'window', '--json'], { encoding: 'utf8' }));
  console.log(`official: browser ${JSON.stringify(await own.getByTestId('own-letter').textContent())}; CLI ${official.prediction} ${JSON.stringify(official.response.slice(0, 60))}`);
  assert.equal((await own.getByTestId('own-letter').textContent()).trim(), official.prediction ?? '');

  // A free question streams a reply.
  await own.getByTestId('own-question').fill('Describe the image.');
  await own.getByTestId('own-ask-free').click();
  await own.getByTestId('own-text').filter({ hasText: /\S/ }).waitFor({ timeout: SLOW });
  mark('free question answered');
  await page.screenshot({ path: join(SHOTS, 'own-images-answered.png'), fullPage: true });

  // The identifying attributes were never written to the browser's storage.
  const stored = await page.evaluate(async () => {
    const found = [];
    async function walk(dir, path) {
      for await (const [name, h] of dir.entries()) {
        if (h.kind === 'directory') await walk(h, `${path}${name}/`);
        else if (new TextDecoder('latin1').decode(await (await h.getFile()).arrayBuffer()).includes('DOE^JANE')) found.push(path + name);
      }
    }
    await walk(await navigator.storage.getDirectory(), '');
    for (let i = 0; i < localStorage.length; i++) {
      if (localStorage.getItem(localStorage.key(i)).includes('DOE^JANE')) found.push(`localStorage ${localStorage.key(i)}`);
    }
    return found;
  });
  assert.deepEqual(stored, [], 'identifying attributes stored');

  assert.deepEqual(problems, [], 'console errors');
  assert.deepEqual(offHost, [], 'requests that left 127.0.0.1');
});
