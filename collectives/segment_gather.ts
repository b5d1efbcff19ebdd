/**
 * Gather through the shared segment: the root's `output` (n blocks of b bytes) gets every member's `input`
 * as block `member`, in k = ⌈b/c⌉ chunks: each member copies its chunk in (post), then the root copies
 * every member's chunk out (finish). The root copies b in and n·b out, every other member b in. Cost
 * `(k+1)·α + (b + n·b)·β`.
 *
 * @module
 */
import { chunksOf, postChunk } from "./_segment_chunks.ts";
import type { SegmentContext, SegmentPlan } from "./segment_context.ts";

/**
 * The plan of a gather.
 *
 * @param ctx The group's segment.
 * @param input This member's block.
 * @param output At the root, room for every member's block in member order; elsewhere unused.
 * @param root The member that gathers.
 * @returns The plan.
 */
export function segmentGather(
  ctx: SegmentContext,
  input: Uint8Array,
  output: Uint8Array | undefined,
  root: number,
): SegmentPlan {
  const b = input.byteLength;
  const chunks = chunksOf(ctx, b, ctx.bufferBytes);
  const out = ctx.rank === root ? output : undefined;
  return {
    chunks: chunks.count,
    post(c: number, buf: number): void {
      postChunk(ctx, input, chunks, c, buf);
    },
    finish(c: number, buf: number): void {
      if (out === undefined) return;
      const off = c * chunks.size, len = chunks.length(c);
      for (let q = 0; q < ctx.size; q++) out.set(ctx.buffer(q, buf).subarray(0, len), q * b + off);
    },
  };
}
