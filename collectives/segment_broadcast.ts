/**
 * Broadcast through the shared segment, in place on `buf` (m bytes) from `root`, in k = ⌈m/c⌉ chunks:
 * the root copies each chunk into its buffer (post); every other member copies it out (finish). Per
 * non-root member m copied; the root m. Cost `(k+1)·α + 2·m·β`.
 *
 * @module
 */
import { chunksOf, postChunk } from "./_segment_chunks.ts";
import type { SegmentContext, SegmentPlan } from "./segment_context.ts";

/**
 * The plan of a broadcast in place on `buf` from `root`.
 *
 * @param ctx The group's segment.
 * @param buf The tensor's bytes.
 * @param root The member whose bytes everyone gets.
 * @returns The plan.
 */
export function segmentBroadcast(ctx: SegmentContext, buf: Uint8Array, root: number): SegmentPlan {
  const chunks = chunksOf(ctx, buf.byteLength, ctx.bufferBytes);
  const me = ctx.rank;
  return {
    chunks: chunks.count,
    post(c: number, b: number): void {
      if (me === root) postChunk(ctx, buf, chunks, c, b);
    },
    finish(c: number, b: number): void {
      if (me === root) return;
      buf.set(ctx.buffer(root, b).subarray(0, chunks.length(c)), c * chunks.size);
    },
  };
}
