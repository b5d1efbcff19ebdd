/**
 * Linear scatter (MPICH's long-message scatter): the root sends block r of its input straight to rank r,
 * to every rank at once; each rank receives its block into its output. Blocks move in chunks of at most
 * `ctx.chunkBytes`.
 *
 * Bytes the root sends: (n−1)·b; every other rank receives b.
 *
 * Cost (sim/cost_model.ts `linearGatherCost`, the same formula; m = n·b the input bytes),
 * k = ⌈b/chunkBytes⌉:
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
 * Scatters the root's `input`, block r to rank r's `output`.
 *
 * @param ctx The group's context; every rank calls with the same length and root.
 * @param input At the root, n blocks; elsewhere unused (may be undefined).
 * @param output This rank's block.
 * @param root The group rank that scatters.
 * @param layout Uneven blocks (the v-form, `counts`), in bytes; equal blocks of the output's size if omitted.
 * @returns When this rank's block is in place (and, at the root, every block is sent).
 * @throws {RangeError} If the lengths do not fit or `root` is not a rank.
 */
export async function linearScatter(
  ctx: CollectiveContext,
  input: Uint8Array | undefined,
  output: Uint8Array,
  root: number,
  layout?: Blocks,
): Promise<void> {
  const check = argChecks(ctx, "scatter");
  check.root(root);
  check.buffer(output, "output");
  const { rank, size } = ctx.comm;
  const blocks = layout ?? equalBlocks(size, output.length);
  if (layout !== undefined) checkUneven(check, "scatter", output, blocks.lengths[rank], input, blocks);
  const plan = new Plan(ctx);
  if (rank === root) {
    const all = layout === undefined ? rootBlocks(check, "scatter", output, input) : input as Uint8Array;
    for (let q = 0; q < size; q++) {
      if (q !== root) { for (const chunk of chunks(ctx, blockOf(all, blocks, q))) plan.send(q, chunk); }
    }
    output.set(blockOf(all, blocks, rank));
  } else {
    for (const chunk of chunks(ctx, output)) plan.recv(root, chunk);
  }
  await plan.run();
}
