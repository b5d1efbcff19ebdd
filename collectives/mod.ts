/**
 * The collective algorithms, one per file, and the tables built from their descriptors
 * ({@linkcode ALGORITHM_DESCRIPTORS}, `algorithms.ts`): the names of each collective in order of
 * preference ({@linkcode ALGORITHMS}), a registry of the message algorithms for each collective (each runs
 * on a {@linkcode CollectiveContext}: group-local ranks, a reduce function, scratch; for any group size
 * and any whole number of elements), the segment plans ({@linkcode SEGMENT_PLANS}) and the cost functions
 * by name ({@linkcode COST_FUNCTIONS}, {@linkcode predict}).
 *
 * The `"segment"` algorithms (`segment_*.ts`) are of another kind: the ranks of one host read each
 * other's shared buffers instead of exchanging messages, and run as plans of chunks on a
 * {@linkcode SegmentContext} (see `segment_context.ts`); the message registries below leave them out.
 *
 * {@linkcode chooseAlgorithm} picks the algorithm the cost model (`sim/cost_model.ts`) predicts to be
 * fastest, for callers that ask for `"auto"`; where the segment is available it picks it (every byte a
 * message algorithm moves between processes of one host is copied into a ring and out again; the segment
 * copies it once, and reduces in place): {@linkcode runsOnSegment} is that rule, for a backend that must
 * know where a call runs before it has priced anything.
 *
 * @example Choosing and running an all-reduce algorithm
 * ```ts
 * import { ALL_REDUCE_ALGORITHMS, chooseAlgorithm } from "./mod.ts";
 * import { DEFAULT_TCP_CONSTANTS } from "../sim/cost_model.ts";
 * import assert from "node:assert/strict";
 * const name = chooseAlgorithm("allReduce", { bytes: 256 << 20, size: 96, constants: DEFAULT_TCP_CONSTANTS });
 * assert.equal(name, "ring");
 * assert.equal(typeof ALL_REDUCE_ALGORITHMS[name], "function");
 * ```
 *
 * @module
 */
import type { CostConstants, CostFunction, CostShape } from "../sim/cost_model.ts";
import {
  ALGORITHM_DESCRIPTORS,
  type AlgorithmDescriptor,
  type AlgorithmName,
  type AllGatherAlgorithm,
  type AllReduceAlgorithm,
  type AllReduceFn,
  type AllToAllAlgorithm,
  type AllToAllFn,
  type BarrierAlgorithm,
  type BarrierFn,
  type BlocksFn,
  type BroadcastAlgorithm,
  type Collective,
  type GatherAlgorithm,
  type GatherFn,
  type MessageRunOf,
  type ReduceAlgorithm,
  type ReduceScatterAlgorithm,
  type RootedFn,
  type ScatterAlgorithm,
  type ScatterFn,
  type SegmentPlanOf,
} from "./algorithms.ts";

export { ALGORITHM_DESCRIPTORS };
export type {
  AlgorithmDescriptor,
  AlgorithmKind,
  AllReduceOptions,
  MessageAlgorithm,
  SegmentAlgorithm,
} from "./algorithms.ts";
export type {
  AlgorithmName,
  AllGatherAlgorithm,
  AllReduceAlgorithm,
  AllReduceFn,
  AllToAllAlgorithm,
  AllToAllFn,
  BarrierAlgorithm,
  BarrierFn,
  BlocksFn,
  BroadcastAlgorithm,
  Collective,
  GatherAlgorithm,
  GatherFn,
  MessageRunOf,
  ReduceAlgorithm,
  ReduceScatterAlgorithm,
  RootedFn,
  ScatterAlgorithm,
  ScatterFn,
  SegmentPlanOf,
};
export type { CollectiveContext, Comm } from "./comm.ts";
export { type Blocks, blocksOf, equalBlocks } from "./_blocks.ts";
export type { SegmentContext, SegmentPlan, SegmentState } from "./segment_context.ts";
export { SegmentPipeline } from "./segment_context.ts";
export type { SegmentAllReduceOptions } from "./segment_allreduce.ts";
export { segmentAllReduce } from "./segment_allreduce.ts";
export { segmentBroadcast } from "./segment_broadcast.ts";
export { segmentReduce } from "./segment_reduce.ts";
export { segmentAllGather } from "./segment_allgather.ts";
export { segmentReduceScatter } from "./segment_reduce_scatter.ts";
export { segmentAllToAll } from "./segment_alltoall.ts";
export { segmentBarrier } from "./segment_barrier.ts";
export { segmentGather } from "./segment_gather.ts";
export { segmentScatter } from "./segment_scatter.ts";
export { linearGather } from "./linear_gather.ts";
export { linearScatter } from "./linear_scatter.ts";
export { binomialGather } from "./binomial_gather.ts";
export { binomialScatter } from "./binomial_scatter.ts";
export { binomialBroadcast } from "./binomial_broadcast.ts";
export { orderedAllReduce } from "./ordered_allreduce.ts";
export { orderedReduceScatter } from "./ordered_reduce_scatter.ts";
export { orderedReduce } from "./ordered_reduce.ts";
export { binomialReduce } from "./binomial_reduce.ts";
export { chainBroadcast } from "./chain_broadcast.ts";
export { directAllReduce } from "./direct_allreduce.ts";
export { disseminationBarrier } from "./dissemination_barrier.ts";
export { halvingDoublingAllReduce } from "./halving_doubling_allreduce.ts";
export { halvingReduceScatter } from "./halving_reduce_scatter.ts";
export { hierarchicalAllReduce, hostGroups, subComm } from "./hierarchical_allreduce.ts";
export { pairwiseAllToAll } from "./pairwise_alltoall.ts";
export { psAllReduce, type PsAllReduceOptions } from "./ps_allreduce.ts";
export { recursiveDoublingAllGather } from "./recursive_doubling_allgather.ts";
export { ringAllGather } from "./ring_allgather.ts";
export { ringAllReduce } from "./ring_allreduce.ts";
export { ringReduceScatter } from "./ring_reduce_scatter.ts";
export { doubleTreeAllReduce, treeAllReduce } from "./tree_allreduce.ts";

// ---- the tables, built from the descriptors ------------------------------------------------------

/** The descriptors of each collective, in the list's order (the order of preference). */
const BY_COLLECTIVE: Readonly<Record<Collective, readonly AlgorithmDescriptor[]>> = (() => {
  const table: Partial<Record<Collective, AlgorithmDescriptor[]>> = {};
  for (const d of ALGORITHM_DESCRIPTORS as readonly AlgorithmDescriptor[]) {
    (table[d.collective] ??= []).push(d);
  }
  for (const list of Object.values(table)) Object.freeze(list);
  return Object.freeze(table as Record<Collective, AlgorithmDescriptor[]>);
})();

/** A frozen table with, for each collective in the list's order, what `entry` makes of its descriptors. */
function perCollective<T>(entry: (descriptors: readonly AlgorithmDescriptor[]) => T): Record<Collective, T> {
  const entries = Object.entries(BY_COLLECTIVE).map(([c, list]) => [c, entry(list)]);
  return Object.freeze(Object.fromEntries(entries));
}

/**
 * Every algorithm name of each collective, in order of preference: when the model prices two the same
 * (ring and co-located ps, for one), the earlier wins.
 */
export const ALGORITHMS: { readonly [C in Collective]: readonly AlgorithmName[C][] } = perCollective(
  (list) => Object.freeze(list.map((d) => d.name)),
) as { readonly [C in Collective]: readonly AlgorithmName[C][] };

/** A collective's message algorithms: all but `"segment"`. */
type Messages<A extends string> = Exclude<A, "segment">;

/** The registry of a collective's message algorithms, by name. */
function registry<C extends Collective>(
  collective: C,
): Readonly<Record<Messages<AlgorithmName[C]>, MessageRunOf[C]>> {
  const entries = BY_COLLECTIVE[collective].flatMap((d) => d.kind === "messages" ? [[d.name, d.run]] : []);
  return Object.freeze(Object.fromEntries(entries));
}

/** All-reduce algorithms by name. */
export const ALL_REDUCE_ALGORITHMS: Readonly<Record<Messages<AllReduceAlgorithm>, AllReduceFn>> = registry(
  "allReduce",
);
/** All-gather algorithms by name: `(ctx, input, output)`, output = n × input. */
export const ALL_GATHER_ALGORITHMS: Readonly<Record<Messages<AllGatherAlgorithm>, BlocksFn>> = registry(
  "allGather",
);
/** Reduce-scatter algorithms by name: `(ctx, input, output)`, input = n × output. */
export const REDUCE_SCATTER_ALGORITHMS: Readonly<Record<Messages<ReduceScatterAlgorithm>, BlocksFn>> =
  registry("reduceScatter");
/** Broadcast algorithms by name. */
export const BROADCAST_ALGORITHMS: Readonly<Record<Messages<BroadcastAlgorithm>, RootedFn>> = registry(
  "broadcast",
);
/** Reduce algorithms by name. */
export const REDUCE_ALGORITHMS: Readonly<Record<Messages<ReduceAlgorithm>, RootedFn>> = registry("reduce");
/** All-to-all algorithms by name: `(ctx, input, output)`, equal blocks. */
export const ALL_TO_ALL_ALGORITHMS: Readonly<Record<Messages<AllToAllAlgorithm>, AllToAllFn>> = registry(
  "allToAll",
);
/** Barrier algorithms by name. */
export const BARRIER_ALGORITHMS: Readonly<Record<Messages<BarrierAlgorithm>, BarrierFn>> = registry(
  "barrier",
);

/** Gather algorithms by name: `(ctx, input, output, root)`, the root's output = n × input. */
export const GATHER_ALGORITHMS: Readonly<Record<Messages<GatherAlgorithm>, GatherFn>> = registry("gather");
/** Scatter algorithms by name: `(ctx, input, output, root)`, the root's input = n × output. */
export const SCATTER_ALGORITHMS: Readonly<Record<Messages<ScatterAlgorithm>, ScatterFn>> = registry(
  "scatter",
);

/** The segment algorithms, by collective: each makes a plan of chunks (see `segment_context.ts`). */
export const SEGMENT_PLANS: Readonly<SegmentPlanOf> = perCollective((list) => {
  const d = list.find((d) => d.kind === "segment");
  return d?.kind === "segment" ? d.plan : undefined;
}) as Readonly<SegmentPlanOf>;

/** The cost function of every algorithm, by collective and name. */
export const COST_FUNCTIONS: {
  readonly [C in Collective]: Readonly<Record<AlgorithmName[C], CostFunction>>;
} = perCollective((list) => Object.freeze(Object.fromEntries(list.map((d) => [d.name, d.cost])))) as {
  readonly [C in Collective]: Readonly<Record<AlgorithmName[C], CostFunction>>;
};

/**
 * The algorithms of each collective that run its v-form (uneven blocks), by name, in order of preference.
 */
export const UNEVEN_ALGORITHMS: { readonly [C in Collective]: readonly string[] } = perCollective((list) =>
  Object.freeze(list.flatMap((d) => d.kind === "messages" && d.uneven ? [d.name] : []))
);

/**
 * The message algorithm of each reducing collective that folds in rank order (the deterministic mode's),
 * by collective; the host segment's plans fold in member order too.
 */
export const DETERMINISTIC_ALGORITHMS: { readonly [C in Collective]: readonly string[] } = perCollective((
  list,
) => Object.freeze(list.flatMap((d) => d.kind === "messages" && d.deterministic ? [d.name] : [])));

/** A call shape with the constants to price it at. */
export interface PredictOptions extends CostShape {
  /** The transport's constants. */
  readonly constants: CostConstants;
}

/**
 * Predicted seconds of one algorithm of one collective, by its cost function in `sim/cost_model.ts`.
 *
 * @param collective The collective.
 * @param algorithm One of its algorithm names.
 * @param options The call shape and the constants.
 * @returns Seconds.
 * @throws {RangeError} If the algorithm is unknown or the shape is invalid.
 *
 * @example Barrier on 8 ranks costs three latencies
 * ```ts
 * import { predict } from "./mod.ts";
 * import assert from "node:assert/strict";
 * const constants = { alpha: 0.5, beta: 1e-9, gamma: 1e-10 };
 * assert.equal(predict("barrier", "dissemination", { size: 8, bytes: 0, constants }), 1.5);
 * ```
 */
export function predict<C extends Collective>(
  collective: C,
  algorithm: AlgorithmName[C],
  options: PredictOptions,
): number {
  const table = COST_FUNCTIONS[collective] as Readonly<Record<string, CostFunction>> | undefined;
  const fn = table?.[algorithm];
  if (fn === undefined) {
    throw new RangeError(
      `Unknown algorithm: expected one of ${Object.keys(table ?? {}).join(", ")} for ${collective}, ` +
        `found ${String(algorithm)}`,
    );
  }
  return fn(options, options.constants);
}

/** What {@linkcode chooseAlgorithm} prices. */
export interface ChooseOptions {
  /** Bytes, as `sim/cost_model.ts` counts them for the collective. */
  bytes: number;
  /** Ranks in the group. */
  size: number;
  /** The transport's constants. */
  constants: CostConstants;
  /** The context's chunk size. @default DEFAULT_CHUNK_BYTES of the cost model */
  chunkBytes?: number;
  /** Parameter servers assumed for `"ps"`. @default size */
  servers?: number;
  /** Whether the group's ranks share a host segment (`"segment"` is then the choice). @default false */
  segment?: boolean;
  /** The host of each rank, for the topology-aware algorithms (`constants` are then between hosts). */
  hosts?: readonly number[];
  /** The constants within a host, with `hosts`. @default `constants` */
  intra?: CostConstants;
  /** A v-form (uneven blocks): only the algorithms that run it, and never the segment. @default false */
  uneven?: boolean;
  /** Deterministic mode: only the algorithms that fold in rank order (or the segment). @default false */
  deterministic?: boolean;
}

/** Costs within this relative margin count as equal, so that rounding never overrides preference. */
const TIE = 1e-9;

/**
 * The algorithm of `collective` with the lowest predicted time, for callers that ask for `"auto"`.
 *
 * @param collective The collective.
 * @param options The call's size in bytes and ranks, and the transport's constants.
 * @returns The algorithm's name (a key of the collective's registry).
 * @throws {RangeError} If the shape is invalid.
 *
 * @example Tiny all-reduces on many ranks avoid the ring
 * ```ts
 * import { chooseAlgorithm } from "./mod.ts";
 * import { DEFAULT_TCP_CONSTANTS } from "../sim/cost_model.ts";
 * import assert from "node:assert/strict";
 * assert.notEqual(chooseAlgorithm("allReduce", { bytes: 8, size: 64, constants: DEFAULT_TCP_CONSTANTS }), "ring");
 * ```
 */
export function chooseAlgorithm<C extends Collective>(
  collective: C,
  options: ChooseOptions,
): AlgorithmName[C] {
  const { bytes, size, constants, chunkBytes, servers, hosts, intra } = options;
  const uneven = options.uneven ?? false;
  if (!uneven && runsOnSegment("auto", options.segment ?? false)) return "segment" as AlgorithmName[C];
  let best: AlgorithmName[C] | undefined;
  let bestCost = Infinity;
  for (const d of BY_COLLECTIVE[collective]) {
    if (d.kind === "segment" || (uneven && !d.uneven) || (options.deterministic && !d.deterministic)) {
      continue;
    }
    const cost = d.cost({ size, bytes, chunkBytes, servers, hosts, intra }, constants);
    if (best === undefined || cost < bestCost * (1 - TIE)) {
      best = d.name as AlgorithmName[C];
      bestCost = cost;
    }
  }
  return best as AlgorithmName[C];
}

/**
 * Whether a call that asks for `algorithm` runs its collective's segment plan, given whether its group's
 * ranks share a host segment: by name, or as what `"auto"` picks wherever the segment is there (see
 * {@linkcode chooseAlgorithm}, which answers `"auto"` by this rule). A call asking for `"segment"` where
 * there is none runs nowhere: the backend refuses it.
 *
 * @param algorithm The name asked for, or `"auto"`.
 * @param segment Whether the group's ranks share a host segment.
 * @returns Whether the call runs through the segment.
 *
 * @example "auto" runs through the segment wherever there is one
 * ```ts
 * import { runsOnSegment } from "./mod.ts";
 * import assert from "node:assert/strict";
 * assert.equal(runsOnSegment("auto", true), true);
 * assert.equal(runsOnSegment("auto", false), false);
 * assert.equal(runsOnSegment("ring", true), false);
 * ```
 */
export function runsOnSegment(algorithm: string, segment: boolean): boolean {
  return segment && (algorithm === "auto" || algorithm === "segment");
}

export {
  chunkBounds,
  chunkElements,
  type Codec,
  type CodecKernels,
  CODECS,
  type CompressedCall,
  type CompressedContext,
  matrixRank,
  type MatrixSpan,
  powerSgdSizes,
} from "./compressed_context.ts";
export { int8AllReduce, int8AllReduceCost } from "./compressed_int8.ts";
export { signAllReduce, signAllReduceCost } from "./compressed_sign.ts";
export { topKAllReduce, topKAllReduceCost } from "./compressed_topk.ts";
export { powerSgdAllReduce, powerSgdAllReduceCost } from "./compressed_powersgd.ts";
export {
  hierarchicalCompressedAllReduce,
  type HierarchicalCompressedOptions,
  type HostsCompressedContext,
  type SubgroupContext,
} from "./compressed_hierarchical.ts";

import type { Codec, CompressedCall, CompressedContext } from "./compressed_context.ts";
import { int8AllReduce } from "./compressed_int8.ts";
import { signAllReduce } from "./compressed_sign.ts";
import { topKAllReduce } from "./compressed_topk.ts";
import { powerSgdAllReduce } from "./compressed_powersgd.ts";

/** The compressed all-reduces, by codec (`ReduceOptions.compression`). */
export const COMPRESSED_ALL_REDUCE: Readonly<
  Record<Codec, (ctx: CompressedContext, call: CompressedCall) => Promise<void>>
> = {
  int8: int8AllReduce,
  sign: signAllReduce,
  topk: topKAllReduce,
  powersgd: powerSgdAllReduce,
};
