/**
 * The hierarchical all-reduce on the nccl backend ({@linkcode NcclHierarchy}): the 2D scheme of
 * `collectives/hierarchical_allreduce.ts` through sub-communicators that `ncclCommSplit` makes (one per
 * host, one per local index across hosts): an in-place `ncclReduceScatter` within the host, an
 * `ncclAllReduce` of each rank's shard across hosts, an in-place `ncclAllGather` within the host; the few
 * elements past a multiple of the host's rank count go through the world's all-reduce. NCCL itself is
 * topology-aware within a communicator (rings and trees over NVLink, then the network); this keeps the
 * network stage to one shard per rank, as Horovod's hierarchical all-reduce does.
 *
 * @module
 */
import { UnsupportedError } from "../../core/errors.ts";
import type { DeviceBuffer } from "../../gpu/mod.ts";
import { hostGroups } from "../../collectives/hierarchical_allreduce.ts";
import type { NcclProcessGroup } from "./nccl_group.ts";

/**
 * The groups of a hierarchy: each host's ranks, and each local index's ranks across the hosts.
 *
 * @example Two hosts of three GPUs
 * ```ts
 * import { type HierarchyPlan, hierarchyPlan } from "@dcomm/dcomm/nccl";
 * import { UnsupportedError } from "@dcomm/dcomm";
 * import assert from "node:assert/strict";
 * const plan: HierarchyPlan = hierarchyPlan([0, 0, 0, 1, 1, 1]);
 * assert.deepEqual(plan.hosts, [[0, 1, 2], [3, 4, 5]]);
 * assert.deepEqual(plan.across, [[0, 3], [1, 4], [2, 5]]);
 * assert.throws(() => hierarchyPlan([0, 0, 1]), UnsupportedError); // uneven hosts
 * ```
 */
export interface HierarchyPlan {
  /** The group ranks of each host, in rank order. */
  readonly hosts: readonly (readonly number[])[];
  /** For local index i, the i-th rank of every host. */
  readonly across: readonly (readonly number[])[];
}

/**
 * The split of a group of `hosts.length` ranks into hosts and indices across them.
 *
 * @param hosts The host of each group rank.
 * @returns The plan.
 * @throws {UnsupportedError} If hosts hold different numbers of ranks (the 2D scheme needs the same on each).
 *
 * @example
 * ```ts
 * import { hierarchyPlan } from "@dcomm/dcomm/nccl";
 * import assert from "node:assert/strict";
 * const plan = hierarchyPlan([0, 0, 1, 1]);
 * assert.deepEqual(plan.hosts, [[0, 1], [2, 3]]);
 * assert.deepEqual(plan.across, [[0, 2], [1, 3]]);
 * ```
 */
export function hierarchyPlan(hosts: readonly number[]): HierarchyPlan {
  const groups = hostGroups(hosts, hosts.length);
  const L = groups[0].length;
  if (groups.some((g) => g.length !== L)) {
    throw new UnsupportedError(
      `Cannot build a hierarchy: the 2D scheme needs the same number of ranks on every host, found ${
        groups.map((g) => g.length).join(", ")
      }; use the group's own all-reduce (NCCL's topology detection)`,
    );
  }
  return { hosts: groups, across: Array.from({ length: L }, (_, i) => groups.map((g) => g[i])) };
}

/**
 * Within-host and across-host sub-groups of an nccl group, for {@linkcode NcclHierarchy.allReduce}.
 *
 * @example On a world of one (on a cluster: one rank per GPU, `hosts` the host of each rank)
 * ```ts
 * import { createNcclGroup, ncclBackendMissing, NcclHierarchy } from "@dcomm/dcomm/nccl";
 * import { DeviceBuffer } from "@dcomm/dcomm/gpu";
 * import { MemoryStore } from "@dcomm/dcomm/store";
 * import assert from "node:assert/strict";
 * if (ncclBackendMissing() === undefined) {
 *   await using store = new MemoryStore();
 *   await using pg = await createNcclGroup({ rank: 0, size: 1, store });
 *   await using hierarchy = await NcclHierarchy.create(pg, [0]); // needs ncclCommSplit (NCCL 2.18)
 *   using grad = DeviceBuffer.from(new Float32Array([1, 2, 3]));
 *   await hierarchy.allReduce(grad, { op: "avg" });
 *   assert.deepEqual(grad.toArray(), new Float32Array([1, 2, 3]));
 *   assert.deepEqual([hierarchy.intra.ranks, hierarchy.inter.ranks], [[0], [0]]);
 * }
 * ```
 */
export class NcclHierarchy implements AsyncDisposable {
  /** The group the hierarchy splits. */
  readonly world: NcclProcessGroup;
  /** This rank's host. */
  readonly intra: NcclProcessGroup;
  /** This rank's local index across the hosts. */
  readonly inter: NcclProcessGroup;
  readonly #others: NcclProcessGroup[];

  private constructor(
    world: NcclProcessGroup,
    intra: NcclProcessGroup,
    inter: NcclProcessGroup,
    others: NcclProcessGroup[],
  ) {
    this.world = world;
    this.intra = intra;
    this.inter = inter;
    this.#others = others;
  }

  /**
   * Splits `pg` (every rank of it calls this, with the same host map): one `ncclCommSplit` per host and
   * per local index (NCCL 2.18).
   *
   * @param pg The group.
   * @param hosts The host of each group rank. @default `LOCAL_WORLD_SIZE` consecutive ranks per host
   * @returns The hierarchy; close it (or `await using` it) to free its communicators.
   * @throws {UnsupportedError} On uneven hosts, or an NCCL without `ncclCommSplit`.
   */
  static async create(pg: NcclProcessGroup, hosts?: readonly number[]): Promise<NcclHierarchy> {
    const map = hosts ?? defaultHosts(pg.size);
    if (map.length !== pg.size) {
      throw new RangeError(
        `Cannot build a hierarchy: expected a host for each of ${pg.size} ranks, found ${map.length}`,
      );
    }
    const plan = hierarchyPlan(map);
    const made: NcclProcessGroup[] = [];
    let intra: NcclProcessGroup | undefined, inter: NcclProcessGroup | undefined;
    // Every rank takes part in every split, in the same order; it keeps the two it is a member of.
    for (const ranks of [...plan.hosts, ...plan.across]) {
      const g = await pg.newGroup(ranks);
      made.push(g);
      if (ranks.includes(pg.rank)) {
        if (plan.hosts.includes(ranks)) intra = g;
        else inter = g;
      }
    }
    return new NcclHierarchy(pg, intra as NcclProcessGroup, inter as NcclProcessGroup, made);
  }

  /**
   * All-reduces `tensor` in place: reduce-scatter within the host, all-reduce of the shard across hosts,
   * all-gather within the host.
   *
   * @param tensor A device buffer of this rank's GPU.
   * @param options `"sum"` or `"avg"`, and a timeout per stage.
   * @returns When the result is in `tensor` (on the group's stream).
   */
  async allReduce(
    tensor: DeviceBuffer,
    options: { op?: "sum" | "avg"; timeoutMs?: number } = {},
  ): Promise<void> {
    const L = this.intra.size, n = this.world.size;
    const chunk = Math.floor(tensor.length / L), main = chunk * L;
    const timeoutMs = options.timeoutMs;
    // An average is the sum scaled by 1/n once, on the stage across hosts (NCCL's PreMulSum, 2.11).
    const scale = options.op === "avg" ? 1 / n : undefined;
    if (chunk > 0) {
      const whole = tensor.view(0, main), shard = tensor.view(this.intra.rank * chunk, chunk);
      await this.intra.reduceScatter(shard, whole, { op: "sum", timeoutMs });
      await this.inter.allReduce(shard, { op: "sum", scale, timeoutMs });
      await this.intra.allGather(whole, shard, { timeoutMs });
    }
    if (main < tensor.length) {
      await this.world.allReduce(tensor.view(main), { op: options.op ?? "sum", timeoutMs });
    }
  }

  /** Frees the sub-communicators. */
  async close(): Promise<void> {
    for (const g of this.#others) await g.close();
  }

  /** Same as {@linkcode NcclHierarchy.close}. */
  async [Symbol.asyncDispose](): Promise<void> {
    await this.close();
  }
}

/** Hosts of `LOCAL_WORLD_SIZE` consecutive ranks (the launcher's and torchrun's numbering). */
function defaultHosts(size: number): number[] {
  const local = Number(Deno.env.get("LOCAL_WORLD_SIZE") ?? size);
  if (!Number.isInteger(local) || local < 1 || size % local !== 0) {
    throw new RangeError(
      `Cannot build a hierarchy: LOCAL_WORLD_SIZE must divide the group's ${size} ranks, found ${local}`,
    );
  }
  return Array.from({ length: size }, (_, r) => Math.floor(r / local));
}
