/**
 * Calls, from the main thread to the communication Worker, through a ring in a SharedArrayBuffer: the main
 * thread writes a record of numbers and bumps a counter (about a microsecond), and the Worker, waiting on
 * that counter with `Atomics.waitAsync`, wakes 20–30 µs later; a `postMessage` of the same call costs the
 * main thread tens of microseconds and takes 50–80 µs to arrive (measured in Deno 2.9 on the 2-core
 * development machine, 2 ranks: 130 → 40 µs from the call to the Worker's start of it).
 *
 * A record names buffers by number: each SharedArrayBuffer is sent once, by message, with the first call
 * that uses it, and that call goes by message too. Calls that cannot be numbers (an algorithm name of
 * send/recv outside the known ones), group registrations, closing, and any call that finds the ring full
 * also go by message. Every item carries its place in one sequence, and the Worker acts on them in that
 * order, whichever way each came ({@linkcode InOrder}).
 *
 * A {@linkcode RecordRing} of {@linkcode REQUEST_SLOTS} records of 16 float64s (see
 * {@linkcode encodeRequest}).
 *
 * @module
 */
import { DTYPES, REDUCE_OPS } from "../../core/dtype.ts";
import {
  COLLECTIVES,
  type OpRequest,
  type PointerRegion,
  type PoolRegion,
  type Region,
} from "./_protocol.ts";
import { RecordRing } from "./_record_ring.ts";

/** Records in the ring. */
export const REQUEST_SLOTS = 256;
const RECORD_WORDS = 16;

/** A new ring's memory. */
export function requestBuffer(): SharedArrayBuffer {
  return RecordRing.buffer(REQUEST_SLOTS, RECORD_WORDS);
}

/** A record's numbers, as the ring holds them. */
export type RequestRecord = Float64Array;

/**
 * Writes `op` as numbers into `out` (16 of them): id, group, collective, dtype, op, root, algorithm,
 * servers, count, then buffer id, offset and length of the input and of the output (-1 for none), and
 * the timeout. A tensor reached by its address has buffer id -2, its address in place of the offset; a
 * tensor in the pool buffer id -3, its offset in the pool.
 * Calls that resume a segment call, compressed all-reduces, v-forms (their counts) and deterministic calls
 * go by message.
 *
 * @param op The call.
 * @param algorithms The algorithm names by code ("auto" is -1).
 * @param bufferId The number of a registered buffer.
 * @param out Where to write.
 * @returns False when the call cannot be written as numbers.
 */
export function encodeRequest(
  op: OpRequest,
  algorithms: readonly string[],
  bufferId: (buffer: SharedArrayBuffer) => number,
  out: Float64Array,
): boolean {
  const algorithm = op.algorithm === "auto" ? -1 : algorithms.indexOf(op.algorithm);
  if (
    (algorithm === -1 && op.algorithm !== "auto") || op.resume !== undefined ||
    op.compression !== undefined ||
    op.counts !== undefined || op.deterministic
  ) return false;
  out[0] = op.id;
  out[1] = op.group;
  out[2] = COLLECTIVES.indexOf(op.collective);
  // The dtype, and above it the all-reduce's narrower commDtype (+1; 0 for none): DTYPES has under 16.
  out[3] = DTYPES.indexOf(op.dtype) +
    (op.commDtype === undefined ? 0 : 16 * (DTYPES.indexOf(op.commDtype) + 1));
  out[4] = REDUCE_OPS.indexOf(op.op);
  out[5] = op.root;
  out[6] = algorithm;
  out[7] = op.servers ?? -1;
  out[8] = op.count;
  region(op.input, bufferId, out, 9);
  region(op.output, bufferId, out, 12);
  out[15] = op.timeoutMs;
  return true;
}

/** The buffer id of a tensor reached by its address. */
const POINTER = -2;
/** The buffer id of a tensor in the pool. */
const POOL = -3;

function region(
  r: Region | PointerRegion | PoolRegion | undefined,
  bufferId: (b: SharedArrayBuffer) => number,
  out: Float64Array,
  at: number,
): void {
  if (r !== undefined && "address" in r) {
    out[at] = POINTER;
    out[at + 1] = r.address;
    out[at + 2] = r.byteLength;
    return;
  }
  if (r !== undefined && "pool" in r) {
    out[at] = POOL;
    out[at + 1] = r.pool;
    out[at + 2] = r.byteLength;
    return;
  }
  out[at] = r ? bufferId(r.buffer) : -1;
  out[at + 1] = r ? r.byteOffset : 0;
  out[at + 2] = r ? r.byteLength : 0;
}

/**
 * The call a record describes.
 *
 * @param r The record.
 * @param algorithms The algorithm names by code.
 * @param buffer The buffer of a number (registered before the call is decoded).
 * @returns The call.
 */
export function decodeRequest(
  r: ArrayLike<number>,
  algorithms: readonly string[],
  buffer: (id: number) => SharedArrayBuffer,
): OpRequest {
  const regionAt = (at: number): Region | PointerRegion | PoolRegion | undefined =>
    r[at] === POINTER
      ? { address: r[at + 1], byteLength: r[at + 2] }
      : r[at] === POOL
      ? { pool: r[at + 1], byteLength: r[at + 2] }
      : r[at] < 0
      ? undefined
      : { buffer: buffer(r[at]), byteOffset: r[at + 1], byteLength: r[at + 2] };
  return {
    id: r[0],
    group: r[1],
    collective: COLLECTIVES[r[2]],
    dtype: DTYPES[r[3] % 16],
    ...(r[3] < 16 ? {} : { commDtype: DTYPES[Math.floor(r[3] / 16) - 1] }),
    op: REDUCE_OPS[r[4]],
    root: r[5],
    algorithm: r[6] < 0 ? "auto" : algorithms[r[6]],
    ...(r[7] < 0 ? {} : { servers: r[7] }),
    count: r[8],
    input: regionAt(9),
    output: regionAt(12),
    timeoutMs: r[15],
  };
}

/** The main thread's end. */
export class RequestWriter {
  readonly #ring: RecordRing;

  /** @param buffer From {@linkcode requestBuffer}. */
  constructor(buffer: SharedArrayBuffer) {
    this.#ring = new RecordRing(buffer, REQUEST_SLOTS, RECORD_WORDS);
  }

  /**
   * Writes a record with `fill` and wakes the Worker.
   *
   * @param fill Writes the record's 16 numbers into the slot; returns false to write nothing.
   * @returns False when the ring is full or `fill` declined (the caller sends a message instead).
   */
  write(fill: (slot: Float64Array) => boolean): boolean {
    return this.#ring.write((records, at) => fill(records.subarray(at, at + RECORD_WORDS)));
  }
}

/** The Worker's end: waits for records for as long as it runs. */
export class RequestReader {
  readonly #ring: RecordRing;
  #stopped = false;

  /** @param buffer From {@linkcode requestBuffer}. */
  constructor(buffer: SharedArrayBuffer) {
    this.#ring = new RecordRing(buffer, REQUEST_SLOTS, RECORD_WORDS);
  }

  /**
   * Hands every record to `take` (a copy: the slot is reused once read), as they come, until
   * {@linkcode stop}. A pending `Atomics.waitAsync` does not keep the thread alive.
   *
   * @param take Receives each record.
   */
  async run(take: (record: number[]) => void): Promise<void> {
    // Copied into a plain array (the slot is reused once read): a Float64Array of its own would cost 1.5 µs.
    const copy = (records: Float64Array, at: number): void => {
      const record = new Array<number>(RECORD_WORDS);
      for (let i = 0; i < RECORD_WORDS; i++) record[i] = records[at + i];
      take(record);
    };
    while (!this.#stopped) {
      await this.#ring.wait();
      this.#ring.drain(copy);
    }
  }

  /** Ends {@linkcode run} at its next wake-up. */
  stop(): void {
    this.#stopped = true;
    this.#ring.wake();
  }
}

/** Runs actions in the order of their sequence numbers (1, 2, 3, ...), whichever order they arrive in. */
export class InOrder {
  #next = 1;
  #waiting = new Map<number, () => void>();

  /**
   * Takes the action of number `seq`, and runs every action whose turn has come.
   *
   * @param seq Its place in the sequence.
   * @param action What to do in turn.
   */
  arrive(seq: number, action: () => void): void {
    this.#waiting.set(seq, action);
    for (let next = this.#waiting.get(this.#next); next !== undefined; next = this.#waiting.get(this.#next)) {
      this.#waiting.delete(this.#next);
      this.#next++;
      next();
    }
  }
}
