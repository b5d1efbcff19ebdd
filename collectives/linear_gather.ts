/**
 * Linear gather (MPICH's long-message gather): every rank sends its block straight to the root, which
 * receives all of them at once, each into its place in the output. Blocks move in chunks of at most
 * `ctx.chunkBytes`.
 *
 * Bytes each rank sends: b (the block) to the root; the root receives (n−1)·b.
 *
 * Cost (sim/cost_model.ts `linearGatherCost`, m = n·b the output bytes), k = ⌈b/chunkBytes⌉:
 *   T = (n−1)·k·α + (n−1)·b·β
 *
 * @module
 */
import type { CollectiveContext } from "./comm.ts";
import { argChecks, checkUneven, rootBlocks } from "./_checks.ts";
import { blockOf, type Blocks, equalBlocks } from "./_blocks.ts";
import { chunks } from "./_layout.ts";
import { Plan } from "./_schedule.ts";

/**
 * Gathers every rank's `input` into the root's `output`, block r from rank r.
 *
 * @param ctx The group's context; every rank calls with the same length and root.
 * @param input This rank's block.
 * @param output At the root, room for n blocks; elsewhere unused (may be undefined).
 * @param root The group rank that gathers.
 * @param layout Uneven blocks (the v-form, `counts`), in bytes; equal blocks of the input's size if omitted.
 * @returns When this rank's block is sent (and, at the root, every block is in place).
 * @throws {RangeError} If the lengths do not fit or `root` is not a rank.
 */
export async function linearGather(
  ctx: CollectiveContext,
  input: Uint8Array,
  output: Uint8Array | undefined,
  root: number,
  layout?: Blocks,
): Promise<void> {
  const check = argChecks(ctx, "gather");
  check.root(root);
  check.buffer(input, "input");
  const { rank, size } = ctx.comm;
  const blocks = layout ?? equalBlocks(size, input.length);
  if (layout !== undefined) checkUneven(check, "gather", input, blocks.lengths[rank], output, blocks);
  const plan = new Plan(ctx);
  if (rank === root) {
    const out = layout === undefined ? rootBlocks(check, "gather", input, output) : output as Uint8Array;
    blockOf(out, blocks, rank).set(input);
    for (let q = 0; q < size; q++) {
      if (q !== root) { for (const chunk of chunks(ctx, blockOf(out, blocks, q))) plan.recv(q, chunk); }
    }
  } else {
    for (const chunk of chunks(ctx, input)) plan.send(root, chunk);
  }
  await plan.run();
}
