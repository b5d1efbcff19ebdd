/**
 * All-reduce through the shared segment, in place on `buf` (m bytes), in chunks of c ≤ bufferBytes,
 * k = ⌈m/c⌉ chunks, n members. Two plans:
 *
 * - **one-shot**: each member copies its chunk into its buffer (post); once all have, each reduces all n
 *   buffers into its output (finish). Per member: m copied in, n·m read by the reduction, m written
 *   out; one synchronisation per chunk. Cost `(k+1)·α + 2·m·β + n·m·γ`.
 * - **two-phase** (reduce-scatter then all-gather, by reading): each member copies into its buffer the
 *   shards of its chunk that the others reduce, not its own (post); each reduces its own shard of its
 *   tensor with that shard of every other member's buffer, into its tensor and its buffer (mid); once all
 *   have, each copies every other member's reduced shard into its tensor (finish). Per member about m
 *   read and m written in copies, m read by the reduction: 4 passes over the tensor, against 5 for
 *   one-shot (n = 2). Two synchronisations per chunk. Cost `(2k+1)·α + 2·m·β + m·γ`.
 *
 * - **pooled** ({@linkcode segmentAllReducePooled}), when every member's tensor is in its pool: nothing is
 *   copied in; each member reduces its shard of every member's tensor into its own, in place (mid), then
 *   copies every other member's reduced shard into its own (finish), and is done once every member has
 *   consumed every chunk. Per member m read and m/n written by the reduction, (n−1)/n·m copied; three
 *   synchronisations per chunk. Cost `(2k+2)·α + m·β + m·γ`.
 *
 * α is one synchronisation (a counter store seen by a spinning peer), β seconds per byte copied, γ seconds
 * per byte read by a reduction: one-shot wins for small tensors (one synchronisation per chunk), two-phase
 * once (n−1)·m of extra reading costs more than k more synchronisations.
 *
 * @module
 */
import { chunksOf, postChunk } from "./_segment_chunks.ts";
import { type SegmentContext, type SegmentPlan, shardOf } from "./segment_context.ts";

/** Options of {@linkcode segmentAllReduce}. */
export interface SegmentAllReduceOptions {
  /** Run the two-phase plan instead of the one-shot. @default false */
  twoPhase?: boolean;
}

/**
 * The plan of an all-reduce in place on `buf`.
 *
 * @param ctx The group's segment.
 * @param buf The tensor's bytes.
 * @param options Which plan.
 * @returns The plan.
 */
export function segmentAllReduce(
  ctx: SegmentContext,
  buf: Uint8Array,
  options: SegmentAllReduceOptions = {},
): SegmentPlan {
  const es = ctx.elemSize;
  const oneShot = !options.twoPhase || ctx.size === 1;
  // A tensor that fits one buffer (every small call): one object, and no view of a part of it per step.
  if (oneShot && buf.byteLength <= Math.floor(ctx.bufferBytes / es) * es) return new OneChunk(ctx, buf);
  const chunks = chunksOf(ctx, buf.byteLength, ctx.bufferBytes);
  if (oneShot) {
    return {
      chunks: chunks.count,
      post: (c: number, b: number): void => postChunk(ctx, buf, chunks, c, b),
      finish(c: number, b: number): void {
        const off = c * chunks.size, len = chunks.length(c);
        if (len > 0) ctx.reduceToOutput(buf.subarray(off, off + len), b, 0);
      },
    };
  }
  return {
    chunks: chunks.count,
    post(c: number, b: number): void {
      const off = c * chunks.size, n = chunks.length(c) / es, mine = ctx.buffer(ctx.rank, b);
      for (let q = 0; q < ctx.size; q++) {
        if (q === ctx.rank) continue;
        const [s, e] = shardOf(n, ctx.size, q);
        if (e > s) mine.set(buf.subarray(off + s * es, off + e * es), s * es);
      }
    },
    mid(c: number, b: number): void {
      const off = c * chunks.size;
      const [s, e] = shardOf(chunks.length(c) / es, ctx.size, ctx.rank);
      if (e > s) {
        const own = buf.subarray(off + s * es, off + e * es);
        ctx.reduceWithOwn(own, own, b, s * es);
      }
    },
    finish(c: number, b: number): void {
      const off = c * chunks.size, n = chunks.length(c) / es;
      for (let q = 0; q < ctx.size; q++) {
        if (q === ctx.rank) continue;
        const [s, e] = shardOf(n, ctx.size, q);
        if (e > s) buf.set(ctx.buffer(q, b).subarray(s * es, e * es), off + s * es);
      }
    },
  };
}

/** The one-shot plan of a tensor of one chunk: post it whole, reduce every member's buffer into it. */
class OneChunk implements SegmentPlan {
  readonly chunks = 1;
  readonly #ctx: SegmentContext;
  readonly #buf: Uint8Array;

  constructor(ctx: SegmentContext, buf: Uint8Array) {
    this.#ctx = ctx;
    this.#buf = buf;
  }

  post(_c: number, b: number): void {
    this.#ctx.buffer(this.#ctx.rank, b).set(this.#buf);
  }

  finish(_c: number, b: number): void {
    if (this.#buf.byteLength > 0) this.#ctx.reduceToOutput(this.#buf, b, 0);
  }
}

/**
 * The plan of an all-reduce in place on tensors that every member allocated in its pool: `ctx.tensor(q)`
 * is member q's, `bytes` long.
 *
 * @param ctx The group's segment.
 * @param bytes The tensors' length.
 * @returns The plan.
 */
export function segmentAllReducePooled(ctx: SegmentContext, bytes: number): SegmentPlan {
  const chunks = chunksOf(ctx, bytes, ctx.bufferBytes);
  const es = ctx.elemSize;
  return {
    chunks: chunks.count,
    lends: true,
    post(): void {},
    mid(c: number): void {
      const [s, e] = shardOf(chunks.length(c) / es, ctx.size, ctx.rank);
      if (e > s) ctx.reduceTensors(c * chunks.size + s * es, (e - s) * es);
    },
    finish(c: number): void {
      const off = c * chunks.size, n = chunks.length(c) / es, mine = ctx.tensor(ctx.rank);
      for (let q = 0; q < ctx.size; q++) {
        const [s, e] = shardOf(n, ctx.size, q);
        if (q !== ctx.rank && e > s) {
          mine.set(ctx.tensor(q).subarray(off + s * es, off + e * es), off + s * es);
        }
      }
    },
  };
}
