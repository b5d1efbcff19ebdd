/**
 * Gather through the shared segment: the root's `output` (n blocks of b bytes) gets every member's `input`
 * as block `member`, in k = ⌈b/c⌉ chunks: each member but the root copies its chunk in (post), then the
 * root copies every member's chunk out, its own from its input (finish). The root copies n·b, every other
 * member b. Cost `(k+1)·α + (b + n·b)·β`.
 *
 * @module
 */
import { blockChunk, chunksOf } from "./_segment_chunks.ts";
import { type Blocks, equalBlocks } from "./_blocks.ts";
import type { SegmentContext, SegmentPlan } from "./segment_context.ts";

/**
 * The plan of a gather.
 *
 * @param ctx The group's segment.
 * @param input This member's block.
 * @param output At the root, room for every member's block in member order; elsewhere unused.
 * @param root The member that gathers.
 * @param layout The v-form's uneven blocks (`counts`), in bytes; equal blocks if omitted.
 * @returns The plan.
 */
export function segmentGather(
  ctx: SegmentContext,
  input: Uint8Array,
  output: Uint8Array | undefined,
  root: number,
  layout?: Blocks,
): SegmentPlan {
  const b = input.byteLength;
  const blocks = layout ?? equalBlocks(ctx.size, b);
  const { offsets, lengths } = blocks;
  const chunks = chunksOf(ctx, Math.max(...lengths), ctx.bufferBytes), size = chunks.size;
  const out = ctx.rank === root ? output : undefined;
  return {
    chunks: chunks.count,
    post(c: number, buf: number): void {
      // The root's own block goes straight from its input to its output (finish), not through the buffer.
      const len = blockChunk(b, size, c);
      if (len > 0 && out === undefined) {
        ctx.buffer(ctx.rank, buf).set(input.subarray(c * size, c * size + len));
      }
    },
    finish(c: number, buf: number): void {
      if (out === undefined) return;
      for (let q = 0; q < ctx.size; q++) {
        const len = blockChunk(lengths[q], size, c);
        if (len <= 0) continue;
        const from = q === ctx.rank
          ? input.subarray(c * size, c * size + len)
          : ctx.buffer(q, buf).subarray(0, len);
        out.set(from, offsets[q] + c * size);
      }
    },
  };
}
