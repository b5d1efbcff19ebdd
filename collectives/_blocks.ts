/**
 * Where each rank's block lies in an n-block buffer: equal blocks, or the uneven blocks of the v-forms
 * (`counts` in elements per rank, torch's split sizes), as byte offsets and lengths.
 *
 * @module
 */

/** The blocks of an n-block buffer, in bytes. */
export interface Blocks {
  /** Where block r begins. */
  readonly offsets: readonly number[];
  /** Block r's bytes. */
  readonly lengths: readonly number[];
  /** All the blocks' bytes. */
  readonly total: number;
}

/**
 * `n` equal blocks of `b` bytes.
 *
 * @param n The number of blocks.
 * @param b Bytes per block.
 * @returns The blocks.
 */
export function equalBlocks(n: number, b: number): Blocks {
  return {
    offsets: Array.from({ length: n }, (_, r) => r * b),
    lengths: new Array<number>(n).fill(b),
    total: n * b,
  };
}

/**
 * The blocks of `counts[r]` elements of `elemSize` bytes each, one after another.
 *
 * @param counts Elements per block.
 * @param elemSize Bytes per element.
 * @returns The blocks.
 */
export function blocksOf(counts: readonly number[], elemSize: number): Blocks {
  const offsets: number[] = [], lengths: number[] = [];
  let at = 0;
  for (const c of counts) {
    offsets.push(at);
    lengths.push(c * elemSize);
    at += c * elemSize;
  }
  return { offsets, lengths, total: at };
}

/**
 * Block `r` of `buf`.
 *
 * @param buf The n-block buffer.
 * @param blocks Its blocks.
 * @param r The block.
 * @returns A view of it.
 */
export function blockOf(buf: Uint8Array, blocks: Blocks, r: number): Uint8Array {
  return buf.subarray(blocks.offsets[r], blocks.offsets[r] + blocks.lengths[r]);
}

/**
 * Throws unless `buf` holds exactly the blocks.
 *
 * @param verb The collective, for the message.
 * @param name The buffer's name.
 * @param buf The buffer.
 * @param blocks Its blocks.
 * @throws {RangeError} If the lengths differ.
 */
export function checkBlocksFit(verb: string, name: string, buf: Uint8Array, blocks: Blocks): void {
  if (buf.length !== blocks.total) {
    throw new RangeError(
      `Cannot ${verb}: expected ${name} of ${blocks.total} bytes (the blocks' sum), found ${buf.length}`,
    );
  }
}
