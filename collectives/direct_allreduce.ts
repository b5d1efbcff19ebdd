/**
 * Direct all-reduce, for tiny messages: one round, no forwarding.
 *
 * Steps: every rank sends its whole buffer to every other rank, then reduces all n contributions, its own
 * in its rank's place, in rank order with `ctx.reduceMany`. Buffers larger than `ctx.chunkBytes` move in
 * chunks, each reduced when all n copies of it are in.
 *
 * Bytes each rank sends: (n−1)·m (and receives as much); it folds n contributions of m
 * bytes, which costs (n−1)·m of reduction.
 *
 * Cost (sim/cost_model.ts `directAllReduceCost`), k = ⌈m/chunkBytes⌉:
 *   T = (n−1)·k·α + (n−1)·m·β + (n−1)·m·γ
 *
 * Every rank reduces the same inputs in the same order, so all ranks end with the same bits.
 *
 * @module
 */
import type { CollectiveContext } from "./comm.ts";
import { argChecks } from "./_checks.ts";
import { chunks } from "./_layout.ts";
import { Plan } from "./_schedule.ts";

/**
 * All-reduces `buf` in place by exchanging it with every other rank.
 *
 * @param ctx The group's context; every rank calls with the same length.
 * @param buf The local contribution; holds the reduction afterwards.
 * @returns When this rank's result is complete.
 * @throws {RangeError} If `buf` is not a whole number of elements.
 */
export async function directAllReduce(ctx: CollectiveContext, buf: Uint8Array): Promise<void> {
  argChecks(ctx, "all-reduce").buffer(buf);
  const { rank, size } = ctx.comm;
  if (size === 1 || buf.length === 0) return;
  // Send from a copy, so the result can be written into `buf` while copies of it are still in flight.
  const own = ctx.scratch(buf.length);
  own.set(buf);
  const ownChunks = chunks(ctx, own);
  const plan = new Plan(ctx);
  chunks(ctx, buf).forEach((chunk, c) => {
    for (let r = 0; r < size; r++) if (r !== rank) plan.send(r, ownChunks[c]);
    plan.recvReduceMany(chunk, Array.from({ length: size }, (_, r) => r === rank ? ownChunks[c] : r));
  });
  await plan.run();
}
