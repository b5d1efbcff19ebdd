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
 * The three run as one pipeline of H slices (slice s: segment s of every shard, the unit of the inter-host
 * ring): the ring starts once its first slice is reduced within the host, and a slice is gathered within the
 * host as soon as the ring has finished it, so only a slice's worth of the intra-host stages is not hidden
 * behind the network (at 1 MiB on 4 emulated 1 Gb/s hosts of 2 ranks, the stages one after the other spent
 * 3 ms of 19 within the hosts).
 * Uneven hosts, the leaders' scheme, pipelined the same way: each host's first rank (its leader) takes its
 * host's contributions segment by segment in the order the ring between the leaders needs them, and sends
 * each segment back to them as soon as that ring has finished it.
 *
 * Bytes over the network per host: 2·(H−1)/H·m, against a flat ring's 2·(n−1)/n·m through each host's link
 * (n = H·L), and 2(H−1) network latencies per chunk against the ring's 2(n−1).
 *
 * Cost (`sim/cost_model.ts` `hierarchicalAllReduceCost`): 2D, with the intra-host stages
 *   W = 2(L−1)·H·α_i + 2·(L−1)/L·m·β_i + (L−1)/L·m·γ and the inter-host ring
 *   A = 2(H−1)·k·α + 2·(H−1)/H·m·β + (H−1)/H·(m/L)·γ,  T = W/H + max(A, W·(H−1)/H),
 * α_i, β_i within a host, α, β between hosts; leaders, the same with W = (L−1)·(2H·α_i + 2m·β_i + m·γ) on
 * the largest host's leader and A the ring of m among the H leaders.
 *
 * Every element is reduced along fixed paths, in the same order on every rank that computes it, and then
 * copied: all ranks end with the same bits.
 *
 * @module
 */
import type { CollectiveContext, Comm } from "./comm.ts";
import { argChecks } from "./_checks.ts";
import { chunks, mod, partition } from "./_layout.ts";
import { Plan, type Step } from "./_schedule.ts";
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
  if (groups.every((g) => g.length === L)) await twoDimensional(ctx, buf, groups, mine);
  else await leaders(ctx, buf, groups, mine);
}

/**
 * The 2D scheme as one plan, pipelined by slices: shard i (local rank i's) is cut into H segments, and
 * slice s is segment s of every shard. The intra-host reduce-scatter runs slice by slice in the order the
 * inter-host ring needs them (its step t sends segment x−t and reduces into x−t−1, x this rank's host), so
 * the ring starts once the first slice is reduced within the host, not the whole buffer; and the intra-host
 * all-gather of a slice starts as soon as the ring has finished that segment. Only the first slice's
 * reduce-scatter and the last slice's all-gather are not hidden behind the network.
 */
async function twoDimensional(
  ctx: CollectiveContext,
  buf: Uint8Array,
  groups: readonly number[][],
  mine: readonly number[],
): Promise<void> {
  const { rank } = ctx.comm;
  const L = mine.length, H = groups.length;
  const i = mine.indexOf(rank);
  const x = groups.indexOf(mine as number[]);
  const localRight = mine[mod(i + 1, L)], localLeft = mine[mod(i - 1, L)];
  const acrossRight = groups[mod(x + 1, H)][i], acrossLeft = groups[mod(x - 1, H)][i];
  const shards = partition(buf.length, { parts: L, elemSize: ctx.elemSize });
  const segments = Array.from(
    { length: L },
    (_, p) => partition(shards[p + 1] - shards[p], { parts: H, elemSize: ctx.elemSize }),
  );
  /** Part p (shard p's segment) of slice s, in chunks. */
  const part = (p: number, s: number): Uint8Array[] =>
    chunks(ctx, buf.subarray(shards[p] + segments[p][s], shards[p] + segments[p][s + 1]));
  const plan = new Plan(ctx);

  // 1. Intra-host ring reduce-scatter, slice x, x−1, ..., x+1 (the ring's order); wire keys 0..H−1.
  const intraDone: Step[] = new Array(H);
  for (let o = 0; o < H; o++) {
    const s = mod(x - o, H);
    const steps: Step[] = [];
    let reduced: Step[] = [];
    for (let t = 0; t < L - 1; t++) {
      const after = reduced;
      const sends = part(mod(i - t - 1, L), s).map((c, k) =>
        plan.send(localRight, c, { key: o, after: t > 0 ? [after[k]] : [] })
      );
      reduced = part(mod(i - t - 2, L), s).map((c) => plan.recvReduce(localLeft, c, { key: o }));
      steps.push(...sends, ...reduced);
    }
    intraDone[s] = plan.join(steps);
  }

  // 2. Inter-host ring all-reduce of shard i among the H ranks of local index i, each segment after its
  // slice is reduced within the host.
  const final = ringOfHosts(
    plan,
    { x, H, right: acrossRight, left: acrossLeft, ready: intraDone },
    (s) => part(i, s),
  );

  // 3. Intra-host ring all-gather of each slice once its segment is final, in the order they finish
  // (x+1, then x, x−1, ..., x+2); wire keys H..2H−1.
  for (let o = 0; o < H; o++) {
    const s = mod(x + 1 - o, H);
    let got: Step[] = [final[s]];
    for (let t = 0; t < L - 1; t++) {
      const ready = got;
      part(mod(i - t, L), s).forEach((c) => plan.send(localRight, c, { key: H + o, after: ready }));
      got = [
        plan.join(
          part(mod(i - t - 1, L), s).map((c) =>
            plan.recv(localLeft, c, { key: H + o, after: [intraDone[s]] })
          ),
        ),
      ];
    }
  }
  await plan.run();
}

/**
 * One leader per host (uneven hosts), pipelined: the ring between the hosts' leaders runs on the whole
 * buffer cut into H segments, each segment reduced into the leader from its host's other ranks (in local
 * rank order) in the order the ring needs them, and sent back to them as soon as the ring has finished it.
 * Only the first segment's gathering and the last one's return are not hidden behind the network.
 */
async function leaders(
  ctx: CollectiveContext,
  buf: Uint8Array,
  groups: readonly number[][],
  mine: readonly number[],
): Promise<void> {
  const { rank } = ctx.comm;
  const H = groups.length;
  const x = groups.indexOf(mine as number[]);
  const leader = mine[0];
  const offsets = partition(buf.length, { parts: H, elemSize: ctx.elemSize });
  /** Segment s, in chunks. */
  const seg = (s: number): Uint8Array[] => chunks(ctx, buf.subarray(offsets[s], offsets[s + 1]));
  const plan = new Plan(ctx);
  // Segments in the order the ring reduces them (x, x−1, ..., x+1), and finishes them (x+1, x, ..., x+2).
  const reduceOrder = Array.from({ length: H }, (_, o) => mod(x - o, H));
  const finishOrder = Array.from({ length: H }, (_, o) => mod(x + 1 - o, H));
  if (rank !== leader) {
    const sent: Step[] = new Array(H);
    reduceOrder.forEach((s, o) => sent[s] = plan.join(seg(s).map((c) => plan.send(leader, c, { key: o }))));
    finishOrder.forEach((s, o) =>
      seg(s).forEach((c) => plan.recv(leader, c, { key: H + o, after: [sent[s]] }))
    );
    await plan.run();
    return;
  }
  // The leader: its host's contributions, in local rank order, segment by segment.
  const localDone: Step[] = new Array(H);
  reduceOrder.forEach((s, o) => {
    let last: Step[] = [];
    for (const peer of mine.slice(1)) {
      const prev = last;
      last = seg(s).map((c, k) => plan.recvReduce(peer, c, { key: o, after: prev.length ? [prev[k]] : [] }));
    }
    localDone[s] = plan.join(last);
  });
  const ring = groups.map((g) => g[0]);
  const right = ring[mod(x + 1, H)], left = ring[mod(x - 1, H)];
  const final = ringOfHosts(plan, { x, H, right, left, ready: localDone }, seg);
  finishOrder.forEach((s, o) => {
    for (const peer of mine.slice(1)) {
      seg(s).forEach((c) => plan.send(peer, c, { key: H + o, after: [final[s]] }));
    }
  });
  await plan.run();
}

/**
 * The ring between hosts, added to `plan`: an all-reduce of H segments (`segment(s)`, in chunks) with the
 * rank of this index on the next host (`right`) and the previous (`left`), this rank's host being `x`. Step t
 * sends segment x−t and reduces into x−t−1 (then, in the all-gather, receives into it); a segment is sent or
 * reduced into only once `ready[s]` (its part of the work within the host) is done.
 *
 * @returns Each segment's final step: when this rank holds its all-reduced value.
 */
function ringOfHosts(
  plan: Plan,
  at: { x: number; H: number; right: number; left: number; ready: readonly Step[] },
  segment: (s: number) => Uint8Array[],
): Step[] {
  const { x, H, right, left, ready } = at;
  const final: Step[] = new Array(H);
  const sentInReduce: Step[][] = new Array(H);
  let arrived: Step[] = [];
  for (let t = 0; t < 2 * (H - 1); t++) {
    const out = mod(x - t, H);
    const sendAfter = arrived;
    const sends = segment(out).map((c, k) =>
      plan.send(right, c, { after: t > 0 ? [sendAfter[k]] : [ready[out]] })
    );
    if (t < H - 1) sentInReduce[out] = sends;
    const inc = mod(x - t - 1, H);
    arrived = segment(inc).map((c, k) =>
      t < H - 1
        ? plan.recvReduce(left, c, { after: [ready[inc]] })
        : plan.recv(left, c, { after: [sentInReduce[inc][k]] })
    );
    if (t >= H - 2) final[inc] = plan.join(arrived);
  }
  return final;
}
