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
import { argChecks, rootBlocks } from "./_checks.ts";
import { chunks } from "./_layout.ts";
import { Plan } from "./_schedule.ts";

/**
 * Gathers every rank's `input` into the root's `output`, block r from rank r.
 *
 * @param ctx The group's context; every rank calls with the same length and root.
 * @param input This rank's block.
 * @param output At the root, room for n blocks; elsewhere unused (may be undefined).
 * @param root The group rank that gathers.
 * @returns When this rank's block is sent (and, at the root, every block is in place).
 * @throws {RangeError} If the lengths do not fit or `root` is not a rank.
 */
export async function linearGather(
  ctx: CollectiveContext,
  input: Uint8Array,
  output: Uint8Array | undefined,
  root: number,
): Promise<void> {
  const check = argChecks(ctx, "gather");
  check.root(root);
  check.buffer(input, "input");
  const { rank, size } = ctx.comm, b = input.length;
  const plan = new Plan(ctx);
  if (rank === root) {
    const out = rootBlocks(check, "gather", input, output);
    out.set(input, rank * b);
    for (let q = 0; q < size; q++) {
      if (q !== root) {
        for (const chunk of chunks(ctx, out.subarray(q * b, (q + 1) * b))) plan.recv(q, chunk);
      }
    }
  } else {
    for (const chunk of chunks(ctx, input)) plan.send(root, chunk);
  }
  await plan.run();
}
