/**
 * Reduce to `root` through the shared segment, in place on `buf` (m bytes; the non-roots' tensors stay
 * as they were), k = ⌈m/c⌉ chunks. One-shot: every member posts its chunk; the root reduces all n
 * buffers into its tensor, `(k+1)·α + m·β (post) + n·m·γ` at the root. Two-phase: every member reduces
 * its shard of the chunk in place (mid), and the root copies the n shards out: `(2k+1)·α + 2·m·β + m·γ`,
 * the reading spread over the members.
 *
 * @module
 */
import { chunksOf, postChunk } from "./_segment_chunks.ts";
import { type SegmentContext, type SegmentPlan, shardOf } from "./segment_context.ts";
import type { SegmentAllReduceOptions } from "./segment_allreduce.ts";

/**
 * The plan of a reduce to `root` in place on `buf`.
 *
 * @param ctx The group's segment.
 * @param buf The tensor's bytes.
 * @param root The member that gets the result.
 * @param options Which plan.
 * @returns The plan.
 */
export function segmentReduce(
  ctx: SegmentContext,
  buf: Uint8Array,
  root: number,
  options: SegmentAllReduceOptions = {},
): SegmentPlan {
  const chunks = chunksOf(ctx, buf.byteLength, ctx.bufferBytes);
  const me = ctx.rank, es = ctx.elemSize;
  const post = (c: number, b: number): void => postChunk(ctx, buf, chunks, c, b);
  if (!options.twoPhase || ctx.size === 1) {
    return {
      chunks: chunks.count,
      post,
      finish(c: number, b: number): void {
        const off = c * chunks.size, len = chunks.length(c);
        if (me === root && len > 0) ctx.reduceToOutput(buf.subarray(off, off + len), b, 0);
      },
    };
  }
  return {
    chunks: chunks.count,
    post,
    mid(c: number, b: number): void {
      const [s, e] = shardOf(chunks.length(c) / es, ctx.size, me);
      if (e > s) ctx.reduceToBuffer(b, s * es, (e - s) * es);
    },
    finish(c: number, b: number): void {
      if (me !== root) return;
      const off = c * chunks.size, n = chunks.length(c) / es;
      for (let q = 0; q < ctx.size; q++) {
        const [s, e] = shardOf(n, ctx.size, q);
        if (e > s) buf.set(ctx.buffer(q, b).subarray(s * es, e * es), off + s * es);
      }
    },
  };
}
