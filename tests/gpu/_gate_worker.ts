/**
 * The Worker of `_stream_gate.ts`: after `afterMs`, writes 1 into the word at `address` (pinned host
 * memory a CUDA stream waits on), then says so.
 *
 * @module
 */
/// <reference lib="deno.worker" />
self.onmessage = (event: MessageEvent<{ address: string; afterMs: number }>) => {
  const { address, afterMs } = event.data;
  setTimeout(() => {
    const pointer = Deno.UnsafePointer.create(BigInt(address));
    if (pointer === null) throw new Error("the gate's address is NULL");
    new Uint32Array(Deno.UnsafePointerView.getArrayBuffer(pointer, 4))[0] = 1;
    self.postMessage("open");
  }, afterMs);
};
