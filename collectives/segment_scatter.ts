/**
 * Scatter through the shared segment: block `member` of the root's `input` (n blocks of b bytes) lands in
 * that member's `output`. A chunk carries one piece (p = ⌊c/n⌋ bytes) of each block, k = ⌈b/p⌉ chunks:
 * the root copies the n − 1 pieces of the others in (post), then every other member copies its piece of the
 * root's buffer out and the root its own block from its input (finish). The root copies n·b, every other
 * member b. Cost `(k+1)·α + (n·b + b)·β`.
 *
 * @module
 */
import { blockChunk, chunksOf, pieceBytes, postUnevenPieces } from "./_segment_chunks.ts";
import { type Blocks, equalBlocks } from "./_blocks.ts";
import type { SegmentContext, SegmentPlan } from "./segment_context.ts";

/**
 * The plan of a scatter.
 *
 * @param ctx The group's segment.
 * @param input At the root, n blocks, block q for member q; elsewhere unused.
 * @param output This member's block.
 * @param root The member that scatters.
 * @param layout The v-form's uneven blocks (`counts`), in bytes; equal blocks if omitted.
 * @returns The plan.
 */
export function segmentScatter(
  ctx: SegmentContext,
  input: Uint8Array | undefined,
  output: Uint8Array,
  root: number,
  layout?: Blocks,
): SegmentPlan {
  const p = pieceBytes(ctx);
  const blocks = layout ?? equalBlocks(ctx.size, output.byteLength);
  const chunks = chunksOf(ctx, Math.max(...blocks.lengths), p);
  const all = ctx.rank === root ? input : undefined, own = output.byteLength;
  return {
    chunks: chunks.count,
    post(c: number, buf: number): void {
      // The root's own block goes straight from its input to its output (finish), not through the buffer.
      if (all !== undefined) postUnevenPieces(ctx, all, blocks, p, c, buf, root);
    },
    finish(c: number, buf: number): void {
      const len = blockChunk(own, p, c);
      if (len <= 0) return;
      if (all !== undefined) {
        const at = blocks.offsets[root] + c * p;
        output.set(all.subarray(at, at + len), c * p);
      } else {
        const at = ctx.rank * p;
        output.set(ctx.buffer(root, buf).subarray(at, at + len), c * p);
      }
    },
  };
}
