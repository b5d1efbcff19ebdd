/**
 * A real in-thread message-passing world for the collective algorithms: N rank contexts connected by one
 * FIFO channel per ordered pair of ranks, every rank running the algorithm concurrently. Nothing here
 * knows any answer; results are checked against sequential references computed from the inputs.
 *
 * Two delivery modes:
 * - `"eager"`: a send copies the payload into the channel and resolves at once (a buffered transport).
 * - `"rendezvous"`: a send resolves only when the receiver takes the message, and the payload is copied
 *   at that moment (a zero-copy transport). It catches algorithms that change a buffer still being sent
 *   and algorithms that deadlock unless sends are buffered.
 *
 * A receive whose buffer length differs from the message's throws, and a world that ends with an
 * unreceived message or a waiting receive throws: both mean the ranks disagreed on the wire order.
 *
 * @module
 */
import type { CollectiveContext, Comm } from "../../collectives/comm.ts";
import { kernels } from "../../wasm/kernels.ts";

/** The dtypes the tests reduce. */
export type TestDType = "int32" | "float32" | "float64";
/** The ops the tests reduce with. */
export type TestOp = "sum" | "prod" | "min" | "max";
/** A TypedArray of a {@linkcode TestDType}. */
export type TestArray = Int32Array | Float32Array | Float64Array;

/** Bytes per element of each test dtype. */
export const ELEM_SIZE: Readonly<Record<TestDType, number>> = { int32: 4, float32: 4, float64: 8 };

/** Elementwise reduction of byte buffers, as a {@linkcode CollectiveContext} offers it. */
export interface Reducer {
  /** `dst = op(dst, src)`. */
  reduce(dst: Uint8Array, src: Uint8Array): void;
  /** `dst = op(srcs[0], ..., srcs[k-1])`, in that order. */
  reduceMany(dst: Uint8Array, srcs: readonly Uint8Array[]): void;
}

/** How a world is built. */
export interface WorldOptions {
  /** The number of ranks. */
  size: number;
  /** The element type. */
  dtype: TestDType;
  /** The reduction. @default "sum" */
  op?: TestOp;
  /** The context's chunk size; small values exercise pipelining edges. @default 64 */
  chunkBytes?: number;
  /** See the module doc. @default "rendezvous" */
  delivery?: "eager" | "rendezvous";
  /** The host of each rank, as the contexts' `hosts` (a fake host map). @default none */
  hosts?: readonly number[];
}

/** What one rank sent during a run. */
export interface RankTraffic {
  /** Messages sent. */
  messages: number;
  /** Payload bytes sent. */
  bytes: number;
}

/** The outcome of {@linkcode runWorld}. */
export interface WorldRun<T> {
  /** Each rank's return value, by rank. */
  results: T[];
  /** Each rank's outgoing traffic, by rank. */
  sent: RankTraffic[];
}

interface Pending {
  data: Uint8Array;
  taken?: () => void;
  fail?: (e: Error) => void;
}

interface Waiting {
  into: Uint8Array;
  resolve: () => void;
  reject: (e: Error) => void;
}

/** One direction between two ranks: messages not yet received, or receives not yet matched. */
class Channel {
  readonly from: number;
  readonly to: number;
  readonly #eager: boolean;
  readonly #messages: Pending[] = [];
  readonly #receives: Waiting[] = [];

  constructor(from: number, to: number, eager: boolean) {
    this.from = from;
    this.to = to;
    this.#eager = eager;
  }

  get idle(): boolean {
    return this.#messages.length === 0 && this.#receives.length === 0;
  }

  send(data: Uint8Array): Promise<void> {
    const waiting = this.#receives.shift();
    if (waiting !== undefined) {
      const error = this.#deliver(data, waiting);
      return error === undefined ? Promise.resolve() : Promise.reject(error);
    }
    if (this.#eager) {
      this.#messages.push({ data: data.slice() });
      return Promise.resolve();
    }
    return new Promise((taken, fail) => this.#messages.push({ data, taken, fail }));
  }

  recv(into: Uint8Array): Promise<void> {
    const message = this.#messages.shift();
    if (message === undefined) {
      return new Promise((resolve, reject) => this.#receives.push({ into, resolve, reject }));
    }
    return new Promise((resolve, reject) => {
      const error = this.#deliver(message.data, { into, resolve, reject });
      if (error === undefined) message.taken?.();
      else message.fail?.(error);
    });
  }

  #deliver(data: Uint8Array, waiting: Waiting): Error | undefined {
    if (data.length !== waiting.into.length) {
      const error = new Error(
        `Rank ${this.to} expected ${waiting.into.length} bytes from rank ${this.from}, found ${data.length}`,
      );
      waiting.reject(error);
      return error;
    }
    waiting.into.set(data);
    waiting.resolve();
    return undefined;
  }
}

/**
 * Runs `body` on every rank of a fresh world at once and returns each rank's result.
 *
 * @param options The world.
 * @param body One rank's part; it gets that rank's context.
 * @returns The results and the traffic, by rank.
 * @throws If any rank throws, or the ranks leave messages unmatched.
 */
export async function runWorld<T>(
  options: WorldOptions,
  body: (ctx: CollectiveContext) => Promise<T>,
): Promise<WorldRun<T>> {
  const { size, dtype, op = "sum", chunkBytes = 64, delivery = "rendezvous" } = options;
  const channels: Channel[][] = [];
  for (let from = 0; from < size; from++) {
    channels.push([]);
    for (let to = 0; to < size; to++) channels[from].push(new Channel(from, to, delivery === "eager"));
  }
  const sent: RankTraffic[] = Array.from({ length: size }, () => ({ messages: 0, bytes: 0 }));
  const reducer = await makeReducer({ dtype, op });
  const contexts = Array.from({ length: size }, (_, rank): CollectiveContext => {
    const peerCheck = (peer: number): void => {
      if (!Number.isInteger(peer) || peer < 0 || peer >= size || peer === rank) {
        throw new RangeError(`Rank ${rank} addressed peer ${peer} in a world of ${size}`);
      }
    };
    const comm: Comm = {
      rank,
      size,
      send(peer: number, data: Uint8Array): Promise<void> {
        peerCheck(peer);
        sent[rank].messages++;
        sent[rank].bytes += data.length;
        return channels[rank][peer].send(data);
      },
      recv(peer: number, into: Uint8Array): Promise<void> {
        peerCheck(peer);
        return channels[peer][rank].recv(into);
      },
    };
    return {
      comm,
      elemSize: ELEM_SIZE[dtype],
      chunkBytes,
      reduce: (dst, src) => reducer.reduce(dst, src),
      reduceMany: (dst, srcs) => reducer.reduceMany(dst, srcs),
      scratch: (bytes: number): Uint8Array => {
        // Garbage, not zeros: an algorithm that reads scratch before writing it must fail.
        const mem = new Uint8Array(bytes);
        mem.fill(0xa5);
        return mem;
      },
      hosts: options.hosts,
    };
  });
  const results = await Promise.all(contexts.map((ctx) => body(ctx)));
  for (const row of channels) {
    for (const channel of row) {
      if (!channel.idle) {
        throw new Error(`Channel ${channel.from} → ${channel.to} has unmatched messages or receives`);
      }
    }
  }
  return { results, sent };
}

function typed(dtype: TestDType, bytes: Uint8Array): TestArray {
  const size = ELEM_SIZE[dtype];
  if (bytes.byteOffset % size !== 0 || bytes.length % size !== 0) {
    throw new RangeError(`Misaligned ${dtype} buffer: offset ${bytes.byteOffset}, length ${bytes.length}`);
  }
  const n = bytes.length / size;
  if (dtype === "int32") return new Int32Array(bytes.buffer, bytes.byteOffset, n);
  if (dtype === "float32") return new Float32Array(bytes.buffer, bytes.byteOffset, n);
  return new Float64Array(bytes.buffer, bytes.byteOffset, n);
}

function overlaps(a: Uint8Array, b: Uint8Array): boolean {
  return a.buffer === b.buffer && a.length > 0 && b.length > 0 &&
    a.byteOffset < b.byteOffset + b.length && b.byteOffset < a.byteOffset + a.length;
}

function combine(op: TestOp, int: boolean): (a: number, b: number) => number {
  switch (op) {
    case "sum":
      return (a, b) => a + b;
    case "prod":
      return int ? Math.imul : (a, b) => a * b;
    case "min":
      return Math.min;
    case "max":
      return Math.max;
  }
}

/**
 * The context's reducer: the WASM kernels (`wasm/kernels.ts`), as the CPU backend uses them. On top of
 * what the kernels accept it refuses misaligned, unequal or overlapping buffers, so that the algorithms
 * stay within what any kernel (native, GPU) can be asked to do.
 */
export async function makeReducer(options: { dtype: TestDType; op: TestOp }): Promise<Reducer> {
  const { dtype, op } = options;
  const k = await kernels();
  const check = (dst: Uint8Array, src: Uint8Array): void => {
    if (dst.length !== src.length) throw new RangeError(`Reduce of ${src.length} bytes into ${dst.length}`);
    if (overlaps(dst, src)) throw new RangeError("Reduce with overlapping source and destination");
  };
  return {
    reduce(dst: Uint8Array, src: Uint8Array): void {
      check(dst, src);
      k.reduce(typed(dtype, dst), typed(dtype, src), { op });
    },
    reduceMany(dst: Uint8Array, srcs: readonly Uint8Array[]): void {
      if (srcs.length === 0) throw new RangeError("ReduceMany of no sources");
      for (const src of srcs) check(dst, src);
      k.reduceMany(typed(dtype, dst), srcs.map((src) => typed(dtype, src)), { op });
    },
  };
}

/** A small seeded PRNG (mulberry32): the same seed gives the same inputs, so a failure reproduces. */
export class Rng {
  #state: number;

  /** @param seed Any 32-bit integer. */
  constructor(seed: number) {
    this.#state = seed >>> 0;
  }

  /** A uniform float in [0, 1). */
  next(): number {
    this.#state = (this.#state + 0x6d2b79f5) | 0;
    let t = this.#state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  }
}

/** A new TestArray of `dtype` with `count` elements. */
export function newArray(dtype: TestDType, count: number): TestArray {
  if (dtype === "int32") return new Int32Array(count);
  if (dtype === "float32") return new Float32Array(count);
  return new Float64Array(count);
}

/** One random array per rank: int32 in [-1000, 1000], floats in [-1, 1). */
export function randomInputs(
  options: { dtype: TestDType; count: number; size: number; seed: number },
): TestArray[] {
  const { dtype, count, size, seed } = options;
  const rng = new Rng(seed);
  return Array.from({ length: size }, () => {
    const a = newArray(dtype, count);
    for (let i = 0; i < count; i++) {
      a[i] = dtype === "int32" ? Math.floor(rng.next() * 2001) - 1000 : rng.next() * 2 - 1;
    }
    return a;
  });
}

/** The bytes of a TestArray (no copy). */
export function bytes(a: TestArray): Uint8Array {
  return new Uint8Array(a.buffer, a.byteOffset, a.byteLength);
}

/** A copy of a TestArray's bytes, in a new buffer. */
export function copyBytes(a: TestArray): Uint8Array {
  return bytes(a).slice();
}

/** Unit roundoff of each float dtype. */
const UNIT_ROUNDOFF: Readonly<Record<TestDType, number>> = { int32: 0, float32: 2 ** -24, float64: 2 ** -53 };

/**
 * Throws unless `got` is the reduction of `inputs` (elementwise, over the ranks).
 *
 * int32 and every min/max must match exactly. Float sums are compared with a float64 sequential sum s
 * within 2·(n−1)·u·Σ|x| per element (u the unit roundoff of the dtype): any summation order of n terms
 * is within (n−1)·u·Σ|x| of the exact sum, and the float64 reference itself is within (n−1)·2^-53·Σ|x|.
 */
export function assertReduced(
  got: Uint8Array,
  inputs: readonly TestArray[],
  options: { dtype: TestDType; op: TestOp; what: string },
): void {
  const { dtype, op, what } = options;
  const g = typed(dtype, got.slice());
  const n = inputs.length;
  const count = inputs[0]?.length ?? 0;
  if (g.length !== count) throw new Error(`${what}: expected ${count} elements, found ${g.length}`);
  const exact = dtype === "int32" || op === "min" || op === "max";
  const f = combine(op, dtype === "int32");
  const acc = newArray(dtype, 1);
  for (let i = 0; i < count; i++) {
    if (exact) {
      acc[0] = inputs[0][i];
      for (let r = 1; r < n; r++) acc[0] = f(acc[0], inputs[r][i]);
      if (!Object.is(g[i], acc[0])) {
        throw new Error(`${what}: element ${i} is ${g[i]}, expected ${acc[0]}`);
      }
      continue;
    }
    if (op !== "sum") throw new Error(`${what}: no tolerance rule for float ${op}`);
    let sum = 0;
    let abs = 0;
    for (let r = 0; r < n; r++) {
      sum += inputs[r][i];
      abs += Math.abs(inputs[r][i]);
    }
    const tol = 2 * (n - 1) * UNIT_ROUNDOFF[dtype] * abs;
    if (!(Math.abs(g[i] - sum) <= tol)) {
      throw new Error(`${what}: element ${i} is ${g[i]}, expected ${sum} ± ${tol}`);
    }
  }
}

/** Throws unless every buffer holds the same bits as the first. */
export function assertSameBits(buffers: readonly Uint8Array[], what: string): void {
  for (let r = 1; r < buffers.length; r++) {
    const a = buffers[0];
    const b = buffers[r];
    if (a.length !== b.length) {
      throw new Error(`${what}: rank ${r} has ${b.length} bytes, rank 0 ${a.length}`);
    }
    for (let i = 0; i < a.length; i++) {
      if (a[i] !== b[i]) throw new Error(`${what}: rank ${r} differs from rank 0 at byte ${i}`);
    }
  }
}

/** Throws unless two byte buffers are equal. */
export function assertBytesEqual(got: Uint8Array, want: Uint8Array, what: string): void {
  if (got.length !== want.length) throw new Error(`${what}: ${got.length} bytes, expected ${want.length}`);
  for (let i = 0; i < got.length; i++) {
    if (got[i] !== want[i]) throw new Error(`${what}: byte ${i} is ${got[i]}, expected ${want[i]}`);
  }
}

/** The world sizes every algorithm is tested on. */
export const SIZES: readonly number[] = [1, 2, 3, 4, 5, 8];
/** The element counts every algorithm is tested on (the large odd one is tested separately). */
export const COUNTS: readonly number[] = [0, 1, 7, 1024];
/** A large odd element count, for fewer combinations. */
export const LARGE_COUNT = 100_003;
