/**
 * The URL a `node:worker_threads` Worker can start from, wherever dcomm itself was loaded from.
 *
 * Deno's `node:worker_threads` Worker accepts only `file:` and `data:` URLs ("The URL must be one of
 * scheme file or data"), but dcomm loaded from JSR or any https/http URL has an `import.meta.url` of that
 * scheme. A one-line `data:` module that imports the real URL starts the same module there: the import
 * goes through the same module loader, cache and permissions as the main thread's, so a package the main
 * thread has loaded costs no download.
 *
 * @module
 */

/**
 * `url` itself when a `node:worker_threads` Worker can start from it (`file:`, `data:`), else a `data:`
 * module that imports it. The `file:` case, the one of a checkout, is untouched: it starts as fast as ever.
 *
 * @param url The Worker module's URL (`new URL("./module.ts", import.meta.url)`).
 * @returns A URL `new Worker(url)` of `node:worker_threads` accepts.
 */
export function nodeWorkerUrl(url: URL): URL {
  if (url.protocol === "file:" || url.protocol === "data:") return url;
  // A static import, not `await import(url)`: Deno 2.9.6 delivers a Worker's messages once the body of its
  // main module has run, even while a top-level await is pending, and with a dynamic import the main
  // thread's init message arrived before comm_worker.ts had a listener and was lost (seen on an empty
  // DENO_DIR, where the import downloads). A static import loads the whole graph before the body runs.
  // Only `%` and `#` need escaping in a data: URL, so a failure message shows the URL as it is.
  const code = `import ${JSON.stringify(url.href)};`;
  return new URL(`data:text/javascript,${code.replace(/[%#]/g, encodeURIComponent)}`);
}
