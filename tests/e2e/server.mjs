// Static file servers for dist/ on 127.0.0.1 (random port): nginx with the documented
// configuration for the end-to-end tests, and a plain Node one for the benchmark scripts (the GPU
// machines they run on have no nginx).
import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:http';
import { createServer as createNetServer } from 'node:net';
import { readFile, stat } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { extname, join, normalize, resolve } from 'node:path';

const TYPES = {
  '.html': 'text/html; charset=utf-8', '.js': 'text/javascript', '.mjs': 'text/javascript',
  '.wasm': 'application/wasm', '.css': 'text/css', '.svg': 'image/svg+xml', '.json': 'application/json',
  '.png': 'image/png', '.ico': 'image/x-icon', '.txt': 'text/plain',
};

export async function serve(dir) {
  const root = resolve(dir);
  const server = createServer(async (req, res) => {
    try {
      const url = new URL(req.url, 'http://127.0.0.1');
      let path = normalize(join(root, decodeURIComponent(url.pathname)));
      if (!path.startsWith(root)) { res.writeHead(403).end(); return; }
      if ((await stat(path).catch(() => null))?.isDirectory()) path = join(path, 'index.html');
      const body = await readFile(path);
      res.writeHead(200, { 'content-type': TYPES[extname(path)] ?? 'application/octet-stream', 'cache-control': 'no-store' });
      res.end(body);
    } catch {
      res.writeHead(404, { 'content-type': 'text/plain' }).end('not found');
    }
  });
  await new Promise((ok) => server.listen(0, '127.0.0.1', ok));
  const { port } = server.address();
  return { url: `http://127.0.0.1:${port}/`, close: () => new Promise((ok) => server.close(ok)) };
}

// dist/ served by Debian's nginx with the documented configuration (deploy/nginx/rexvqa-web.conf),
// only its `listen` and `root` changed, so the end-to-end suite tests the setup the README gives
// a hospital's IT team. Needs nginx (scripts/setup.sh installs it).
const NGINX = ['/usr/sbin/nginx', '/usr/bin/nginx'].find((p) => existsSync(p));
const SITE = new URL('../../deploy/nginx/rexvqa-web.conf', import.meta.url);

// A port nothing listens on now, on 127.0.0.1.
export async function freePort() {
  const s = createNetServer();
  await new Promise((ok) => s.listen(0, '127.0.0.1', ok));
  const { port } = s.address();
  await new Promise((ok) => s.close(ok));
  return port;
}

export async function serveNginx(dir) {
  if (!NGINX) throw new Error('nginx is not installed: run scripts/setup.sh (the e2e suite serves the app with deploy/nginx/)');
  const port = await freePort();
  const tmp = mkdtempSync(join(tmpdir(), 'rexvqa-nginx-'));
  let site = readFileSync(SITE, 'utf8');
  const swap = (from, to) => {
    if (!site.includes(from)) throw new Error(`deploy/nginx/rexvqa-web.conf has no "${from}" for the tests to change`);
    site = site.replace(from, to);
  };
  swap('listen 80;', `listen 127.0.0.1:${port};`);
  swap('root /srv/rexvqa-web;', `root ${resolve(dir)};`);
  const temp = ['client_body', 'proxy', 'fastcgi', 'uwsgi', 'scgi'].map((t) => `${t}_temp_path ${tmp}/${t};`).join(' ');
  writeFileSync(join(tmp, 'nginx.conf'), [
    process.getuid?.() === 0 ? 'user root;' : '',
    `worker_processes 1; pid ${tmp}/nginx.pid; error_log ${tmp}/error.log warn;`,
    'events { worker_connections 256; }',
    `http { include /etc/nginx/mime.types; default_type application/octet-stream; access_log off; ${temp}`,
    site,
    '}',
  ].join('\n'));
  const child = spawn(NGINX, ['-p', tmp, '-c', join(tmp, 'nginx.conf'), '-g', 'daemon off;'], { stdio: ['ignore', 'ignore', 'pipe'] });
  let stderr = '';
  child.stderr.on('data', (d) => { stderr += d; });
  const url = `http://127.0.0.1:${port}/`;
  for (let i = 0; ; i += 1) {
    if (child.exitCode !== null) throw new Error(`nginx exited with ${child.exitCode}: ${stderr}`);
    if ((await fetch(url).catch(() => null))?.ok) break;
    if (i > 100) throw new Error(`nginx served nothing at ${url}: ${stderr}`);
    await new Promise((ok) => setTimeout(ok, 50));
  }
  return {
    url,
    close: async () => {
      if (child.exitCode === null) {
        child.kill('SIGQUIT');
        await new Promise((ok) => child.once('exit', ok));
      }
      rmSync(tmp, { recursive: true, force: true });
    },
  };
}
