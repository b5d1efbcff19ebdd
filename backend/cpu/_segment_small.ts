/**
 * The calling thread's all-reduce of a small tensor through the host segment, with nothing made per call:
 * the one-shot plan of `collectives/segment_allreduce.ts` for one chunk, written out over views made once
 * per group. It follows the segment's protocol step for step (log the descriptor, bump `called`, post into
 * buffer `seq mod k`, wait for every member's `posted`, reduce in member order, publish `consumed`), so
 * its peers may run the same call through the general pipeline, on either of their threads.
 *
 * Whenever it cannot go straight on (a buffer still being read, a member that has not posted within a few
 * looks, a descriptor that differs), it stops and returns where the call stands: the general pipeline
 * goes on from there, with its deadlines, its liveness checks and its mismatch errors.
 *
 * @module
 */
import type { DType, ReduceOp, TypedArray } from "../../core/dtype.ts";
import type { SegmentState } from "../../collectives/segment_context.ts";
import { type HostSegment, reached, SEGMENT_HEADER_BYTES } from "../../transport/segment.ts";
import { encodeCallInto } from "./_descriptor.ts";
import { DistError, TransportError } from "../../core/errors.ts";

/**
 * The largest tensor this path takes, in bytes (above it, the general pipeline's chunks and threads pay
 * for themselves); the segment's buffers and the executor's scratch bound it too.
 */
export const SMALL_ALLREDUCE_BYTES = 16384;

/** Above this many bytes the kernels reduce the posts (SIMD); at most, a JavaScript loop does (no call). */
const JS_REDUCE_BYTES = 64;

/** How the kernels reduce the posts where they lie: {@linkcode SegmentExecutor.reducePosts}'s shape. */
export type ReducePosts = (
  members: readonly number[],
  byteOffset: number,
  dtype: DType,
  op: ReduceOp,
  into: TypedArray,
) => void;

/** How many times it looks for the members' posts before the general pipeline takes over. */
const LOOKS = 4096;

/**
 * Whether {@linkcode SmallAllReduce} runs an all-reduce of this dtype, op and size: the sums (and avg) it
 * computes with the kernels' bits (`kernels/reduce.c`: in member order, float32 rounded at each step, avg
 * as the sum times the inverse of n in the dtype's precision, int32 wrapping).
 *
 * @param dtype The dtype.
 * @param op The op.
 * @param bytes The tensor's bytes.
 * @returns Whether it does.
 */
export function smallAllReduceTakes(dtype: DType, op: ReduceOp, bytes: number): boolean {
  if (bytes === 0 || bytes > SMALL_ALLREDUCE_BYTES) return false;
  if (dtype === "float32" || dtype === "float64") return op === "sum" || op === "avg";
  return dtype === "int32" && op === "sum";
}

/** One group's small all-reduces on the calling thread. */
export class SmallAllReduce {
  /** The number of the last call run (or begun), in the group's sequence. */
  number = 0;
  readonly #seg: HostSegment;
  readonly #group: number;
  readonly #members: readonly number[];
  /** This rank within the group. */
  readonly #me: number;
  /** Every member's words, by group rank. */
  readonly #words: Int32Array[];
  readonly #called: number;
  readonly #posted: number;
  readonly #consumed: number;
  readonly #mask: number;
  readonly #buffers: number;
  readonly #bufferBytes: number;
  /** Every member's area as elements, made on the first call of each dtype. */
  #f32: Float32Array[] | undefined;
  #f64: Float64Array[] | undefined;
  #i32: Int32Array[] | undefined;
  /** The descriptor of the last shape called (its words, but the call's number). */
  readonly #template = new Int32Array(8);
  readonly #templateView = new DataView(this.#template.buffer);
  #templateDtype: DType | undefined;
  #templateOp: ReduceOp | undefined;
  #templateCount = -1;
  readonly #algorithm: number;
  readonly #reducePosts: ReducePosts;
  /** The largest tensor it takes, in bytes. */
  readonly #most: number;

  /**
   * @param seg The host segment, as the calling thread maps it.
   * @param group The group id (one with a block in the segment).
   * @param members The group's global ranks.
   * @param algorithm The code the descriptors give the algorithm `"segment"`.
   * @param reducePosts How the kernels reduce posts above {@linkcode JS_REDUCE_BYTES}.
   * @param scratchBytes The most bytes `reducePosts` reduces at once.
   */
  constructor(
    seg: HostSegment,
    group: number,
    members: readonly number[],
    algorithm: number,
    reducePosts: ReducePosts,
    scratchBytes: number,
  ) {
    this.#seg = seg;
    this.#group = group;
    this.#members = members;
    this.#me = members.indexOf(seg.rank);
    this.#words = members.map((r) => seg.words(r));
    this.#called = seg.counterIndex(group, "called");
    this.#posted = seg.counterIndex(group, "posted");
    this.#consumed = seg.counterIndex(group, "consumed");
    this.#buffers = seg.layout.buffers;
    this.#mask = seg.layout.buffers - 1;
    this.#bufferBytes = seg.layout.bufferBytes;
    this.#algorithm = algorithm;
    this.#reducePosts = reducePosts;
    this.#most = Math.min(SMALL_ALLREDUCE_BYTES, seg.layout.bufferBytes, scratchBytes);
  }

  /**
   * Whether this path runs an all-reduce of this dtype, op and size here: {@linkcode smallAllReduceTakes}
   * within this segment's buffers.
   *
   * @param dtype The dtype.
   * @param op The op.
   * @param bytes The tensor's bytes.
   * @returns Whether it does.
   */
  takes(dtype: DType, op: ReduceOp, bytes: number): boolean {
    return bytes <= this.#most && smallAllReduceTakes(dtype, op, bytes);
  }

  /**
   * Runs an all-reduce of `t` in place, as far as the members let it without waiting.
   *
   * @param t The tensor ({@linkcode smallAllReduceTakes} its dtype, op and size).
   * @param dtype Its dtype.
   * @param op The op.
   * @returns `undefined` when the call is done, else where it stands (call {@linkcode SmallAllReduce.number}).
   */
  run(t: TypedArray, dtype: DType, op: ReduceOp): SegmentState | undefined {
    const seg = this.#seg, words = this.#words, me = this.#me, mine = words[me];
    const number = (mine[this.#called] + 1) | 0;
    this.number = number;
    const base = mine[this.#posted];
    // The descriptor: the shape's words, then the call's number, then the pool's flag (none) and offset.
    const w = seg.logOffset(this.#group, number) >>> 2;
    const template = this.#templateOf(dtype, op, t.length);
    for (let i = 0; i < 8; i++) mine[w + i] = template[i];
    mine[w + 1] = number;
    seg.setLogPool(seg.rank, this.#group, number, -1);
    Atomics.store(mine, this.#called, number);
    const seq = (base + 1) | 0, size = words.length;
    // Buffer seq mod k is free once every member consumed the chunk that used it last.
    for (let q = 0; q < size; q++) {
      if (q !== me && !reached(Atomics.load(words[q], this.#consumed), (seq - this.#buffers) | 0)) {
        seg.ringAll();
        return { base, posted: 0, reduced: 0, finished: 0, checked: false };
      }
    }
    const b = seq & this.#mask;
    const es = t.BYTES_PER_ELEMENT, at = (SEGMENT_HEADER_BYTES + b * this.#bufferBytes) / es;
    const areas = this.#areas(dtype);
    const own = areas[me];
    (own as Uint8Array).set(t as Uint8Array, at);
    Atomics.store(mine, this.#posted, seq);
    // One ring for the call's begin and its post: a peer asleep on either wakes to both.
    seg.ringAll();
    // Every member's post of this call, and its descriptor the same as this rank's.
    for (let q = 0, looks = 0; q < size;) {
      if (q === me) {
        q++;
        continue;
      }
      const theirs = words[q];
      if (!reached(Atomics.load(theirs, this.#posted), seq)) {
        if (++looks === LOOKS) return { base, posted: 1, reduced: 0, finished: 0, checked: false };
        continue;
      }
      for (let i = 0; i < 8; i++) {
        // Another call, or one logged over by a member far ahead: the general pipeline names it.
        if (theirs[w + i] !== mine[w + i]) {
          return { base, posted: 1, reduced: 0, finished: 0, checked: false };
        }
      }
      q++;
    }
    if (t.byteLength <= JS_REDUCE_BYTES) reduceInto(t, areas, at, dtype, op);
    else this.#reducePosts(this.#members, at * es, dtype, op, t);
    // Done, but a member may have given the call up (timed out, failed) after posting: a late rank fails
    // as the others did rather than succeed (the general pipeline's spin checks the same). A member that
    // failed in a later call had finished this one.
    for (let q = 0; q < size; q++) {
      const reason = seg.abortReason(this.#members[q]);
      if (
        reason !== undefined && (q === me || !reached(Atomics.load(words[q], this.#called), (number + 1) | 0))
      ) {
        throw q === me
          ? new DistError(reason)
          : new TransportError(`Rank ${this.#members[q]} aborted: ${reason}`, {
            peer: this.#members[q],
          });
      }
    }
    Atomics.store(mine, this.#consumed, seq);
    seg.ring(this.#members);
    return undefined;
  }

  /** The descriptor of an all-reduce of this shape, call number aside (made again when the shape changes). */
  #templateOf(dtype: DType, op: ReduceOp, count: number): Int32Array {
    if (dtype !== this.#templateDtype || op !== this.#templateOp || count !== this.#templateCount) {
      encodeCallInto(
        this.#templateView,
        0,
        this.#group,
        0,
        "allReduce",
        dtype,
        op,
        this.#algorithm,
        0,
        count,
        0,
        0,
      );
      this.#templateDtype = dtype;
      this.#templateOp = op;
      this.#templateCount = count;
    }
    return this.#template;
  }

  #areas(dtype: DType): TypedArray[] {
    const seg = this.#seg;
    if (dtype === "float32") {
      return this.#f32 ??= this.#members.map((r) => new Float32Array(seg.area(r).buffer));
    }
    if (dtype === "float64") {
      return this.#f64 ??= this.#members.map((r) => new Float64Array(seg.area(r).buffer));
    }
    return this.#i32 ??= this.#members.map((r) => new Int32Array(seg.area(r).buffer));
  }
}

/** `t = op(areas[0][at..], ..., areas[n-1][at..])` in member order, with the kernels' bits. */
function reduceInto(t: TypedArray, areas: TypedArray[], at: number, dtype: DType, op: ReduceOp): void {
  const size = areas.length, n = t.length, first = areas[0];
  if (dtype === "float32") {
    const inv = Math.fround(1 / size), avg = op === "avg";
    for (let i = 0; i < n; i++) {
      let acc = first[at + i] as number;
      for (let q = 1; q < size; q++) acc = Math.fround(acc + (areas[q][at + i] as number));
      t[i] = avg ? Math.fround(acc * inv) : acc;
    }
  } else if (dtype === "float64") {
    const inv = 1 / size, avg = op === "avg";
    for (let i = 0; i < n; i++) {
      let acc = first[at + i] as number;
      for (let q = 1; q < size; q++) acc += areas[q][at + i] as number;
      t[i] = avg ? acc * inv : acc;
    }
  } else {
    for (let i = 0; i < n; i++) {
      let acc = first[at + i] as number;
      for (let q = 1; q < size; q++) acc = (acc + (areas[q][at + i] as number)) | 0;
      t[i] = acc;
    }
  }
}
