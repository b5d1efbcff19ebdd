/**
 * Scratch memory the engine's calls take and give back as a whole: the i-th buffer a call takes is the
 * i-th of the previous call's, grown if it must be, so a steady training loop allocates nothing.
 *
 * @module
 */

/** How a {@linkcode ScratchPool} makes its buffers. */
export interface ScratchOptions {
  /**
   * SharedArrayBuffers (what collectives on regions take: a compressed all-reduce's stages) rather than
   * ArrayBuffers. @default false
   */
  shared?: boolean;
  /** Zero every take (what a codec's scratch promises); otherwise its contents are undefined. @default false */
  zeroed?: boolean;
}

/** Buffers reused call after call, taken in order and all given back by {@linkcode ScratchPool.reset}. */
export class ScratchPool {
  #buffers: ArrayBufferLike[] = [];
  #next = 0;
  readonly #shared: boolean;
  readonly #zeroed: boolean;

  /** @param options What the buffers are. */
  constructor(options: ScratchOptions = {}) {
    this.#shared = options.shared ?? false;
    this.#zeroed = options.zeroed ?? false;
  }

  /**
   * The next buffer, of `bytes` bytes, valid until the next {@linkcode ScratchPool.reset}.
   *
   * @param bytes Its length.
   * @returns A view of it.
   */
  take(bytes: number): Uint8Array {
    const i = this.#next++;
    let buf = this.#buffers[i];
    if (buf === undefined || buf.byteLength < bytes) {
      const size = Math.max(16, bytes, (buf?.byteLength ?? 0) * 2);
      buf = this.#buffers[i] = this.#shared ? new SharedArrayBuffer(size) : new ArrayBuffer(size);
    }
    const out = new Uint8Array(buf, 0, bytes);
    if (this.#zeroed) out.fill(0);
    return out;
  }

  /** Gives every buffer back: the next take is the first buffer again. */
  reset(): void {
    this.#next = 0;
  }
}
