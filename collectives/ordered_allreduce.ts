/**
 * Ordered all-reduce, the deterministic mode's: an ordered reduce-scatter (`ordered_reduce_scatter.ts`:
 * shard r of every rank to rank r, folded in rank order with `ctx.reduceMany`), then a ring all-gather of
 * the shards. Every element is the fold of the ranks' values in rank order (0, 1, …, n−1), the fold the
 * host segment's plans make, whatever the chunk size, transport, arrival order or hosts.
 *
 * Bytes each rank sends: 2·(n−1)/n·m, as the ring all-reduce; it reduces (n−1)/n·m.
 *
 * Cost (sim/cost_model.ts `ringAllReduceCost`, the same bytes and messages), k = ⌈m/(n·chunkBytes)⌉:
 *   T = 2(n−1)·k·α + 2·(n−1)/n·m·β + (n−1)/n·m·γ
 *
 * @module
 */
import type { CollectiveContext } from "./comm.ts";
import { argChecks } from "./_checks.ts";
import { blockOf, type Blocks } from "./_blocks.ts";
import { partition } from "./_layout.ts";
import { orderedReduceScatterPlan } from "./ordered_reduce_scatter.ts";
import { ringAllGather } from "./ring_allgather.ts";

/** `buf` cut into n shards of whole elements (the first ones one element longer), in bytes. */
export function shardsOf(ctx: CollectiveContext, bytes: number): Blocks {
  const offsets = partition(bytes, { parts: ctx.comm.size, elemSize: ctx.elemSize });
  return {
    offsets: offsets.slice(0, -1),
    lengths: offsets.slice(1).map((end, i) => end - offsets[i]),
    total: bytes,
  };
}

/**
 * All-reduces `buf` in place, every element folded over the ranks in rank order.
 *
 * @param ctx The group's context; every rank calls with the same length.
 * @param buf The local contribution; holds the reduction afterwards.
 * @returns When this rank's result is complete.
 * @throws {RangeError} If `buf` is not a whole number of elements.
 */
export async function orderedAllReduce(ctx: CollectiveContext, buf: Uint8Array): Promise<void> {
  argChecks(ctx, "all-reduce").buffer(buf);
  const { rank, size } = ctx.comm;
  if (size === 1 || buf.length === 0) return;
  const shards = shardsOf(ctx, buf.length), mine = blockOf(buf, shards, rank);
  // This rank's shard of the tensor is both its input to the fold and where the fold lands.
  await orderedReduceScatterPlan(ctx, buf, mine, shards).run();
  await ringAllGather(ctx, mine, buf, shards);
}
