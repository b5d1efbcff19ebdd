/**
 * Binomial-tree scatter (MPICH's short-message scatter), the gather's tree run backwards.
 *
 * Steps: ranks are renumbered relative to the root, v = (r − root) mod n; rank v's subtree is the ranks
 * [v, v + lowbit(v)) (all of them at the root), cut at n. The root (its blocks rotated into relative
 * order, no copy when it is rank 0) sends each child v + 2^j its subtree's blocks, largest first; every
 * other rank receives its subtree's blocks from its parent v − lowbit(v) in one message (in chunks of at
 * most `ctx.chunkBytes`), keeps the first and forwards the rest the same way.
 *
 * Bytes each rank receives: its subtree's blocks once; the root sends (n−1)·b in ⌈log2 n⌉ messages.
 *
 * Cost (sim/cost_model.ts `binomialGatherCost`, the same formula; m = n·b the input bytes):
 *   T = Σ_j k_j·α + (n−1)·b·β
 *
 * @module
 */
import type { CollectiveContext } from "./comm.ts";
import { argChecks, rootBlocks } from "./_checks.ts";
import { chunks, lowBit, mod } from "./_layout.ts";
import { Plan, type Step } from "./_schedule.ts";

/**
 * Scatters the root's `input`, block r to rank r's `output`, along a binomial tree.
 *
 * @param ctx The group's context; every rank calls with the same length and root.
 * @param input At the root, n blocks; elsewhere unused (may be undefined).
 * @param output This rank's block.
 * @param root The group rank that scatters.
 * @returns When this rank's block is in place and its children's are sent.
 * @throws {RangeError} If the lengths do not fit or `root` is not a rank.
 */
export async function binomialScatter(
  ctx: CollectiveContext,
  input: Uint8Array | undefined,
  output: Uint8Array,
  root: number,
): Promise<void> {
  const check = argChecks(ctx, "scatter");
  check.root(root);
  check.buffer(output, "output");
  const { rank, size } = ctx.comm, b = output.length;
  const all = rank === root ? rootBlocks(check, "scatter", output, input) : undefined;
  const v = mod(rank - root, size);
  let top = 1;
  while (top < size) top *= 2;
  const span = v === 0 ? top : lowBit(v);
  const end = Math.min(v + span, size);
  let range: Uint8Array;
  if (all !== undefined) {
    range = root === 0 ? all : ctx.scratch(size * b);
    // Relative block u is rank (u + root) mod n's.
    if (range !== all) {
      for (let u = 0; u < size; u++) {
        range.set(all.subarray(mod(u + root, size) * b, (mod(u + root, size) + 1) * b), u * b);
      }
    }
  } else {
    range = end - v === 1 ? output : ctx.scratch((end - v) * b);
  }
  const plan = new Plan(ctx);
  const got: Step[] = [];
  if (v !== 0) {
    for (const chunk of chunks(ctx, range)) got.push(plan.recv(mod(v - span + root, size), chunk));
  }
  for (let step = span >> 1; step >= 1; step >>= 1) {
    const child = v + step;
    if (child >= size) continue;
    const from = range.subarray((child - v) * b, (Math.min(child + step, size) - v) * b);
    for (const chunk of chunks(ctx, from)) plan.send(mod(child + root, size), chunk, { after: got });
  }
  await plan.run();
  if (range !== output) output.set(range.subarray(0, b));
}
