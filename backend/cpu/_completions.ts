/**
 * Completed calls, from the communication Worker to the main thread, through a ring in a
 * SharedArrayBuffer: the Worker writes a record and bumps a counter, and the main thread, waiting on that
 * counter with `Atomics.waitAsync`, wakes 20–30 µs later, where a `postMessage` takes 50–70 µs to arrive
 * (both measured in Deno 2.9 on the 2-core development machine). Failures still travel by message, with
 * their error; a full ring (the main thread more than {@linkcode COMPLETION_SLOTS} completions behind) falls
 * back to a message too.
 *
 * Layout: int32 words `[written, read]`, then {@linkcode COMPLETION_SLOTS} records of 8 float64s: id,
 * algorithm code (an index into `ALGORITHM_NAMES`), bytes, bytesSent, timeMs, startedAt, finishedAt.
 *
 * @module
 */

/** Records in the ring. */
export const COMPLETION_SLOTS = 256;
const HEADER_BYTES = 16;
const RECORD_WORDS = 8;
const I_WRITTEN = 0;
const I_READ = 1;

/** What a record holds. */
export interface Completion {
  /** The call's id. */
  id: number;
  /** Index of the algorithm's name in `ALGORITHM_NAMES`. */
  algorithm: number;
  /** The report's byte counts and times. */
  bytes: number;
  bytesSent: number;
  timeMs: number;
  startedAt: number;
  finishedAt: number;
}

/** A new ring's memory. */
export function completionBuffer(): SharedArrayBuffer {
  return new SharedArrayBuffer(HEADER_BYTES + COMPLETION_SLOTS * RECORD_WORDS * 8);
}

/** The Worker's end: writes completions. */
export class CompletionWriter {
  readonly #words: Int32Array;
  readonly #records: Float64Array;

  /** @param buffer From {@linkcode completionBuffer}. */
  constructor(buffer: SharedArrayBuffer) {
    this.#words = new Int32Array(buffer, 0, 2);
    this.#records = new Float64Array(buffer, HEADER_BYTES);
  }

  /**
   * Publishes `c` and wakes the main thread.
   *
   * @returns False when the ring is full (the caller sends a message instead).
   */
  write(c: Completion): boolean {
    const written = Atomics.load(this.#words, I_WRITTEN);
    if (written - Atomics.load(this.#words, I_READ) >= COMPLETION_SLOTS) return false;
    const r = this.#records, at = (written % COMPLETION_SLOTS) * RECORD_WORDS;
    r[at] = c.id;
    r[at + 1] = c.algorithm;
    r[at + 2] = c.bytes;
    r[at + 3] = c.bytesSent;
    r[at + 4] = c.timeMs;
    r[at + 5] = c.startedAt;
    r[at + 6] = c.finishedAt;
    // The store publishes the record (Atomics are sequentially consistent with the writes before them).
    Atomics.store(this.#words, I_WRITTEN, (written + 1) | 0);
    Atomics.notify(this.#words, I_WRITTEN);
    return true;
  }
}

/** The main thread's end: waits for completions while any call is pending. */
export class CompletionReader {
  readonly #words: Int32Array;
  readonly #records: Float64Array;
  readonly #deliver: (c: Completion) => void;
  #waiting = false;
  #stopped = false;

  /**
   * @param buffer From {@linkcode completionBuffer}.
   * @param deliver Called with each completion, in order.
   */
  constructor(buffer: SharedArrayBuffer, deliver: (c: Completion) => void) {
    this.#words = new Int32Array(buffer, 0, 2);
    this.#records = new Float64Array(buffer, HEADER_BYTES);
    this.#deliver = deliver;
  }

  /** Delivers what was written so far. */
  drain(): void {
    const words = this.#words, r = this.#records;
    let read = Atomics.load(words, I_READ);
    const written = Atomics.load(words, I_WRITTEN);
    while (read !== written) {
      const at = (read % COMPLETION_SLOTS) * RECORD_WORDS;
      const c: Completion = {
        id: r[at],
        algorithm: r[at + 1],
        bytes: r[at + 2],
        bytesSent: r[at + 3],
        timeMs: r[at + 4],
        startedAt: r[at + 5],
        finishedAt: r[at + 6],
      };
      read = (read + 1) | 0;
      Atomics.store(words, I_READ, read);
      this.#deliver(c);
    }
  }

  /**
   * Waits (without blocking the thread) and delivers completions until `more()` says no call is pending.
   * Idempotent while a wait is under way. A pending `Atomics.waitAsync` does not keep the process alive:
   * the Worker, ref'd while calls are pending, does.
   *
   * @param more Whether calls are still pending.
   */
  async watch(more: () => boolean): Promise<void> {
    if (this.#waiting || this.#stopped) return;
    this.#waiting = true;
    try {
      while (!this.#stopped && more()) {
        const seen = Atomics.load(this.#words, I_WRITTEN);
        if (seen === Atomics.load(this.#words, I_READ)) {
          const wait = Atomics.waitAsync(this.#words, I_WRITTEN, seen);
          if (wait.async) await wait.value;
        }
        this.drain();
      }
    } finally {
      this.#waiting = false;
    }
  }

  /** Ends the watch (it stops at its next wake-up). */
  stop(): void {
    this.#stopped = true;
    Atomics.notify(this.#words, I_WRITTEN);
  }
}
