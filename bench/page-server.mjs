// Serves one HTML page on 127.0.0.1 (a secure context, which WebGPU needs) for the bench scripts
// that measure the browser with a page of their own.
import { createServer } from 'node:http';

export async function servePage(html) {
  const server = createServer((_, res) => {
    res.setHeader('content-type', 'text/html');
    res.end(html);
  }).listen(0, '127.0.0.1');
  await new Promise((r) => server.once('listening', r));
  return { url: `http://127.0.0.1:${server.address().port}/`, close: () => server.close() };
}
