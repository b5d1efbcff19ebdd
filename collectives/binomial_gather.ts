/**
 * Binomial-tree gather (MPICH's short-message gather).
 *
 * Steps: ranks are renumbered relative to the root, v = (r − root) mod n. Rank v's subtree is the ranks
 * [v, v + lowbit(v)) (all of them at the root), cut at n. A rank receives the blocks of each child's
 * subtree, v + 2^j for 2^j < lowbit(v), into their places after its own, then sends the whole range to
 * its parent v − lowbit(v) in one message (in chunks of at most `ctx.chunkBytes`). The root, which holds
 * the blocks in relative order, rotates them into rank order (no copy when the root is rank 0).
 *
 * Bytes each rank sends: its subtree's blocks once; the root receives (n−1)·b in ⌈log2 n⌉ messages.
 *
 * Cost (sim/cost_model.ts `binomialGatherCost`, m = n·b the output bytes): with D = ⌈log2 n⌉ rounds,
 * round j moving min(2^j, n − 2^j) blocks of b bytes in k_j = ⌈min(2^j, n − 2^j)·b/chunkBytes⌉ messages:
 *   T = Σ_j k_j·α + (n−1)·b·β
 *
 * @module
 */
import type { CollectiveContext } from "./comm.ts";
import { argChecks, rootBlocks } from "./_checks.ts";
import { chunks, lowBit, mod } from "./_layout.ts";
import { Plan, type Step } from "./_schedule.ts";

/**
 * Gathers every rank's `input` into the root's `output`, block r from rank r, along a binomial tree.
 *
 * @param ctx The group's context; every rank calls with the same length and root.
 * @param input This rank's block.
 * @param output At the root, room for n blocks; elsewhere unused (may be undefined).
 * @param root The group rank that gathers.
 * @returns When this rank's subtree is sent (and, at the root, every block is in place).
 * @throws {RangeError} If the lengths do not fit or `root` is not a rank.
 */
export async function binomialGather(
  ctx: CollectiveContext,
  input: Uint8Array,
  output: Uint8Array | undefined,
  root: number,
): Promise<void> {
  const check = argChecks(ctx, "gather");
  check.root(root);
  check.buffer(input, "input");
  const { rank, size } = ctx.comm, b = input.length;
  const out = rank === root ? rootBlocks(check, "gather", input, output) : undefined;
  const v = mod(rank - root, size);
  let top = 1;
  while (top < size) top *= 2;
  const span = v === 0 ? top : lowBit(v);
  const end = Math.min(v + span, size);
  // This subtree's blocks in relative order: the root's output itself when relative order is rank order.
  const range = end - v === 1 ? input : out !== undefined && root === 0 ? out : ctx.scratch((end - v) * b);
  if (range !== input) range.set(input, 0);
  const plan = new Plan(ctx);
  const got: Step[] = [];
  for (let step = 1; step < span && v + step < size; step *= 2) {
    const child = v + step, childEnd = Math.min(child + step, size);
    const into = range.subarray((child - v) * b, (childEnd - v) * b);
    for (const chunk of chunks(ctx, into)) got.push(plan.recv(mod(child + root, size), chunk));
  }
  if (v !== 0) {
    for (const chunk of chunks(ctx, range)) plan.send(mod(v - span + root, size), chunk, { after: got });
  }
  await plan.run();
  if (out !== undefined && range !== out) {
    // Relative block u belongs to rank (u + root) mod n.
    for (let u = 0; u < size; u++) out.set(range.subarray(u * b, (u + 1) * b), mod(u + root, size) * b);
  }
}
