// trunk post-build hook: moves trunk's inline start-up script into a file and adds a strict
// Content-Security-Policy, so the page can run no inline script and reach no other origin
// than itself (plus Hugging Face, for the model download a user starts).
import { readFileSync, writeFileSync } from 'node:fs';
import { createHash } from 'node:crypto';
import { join } from 'node:path';
import { writeServiceWorker } from './sw-hook.mjs';

const dir = process.env.TRUNK_STAGING_DIR;
if (!dir) throw new Error('TRUNK_STAGING_DIR is not set: run through trunk');
const path = join(dir, 'index.html');
let html = readFileSync(path, 'utf8');
let n = 0;
html = html.replace(/<script(\s+type="module")?\s*>([\s\S]*?)<\/script>/g, (_, type, body) => {
  const name = `start-${createHash('sha256').update(body).digest('hex').slice(0, 16)}.js`;
  writeFileSync(join(dir, name), body);
  n += 1;
  return `<script${type ?? ''} src="./${name}"></script>`;
});
const csp = [
  "default-src 'self'",
  "script-src 'self' 'wasm-unsafe-eval'",
  "worker-src 'self'",
  "connect-src 'self' https://huggingface.co https://*.huggingface.co https://*.hf.co",
  "img-src 'self' blob: data:",
  "style-src 'self' 'unsafe-inline'",
  "object-src 'none'",
  "base-uri 'none'",
  "form-action 'none'",
].join('; ');
html = html.replace('<head>', `<head>\n    <meta http-equiv="Content-Security-Policy" content="${csp}" />`);
writeFileSync(path, html);
console.log(`csp-hook: ${n} inline script(s) moved out, CSP added`);
writeServiceWorker(dir);
