/**
 * Argument checks shared by the algorithms. They only look at what one rank can see (lengths, roots,
 * the context); a disagreement between ranks shows up as a length mismatch in the transport.
 *
 * @module
 */
import type { CollectiveContext } from "./comm.ts";
import { type Blocks, equalBlocks } from "./_blocks.ts";

/** The checks of one collective call; every message starts with "Cannot <verb>:". */
export interface ArgChecks {
  /** Throws unless `buf` holds whole elements. */
  buffer(buf: Uint8Array, name?: string): void;
  /** Throws unless `root` is a rank of the group. */
  root(root: number): void;
  /** Throws unless `whole` is one `block` per rank, and both hold whole elements. */
  blocks(block: Uint8Array, whole: Uint8Array, names: { block: string; whole: string }): void;
}

/**
 * Checks the context at once and returns the argument checks for one call.
 *
 * @param ctx The algorithm's context.
 * @param verb What the caller does, for messages ("all-reduce", "broadcast").
 * @returns The checks.
 * @throws {RangeError} If the element size, chunk size, rank or size is unusable.
 */
export function argChecks(ctx: CollectiveContext, verb: string): ArgChecks {
  const { elemSize, chunkBytes, comm } = ctx;
  if (!Number.isInteger(elemSize) || elemSize < 1) {
    throw new RangeError(`Cannot ${verb}: expected a positive integer element size, found ${elemSize}`);
  }
  if (!(chunkBytes > 0)) {
    throw new RangeError(`Cannot ${verb}: expected chunkBytes > 0, found ${chunkBytes}`);
  }
  if (!Number.isInteger(comm.size) || comm.size < 1 || !(comm.rank >= 0 && comm.rank < comm.size)) {
    throw new RangeError(`Cannot ${verb}: rank ${comm.rank} is not in a group of ${comm.size} ranks`);
  }
  const buffer = (buf: Uint8Array, name = "buffer"): void => {
    if (buf.length % elemSize !== 0) {
      throw new RangeError(
        `Cannot ${verb}: ${name} of ${buf.length} bytes is not a multiple of the ${elemSize}-byte element`,
      );
    }
  };
  return {
    buffer,
    root(root: number): void {
      if (!Number.isInteger(root) || root < 0 || root >= comm.size) {
        throw new RangeError(`Cannot ${verb}: expected a root in 0..${comm.size - 1}, found ${root}`);
      }
    },
    blocks(block: Uint8Array, whole: Uint8Array, names: { block: string; whole: string }): void {
      buffer(block, names.block);
      const want = block.length * comm.size;
      if (whole.length !== want) {
        throw new RangeError(
          `Cannot ${verb}: expected ${names.whole} of ${comm.size} × ${block.length} = ${want} bytes, ` +
            `found ${whole.length}`,
        );
      }
    },
  };
}

/**
 * The root's n-block buffer of a gather (its output) or a scatter (its input), checked against the block.
 *
 * @param check The call's checks.
 * @param what `"gather"` or `"scatter"`.
 * @param block This rank's block (the gather's input, the scatter's output).
 * @param whole The root's n blocks.
 * @returns `whole`.
 * @throws {RangeError} If there is none, or it does not hold one block per rank.
 */
export function rootBlocks(
  check: ArgChecks,
  what: "gather" | "scatter",
  block: Uint8Array,
  whole: Uint8Array | undefined,
): Uint8Array {
  const name = what === "gather" ? "output" : "input";
  if (whole === undefined) throw new RangeError(`Cannot ${what}: the root needs an ${name}, found none`);
  check.blocks(block, whole, { block: what === "gather" ? "input" : "output", whole: name });
  return whole;
}

/**
 * Checks a v-form's buffers against its blocks: the rank's own block is `own` bytes (its input or output)
 * and the n-block buffer holds all of them, each a whole number of elements.
 *
 * @param check The call's checks.
 * @param verb The collective, for messages.
 * @param block This rank's block buffer.
 * @param own Its expected bytes.
 * @param whole The n-block buffer, or undefined where the rank has none.
 * @param blocks The blocks.
 * @throws {RangeError} If a length does not fit.
 */
export function checkUneven(
  check: ArgChecks,
  verb: string,
  block: Uint8Array,
  own: number,
  whole: Uint8Array | undefined,
  blocks: Blocks,
): void {
  check.buffer(block);
  if (block.length !== own) {
    throw new RangeError(`Cannot ${verb}: expected this rank's block of ${own} bytes, found ${block.length}`);
  }
  if (whole !== undefined && whole.length !== blocks.total) {
    throw new RangeError(
      `Cannot ${verb}: expected the n blocks' ${blocks.total} bytes, found ${whole.length}`,
    );
  }
}

/**
 * The blocks of a block collective's n-block buffer, checked: equal blocks of `block`'s size (`whole` must
 * hold n of them), or the v-form's `layout` (`block` must be this rank's, `whole` their sum).
 *
 * @param ctx The algorithm's context.
 * @param verb The collective, for messages.
 * @param block This rank's block buffer (an all-gather's input, a reduce-scatter's output).
 * @param whole The n-block buffer.
 * @param names How messages name the two.
 * @param layout The v-form's blocks, in bytes, if any.
 * @returns The blocks.
 * @throws {RangeError} If a length does not fit.
 */
export function checkedBlocks(
  ctx: CollectiveContext,
  verb: string,
  block: Uint8Array,
  whole: Uint8Array,
  names: { block: string; whole: string },
  layout?: Blocks,
): Blocks {
  const check = argChecks(ctx, verb);
  if (layout === undefined) {
    check.blocks(block, whole, names);
    return equalBlocks(ctx.comm.size, block.length);
  }
  checkUneven(check, verb, block, layout.lengths[ctx.comm.rank], whole, layout);
  return layout;
}
