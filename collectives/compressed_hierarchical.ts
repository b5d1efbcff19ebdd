/**
 * A compressed all-reduce between hosts only (`Compression.interHost`): the ranks of a host sum their
 * tensors uncompressed over the host's own fast links, only the host's first rank (its leader) runs the
 * codec, with the other hosts' leaders, and the result comes back to the host the way the sum went.
 * Without a host map, on one host, or with one rank per host, it is the codec on the whole group.
 *
 * Steps, for H hosts of L ranks (the largest) and m float32 elements:
 * 1. reduce (sum) within each host onto its leader, of the whole tensor (4m bytes from each rank);
 * 2. the codec's all-reduce among the H leaders (its own bytes, `compressed_*.ts`), divided by the group's
 *    size for an average;
 * 3. broadcast within each host from its leader (4m bytes to each rank).
 *
 * Cost: T = T_reduce(L, 4m) + T_codec(H, m) + T_broadcast(L, 4m), the first and last at the constants
 * within a host, the codec's at those between hosts: only the codec's compressed bytes cross the network,
 * once per host instead of once per rank.
 *
 * @module
 */
import { hostGroups } from "./hierarchical_allreduce.ts";
import { type CompressedCall, type CompressedContext, floats } from "./compressed_context.ts";

/** A compressed context over some of a group's ranks, with the uncompressed collectives within a host. */
export interface SubgroupContext extends CompressedContext {
  /** Sums `data` onto this context's rank 0, in place there (float32, uncompressed). */
  reduce(data: Float32Array): Promise<void>;
  /** Copies rank 0's `data` to every rank of this context (float32). */
  broadcast(data: Float32Array): Promise<void>;
}

/** What the split between hosts sees: the group's compressed context, its hosts, and sub-communicators. */
export interface HostsCompressedContext extends CompressedContext {
  /**
   * The host of each group rank (equal numbers share a host); undefined where unknown (then every rank
   * counts as its own host).
   */
  readonly hosts?: readonly number[];
  /**
   * The context of `members` (ranks of this context, this rank among them, in that order), which every
   * member makes alike: `key` (0 to 255) names it the same on every member, the way a color names a
   * communicator in `MPI_Comm_split`.
   *
   * @param members The ranks, in the sub-group's order.
   * @param key Its name within this group.
   * @returns The context.
   */
  split(members: readonly number[], key: number): SubgroupContext;
}

/** What {@linkcode hierarchicalCompressedAllReduce} runs among the hosts' leaders. */
export interface HierarchicalCompressedOptions {
  /** The codec's all-reduce (`COMPRESSED_ALL_REDUCE` of `mod.ts`). */
  readonly codec: (ctx: CompressedContext, call: CompressedCall) => Promise<void>;
}

/** The key of the leaders' sub-group: above every host's index (hosts are keyed 0, 1, ...). */
const LEADERS = 255;

/**
 * All-reduces `call.tensor` in place, compressed between hosts only.
 *
 * @param ctx The group's context, with its hosts.
 * @param call The call (error feedback and PowerSGD's Q are the leaders': sums of hosts).
 * @param options The codec.
 * @returns When this rank's result is complete.
 * @throws {RangeError} If there are more hosts than sub-group keys, or `ctx.hosts` has the wrong length.
 */
export async function hierarchicalCompressedAllReduce(
  ctx: HostsCompressedContext,
  call: CompressedCall,
  options: HierarchicalCompressedOptions,
): Promise<void> {
  const hosts = hostGroups(ctx.hosts, ctx.size);
  if (hosts.length === 1 || hosts.every((h) => h.length === 1)) return await options.codec(ctx, call);
  if (hosts.length > LEADERS) {
    throw new RangeError(
      `Cannot compress between hosts: expected at most ${LEADERS} hosts, found ${hosts.length}`,
    );
  }
  const at = hosts.findIndex((h) => h.includes(ctx.rank));
  const mine = hosts[at];
  const host = ctx.split(mine, at);
  const leaders = mine[0] === ctx.rank ? ctx.split(hosts.map((h) => h[0]), LEADERS) : undefined;
  // The host's sum is a copy: the codec's collectives run on this context's scratch.
  const sum = floats(ctx.scratch(call.tensor.byteLength));
  sum.set(call.tensor);
  if (mine.length > 1) await host.reduce(sum);
  if (leaders !== undefined) {
    await options.codec(leaders, { ...call, tensor: sum, average: false });
    if (call.average) ctx.kernels.divide(sum, ctx.size);
  }
  if (mine.length > 1) await host.broadcast(sum);
  call.tensor.set(sum);
}
