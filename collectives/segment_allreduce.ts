/**
 * All-reduce through the shared segment, in place on `buf` (m bytes), in chunks of c ≤ bufferBytes,
 * k = ⌈m/c⌉ chunks, n members. Two plans:
 *
 * - **one-shot**: each member copies its chunk into its buffer (post); once all have, each reduces all n
 *   buffers into its output (finish). Per member: m copied in, n·m read by the reduction, m written
 *   out; one synchronisation per chunk. Cost `(k+1)·α + 2·m·β + n·m·γ`.
 * - **two-phase** (reduce-scatter then all-gather, by reading): post as above; each member reduces its
 *   shard (m/n) of every buffer into its own buffer in place (mid); once all have, each copies every
 *   member's reduced shard out (finish). Per member: m in, m read by the reduction, m out; two
 *   synchronisations per chunk. Cost `(2k+1)·α + 3·m·β + m·γ`.
 *
 * α is one synchronisation (a counter store seen by a spinning peer), β seconds per byte copied, γ seconds
 * per byte read by a reduction: one-shot wins for few members and small chunks, two-phase when n·m of
 * reading costs more than the extra copy and synchronisations.
 *
 * @module
 */
import { chunksOf } from "./_segment_chunks.ts";
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
  const chunks = chunksOf(ctx, buf.byteLength, ctx.bufferBytes);
  const es = ctx.elemSize;
  const post = (c: number, b: number): void => {
    const off = c * chunks.size;
    ctx.buffer(ctx.rank, b).set(buf.subarray(off, off + chunks.length(c)));
  };
  if (!options.twoPhase || ctx.size === 1) {
    return {
      chunks: chunks.count,
      post,
      finish(c: number, b: number): void {
        const off = c * chunks.size, len = chunks.length(c);
        if (len > 0) ctx.reduceToOutput(buf.subarray(off, off + len), b, 0);
      },
    };
  }
  return {
    chunks: chunks.count,
    post,
    mid(c: number, b: number): void {
      const [s, e] = shardOf(chunks.length(c) / es, ctx.size, ctx.rank);
      if (e > s) ctx.reduceToBuffer(b, s * es, (e - s) * es);
    },
    finish(c: number, b: number): void {
      const off = c * chunks.size, n = chunks.length(c) / es;
      for (let q = 0; q < ctx.size; q++) {
        const [s, e] = shardOf(n, ctx.size, q);
        if (e > s) buf.set(ctx.buffer(q, b).subarray(s * es, e * es), off + s * es);
      }
    },
  };
}
