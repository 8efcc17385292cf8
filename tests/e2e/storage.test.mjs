// End-to-end: a model import that does not fit the origin's storage quota is refused before any
// byte is copied, with the numbers; once there is room the same import goes through.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { FIX, SLOW, servedApp, tab } from './steps.mjs';

const open = servedApp();

test('an import larger than the free quota is refused with the numbers, then succeeds with room', async () => {
  const { page, problems } = await open();
  await page.getByTestId('gpu-ready').waitFor({ timeout: 60_000 });
  // Chromium's own test hook for a small quota (DevTools protocol), as a nearly full disk gives.
  const cdp = await page.context().newCDPSession(page);
  const origin = new URL(page.url()).origin;
  await cdp.send('Storage.overrideQuotaForOrigin', { origin, quotaSize: 1_000_000 });
  await tab(page, 'model');
  await page.getByTestId('model-text-input').setInputFiles(join(FIX, 'tiny-q8_0.gguf'));
  await page.getByTestId('model-mmproj-input').setInputFiles(join(FIX, 'tiny-q8_0-mmproj.gguf'));
  await page.getByTestId('model-import').click();
  const err = page.getByTestId('app-error').filter({ hasText: 'not enough browser storage' });
  await err.waitFor({ timeout: 60_000 });
  const msg = await err.textContent();
  console.log(`refused: ${msg}`);
  assert.match(msg, /needs \d+(\.\d)? MB more, and this site may use 1\.0 MB/);
  // Refused before copying: nothing was stored.
  assert.equal(await page.getByTestId('stored-models').count(), 0);
  await page.getByTestId('app-error').getByRole('button', { name: 'Dismiss' }).click();

  await cdp.send('Storage.overrideQuotaForOrigin', { origin });
  await page.getByTestId('model-import').click();
  await page.getByTestId('model-card').waitFor({ timeout: SLOW });
  assert.equal(await page.getByTestId('stored-models').locator('tbody tr').count(), 2);
  assert.deepEqual(problems, []);
});
