// The app's service worker: the shell (every file of one build) from one cache, so the app
// starts with no network once it has been opened. scripts/sw-hook.mjs fills in the build's
// version and file list when trunk builds; this file as written is the template.
//
// Every shell file is served from the cache, the page itself included: the engine worker's
// files carry no content hash in their names, so a page of one build with a worker of another
// could meet. A new build installs beside the old one and waits; the page offers it and, when
// the user takes it, tells it to take over and reloads.
const VERSION = '__VERSION__';
const SHELL = __SHELL__;
const CACHE = `rexvqa-shell-${VERSION}`;

self.addEventListener('install', (event) => {
  // `reload`: past the HTTP cache, so a stale copy of an unhashed file cannot enter a new build.
  event.waitUntil(caches.open(CACHE).then((c) => c.addAll(SHELL.map((u) => new Request(u, { cache: 'reload' })))));
});

self.addEventListener('activate', (event) => {
  event.waitUntil((async () => {
    for (const key of await caches.keys()) {
      if (key.startsWith('rexvqa-shell-') && key !== CACHE) await caches.delete(key);
    }
    await self.clients.claim();
  })());
});

self.addEventListener('message', (event) => {
  if (event.data === 'skip-waiting') self.skipWaiting();
});

self.addEventListener('fetch', (event) => {
  const req = event.request;
  if (req.method !== 'GET' || new URL(req.url).origin !== self.location.origin) return;
  event.respondWith((async () => {
    const cache = await caches.open(CACHE);
    const key = req.mode === 'navigate' ? './' : req;
    return (await cache.match(key, { ignoreSearch: true })) ?? fetch(req);
  })());
});
