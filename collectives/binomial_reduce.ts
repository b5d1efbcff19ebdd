/**
 * Binomial-tree reduce (MPICH's).
 *
 * Steps: ranks are renumbered relative to the root, v = (r − root) mod n. For mask = 1, 2, 4, …: a rank
 * with bit `mask` set sends its partial result to v − mask and stops; otherwise it receives from v + mask
 * (if that exists) and reduces. Contributions are combined in this fixed order (own, then children by
 * increasing mask) whatever order they arrive in. Chunks of at most `ctx.chunkBytes` go up as soon as they
 * are reduced. Only the root's buffer is written; an inner rank sums in scratch.
 *
 * Bytes each rank sends: m (none at the root); a rank with c children receives and reduces c·m, the root
 * ⌈log2 n⌉·m.
 *
 * Cost (sim/cost_model.ts `binomialReduceCost`), k = ⌈m/chunkBytes⌉, D = ⌈log2 n⌉:
 *   T = D·(k·α + m·β + m·γ)
 *
 * @module
 */
import type { CollectiveContext } from "./comm.ts";
import { argChecks } from "./_checks.ts";
import { chunks, mod } from "./_layout.ts";
import { Plan, type Step } from "./_schedule.ts";

/**
 * Reduces every rank's `buf` into the root's `buf` along a binomial tree.
 *
 * @param ctx The group's context; every rank calls with the same length and root.
 * @param buf The local contribution; at the root it holds the reduction afterwards, elsewhere it is left
 *   unchanged.
 * @param root The group rank that receives the result.
 * @returns When this rank's part is done (at the root: when the result is complete).
 * @throws {RangeError} If `buf` is not whole elements or `root` is not a rank.
 */
export async function binomialReduce(ctx: CollectiveContext, buf: Uint8Array, root: number): Promise<void> {
  const check = argChecks(ctx, "reduce");
  check.buffer(buf);
  check.root(root);
  const { rank, size } = ctx.comm;
  if (size === 1 || buf.length === 0) return;
  const v = mod(rank - root, size);
  const real = (u: number): number => mod(u + root, size);
  const children: number[] = [];
  let parent = -1;
  for (let mask = 1; mask < size; mask *= 2) {
    if (v & mask) {
      parent = real(v - mask);
      break;
    }
    if (v + mask < size) children.push(real(v + mask));
  }
  const plan = new Plan(ctx);
  const own = chunks(ctx, buf);
  // The root reduces in place; an inner rank writes op(own, first child) into scratch, then accumulates.
  const acc = parent < 0 || children.length === 0 ? own : chunks(ctx, ctx.scratch(buf.length));
  own.forEach((chunk, c) => {
    let reduced: Step[] = [];
    children.forEach((child, i) => {
      const base = i === 0 && acc !== own ? chunk : undefined;
      reduced = [plan.recvReduce(child, acc[c], { base, after: reduced })];
    });
    if (parent >= 0) plan.send(parent, acc[c], { after: reduced });
  });
  await plan.run();
}
