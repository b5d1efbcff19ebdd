/**
 * Parameter-server all-reduce (BytePS/PS-lite style): the buffer is sharded over S server ranks, group
 * ranks 0..S−1. With S = n (the default) every rank serves one shard, BytePS's co-located mode; with
 * S < n the first S ranks serve and every rank still contributes.
 *
 * Steps: push: every rank sends shard s to server s (a server keeps its own shard). Reduce: server s
 * reduces the n contributions to shard s in rank order with `ctx.reduceMany`. Pull: server s sends the
 * reduced shard to every other rank. Shards move in chunks of at most `ctx.chunkBytes`, and a chunk is
 * pulled as soon as it is reduced.
 *
 * Bytes each rank sends: (S − [r < S])·m/S pushed, plus (n−1)·m/S pulled from a server; a server receives
 * (n−1)·m/S and reduces n shards of m/S. The busiest link carries (n−1)·m/S each way (= the ring's
 * (n−1)/n·m when S = n).
 *
 * Cost (sim/cost_model.ts `psAllReduceCost`), k = ⌈m/(S·chunkBytes)⌉ chunks per shard:
 *   T = 2(n−1)·k·α + 2(n−1)·m/S·β + (n−1)·m/S·γ
 *
 * Each shard is reduced once, by its server, in rank order, so all ranks end with the same bits.
 *
 * @module
 */
import type { CollectiveContext } from "./comm.ts";
import { argChecks } from "./_checks.ts";
import { chunks, partition } from "./_layout.ts";
import { Plan } from "./_schedule.ts";

/** Options of {@linkcode psAllReduce}. */
export interface PsAllReduceOptions {
  /** The number of server ranks, 1..n; ranks 0..servers−1 serve. @default the group size */
  servers?: number;
}

/**
 * All-reduces `buf` in place through parameter servers.
 *
 * @param ctx The group's context; every rank calls with the same length and options.
 * @param buf The local contribution; holds the reduction afterwards.
 * @param options The number of servers.
 * @returns When this rank's result is complete.
 * @throws {RangeError} If `buf` is not a whole number of elements or `servers` is not in 1..n.
 */
export async function psAllReduce(
  ctx: CollectiveContext,
  buf: Uint8Array,
  options: PsAllReduceOptions = {},
): Promise<void> {
  argChecks(ctx, "all-reduce").buffer(buf);
  const { rank, size } = ctx.comm;
  const servers = options.servers ?? size;
  if (!Number.isInteger(servers) || servers < 1 || servers > size) {
    throw new RangeError(`Cannot all-reduce: expected servers in 1..${size}, found ${servers}`);
  }
  if (size === 1 || buf.length === 0) return;
  const bounds = partition(buf.length, { parts: servers, elemSize: ctx.elemSize });
  const shard = (s: number): Uint8Array => buf.subarray(bounds[s], bounds[s + 1]);
  const plan = new Plan(ctx);
  // Wire order per pair, the same at both ends: push of chunk c at key 2c, pull of chunk c at key 2c+3,
  // so pulls of early chunks interleave with pushes of later ones instead of waiting for all of them.
  const pushKey = (c: number): number => 2 * c;
  const pullKey = (c: number): number => 2 * c + 3;
  for (let s = 0; s < servers; s++) {
    if (s === rank) continue;
    chunks(ctx, shard(s)).forEach((chunk, c) => {
      const pushed = plan.send(s, chunk, { key: pushKey(c) });
      plan.recv(s, chunk, { after: [pushed], key: pullKey(c) });
    });
  }
  if (rank < servers) {
    const mine = shard(rank);
    // Our own contribution, copied so that the reduction never reads the bytes it writes.
    const own = ctx.scratch(mine.length);
    own.set(mine);
    const ownChunks = chunks(ctx, own);
    chunks(ctx, mine).forEach((chunk, c) => {
      const sources = Array.from({ length: size }, (_, r) => r === rank ? ownChunks[c] : r);
      const reduced = plan.recvReduceMany(chunk, sources, { key: pushKey(c) });
      for (let r = 0; r < size; r++) {
        if (r !== rank) plan.send(r, chunk, { after: [reduced], key: pullKey(c) });
      }
    });
  }
  await plan.run();
}
