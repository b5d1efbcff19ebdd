/**
 * All-gather through the shared segment: `output` (n blocks of m bytes) gets every member's `input` (m
 * bytes) as block `member`, in k = ⌈m/c⌉ chunks: each member copies its chunk in (post), then copies every
 * member's chunk out (finish). Per member m in, n·m out. Cost `(k+1)·α + (n+1)·m·β`. Uneven blocks (the
 * v-form) take as many chunks as the largest needs; each member's ends at its own.
 *
 * @module
 */
import { blockChunk, chunksOf, postChunk } from "./_segment_chunks.ts";
import type { Blocks } from "./_blocks.ts";
import type { SegmentContext, SegmentPlan } from "./segment_context.ts";

/**
 * The plan of an all-gather.
 *
 * @param ctx The group's segment.
 * @param input This member's block.
 * @param output Room for every member's block, in member order.
 * @param layout The v-form's uneven blocks (`counts`), in bytes; equal blocks if omitted.
 * @returns The plan.
 */
export function segmentAllGather(
  ctx: SegmentContext,
  input: Uint8Array,
  output: Uint8Array,
  layout?: Blocks,
): SegmentPlan {
  const m = input.byteLength;
  if (layout === undefined) {
    const chunks = chunksOf(ctx, m, ctx.bufferBytes);
    return {
      chunks: chunks.count,
      post(c: number, b: number): void {
        postChunk(ctx, input, chunks, c, b);
      },
      finish(c: number, b: number): void {
        const off = c * chunks.size, len = chunks.length(c);
        for (let q = 0; q < ctx.size; q++) output.set(ctx.buffer(q, b).subarray(0, len), q * m + off);
      },
    };
  }
  // Uneven blocks: as many chunks as the largest block needs; each member's block ends at its own.
  const { offsets, lengths } = layout;
  const chunks = chunksOf(ctx, Math.max(...lengths), ctx.bufferBytes), size = chunks.size;
  return {
    chunks: chunks.count,
    post(c: number, b: number): void {
      const len = blockChunk(m, size, c);
      if (len > 0) ctx.buffer(ctx.rank, b).set(input.subarray(c * size, c * size + len));
    },
    finish(c: number, b: number): void {
      for (let q = 0; q < ctx.size; q++) {
        const len = blockChunk(lengths[q], size, c);
        if (len > 0) output.set(ctx.buffer(q, b).subarray(0, len), offsets[q] + c * size);
      }
    },
  };
}
