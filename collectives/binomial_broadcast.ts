/**
 * Binomial-tree broadcast (MPICH's short-message broadcast).
 *
 * Steps: ranks are renumbered relative to the root, v = (r − root) mod n. A rank v > 0 receives from
 * v − lowbit(v); then every rank sends to v + 2^j for each 2^j < lowbit(v) (all powers below n at the
 * root), largest subtree first. After ⌈log2 n⌉ rounds every rank has the buffer. Chunks of at most
 * `ctx.chunkBytes` are forwarded as soon as they arrive.
 *
 * Bytes each rank sends: m per child; the root has ⌈log2 n⌉ children, leaves none.
 *
 * Cost (sim/cost_model.ts `binomialBroadcastCost`), k = ⌈m/chunkBytes⌉, D = ⌈log2 n⌉:
 *   T = D·(k·α + m·β)
 *
 * @module
 */
import type { CollectiveContext } from "./comm.ts";
import { argChecks } from "./_checks.ts";
import { chunks, lowBit, mod } from "./_layout.ts";
import { Plan, type Step } from "./_schedule.ts";

/**
 * Broadcasts the root's `buf` to every rank's `buf` along a binomial tree.
 *
 * @param ctx The group's context; every rank calls with the same length and root.
 * @param buf The data at the root; overwritten with it elsewhere.
 * @param root The group rank that holds the data.
 * @returns When this rank's `buf` holds the data (and, at inner ranks, has been forwarded).
 * @throws {RangeError} If `buf` is not whole elements or `root` is not a rank.
 */
export async function binomialBroadcast(
  ctx: CollectiveContext,
  buf: Uint8Array,
  root: number,
): Promise<void> {
  const check = argChecks(ctx, "broadcast");
  check.buffer(buf);
  check.root(root);
  const { rank, size } = ctx.comm;
  if (size === 1 || buf.length === 0) return;
  const v = mod(rank - root, size);
  const real = (u: number): number => mod(u + root, size);
  const parts = chunks(ctx, buf);
  const plan = new Plan(ctx);
  let top = 1;
  while (top < size) top *= 2;
  const span = v === 0 ? top : lowBit(v);
  const got: Step[][] = parts.map((chunk) => v === 0 ? [] : [plan.recv(real(v - span), chunk)]);
  for (let step = span >> 1; step >= 1; step >>= 1) {
    if (v + step >= size) continue;
    parts.forEach((chunk, c) => plan.send(real(v + step), chunk, { after: got[c] }));
  }
  await plan.run();
}
