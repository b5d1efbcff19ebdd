/**
 * Hierarchical (topology-aware) all-reduce: the ranks of a host first combine their contributions over the
 * host's own fast links, only then does anything cross the network, and the result comes back the same
 * way (Horovod's hierarchical all-reduce; NCCL's intra-node rings plus inter-node trees; the 2D torus
 * all-reduce of Mikami et al.). The hosts are `ctx.hosts` (each group rank's host, from the ranks' host
 * identity); without it, or on one host, or with one rank per host, it is the ring.
 *
 * Same number L of ranks on every host (H hosts), the 2D scheme:
 * 1. intra-host ring reduce-scatter: local rank i ends with shard i of its host's sum;
 * 2. inter-host ring all-reduce of shard i among the H ranks of local index i (the L shards of a host
 *    cross the network side by side, each a 1/L of the bytes);
 * 3. intra-host ring all-gather of the shards.
 * Uneven hosts, the leaders' scheme: binomial reduce to each host's first rank, ring all-reduce among
 * those leaders, binomial broadcast back.
 *
 * Bytes over the network per host: 2·(H−1)/H·m, against a flat ring's 2·(n−1)/n·m through each host's link
 * (n = H·L), and 2(H−1) network latencies per chunk against the ring's 2(n−1).
 *
 * Cost (`sim/cost_model.ts` `hierarchicalAllReduceCost`): 2D,
 *   T = 2(L−1)·α_i + 2·(L−1)/L·m·β_i + (L−1)/L·m·γ + 2(H−1)·k·α + 2·(H−1)/H·m·β + (H−1)/H·(m/L)·γ,
 * α_i, β_i within a host, α, β between hosts; leaders, the binomial reduce and broadcast of m on the
 * largest host plus the ring of m among H.
 *
 * Every element is reduced along fixed paths, in the same order on every rank that computes it, and then
 * copied: all ranks end with the same bits.
 *
 * @module
 */
import type { CollectiveContext, Comm } from "./comm.ts";
import { argChecks } from "./_checks.ts";
import { mod, partition } from "./_layout.ts";
import { binomialReduce } from "./binomial_reduce.ts";
import { binomialBroadcast } from "./binomial_broadcast.ts";
import { ringAllReduce } from "./ring_allreduce.ts";

/** The hosts of a group: the group ranks of each host, in rank order, hosts in order of their first rank. */
export function hostGroups(hosts: readonly number[] | undefined, size: number): number[][] {
  if (hosts === undefined) return Array.from({ length: size }, (_, r) => [r]);
  if (hosts.length !== size) {
    throw new RangeError(`Expected a host for each of ${size} ranks, found ${hosts.length}`);
  }
  const groups = new Map<number, number[]>();
  hosts.forEach((h, r) => {
    const g = groups.get(h);
    if (g) g.push(r);
    else groups.set(h, [r]);
  });
  return [...groups.values()];
}

/** The communicator of `members` (group ranks, this rank among them), numbered by their order there. */
export function subComm(comm: Comm, members: readonly number[]): Comm {
  const rank = members.indexOf(comm.rank);
  if (rank < 0) throw new RangeError(`Rank ${comm.rank} is not among ${members.join(", ")}`);
  return {
    rank,
    size: members.length,
    send: (peer, data) => comm.send(members[peer], data),
    recv: (peer, into) => comm.recv(members[peer], into),
  };
}

/**
 * All-reduces `buf` in place, within hosts first.
 *
 * @param ctx The group's context (`ctx.hosts` says each rank's host); every rank calls with the same length.
 * @param buf The local contribution; holds the reduction afterwards.
 * @returns When this rank's result is complete.
 * @throws {RangeError} If `buf` is not a whole number of elements.
 */
export async function hierarchicalAllReduce(ctx: CollectiveContext, buf: Uint8Array): Promise<void> {
  argChecks(ctx, "all-reduce").buffer(buf);
  const { rank, size } = ctx.comm;
  if (size === 1 || buf.length === 0) return;
  const groups = hostGroups(ctx.hosts, size);
  const L = Math.max(...groups.map((g) => g.length));
  if (groups.length === 1 || L === 1) return await ringAllReduce(ctx, buf);
  const mine = groups.find((g) => g.includes(rank)) as number[];
  const local = { ...ctx, comm: subComm(ctx.comm, mine) };
  if (groups.every((g) => g.length === L)) {
    // 2D: shards within the host, each shard's all-reduce across hosts among ranks of the same index.
    const bounds = partition(buf.length, { parts: L, elemSize: ctx.elemSize });
    const i = local.comm.rank;
    await ringReduceScatterInPlace(local, buf, bounds);
    const peers = groups.map((g) => g[i]);
    const across = { ...ctx, comm: subComm(ctx.comm, peers) };
    await ringAllReduce(across, buf.subarray(bounds[i], bounds[i + 1]));
    await ringAllGatherInPlace(local, buf, bounds);
    return;
  }
  // Uneven hosts: through one leader per host.
  await binomialReduce(local, buf, 0);
  if (local.comm.rank === 0) {
    const leaders = { ...ctx, comm: subComm(ctx.comm, groups.map((g) => g[0])) };
    await ringAllReduce(leaders, buf);
  }
  await binomialBroadcast(local, buf, 0);
}

/** Ring reduce-scatter in place over the segments `bounds`: rank i ends with segment i reduced. */
async function ringReduceScatterInPlace(
  ctx: CollectiveContext,
  buf: Uint8Array,
  bounds: readonly number[],
): Promise<void> {
  const { rank, size } = ctx.comm;
  const right = mod(rank + 1, size), left = mod(rank - 1, size);
  const seg = (s: number): Uint8Array => buf.subarray(bounds[s], bounds[s + 1]);
  let largest = 0;
  for (let s = 0; s < size; s++) largest = Math.max(largest, bounds[s + 1] - bounds[s]);
  const incoming = ctx.scratch(largest);
  for (let t = 0; t < size - 1; t++) {
    const out = seg(mod(rank - t - 1, size));
    const into = seg(mod(rank - t - 2, size));
    const got = incoming.subarray(0, into.length);
    await Promise.all([ctx.comm.send(right, out), ctx.comm.recv(left, got)]);
    ctx.reduce(into, got);
  }
}

/** Ring all-gather in place over the segments `bounds`, rank i holding segment i. */
async function ringAllGatherInPlace(
  ctx: CollectiveContext,
  buf: Uint8Array,
  bounds: readonly number[],
): Promise<void> {
  const { rank, size } = ctx.comm;
  const right = mod(rank + 1, size), left = mod(rank - 1, size);
  const seg = (s: number): Uint8Array => buf.subarray(bounds[s], bounds[s + 1]);
  for (let t = 0; t < size - 1; t++) {
    await Promise.all([
      ctx.comm.send(right, seg(mod(rank - t, size))),
      ctx.comm.recv(left, seg(mod(rank - t - 1, size))),
    ]);
  }
}
