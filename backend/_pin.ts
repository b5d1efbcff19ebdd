/**
 * Pinning a tensor's memory for a call that outlives the synchronous call that made it: the communication
 * Worker (cpu backend) or MPI (mpi backend) reads and writes the tensor by its address until the call
 * settles, so its `ArrayBuffer` must not be detached meanwhile (`buffer.transfer()`, `postMessage` or
 * `structuredClone` with a transfer list), which would hand the memory to another owner or free it under
 * the running call. A pinned buffer is marked untransferable (`node:worker_threads`'
 * `markAsUntransferable`), for good: transferring it throws a `TypeError` or `DataCloneError` from then
 * on. A WebAssembly memory's buffer is left alone: user code cannot detach it (only `grow` does, which
 * keeps the memory where it is), and marking it would make a later `grow` abort the process.
 *
 * @module
 */
import { markAsUntransferable } from "node:worker_threads";

const pinned = new WeakSet<ArrayBufferLike>();
/** A WebAssembly memory's pages. */
const WASM_PAGE = 65536;

/**
 * Pins a tensor's buffer (no-op for shared memory, an empty buffer, or one pinned already).
 *
 * @param buffer The tensor's buffer.
 * @param start The address of the buffer's first byte (`Deno.UnsafePointer.of(buffer)`).
 *
 * @example A tensor a call reaches by address can no longer be transferred
 * ```ts
 * import { pinBuffer } from "./_pin.ts";
 * import assert from "node:assert/strict";
 * const t = new Float32Array(1000);
 * pinBuffer(t.buffer, Number(Deno.UnsafePointer.value(Deno.UnsafePointer.of(t.buffer))));
 * assert.throws(() => t.buffer.transfer(), TypeError);
 * ```
 */
export function pinBuffer(buffer: ArrayBufferLike, start: number): void {
  if (buffer.byteLength === 0 || pinned.has(buffer) || buffer instanceof SharedArrayBuffer) return;
  pinned.add(buffer);
  // A WebAssembly memory starts on a page boundary and holds whole pages; an ArrayBuffer of the
  // allocator never starts on one (its allocation header is before it).
  if (start % WASM_PAGE === 0 && buffer.byteLength % WASM_PAGE === 0) return;
  markAsUntransferable(buffer);
}
