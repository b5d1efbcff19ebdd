/**
 * Reduce-scatter through the shared segment: `output` (m bytes) gets the reduction of block `rank` of
 * every member's `input` (n blocks of m bytes). A chunk carries one piece (p = ⌊c/n⌋ bytes) of each of
 * the n blocks side by side, k = ⌈m/p⌉ chunks: each member copies its n pieces in (post), then reduces
 * piece `rank` of every member's buffer into its output (finish). Per member n·m in, n·m read by the
 * reduction. Cost `(k+1)·α + n·m·β + n·m·γ`.
 *
 * @module
 */
import { chunksOf, pieceBytes, postPieces } from "./_segment_chunks.ts";
import type { SegmentContext, SegmentPlan } from "./segment_context.ts";

/**
 * The plan of a reduce-scatter.
 *
 * @param ctx The group's segment.
 * @param input Every member's block, in member order.
 * @param output This member's reduced block.
 * @returns The plan.
 */
export function segmentReduceScatter(
  ctx: SegmentContext,
  input: Uint8Array,
  output: Uint8Array,
): SegmentPlan {
  const m = output.byteLength, p = pieceBytes(ctx);
  const chunks = chunksOf(ctx, m, p);
  return {
    chunks: chunks.count,
    post(c: number, b: number): void {
      postPieces(ctx, input, m, p, chunks, c, b);
    },
    finish(c: number, b: number): void {
      const off = c * chunks.size, len = chunks.length(c);
      if (len > 0) ctx.reduceToOutput(output.subarray(off, off + len), b, ctx.rank * p);
    },
  };
}
