/**
 * Ordered reduce, the deterministic mode's: an ordered reduce-scatter (`ordered_reduce_scatter.ts`) into
 * a scratch shard (the other ranks' tensors are left unchanged), then a linear gather of the shards into
 * the root's tensor. Every element is the fold of the ranks' values in rank order (0, 1, …, n−1).
 *
 * Bytes each rank sends: (n−1)/n·m in the reduce-scatter and its shard, m/n, to the root; the root
 * receives (n−1)/n·m twice over.
 *
 * Cost (sim/cost_model.ts `orderedReduceCost`), k = ⌈m/(n·chunkBytes)⌉:
 *   T = 2(n−1)·k·α + 2·(n−1)/n·m·β + (n−1)/n·m·γ
 *
 * @module
 */
import type { CollectiveContext } from "./comm.ts";
import { argChecks } from "./_checks.ts";
import { linearGather } from "./linear_gather.ts";
import { shardsOf } from "./ordered_allreduce.ts";
import { orderedReduceScatterPlan } from "./ordered_reduce_scatter.ts";

/**
 * Reduces every rank's `buf` into the root's, every element folded over the ranks in rank order.
 *
 * @param ctx The group's context; every rank calls with the same length and root.
 * @param buf The local contribution; the reduction afterwards at the root, unchanged elsewhere.
 * @param root The group rank that receives the result.
 * @returns When this rank's part is done.
 * @throws {RangeError} If `buf` is not whole elements or `root` is not a rank.
 */
export async function orderedReduce(ctx: CollectiveContext, buf: Uint8Array, root: number): Promise<void> {
  const check = argChecks(ctx, "reduce");
  check.buffer(buf);
  check.root(root);
  const { rank, size } = ctx.comm;
  if (size === 1 || buf.length === 0) return;
  const shards = shardsOf(ctx, buf.length);
  const mine = ctx.scratch(shards.lengths[rank]);
  await orderedReduceScatterPlan(ctx, buf, mine, shards).run();
  await linearGather(ctx, mine, rank === root ? buf : undefined, root, shards);
}
