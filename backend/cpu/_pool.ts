/**
 * The allocator of a rank's pool in the host segment (`pg.alloc`): first fit over a list of free ranges
 * kept sorted and merged, 64-byte aligned. Offsets are bytes from the pool's start.
 *
 * @module
 */

/** Allocations and free ranges of one pool. */
export class PoolAllocator {
  /** Bytes in the pool. */
  readonly capacity: number;
  #free: { at: number; bytes: number }[];
  #used = new Map<number, number>();

  /** @param capacity Bytes in the pool. */
  constructor(capacity: number) {
    this.capacity = capacity;
    this.#free = capacity > 0 ? [{ at: 0, bytes: capacity }] : [];
  }

  /** Bytes handed out and not yet released. */
  get used(): number {
    let n = 0;
    for (const bytes of this.#used.values()) n += bytes;
    return n;
  }

  /**
   * Takes `bytes` (rounded up to 64).
   *
   * @param bytes How many.
   * @returns The offset, or `undefined` when no free range is large enough.
   */
  alloc(bytes: number): number | undefined {
    const size = Math.max(64, Math.ceil(bytes / 64) * 64);
    const i = this.#free.findIndex((r) => r.bytes >= size);
    if (i < 0) return undefined;
    const range = this.#free[i];
    const at = range.at;
    if (range.bytes === size) this.#free.splice(i, 1);
    else this.#free[i] = { at: at + size, bytes: range.bytes - size };
    this.#used.set(at, size);
    return at;
  }

  /**
   * Gives back what {@linkcode PoolAllocator.alloc} returned at `at`.
   *
   * @param at The offset.
   * @returns False if nothing was allocated there.
   */
  release(at: number): boolean {
    const size = this.#used.get(at);
    if (size === undefined) return false;
    this.#used.delete(at);
    const free = this.#free;
    let i = 0;
    while (i < free.length && free[i].at < at) i++;
    free.splice(i, 0, { at, bytes: size });
    // Merge with the following range, then with the preceding one.
    if (i + 1 < free.length && free[i].at + free[i].bytes === free[i + 1].at) {
      free[i].bytes += free[i + 1].bytes;
      free.splice(i + 1, 1);
    }
    if (i > 0 && free[i - 1].at + free[i - 1].bytes === free[i].at) {
      free[i - 1].bytes += free[i].bytes;
      free.splice(i, 1);
    }
    return true;
  }
}
