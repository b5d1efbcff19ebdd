/**
 * A module Worker running `body` with `module` imported as `m` and the `data` of the first message it is
 * sent, for tests of what two threads share (e.g. a SharedArrayBuffer ring written from another thread).
 *
 * @param module The module to import, relative to the calling test (`new URL(..., import.meta.url)`).
 * @param body The body of an async function of `m` (the module) and `data`.
 * @returns The Worker; post it the data to start, and terminate it when done.
 */
export function moduleWorker(module: URL, body: string): Worker {
  const source = `self.onmessage = async (e) => {
    const m = await import(${JSON.stringify(module.href)});
    const data = e.data;
    ${body}
  };`;
  return new Worker(`data:application/javascript,${encodeURIComponent(source)}`, { type: "module" });
}
