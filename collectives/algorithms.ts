/**
 * Every algorithm of every collective, once: {@linkcode ALGORITHM_DESCRIPTORS}. A descriptor says the
 * algorithm's name, its collective, its kind, the function that runs it and its cost function (from
 * `sim/cost_model.ts`, which keeps the formulas). `mod.ts` builds everything else from this list: the
 * names per collective in order of preference, the registries of message algorithms, the segment plans
 * and the cost lookup behind `"auto"`; the algorithm name types below are read off it too. A new
 * algorithm is its file, its cost function and one entry here.
 *
 * Two kinds: a `"messages"` algorithm exchanges messages between ranks on a {@linkcode CollectiveContext}
 * (the cpu backend runs it in `runAlgorithm`, `backend/cpu/_dispatch.ts`); a `"segment"` algorithm is a
 * plan of chunks over the host segment, on a `SegmentContext` (see `segment_context.ts`).
 *
 * @example The descriptors of the all-gather, in order of preference
 * ```ts
 * import { ALGORITHM_DESCRIPTORS } from "./algorithms.ts";
 * import assert from "node:assert/strict";
 * const names = ALGORITHM_DESCRIPTORS.filter((d) => d.collective === "allGather").map((d) => d.name);
 * assert.deepEqual(names, ["segment", "ring", "recursive-doubling"]);
 * ```
 *
 * @module
 */
import type { CollectiveContext } from "./comm.ts";
import type { Blocks } from "./_blocks.ts";
import {
  binomialBroadcastCost,
  binomialGatherCost,
  binomialReduceCost,
  chainBroadcastCost,
  type CostFunction,
  directAllReduceCost,
  disseminationBarrierCost,
  doubleTreeAllReduceCost,
  halvingDoublingAllReduceCost,
  halvingReduceScatterCost,
  hierarchicalAllReduceCost,
  linearGatherCost,
  orderedReduceCost,
  pairwiseAllToAllCost,
  psAllReduceCost,
  recursiveDoublingAllGatherCost,
  ringAllGatherCost,
  ringAllReduceCost,
  ringReduceScatterCost,
  segmentAllGatherCost,
  segmentAllReduceCost,
  segmentAllToAllCost,
  segmentBarrierCost,
  segmentBroadcastCost,
  segmentGatherCost,
  segmentReduceCost,
  segmentReduceScatterCost,
  segmentScatterCost,
  treeAllReduceCost,
} from "../sim/cost_model.ts";
import { binomialBroadcast } from "./binomial_broadcast.ts";
import { binomialReduce } from "./binomial_reduce.ts";
import { chainBroadcast } from "./chain_broadcast.ts";
import { directAllReduce } from "./direct_allreduce.ts";
import { disseminationBarrier } from "./dissemination_barrier.ts";
import { halvingDoublingAllReduce } from "./halving_doubling_allreduce.ts";
import { halvingReduceScatter } from "./halving_reduce_scatter.ts";
import { hierarchicalAllReduce } from "./hierarchical_allreduce.ts";
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
import { orderedAllReduce } from "./ordered_allreduce.ts";
import { orderedReduceScatter } from "./ordered_reduce_scatter.ts";
import { orderedReduce } from "./ordered_reduce.ts";
import { segmentGather } from "./segment_gather.ts";
import { segmentScatter } from "./segment_scatter.ts";
import { linearGather } from "./linear_gather.ts";
import { linearScatter } from "./linear_scatter.ts";
import { binomialGather } from "./binomial_gather.ts";
import { binomialScatter } from "./binomial_scatter.ts";

/** The collectives dcomm runs. */
export type Collective =
  | "allReduce"
  | "allGather"
  | "reduceScatter"
  | "broadcast"
  | "reduce"
  | "allToAll"
  | "barrier"
  | "gather"
  | "scatter";

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
/**
 * An all-gather or reduce-scatter algorithm: `input` to `output`, in equal blocks, or in the uneven
 * `layout` of the v-form where the descriptor says `uneven`.
 */
export type BlocksFn = (
  ctx: CollectiveContext,
  input: Uint8Array,
  output: Uint8Array,
  layout?: Blocks,
) => Promise<void>;
/** An all-to-all algorithm: `input` to `output`, in equal blocks or (`uneven`) the send and receive layouts. */
export type AllToAllFn = (
  ctx: CollectiveContext,
  input: Uint8Array,
  output: Uint8Array,
  layout?: { readonly send: Blocks; readonly recv: Blocks },
) => Promise<void>;
/** A rooted algorithm (broadcast, reduce): in place on `buf`, around `root`. */
export type RootedFn = (ctx: CollectiveContext, buf: Uint8Array, root: number) => Promise<void>;
/** A barrier algorithm. */
export type BarrierFn = (ctx: CollectiveContext) => Promise<void>;
/** A gather algorithm: every rank's `input` into the root's `output` (n blocks; undefined elsewhere). */
export type GatherFn = (
  ctx: CollectiveContext,
  input: Uint8Array,
  output: Uint8Array | undefined,
  root: number,
  layout?: Blocks,
) => Promise<void>;
/** A scatter algorithm: the root's `input` (n blocks; undefined elsewhere), block r to rank r's `output`. */
export type ScatterFn = (
  ctx: CollectiveContext,
  input: Uint8Array | undefined,
  output: Uint8Array,
  root: number,
  layout?: Blocks,
) => Promise<void>;

/** The signature of a message algorithm, by collective. */
export interface MessageRunOf {
  /** In place on the tensor. */
  allReduce: AllReduceFn;
  /** `(ctx, input, output)`, output = n × input. */
  allGather: BlocksFn;
  /** `(ctx, input, output)`, input = n × output. */
  reduceScatter: BlocksFn;
  /** In place, from `root`. */
  broadcast: RootedFn;
  /** In place, to `root`. */
  reduce: RootedFn;
  /** `(ctx, input, output, layout?)`, equal blocks or the v-form's. */
  allToAll: AllToAllFn;
  /** No tensor. */
  barrier: BarrierFn;
  /** `(ctx, input, output, root)`, the root's output = n × input. */
  gather: GatherFn;
  /** `(ctx, input, output, root)`, the root's input = n × output. */
  scatter: ScatterFn;
}

/** The signature of the segment plan, by collective. */
export interface SegmentPlanOf {
  /** See `segment_allreduce.ts`. */
  allReduce: typeof segmentAllReduce;
  /** See `segment_allgather.ts`. */
  allGather: typeof segmentAllGather;
  /** See `segment_reduce_scatter.ts`. */
  reduceScatter: typeof segmentReduceScatter;
  /** See `segment_broadcast.ts`. */
  broadcast: typeof segmentBroadcast;
  /** See `segment_reduce.ts`. */
  reduce: typeof segmentReduce;
  /** See `segment_alltoall.ts`. */
  allToAll: typeof segmentAllToAll;
  /** See `segment_barrier.ts`. */
  barrier: typeof segmentBarrier;
  /** See `segment_gather.ts`. */
  gather: typeof segmentGather;
  /** See `segment_scatter.ts`. */
  scatter: typeof segmentScatter;
}

/** How an algorithm runs: messages over a {@linkcode CollectiveContext}, or a plan over the host segment. */
export type AlgorithmKind = "messages" | "segment";

/** A message algorithm of collective `C`. */
export interface MessageAlgorithm<C extends Collective = Collective> {
  /** The name `algorithm` takes. */
  readonly name: string;
  /** The collective it runs. */
  readonly collective: C;
  /** Messages over a {@linkcode CollectiveContext}. */
  readonly kind: "messages";
  /** Runs it. */
  readonly run: MessageRunOf[C];
  /** Its predicted seconds (`sim/cost_model.ts`). */
  readonly cost: CostFunction;
  /** One line for docs. */
  readonly summary: string;
  /** Whether it runs the v-form too (uneven blocks: `counts`, `sendCounts`/`recvCounts`). @default false */
  readonly uneven?: boolean;
  /**
   * Whether its sums fold every rank's contribution in rank order, as the segment's plans do, so that its
   * bits depend on the inputs alone (the deterministic mode's algorithms). @default false
   */
  readonly deterministic?: boolean;
}

/** The segment algorithm of collective `C`. */
export interface SegmentAlgorithm<C extends Collective = Collective> {
  /** Always `"segment"`. */
  readonly name: "segment";
  /** The collective it runs. */
  readonly collective: C;
  /** A plan of chunks over a `SegmentContext`. */
  readonly kind: "segment";
  /** Makes the plan of a call. */
  readonly plan: SegmentPlanOf[C];
  /** Its predicted seconds (`sim/cost_model.ts`). */
  readonly cost: CostFunction;
  /** One line for docs. */
  readonly summary: string;
}

/** One algorithm of collective `C` (of any collective by default): either kind. */
export type AlgorithmDescriptor<C extends Collective = Collective> = {
  [K in C]: MessageAlgorithm<K> | SegmentAlgorithm<K>;
}[C];

/**
 * Every algorithm, grouped by collective; within a collective in order of preference (when the model
 * prices two the same, ring and co-located ps for one, the earlier wins), the segment first.
 */
export const ALGORITHM_DESCRIPTORS = Object.freeze(
  [
    // ---- all-reduce
    {
      name: "segment",
      collective: "allReduce",
      kind: "segment",
      plan: segmentAllReduce,
      cost: segmentAllReduceCost,
      summary: "Host segment: one-shot or two-phase (reduce-scatter then all-gather by reading), the cheaper",
    },
    {
      name: "ring",
      collective: "allReduce",
      kind: "messages",
      run: ringAllReduce,
      cost: ringAllReduceCost,
      summary: "Ring: a pipelined reduce-scatter then all-gather, bandwidth-optimal",
    },
    {
      name: "hierarchical",
      collective: "allReduce",
      kind: "messages",
      run: hierarchicalAllReduce,
      cost: hierarchicalAllReduceCost,
      summary: "Hierarchical: within hosts first (2D shards, or one leader per host), then across hosts",
    },
    {
      name: "halving-doubling",
      collective: "allReduce",
      kind: "messages",
      run: halvingDoublingAllReduce,
      cost: halvingDoublingAllReduceCost,
      summary: "Rabenseifner's: recursive-halving reduce-scatter, recursive-doubling all-gather, any size",
    },
    {
      name: "double-tree",
      collective: "allReduce",
      kind: "messages",
      run: doubleTreeAllReduce,
      cost: doubleTreeAllReduceCost,
      summary: "NCCL's double binary tree: two pipelined trees, each carrying half the buffer",
    },
    {
      name: "tree",
      collective: "allReduce",
      kind: "messages",
      run: treeAllReduce,
      cost: treeAllReduceCost,
      summary: "Pipelined binary tree: reduce up to the root, broadcast back down",
    },
    {
      name: "direct",
      collective: "allReduce",
      kind: "messages",
      run: directAllReduce,
      cost: directAllReduceCost,
      summary: "Direct: every rank sends its whole buffer to every other, one round, for tiny messages",
    },
    {
      name: "ps",
      collective: "allReduce",
      kind: "messages",
      run: psAllReduce,
      cost: psAllReduceCost,
      summary: "Parameter servers: shards pushed to S server ranks, reduced there and pulled back",
    },
    {
      name: "ordered",
      collective: "allReduce",
      kind: "messages",
      run: orderedAllReduce,
      cost: ringAllReduceCost,
      summary: "Ordered (deterministic mode): shards folded in rank order where they land, then all-gathered",
      deterministic: true,
    },
    // ---- all-gather
    {
      name: "segment",
      collective: "allGather",
      kind: "segment",
      plan: segmentAllGather,
      cost: segmentAllGatherCost,
      summary: "Host segment: each member copies its block in, then every block out",
    },
    {
      name: "ring",
      collective: "allGather",
      kind: "messages",
      uneven: true,
      run: ringAllGather,
      cost: ringAllGatherCost,
      summary: "Ring: n−1 pipelined steps of one block",
    },
    {
      name: "recursive-doubling",
      collective: "allGather",
      kind: "messages",
      run: recursiveDoublingAllGather,
      cost: recursiveDoublingAllGatherCost,
      summary: "⌈log2 n⌉ rounds: recursive doubling when n is a power of two, Bruck's algorithm otherwise",
    },
    // ---- reduce-scatter
    {
      name: "segment",
      collective: "reduceScatter",
      kind: "segment",
      plan: segmentReduceScatter,
      cost: segmentReduceScatterCost,
      summary: "Host segment: each member copies its n blocks in, then reduces its block from every member",
    },
    {
      name: "ring",
      collective: "reduceScatter",
      kind: "messages",
      uneven: true,
      run: ringReduceScatter,
      cost: ringReduceScatterCost,
      summary: "Ring: the first half of the ring all-reduce, out of place",
    },
    {
      name: "halving",
      collective: "reduceScatter",
      kind: "messages",
      run: halvingReduceScatter,
      cost: halvingReduceScatterCost,
      summary: "Recursive halving (MPICH's), any size",
    },
    {
      name: "ordered",
      collective: "reduceScatter",
      kind: "messages",
      uneven: true,
      run: orderedReduceScatter,
      cost: ringReduceScatterCost,
      summary: "Ordered (deterministic mode): every rank's block r to rank r, folded there in rank order",
      deterministic: true,
    },
    // ---- broadcast
    {
      name: "segment",
      collective: "broadcast",
      kind: "segment",
      plan: segmentBroadcast,
      cost: segmentBroadcastCost,
      summary: "Host segment: the root copies each chunk in, every other member copies it out",
    },
    {
      name: "binomial",
      collective: "broadcast",
      kind: "messages",
      run: binomialBroadcast,
      cost: binomialBroadcastCost,
      summary: "Binomial tree (MPICH's short-message broadcast): ⌈log2 n⌉ rounds",
    },
    {
      name: "chain",
      collective: "broadcast",
      kind: "messages",
      run: chainBroadcast,
      cost: chainBroadcastCost,
      summary: "Pipelined chain from the root: every link busy once the chain fills",
    },
    // ---- reduce
    {
      name: "segment",
      collective: "reduce",
      kind: "segment",
      plan: segmentReduce,
      cost: segmentReduceCost,
      summary: "Host segment: one-shot (the root reduces every buffer) or two-phase, the cheaper",
    },
    {
      name: "binomial",
      collective: "reduce",
      kind: "messages",
      run: binomialReduce,
      cost: binomialReduceCost,
      summary: "Binomial tree (MPICH's): ⌈log2 n⌉ rounds, in a fixed order",
    },
    {
      name: "ordered",
      collective: "reduce",
      kind: "messages",
      run: orderedReduce,
      cost: orderedReduceCost,
      summary:
        "Ordered (deterministic mode): an ordered reduce-scatter, then the shards gathered at the root",
      deterministic: true,
    },
    // ---- all-to-all
    {
      name: "segment",
      collective: "allToAll",
      kind: "segment",
      plan: segmentAllToAll,
      cost: segmentAllToAllCost,
      summary: "Host segment: each member copies its n blocks in, then its block of every member out",
    },
    {
      name: "pairwise",
      collective: "allToAll",
      kind: "messages",
      uneven: true,
      run: pairwiseAllToAll,
      cost: pairwiseAllToAllCost,
      summary: "Pairwise exchange (MPICH's long-message all-to-all): n−1 steps, one peer each way",
    },
    // ---- barrier
    {
      name: "segment",
      collective: "barrier",
      kind: "segment",
      plan: segmentBarrier,
      cost: segmentBarrierCost,
      summary: "Host segment: one empty chunk every member posts",
    },
    {
      name: "dissemination",
      collective: "barrier",
      kind: "messages",
      run: disseminationBarrier,
      cost: disseminationBarrierCost,
      summary: "Dissemination (MPICH's barrier): ⌈log2 n⌉ rounds of empty messages",
    },
    // ---- gather
    {
      name: "segment",
      collective: "gather",
      kind: "segment",
      plan: segmentGather,
      cost: segmentGatherCost,
      summary: "Host segment: each member copies its block in, the root copies every block out",
    },
    {
      name: "linear",
      collective: "gather",
      kind: "messages",
      uneven: true,
      run: linearGather,
      cost: linearGatherCost,
      summary: "Linear (MPICH's long-message gather): every rank sends its block straight to the root",
    },
    {
      name: "binomial",
      collective: "gather",
      kind: "messages",
      run: binomialGather,
      cost: binomialGatherCost,
      summary: "Binomial tree (MPICH's short-message gather): ⌈log2 n⌉ rounds of growing subtrees",
    },
    // ---- scatter
    {
      name: "segment",
      collective: "scatter",
      kind: "segment",
      plan: segmentScatter,
      cost: segmentScatterCost,
      summary: "Host segment: the root copies every block in, each member copies its own out",
    },
    {
      name: "linear",
      collective: "scatter",
      kind: "messages",
      uneven: true,
      run: linearScatter,
      cost: linearGatherCost,
      summary: "Linear (MPICH's long-message scatter): the root sends each rank its block directly",
    },
    {
      name: "binomial",
      collective: "scatter",
      kind: "messages",
      run: binomialScatter,
      cost: binomialGatherCost,
      summary: "Binomial tree (MPICH's short-message scatter): ⌈log2 n⌉ rounds of shrinking subtrees",
    },
  ] as const satisfies readonly AlgorithmDescriptor[],
);

/** The algorithm names of each collective, as {@linkcode ALGORITHM_DESCRIPTORS} lists them. */
export type AlgorithmName = {
  [C in Collective]: Extract<(typeof ALGORITHM_DESCRIPTORS)[number], { readonly collective: C }>["name"];
};

/** All-reduce algorithms. */
export type AllReduceAlgorithm = AlgorithmName["allReduce"];
/** All-gather algorithms. */
export type AllGatherAlgorithm = AlgorithmName["allGather"];
/** Reduce-scatter algorithms. */
export type ReduceScatterAlgorithm = AlgorithmName["reduceScatter"];
/** Broadcast algorithms. */
export type BroadcastAlgorithm = AlgorithmName["broadcast"];
/** Reduce algorithms. */
export type ReduceAlgorithm = AlgorithmName["reduce"];
/** All-to-all algorithms. */
export type AllToAllAlgorithm = AlgorithmName["allToAll"];
/** Barrier algorithms. */
export type BarrierAlgorithm = AlgorithmName["barrier"];
/** Gather algorithms. */
export type GatherAlgorithm = AlgorithmName["gather"];
/** Scatter algorithms. */
export type ScatterAlgorithm = AlgorithmName["scatter"];
