/**
 * A small seeded PRNG (sfc32) for reproducible random test data: the same seed gives the same stream on
 * every machine, so a failure names a seed that reproduces it.
 *
 * @module
 */

/** A seeded stream of pseudo-random numbers. */
export class Rng {
  #a: number;
  #b: number;
  #c: number;
  #d: number;

  /**
   * @param seed Any 32-bit integer; the same seed gives the same stream.
   */
  constructor(seed: number) {
    this.#a = 0x9e3779b9;
    this.#b = 0x243f6a88;
    this.#c = 0xb7e15162;
    this.#d = seed >>> 0;
    for (let i = 0; i < 12; i++) this.u32();
  }

  /** A uniform 32-bit unsigned integer. */
  u32(): number {
    const t = (((this.#a + this.#b) | 0) + this.#d) | 0;
    this.#d = (this.#d + 1) | 0;
    this.#a = this.#b ^ (this.#b >>> 9);
    this.#b = (this.#c + (this.#c << 3)) | 0;
    this.#c = (this.#c << 21) | (this.#c >>> 11);
    this.#c = (this.#c + t) | 0;
    return t >>> 0;
  }

  /** A uniform float in [0, 1). */
  float(): number {
    return this.u32() / 2 ** 32;
  }

  /** A uniform integer in [lo, hi] (both inclusive, |hi - lo| < 2^32). */
  int(lo: number, hi: number): number {
    return lo + Math.floor(this.float() * (hi - lo + 1));
  }

  /** A uniform 64-bit pattern as a BigInt in [0, 2^64). */
  u64(): bigint {
    return (BigInt(this.u32()) << 32n) | BigInt(this.u32());
  }

  /** One element of `items`, uniformly. */
  pick<T>(items: readonly T[]): T {
    return items[this.int(0, items.length - 1)];
  }

  /** Fills the bytes of `out` (any view, at any offset) with uniform random bits. */
  fillBits(out: ArrayBufferView): void {
    const bytes = new Uint8Array(out.buffer, out.byteOffset, out.byteLength);
    const head = (4 - (out.byteOffset & 3)) & 3;
    if (bytes.length <= head) {
      for (let i = 0; i < bytes.length; i++) bytes[i] = this.u32();
      return;
    }
    for (let i = 0; i < head; i++) bytes[i] = this.u32();
    const words = new Uint32Array(out.buffer, out.byteOffset + head, (bytes.length - head) >>> 2);
    for (let i = 0; i < words.length; i++) words[i] = this.u32();
    for (let i = head + words.length * 4; i < bytes.length; i++) bytes[i] = this.u32();
  }
}
