/**
 * All-to-all through the shared segment: block `q` of `output` (n blocks of m bytes) gets block `rank`
 * of member q's `input`. A chunk carries one piece (p = ⌊c/n⌋ bytes) of each block, k = ⌈m/p⌉ chunks:
 * each member copies its n pieces in (post), then copies piece `rank` of every member's buffer out
 * (finish). Per member n·m in, n·m out. Cost `(k+1)·α + 2·n·m·β`. Input and output may be the same
 * memory: chunk c's pieces are all read before any of them is written.
 *
 * @module
 */
import { chunksOf, pieceBytes, postPieces } from "./_segment_chunks.ts";
import type { SegmentContext, SegmentPlan } from "./segment_context.ts";

/**
 * The plan of an all-to-all.
 *
 * @param ctx The group's segment.
 * @param input This member's n blocks, block q for member q.
 * @param output Room for n blocks, block q from member q.
 * @returns The plan.
 */
export function segmentAllToAll(ctx: SegmentContext, input: Uint8Array, output: Uint8Array): SegmentPlan {
  const m = input.byteLength / ctx.size, p = pieceBytes(ctx);
  const chunks = chunksOf(ctx, m, p);
  return {
    chunks: chunks.count,
    post(c: number, b: number): void {
      postPieces(ctx, input, m, p, chunks, c, b);
    },
    finish(c: number, b: number): void {
      const off = c * chunks.size, len = chunks.length(c), at = ctx.rank * p;
      for (let q = 0; q < ctx.size; q++) output.set(ctx.buffer(q, b).subarray(at, at + len), q * m + off);
    },
  };
}
