/**
 * Completed calls, from the communication Worker to the main thread, through a ring in a
 * SharedArrayBuffer: the Worker writes a record and bumps a counter, and the main thread, waiting on that
 * counter with `Atomics.waitAsync`, wakes 20–30 µs later, where a `postMessage` takes 50–70 µs to arrive
 * (both measured in Deno 2.9 on the 2-core development machine). Failures still travel by message, with
 * their error; a full ring (the main thread more than {@linkcode COMPLETION_SLOTS} completions behind) falls
 * back to a message too.
 *
 * A {@linkcode RecordRing} of {@linkcode COMPLETION_SLOTS} records of 12 float64s: id, algorithm code (an
 * index into `ALGORITHM_NAMES`), bytes, bytesSent, timeMs, startedAt, finishedAt; the codec of a
 * compressed all-reduce (its index in `CODECS` + 1) or the peer `p` of a send or receive (as `-(p + 1)`),
 * 0 for neither; then the phases (`core/phases.ts`): waiting (NaN where not measured), moving, reducing,
 * codec (all NaN for a call without phases).
 *
 * @module
 */

import type { CallPhases } from "../../core/phases.ts";
import { RecordRing } from "./_record_ring.ts";
import { type Codec, CODECS } from "../../collectives/compressed_context.ts";

/** Records in the ring. */
export const COMPLETION_SLOTS = 256;
const RECORD_WORDS = 12;

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
  /** The codec of a compressed all-reduce, if any. */
  compression?: string;
  /** The other rank of a send or receive, if it is one. */
  peer?: number;
  /** Where its time went. */
  phases?: CallPhases;
}

/** A new ring's memory. */
export function completionBuffer(): SharedArrayBuffer {
  return RecordRing.buffer(COMPLETION_SLOTS, RECORD_WORDS);
}

/** The Worker's end: writes completions. */
export class CompletionWriter {
  readonly #ring: RecordRing;

  /** @param buffer From {@linkcode completionBuffer}. */
  constructor(buffer: SharedArrayBuffer) {
    this.#ring = new RecordRing(buffer, COMPLETION_SLOTS, RECORD_WORDS);
  }

  /**
   * Publishes `c` and wakes the main thread.
   *
   * @returns False when the ring is full (the caller sends a message instead).
   */
  write(c: Completion): boolean {
    return this.#ring.write((r, at) => {
      r[at] = c.id;
      r[at + 1] = c.algorithm;
      r[at + 2] = c.bytes;
      r[at + 3] = c.bytesSent;
      r[at + 4] = c.timeMs;
      r[at + 5] = c.startedAt;
      r[at + 6] = c.finishedAt;
      r[at + 7] = c.compression !== undefined
        ? CODECS.indexOf(c.compression as Codec) + 1
        : c.peer !== undefined
        ? -(c.peer + 1)
        : 0;
      const p = c.phases;
      r[at + 8] = p?.waitingMs ?? NaN;
      r[at + 9] = p?.movingMs ?? NaN;
      r[at + 10] = p?.reducingMs ?? NaN;
      r[at + 11] = p?.codecMs ?? NaN;
      return true;
    });
  }
}

/** The main thread's end: waits for completions while any call is pending. */
export class CompletionReader {
  readonly #ring: RecordRing;
  readonly #take: (r: Float64Array, at: number) => void;
  #waiting = false;
  #stopped = false;

  /**
   * @param buffer From {@linkcode completionBuffer}.
   * @param deliver Called with each completion, in order.
   */
  constructor(buffer: SharedArrayBuffer, deliver: (c: Completion) => void) {
    this.#ring = new RecordRing(buffer, COMPLETION_SLOTS, RECORD_WORDS);
    this.#take = (r, at) =>
      deliver({
        id: r[at],
        algorithm: r[at + 1],
        bytes: r[at + 2],
        bytesSent: r[at + 3],
        timeMs: r[at + 4],
        startedAt: r[at + 5],
        finishedAt: r[at + 6],
        ...(r[at + 7] > 0
          ? { compression: CODECS[r[at + 7] - 1] }
          : r[at + 7] < 0
          ? { peer: -r[at + 7] - 1 }
          : {}),
        ...(Number.isNaN(r[at + 9]) ? {} : {
          phases: {
            ...(Number.isNaN(r[at + 8]) ? {} : { waitingMs: r[at + 8] }),
            movingMs: r[at + 9],
            reducingMs: r[at + 10],
            codecMs: r[at + 11],
          },
        }),
      });
  }

  /** Delivers what was written so far. */
  drain(): void {
    this.#ring.drain(this.#take);
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
        await this.#ring.wait();
        this.drain();
      }
    } finally {
      this.#waiting = false;
    }
  }

  /** Ends the watch (it stops at its next wake-up). */
  stop(): void {
    this.#stopped = true;
    this.#ring.wake();
  }
}
