// The service worker of a build (csp-hook.mjs calls it last): writes DIR/sw.js, public/sw.js
// with this build's file list and a version that is the hash of every file's name and bytes, so
// any change to any file is a new version. Also runs on a built folder:
//
//   node scripts/sw-hook.mjs DIR
import { readFileSync, readdirSync, statSync, writeFileSync } from 'node:fs';
import { createHash } from 'node:crypto';
import { join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

function files(d) {
  return readdirSync(d).sort().flatMap((n) => {
    const p = join(d, n);
    return statSync(p).isDirectory() ? files(p) : [p];
  });
}

export function writeServiceWorker(dir) {
  const hash = createHash('sha256');
  const shell = ['./'];
  for (const p of files(dir)) {
    const name = relative(dir, p).split('\\').join('/');
    // Compressed copies made for the server (deploy/nginx) are the same files.
    if (name === 'sw.js' || /\.(gz|br)$/.test(name)) continue;
    hash.update(`${name}\0`).update(readFileSync(p));
    if (name !== 'index.html') shell.push(`./${name}`);
  }
  const version = hash.digest('hex').slice(0, 16);
  const template = readFileSync(new URL('../public/sw.js', import.meta.url), 'utf8');
  writeFileSync(join(dir, 'sw.js'), template.replace('__VERSION__', version).replace('__SHELL__', JSON.stringify(shell)));
  console.log(`sw-hook: sw.js for ${shell.length} shell files, version ${version}`);
  return version;
}

if (process.argv[1] && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  if (!process.argv[2]) throw new Error('usage: node scripts/sw-hook.mjs DIR');
  writeServiceWorker(process.argv[2]);
}
