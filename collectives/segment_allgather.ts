/**
 * All-gather through the shared segment: `output` (n blocks of m bytes) gets every member's `input` (m
 * bytes) as block `member`, in k = ⌈m/c⌉ chunks: each member copies its chunk in (post), then copies every
 * member's chunk out (finish). Per member m in, n·m out. Cost `(k+1)·α + (n+1)·m·β`.
 *
 * @module
 */
import { chunksOf, postChunk } from "./_segment_chunks.ts";
import type { SegmentContext, SegmentPlan } from "./segment_context.ts";

/**
 * The plan of an all-gather.
 *
 * @param ctx The group's segment.
 * @param input This member's block.
 * @param output Room for every member's block, in member order.
 * @returns The plan.
 */
export function segmentAllGather(ctx: SegmentContext, input: Uint8Array, output: Uint8Array): SegmentPlan {
  const m = input.byteLength;
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
