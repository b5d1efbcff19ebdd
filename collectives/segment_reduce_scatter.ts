/**
 * Reduce-scatter through the shared segment: `output` (m bytes) gets the reduction of block `rank` of
 * every member's `input` (n blocks of m bytes). A chunk carries one piece (p = ⌊c/n⌋ bytes) of each of
 * the n blocks side by side, k = ⌈m/p⌉ chunks: each member copies its n pieces in (post), then reduces
 * piece `rank` of every member's buffer into its output (finish). Per member n·m in, n·m read by the
 * reduction. Cost `(k+1)·α + n·m·β + n·m·γ`.
 *
 * @module
 */
import { blockChunk, chunksOf, pieceBytes, postPieces, postUnevenPieces } from "./_segment_chunks.ts";
import type { Blocks } from "./_blocks.ts";
import type { SegmentContext, SegmentPlan } from "./segment_context.ts";

/**
 * The plan of a reduce-scatter.
 *
 * @param ctx The group's segment.
 * @param input Every member's block, in member order.
 * @param output This member's reduced block.
 * @param layout The v-form's uneven blocks (`counts`), in bytes; equal blocks if omitted.
 * @returns The plan.
 */
export function segmentReduceScatter(
  ctx: SegmentContext,
  input: Uint8Array,
  output: Uint8Array,
  layout?: Blocks,
): SegmentPlan {
  const m = output.byteLength, p = pieceBytes(ctx);
  if (layout === undefined) {
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
  // Uneven blocks: as many chunks as the largest block needs; each member's block ends at its own.
  const chunks = chunksOf(ctx, Math.max(...layout.lengths), p);
  return {
    chunks: chunks.count,
    post(c: number, b: number): void {
      postUnevenPieces(ctx, input, layout, p, c, b);
    },
    finish(c: number, b: number): void {
      const len = blockChunk(m, p, c);
      if (len > 0) ctx.reduceToOutput(output.subarray(c * p, c * p + len), b, ctx.rank * p);
    },
  };
}
