// Five reloads at random points of one evaluation (tests/e2e/reloads.mjs): no answer lost or
// duplicated, the final report and predictions equal to an uninterrupted run's. The seed is
// printed, and a failure is repeated with `node tests/e2e/reloads.mjs --reloads 5 --seed K`.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { DIST } from './steps.mjs';

test('five reloads during an evaluation lose and repeat nothing', { timeout: 900_000 }, () => {
  const dir = mkdtempSync(join(tmpdir(), 'rexvqa-reloads-test-'));
  const out = join(dir, 'result.json');
  try {
    execFileSync('node', ['tests/e2e/reloads.mjs', '--reloads', '5', '--dist', DIST, '--out', out],
      { stdio: 'inherit', timeout: 880_000 });
    const r = JSON.parse(readFileSync(out, 'utf8'));
    assert.equal(r.points.length, 5);
    assert.equal(r.same_as_uninterrupted, true);
    // Every reload came before the end, and the journal never shrank.
    r.points.forEach((p, i) => {
      assert.ok(p.shown_answered < r.questions, `reload ${i + 1} at ${p.shown_answered}`);
      if (i > 0) assert.ok(p.journaled >= r.points[i - 1].journaled, `journal shrank at reload ${i + 1}`);
    });
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
