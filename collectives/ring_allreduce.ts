/**
 * Ring all-reduce (Baidu/Horovod, NCCL's ring, Gloo's `allreduce_ring_chunked`).
 *
 * Steps: the buffer is cut into n near-equal segments. Reduce-scatter: for t = 0..n-2, rank r sends
 * segment (r − t) to its right neighbour and reduces segment (r − t − 1) arriving from its left, so after
 * n − 1 steps it holds segment (r + 1) fully reduced. All-gather: for n − 1 more steps the same rotation
 * forwards finished segments, which are copied instead of reduced. Each segment moves in chunks of at
 * most `ctx.chunkBytes`, and chunk c of step t leaves as soon as chunk c of step t − 1 is reduced, so the
 * ring is a pipeline: while one chunk is reduced the next is in flight.
 *
 * Bytes each rank sends: 2·(n−1)/n·m (and receives as much); it reduces (n−1)/n·m.
 *
 * Cost (sim/cost_model.ts `ringAllReduceCost`), k = ⌈m/(n·chunkBytes)⌉ chunks per segment:
 *   T = 2(n−1)·k·α + 2·(n−1)/n·m·β + (n−1)/n·m·γ
 *
 * Every segment is reduced once, by a chain of ranks in a fixed order, then copied: all ranks end with
 * the same bits.
 *
 * @module
 */
import type { CollectiveContext } from "./comm.ts";
import { argChecks } from "./_checks.ts";
import { chunks, mod, partition } from "./_layout.ts";
import { Plan, type Step } from "./_schedule.ts";

/**
 * All-reduces `buf` in place around the ring.
 *
 * @param ctx The group's context; every rank calls with the same length.
 * @param buf The local contribution; holds the reduction afterwards.
 * @returns When this rank's result is complete.
 * @throws {RangeError} If `buf` is not a whole number of elements.
 */
export async function ringAllReduce(ctx: CollectiveContext, buf: Uint8Array): Promise<void> {
  argChecks(ctx, "all-reduce").buffer(buf);
  const { rank, size } = ctx.comm;
  if (size === 1 || buf.length === 0) return;
  const right = mod(rank + 1, size);
  const left = mod(rank - 1, size);
  const bounds = partition(buf.length, { parts: size, elemSize: ctx.elemSize });
  const segment = (s: number): Uint8Array[] => chunks(ctx, buf.subarray(bounds[s], bounds[s + 1]));
  const plan = new Plan(ctx);
  // sentInReduce[s][c]: the reduce-scatter send of chunk c of segment s, which must leave before the
  // all-gather overwrites that chunk.
  const sentInReduce: Step[][] = [];
  let arrived: Step[] = [];
  for (let t = 0; t < 2 * (size - 1); t++) {
    const out = mod(rank - t, size);
    const sends = segment(out).map((chunk, c) =>
      plan.send(right, chunk, { after: t > 0 ? [arrived[c]] : [] })
    );
    if (t < size - 1) sentInReduce[out] = sends;
    const inc = mod(rank - t - 1, size);
    arrived = segment(inc).map((chunk, c) =>
      t < size - 1 ? plan.recvReduce(left, chunk) : plan.recv(left, chunk, { after: [sentInReduce[inc][c]] })
    );
  }
  await plan.run();
}
