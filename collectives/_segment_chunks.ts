/**
 * Chunk geometry shared by the segment algorithms.
 *
 * @module
 */
import type { SegmentContext } from "./segment_context.ts";
import type { Blocks } from "./_blocks.ts";

/** How a range of `bytes` splits into chunks of whole elements that fit one buffer. */
export interface Chunks {
  /** Chunks, at least 1 (an empty call still synchronises). */
  readonly count: number;
  /** Bytes per chunk but the last. */
  readonly size: number;
  /** The length of chunk `c`. */
  length(c: number): number;
}

/**
 * Splits `bytes` into chunks of at most `limit` bytes, each a whole number of elements.
 *
 * @param ctx For the element size.
 * @param bytes The range.
 * @param limit The most bytes per chunk.
 * @returns The chunks.
 */
export function chunksOf(ctx: SegmentContext, bytes: number, limit: number): Chunks {
  const es = ctx.elemSize;
  const size = Math.max(es, Math.floor(limit / es) * es);
  const count = Math.max(1, Math.ceil(bytes / size));
  return { count, size, length: (c) => Math.max(0, Math.min(size, bytes - c * size)) };
}

/**
 * The bytes of one block's piece per chunk, for the block collectives: a chunk carries one piece of each
 * of the `size` blocks, side by side in a buffer.
 *
 * @param ctx The context.
 * @returns Bytes per piece (whole elements).
 */
export function pieceBytes(ctx: SegmentContext): number {
  return Math.floor(ctx.bufferBytes / ctx.size / ctx.elemSize) * ctx.elemSize;
}

/**
 * Copies chunk `c` of `src` into this member's buffer `b`: the post of the collectives that put one range
 * of bytes in the segment (all-reduce, reduce, broadcast, all-gather).
 *
 * @param ctx The context.
 * @param src The range.
 * @param chunks Its chunks.
 * @param c The chunk.
 * @param b The buffer.
 */
export function postChunk(ctx: SegmentContext, src: Uint8Array, chunks: Chunks, c: number, b: number): void {
  const off = c * chunks.size;
  ctx.buffer(ctx.rank, b).set(src.subarray(off, off + chunks.length(c)));
}

/**
 * Copies chunk `c` of each of the `ctx.size` blocks of `input` (each `m` bytes) into this member's buffer
 * `b`, one piece of `p` bytes per block: the post of the block collectives (reduce-scatter, all-to-all).
 *
 * @param ctx The context.
 * @param input The blocks.
 * @param m Bytes per block.
 * @param p Bytes per piece ({@linkcode pieceBytes}).
 * @param chunks The chunks of one block.
 * @param c The chunk.
 * @param b The buffer.
 */
export function postPieces(
  ctx: SegmentContext,
  input: Uint8Array,
  m: number,
  p: number,
  chunks: Chunks,
  c: number,
  b: number,
): void {
  const off = c * chunks.size, len = chunks.length(c), mine = ctx.buffer(ctx.rank, b);
  for (let j = 0; j < ctx.size; j++) mine.set(input.subarray(j * m + off, j * m + off + len), j * p);
}

/**
 * Chunk `c`'s length of a block of `bytes`, chunks being `size` bytes: for the v-forms, whose blocks end
 * at different chunks (a block past its end has an empty chunk).
 *
 * @param bytes The block's bytes.
 * @param size Bytes per chunk.
 * @param c The chunk.
 * @returns Its length.
 */
export function blockChunk(bytes: number, size: number, c: number): number {
  return Math.max(0, Math.min(size, bytes - c * size));
}

/**
 * Copies chunk `c` of each block of `input` (the v-forms' uneven `blocks`) into this member's buffer `b`,
 * one piece of `p` bytes per block: {@linkcode postPieces} for uneven blocks.
 *
 * @param ctx The context.
 * @param input The blocks.
 * @param blocks Where each lies.
 * @param p Bytes per piece ({@linkcode pieceBytes}).
 * @param c The chunk.
 * @param b The buffer.
 * @param skip A block not to copy (the scatter root's own), or -1.
 */
export function postUnevenPieces(
  ctx: SegmentContext,
  input: Uint8Array,
  blocks: Blocks,
  p: number,
  c: number,
  b: number,
  skip = -1,
): void {
  const mine = ctx.buffer(ctx.rank, b);
  for (let j = 0; j < ctx.size; j++) {
    if (j === skip) continue;
    const at = blocks.offsets[j] + c * p, len = blockChunk(blocks.lengths[j], p, c);
    if (len > 0) mine.set(input.subarray(at, at + len), j * p);
  }
}
