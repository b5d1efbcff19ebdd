/**
 * SharedArrayBuffer staging for tensors that live in ordinary memory: the main thread copies a tensor in
 * when the call is issued and out when it completes, and the communication thread works on the shared
 * copy meanwhile. Buffers are pooled by power-of-two size, so a training loop allocates nothing after its
 * first step. A tensor that already lives in a SharedArrayBuffer is used in place.
 *
 * @module
 */
import type { TypedArray } from "../../core/dtype.ts";
import type { Region } from "./_protocol.ts";

/** A pool of SharedArrayBuffers. */
export class StagingPool {
  #free = new Map<number, SharedArrayBuffer[]>();
  #own = new WeakSet<SharedArrayBuffer>();

  /** Whether the pool made `buffer` (it lives as long as the pool; a caller's own may not). */
  owns(buffer: SharedArrayBuffer): boolean {
    return this.#own.has(buffer);
  }

  /**
   * A region holding a copy of `array` (or `array` itself when it is shared memory).
   *
   * @param array The tensor.
   * @param copy Whether to copy the tensor's bytes in (false for outputs).
   */
  stage(array: TypedArray, copy: boolean): Region {
    if (array.buffer instanceof SharedArrayBuffer) {
      return { buffer: array.buffer, byteOffset: array.byteOffset, byteLength: array.byteLength };
    }
    const region = this.#take(array.byteLength);
    if (copy) {
      new Uint8Array(region.buffer, 0, array.byteLength).set(
        new Uint8Array(array.buffer, array.byteOffset, array.byteLength),
      );
    }
    return region;
  }

  /**
   * Copies a staged region back into `array` (nothing to do in place) and returns the buffer to the pool.
   * A failed call unstages with `copy` false.
   *
   * @param region What {@linkcode StagingPool.stage} returned for `array`.
   * @param array The tensor.
   * @param copy Whether the call wrote the tensor.
   */
  unstage(region: Region, array: TypedArray, copy: boolean): void {
    if (region.buffer === array.buffer) return;
    if (copy) {
      new Uint8Array(array.buffer, array.byteOffset, array.byteLength).set(
        new Uint8Array(region.buffer, 0, array.byteLength),
      );
    }
    this.#release(region);
  }

  #release(region: Region): void {
    const cap = region.buffer.byteLength;
    const list = this.#free.get(cap);
    if (list) list.push(region.buffer);
    else this.#free.set(cap, [region.buffer]);
  }

  #take(bytes: number): Region {
    const cap = bytes <= 64 ? 64 : 2 ** Math.ceil(Math.log2(bytes));
    let buffer = this.#free.get(cap)?.pop();
    if (buffer === undefined) {
      buffer = new SharedArrayBuffer(cap);
      this.#own.add(buffer);
    }
    return { buffer, byteOffset: 0, byteLength: bytes };
  }
}
