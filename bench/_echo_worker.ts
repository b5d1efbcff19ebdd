/**
 * A Worker that answers every call of its main thread at once: the least a hand-off to a communication
 * thread and back costs (`bench/_layers_rank.ts`'s `tcp+hand-off`). Word 0 of the shared words is the
 * main thread's call count, word 1 the Worker's answer count; each side waits on the other's word with
 * `Atomics.waitAsync`, as dcomm's rings of calls and completions do.
 *
 * @module
 */
/// <reference no-default-lib="true" />
/// <reference lib="deno.worker" />

self.onmessage = async (event: MessageEvent<SharedArrayBuffer>) => {
  const words = new Int32Array(event.data);
  for (let seen = 0;;) {
    const wait = Atomics.waitAsync(words, 0, seen);
    if (wait.async) await wait.value;
    seen = Atomics.load(words, 0);
    if (seen < 0) break;
    Atomics.store(words, 1, seen);
    Atomics.notify(words, 1);
  }
  self.close();
};
