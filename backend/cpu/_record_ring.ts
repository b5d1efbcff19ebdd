/**
 * A ring of fixed-size records of float64s in a SharedArrayBuffer, from one writing thread to one reading
 * thread: the writer fills a slot and bumps a counter, the reader waits on that counter with
 * `Atomics.waitAsync` (so its event loop runs on). The rings of calls (`_requests.ts`) and of completions
 * (`_completions.ts`) between a rank's main thread and its communication Worker are two of these.
 *
 * Layout: int32 words `[written, read]` (16 bytes with padding), then `slots` records of `recordWords`
 * float64s.
 *
 * @module
 */

const HEADER_BYTES = 16;
const I_WRITTEN = 0;
const I_READ = 1;

/** One end of a ring; both ends are made over the same buffer. */
export class RecordRing {
  readonly #words: Int32Array;
  readonly #records: Float64Array;
  readonly #slots: number;
  readonly #recordWords: number;

  /**
   * The memory of a ring.
   *
   * @param slots Records it holds.
   * @param recordWords Float64s per record.
   */
  static buffer(slots: number, recordWords: number): SharedArrayBuffer {
    return new SharedArrayBuffer(HEADER_BYTES + slots * recordWords * 8);
  }

  /**
   * @param buffer From {@linkcode RecordRing.buffer}, with the same `slots` and `recordWords`.
   * @param slots Records it holds.
   * @param recordWords Float64s per record.
   */
  constructor(buffer: SharedArrayBuffer, slots: number, recordWords: number) {
    this.#words = new Int32Array(buffer, 0, 2);
    this.#records = new Float64Array(buffer, HEADER_BYTES, slots * recordWords);
    this.#slots = slots;
    this.#recordWords = recordWords;
  }

  /**
   * Writes a record with `fill` and wakes the reader.
   *
   * @param fill Writes the record at `records[at]` onwards; returns false to write nothing.
   * @returns False when the ring is full or `fill` declined.
   */
  write(fill: (records: Float64Array, at: number) => boolean): boolean {
    const written = Atomics.load(this.#words, I_WRITTEN);
    if (written - Atomics.load(this.#words, I_READ) >= this.#slots) return false;
    if (!fill(this.#records, (written % this.#slots) * this.#recordWords)) return false;
    // The store publishes the record (Atomics are sequentially consistent with the writes before them).
    Atomics.store(this.#words, I_WRITTEN, (written + 1) | 0);
    Atomics.notify(this.#words, I_WRITTEN);
    return true;
  }

  /**
   * Hands every record written so far to `take`, in order; each slot is free again once `take` returns.
   *
   * @param take Reads the record at `records[at]` onwards.
   */
  drain(take: (records: Float64Array, at: number) => void): void {
    const words = this.#words;
    let read = Atomics.load(words, I_READ);
    const written = Atomics.load(words, I_WRITTEN);
    while (read !== written) {
      take(this.#records, (read % this.#slots) * this.#recordWords);
      read = (read + 1) | 0;
      Atomics.store(words, I_READ, read);
    }
  }

  /** Resolves once a record is unread (at once if one is), or on {@linkcode RecordRing.wake}. */
  async wait(): Promise<void> {
    const written = Atomics.load(this.#words, I_WRITTEN);
    if (written !== Atomics.load(this.#words, I_READ)) return;
    const wait = Atomics.waitAsync(this.#words, I_WRITTEN, written);
    if (wait.async) await wait.value;
  }

  /** Wakes a {@linkcode RecordRing.wait} of this thread or another. */
  wake(): void {
    Atomics.notify(this.#words, I_WRITTEN);
  }
}
