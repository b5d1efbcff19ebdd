/**
 * The collective algorithms, one per file, and a registry of them by name for each collective. Every
 * algorithm runs on a {@linkcode CollectiveContext} (group-local ranks, a reduce function, scratch), for
 * any group size and any whole number of elements.
 *
 * The `"segment"` algorithms (`segment_*.ts`) are of another kind: the ranks of one host read each
 * other's shared buffers instead of exchanging messages, and run as plans of chunks on a
 * {@linkcode SegmentContext} (see `segment_context.ts`); the message registries below leave them out.
 *
 * {@linkcode chooseAlgorithm} picks the algorithm the cost model (`sim/cost_model.ts`) predicts to be
 * fastest, for callers that ask for `"auto"`; where the segment is available it picks it (every byte a
 * message algorithm moves between processes of one host is copied into a ring and out again; the segment
 * copies it once, and reduces in place).
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
import type { CollectiveContext } from "./comm.ts";
import {
  type AlgorithmName,
  type AllGatherAlgorithm,
  type AllReduceAlgorithm,
  type AllToAllAlgorithm,
  type BarrierAlgorithm,
  type BroadcastAlgorithm,
  type Collective,
  type CostConstants,
  predict,
  type ReduceAlgorithm,
  type ReduceScatterAlgorithm,
} from "../sim/cost_model.ts";
import { binomialBroadcast } from "./binomial_broadcast.ts";
import { binomialReduce } from "./binomial_reduce.ts";
import { chainBroadcast } from "./chain_broadcast.ts";
import { directAllReduce } from "./direct_allreduce.ts";
import { disseminationBarrier } from "./dissemination_barrier.ts";
import { halvingDoublingAllReduce } from "./halving_doubling_allreduce.ts";
import { halvingReduceScatter } from "./halving_reduce_scatter.ts";
import { pairwiseAllToAll } from "./pairwise_alltoall.ts";
import { psAllReduce } from "./ps_allreduce.ts";
import { recursiveDoublingAllGather } from "./recursive_doubling_allgather.ts";
import { ringAllGather } from "./ring_allgather.ts";
import { ringAllReduce } from "./ring_allreduce.ts";
import { ringReduceScatter } from "./ring_reduce_scatter.ts";
import { doubleTreeAllReduce, treeAllReduce } from "./tree_allreduce.ts";
import { segmentAllReduce } from "./segment_allreduce.ts";
import { segmentBroadcast } from "./segment_broadcast.ts";
import { segmentReduce } from "./segment_reduce.ts";
import { segmentAllGather } from "./segment_allgather.ts";
import { segmentReduceScatter } from "./segment_reduce_scatter.ts";
import { segmentAllToAll } from "./segment_alltoall.ts";
import { segmentBarrier } from "./segment_barrier.ts";

export type {
  AlgorithmName,
  AllGatherAlgorithm,
  AllReduceAlgorithm,
  AllToAllAlgorithm,
  BarrierAlgorithm,
  BroadcastAlgorithm,
  Collective,
  ReduceAlgorithm,
  ReduceScatterAlgorithm,
};
export type { CollectiveContext, Comm } from "./comm.ts";
export type { SegmentContext, SegmentPlan, SegmentState } from "./segment_context.ts";
export { SegmentPipeline } from "./segment_context.ts";
export type { SegmentAllReduceOptions } from "./segment_allreduce.ts";
export {
  segmentAllGather,
  segmentAllReduce,
  segmentAllToAll,
  segmentBarrier,
  segmentBroadcast,
  segmentReduce,
  segmentReduceScatter,
};
export {
  binomialBroadcast,
  binomialReduce,
  chainBroadcast,
  directAllReduce,
  disseminationBarrier,
  doubleTreeAllReduce,
  halvingDoublingAllReduce,
  halvingReduceScatter,
  pairwiseAllToAll,
  psAllReduce,
  recursiveDoublingAllGather,
  ringAllGather,
  ringAllReduce,
  ringReduceScatter,
  treeAllReduce,
};
export type { PsAllReduceOptions } from "./ps_allreduce.ts";

/** Options any all-reduce algorithm accepts; each reads only its own. */
export interface AllReduceOptions {
  /** Parameter servers, for `"ps"`. @default the group size */
  servers?: number;
}

/** An all-reduce algorithm: in place on `buf`. */
export type AllReduceFn = (
  ctx: CollectiveContext,
  buf: Uint8Array,
  options?: AllReduceOptions,
) => Promise<void>;
/** An all-gather or reduce-scatter or all-to-all algorithm: `input` to `output`. */
export type BlocksFn = (ctx: CollectiveContext, input: Uint8Array, output: Uint8Array) => Promise<void>;
/** A rooted algorithm (broadcast, reduce): in place on `buf`, around `root`. */
export type RootedFn = (ctx: CollectiveContext, buf: Uint8Array, root: number) => Promise<void>;
/** A barrier algorithm. */
export type BarrierFn = (ctx: CollectiveContext) => Promise<void>;

/** A collective's message algorithms: all but `"segment"`. */
type Messages<A extends string> = Exclude<A, "segment">;

/** All-reduce algorithms by name. */
export const ALL_REDUCE_ALGORITHMS: Readonly<Record<Messages<AllReduceAlgorithm>, AllReduceFn>> = Object
  .freeze({
    "ring": ringAllReduce,
    "tree": treeAllReduce,
    "double-tree": doubleTreeAllReduce,
    "halving-doubling": halvingDoublingAllReduce,
    "ps": psAllReduce,
    "direct": directAllReduce,
  });

/** All-gather algorithms by name: `(ctx, input, output)`, output = n × input. */
export const ALL_GATHER_ALGORITHMS: Readonly<Record<Messages<AllGatherAlgorithm>, BlocksFn>> = Object.freeze({
  "ring": ringAllGather,
  "recursive-doubling": recursiveDoublingAllGather,
});

/** Reduce-scatter algorithms by name: `(ctx, input, output)`, input = n × output. */
export const REDUCE_SCATTER_ALGORITHMS: Readonly<Record<Messages<ReduceScatterAlgorithm>, BlocksFn>> = Object
  .freeze({
    ring: ringReduceScatter,
    halving: halvingReduceScatter,
  });

/** Broadcast algorithms by name. */
export const BROADCAST_ALGORITHMS: Readonly<Record<Messages<BroadcastAlgorithm>, RootedFn>> = Object.freeze({
  binomial: binomialBroadcast,
  chain: chainBroadcast,
});

/** Reduce algorithms by name. */
export const REDUCE_ALGORITHMS: Readonly<Record<Messages<ReduceAlgorithm>, RootedFn>> = Object.freeze({
  binomial: binomialReduce,
});

/** All-to-all algorithms by name: `(ctx, input, output)`, equal blocks. */
export const ALL_TO_ALL_ALGORITHMS: Readonly<Record<Messages<AllToAllAlgorithm>, BlocksFn>> = Object.freeze({
  pairwise: pairwiseAllToAll,
});

/** Barrier algorithms by name. */
export const BARRIER_ALGORITHMS: Readonly<Record<Messages<BarrierAlgorithm>, BarrierFn>> = Object.freeze({
  dissemination: disseminationBarrier,
});

/** The segment algorithms, by collective: each makes a plan of chunks (see `segment_context.ts`). */
export const SEGMENT_PLANS: {
  readonly allReduce: typeof segmentAllReduce;
  readonly allGather: typeof segmentAllGather;
  readonly reduceScatter: typeof segmentReduceScatter;
  readonly broadcast: typeof segmentBroadcast;
  readonly reduce: typeof segmentReduce;
  readonly allToAll: typeof segmentAllToAll;
  readonly barrier: typeof segmentBarrier;
} = Object.freeze({
  allReduce: segmentAllReduce,
  allGather: segmentAllGather,
  reduceScatter: segmentReduceScatter,
  broadcast: segmentBroadcast,
  reduce: segmentReduce,
  allToAll: segmentAllToAll,
  barrier: segmentBarrier,
});

/**
 * Every algorithm name of each collective, in order of preference: when the model prices two the same
 * (ring and co-located ps, for one), the earlier wins.
 */
export const ALGORITHMS: { readonly [C in Collective]: readonly AlgorithmName[C][] } = Object.freeze({
  allReduce: ["segment", "ring", "halving-doubling", "double-tree", "tree", "direct", "ps"],
  allGather: ["segment", "ring", "recursive-doubling"],
  reduceScatter: ["segment", "ring", "halving"],
  broadcast: ["segment", "binomial", "chain"],
  reduce: ["segment", "binomial"],
  allToAll: ["segment", "pairwise"],
  barrier: ["segment", "dissemination"],
});

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
  const { bytes, size, constants, chunkBytes, servers } = options;
  if (options.segment) return "segment" as AlgorithmName[C];
  let best: AlgorithmName[C] | undefined;
  let bestCost = Infinity;
  for (const name of ALGORITHMS[collective] as readonly AlgorithmName[C][]) {
    if (name === "segment") continue;
    const cost = predict(collective, name, { size, bytes, constants, chunkBytes, servers });
    if (best === undefined || cost < bestCost * (1 - TIE)) {
      best = name;
      bestCost = cost;
    }
  }
  return best as AlgorithmName[C];
}
