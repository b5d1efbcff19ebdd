/**
 * {@linkcode ShardedDataParallel}: ZeRO stages 1, 2 and 3 (DeepSpeed's; FSDP's full sharding is stage 3)
 * over flat float32 parameters and any {@linkcode ProcessGroup}, with ZeRO++'s communication (qwZ, hpZ,
 * qgZ) and the gradient codecs of `compression` (1-bit and top-k with error feedback) on the sharded
 * gradient path.
 *
 * - The parameters form **layers** (each the flat concatenation of its parameters, the unit of sharding,
 *   gathering and gradient reduction; by default consecutive parameters up to `bucketMb`). Each rank owns
 *   one shard of every layer: its optimizer state (SGD's momentum, Adam's two moments) covers that shard
 *   alone, and the optimizer (WASM kernels) updates that shard alone.
 * - **Stage 1**: every rank holds the whole parameters and gradients; `gradReady(layer)` reduce-scatters
 *   the layer's gradient (averaged) so each rank gets its shard's, `step()` updates the shards and
 *   all-gathers the parameters.
 * - **Stage 2**: also the gradients: a layer's whole gradient exists from `grads(layer)` until its
 *   reduce-scatter ends, in a buffer reused for later layers; a rank keeps only its shard's gradient.
 * - **Stage 3**: also the parameters: a rank keeps its shard; `await gather(layer)` brings the whole layer
 *   (and starts gathering the next `prefetch` layers in the direction of the calls: forward, then backward),
 *   `release(layer)` gives it back. Using a layer's parameters without `gather` is an error.
 * - **ZeRO++**: `quantizeWeights: "int8"` (qwZ) all-gathers parameters as block-scaled int8;
 *   `hierarchical` (hpZ) cuts each layer into a block per local rank and keeps, in stage 3, the block of
 *   its local index (its host's secondary shard), refreshed once per step across hosts, so the gathers of
 *   the forward and backward passes stay within the host; gradients then reduce within the host first
 *   and across hosts second; `quantizeGradients: "int8"` (qgZ) sends the gradients as int8 through an
 *   all-to-all reduce-scatter (across hosts only, with the hierarchy). `compression` takes `"sign"` (1-bit
 *   with error feedback) or `"topk"` instead, on the same all-to-all.
 * - **Checkpoints**: `state()` is this rank's shard (parameters and optimizer state, per parameter and
 *   element range), `consolidatedState()` the whole on rank 0; `load()` takes either, or the shards of
 *   every rank of a world of another size (resharding).
 *
 * @module
 */
import { DistError } from "../core/errors.ts";
import { hostIdentity } from "../core/host.ts";
import type { ProcessGroup } from "../backend/process_group.ts";
import { type CompressionKernels, compressionKernels } from "../wasm/compress.ts";
import { type Kernels, kernels } from "../wasm/kernels.ts";
import { type OptimizerKernels, optimizerKernels } from "../wasm/optim.ts";
import { allGatherPieces, type CodecKernels, type PieceCodec, reduceScatterPieces } from "./_codecs.ts";
import { defaultLayers, type LayerLayout, layoutLayer, type Topology, topologyOf } from "./_layout.ts";

/**
 * The optimizer each rank runs on its shards: SGD (with momentum, dampening, Nesterov, L2 weight decay),
 * Adam (L2 weight decay) or AdamW (decoupled weight decay), torch.optim's formulas, in float32.
 *
 * @example AdamW with torch's defaults but the learning rate
 * ```ts
 * import type { ZeroOptimizer } from "@dcomm/dcomm/zero";
 * const optimizer: ZeroOptimizer = { type: "adamw", lr: 1e-3, weightDecay: 0.01 };
 * ```
 */
export type ZeroOptimizer =
  | {
    /** SGD. */
    readonly type: "sgd";
    /** The learning rate. */
    readonly lr: number;
    /** Momentum in [0, 1). @default 0 */
    readonly momentum?: number;
    /** Dampening in [0, 1]. @default 0 */
    readonly dampening?: number;
    /** L2 weight decay. @default 0 */
    readonly weightDecay?: number;
    /** Nesterov momentum. @default false */
    readonly nesterov?: boolean;
  }
  | {
    /** Adam (L2 weight decay) or AdamW (decoupled). */
    readonly type: "adam" | "adamw";
    /** The learning rate. @default 0.001 */
    readonly lr?: number;
    /** β1. @default 0.9 */
    readonly beta1?: number;
    /** β2. @default 0.999 */
    readonly beta2?: number;
    /** ε. @default 1e-8 */
    readonly eps?: number;
    /** Weight decay. @default 0 (Adam), 0.01 (AdamW, torch's) */
    readonly weightDecay?: number;
  };

/**
 * Options of {@linkcode ShardedDataParallel.create}.
 *
 * @example Stage 3 with ZeRO++'s int8 weights and gradients
 * ```ts
 * import { init } from "@dcomm/dcomm";
 * import { ShardedDataParallel, type ZeroOptions } from "@dcomm/dcomm/zero";
 * import assert from "node:assert/strict";
 * await using pg = await init({ rank: 0, worldSize: 1, env: {} });
 * const options: ZeroOptions = {
 *   stage: 3,
 *   optimizer: { type: "adam", lr: 0.01 },
 *   layers: [[0, 1], [2, 3]],
 *   prefetch: 1,
 *   quantizeWeights: "int8",
 *   quantizeGradients: "int8",
 * };
 * const params = [new Float32Array(6), new Float32Array(2), new Float32Array(2), new Float32Array(1)];
 * await using sdp = await ShardedDataParallel.create(pg, params, options);
 * assert.equal(sdp.layers.length, 2);
 * ```
 */
export interface ZeroOptions {
  /** 1: optimizer state sharded; 2: and gradients; 3: and parameters. */
  stage: 1 | 2 | 3;
  /** The optimizer of the shards. */
  optimizer: ZeroOptimizer;
  /**
   * The layers, each a list of parameter indices (every parameter in exactly one layer). @default
   * consecutive parameters up to `bucketMb`
   */
  layers?: readonly (readonly number[])[];
  /** The size of a default layer, in MiB. @default 25 */
  bucketMb?: number;
  /**
   * Stages 2 and 3: the most MiB of whole-layer gradients in flight (taken, or reduce-scattering) before
   * `gather()` waits for the oldest reduce-scatter to finish, so the backward pass's gradient memory stays
   * bounded when the network is slower than the compute (DeepSpeed's `reduce_bucket_size`). @default 25
   */
  reduceBucketMb?: number;
  /** Stage 3: layers gathered ahead of the one asked for. @default 1 */
  prefetch?: number;
  /**
   * hpZ: shard within each host and across hosts (the ranks of every host the same count). `true` finds
   * the hosts by their identity (as the cpu backend does: boot id and network namespace, or
   * `DCOMM_HOST_ID`); `{ hosts }` gives each group rank's host number. The trainer's collectives then span
   * two sub-groups of its own, and run one operation after another in call order, so that every rank issues
   * them in the same order: run no collective of your own on these ranks while a gather, a gradient's
   * reduction or a step of the trainer is in flight (after `step()` returns, none is). @default false
   */
  hierarchical?: boolean | { readonly hosts: readonly number[] };
  /** qwZ: parameters all-gathered as int8 with one scale per `blockSize`. @default none */
  quantizeWeights?: "int8";
  /** qgZ: gradients reduce-scattered as int8 through an all-to-all. @default none */
  quantizeGradients?: "int8";
  /**
   * Another gradient codec on the same all-to-all reduce-scatter, with error feedback: `"sign"` (1 bit per
   * element and a scale per block) or `"topk"` (the `ratio` of largest-magnitude elements of each piece).
   * Not with `quantizeGradients`. @default none
   */
  compression?: { readonly codec: "sign"; readonly blockSize?: number } | {
    readonly codec: "topk";
    readonly ratio: number;
  };
  /** Elements per int8 or sign scale. @default 256 */
  blockSize?: number;
  /**
   * The rank whose parameters every rank starts from (a broadcast), or `false` to check that every rank
   * already holds the same ones (a hash of each parameter; a difference is an error naming it). @default false
   */
  broadcastFrom?: number | false;
  /** Milliseconds each collective may take. @default the group's */
  timeoutMs?: number;
}

/**
 * A layer's layout on this rank.
 *
 * @example
 * ```ts
 * import { init } from "@dcomm/dcomm";
 * import { type LayerInfo, ShardedDataParallel } from "@dcomm/dcomm/zero";
 * import assert from "node:assert/strict";
 * await using pg = await init({ rank: 0, worldSize: 1, env: {} });
 * await using sdp = await ShardedDataParallel.create(pg, [new Float32Array(5)], { stage: 2, optimizer: { type: "sgd", lr: 0.1 } });
 * const [layer]: readonly LayerInfo[] = sdp.layers;
 * assert.deepEqual([layer.params, layer.count, layer.shardStart, layer.shardCount], [[0], 5, 0, 5]);
 * ```
 */
export interface LayerInfo {
  /** The parameters, by index, in the order they sit in the layer. */
  readonly params: readonly number[];
  /** Elements. */
  readonly count: number;
  /** Where this rank's shard starts in the flat layer. */
  readonly shardStart: number;
  /** Elements of this rank's shard. */
  readonly shardCount: number;
}

/**
 * What one {@linkcode ShardedDataParallel.step} reports.
 *
 * @example
 * ```ts
 * import { init } from "@dcomm/dcomm";
 * import { ShardedDataParallel, type ZeroStepReport } from "@dcomm/dcomm/zero";
 * import assert from "node:assert/strict";
 * await using pg = await init({ rank: 0, worldSize: 1, env: {} });
 * await using sdp = await ShardedDataParallel.create(pg, [new Float32Array(4)], { stage: 1, optimizer: { type: "sgd", lr: 0.1 } });
 * sdp.grads(0)[0].fill(1);
 * sdp.gradReady(0);
 * const report: ZeroStepReport = await sdp.step();
 * assert.equal(report.step, 1);
 * assert.deepEqual(sdp.params(0)[0], new Float32Array(4).fill(-0.1));
 * ```
 */
export interface ZeroStepReport {
  /** The optimizer step just taken (1 for the first). */
  readonly step: number;
  /** Payload bytes this rank sent since the previous step (gathers, reduce-scatters, the step's gathers). */
  readonly bytesSent: number;
  /** Collectives run since the previous step. */
  readonly collectives: number;
  /** Milliseconds `step()` waited for the reduce-scatters. */
  readonly waitMs: number;
  /** Milliseconds the optimizer ran. */
  readonly optimizerMs: number;
  /** Milliseconds the codecs (qwZ, qgZ, `compression`) ran on this thread since the previous step. */
  readonly codecMs: number;
}

/**
 * The bytes a rank holds, by kind.
 *
 * @example Stage 3 holds a shard of every kind
 * ```ts
 * import { init } from "@dcomm/dcomm";
 * import { type ShardMemory, ShardedDataParallel } from "@dcomm/dcomm/zero";
 * import assert from "node:assert/strict";
 * await using pg = await init({ rank: 0, worldSize: 1, env: {} });
 * await using sdp = await ShardedDataParallel.create(pg, [new Float32Array(1000)], { stage: 3, optimizer: { type: "adam" } });
 * const memory: ShardMemory = sdp.memory();
 * assert.deepEqual([memory.params, memory.grads, memory.optimizer], [4000, 4000, 8000]);
 * ```
 */
export interface ShardMemory {
  /** Parameters held all the time: the whole (stages 1 and 2) or the shard (stage 3), the fp32 master shard
   * when it is apart (qwZ), and hpZ's secondary shard. */
  readonly params: number;
  /** Gradients held all the time: the whole (stage 1) or the shard's (stages 2 and 3). */
  readonly grads: number;
  /** Optimizer state (momentum, or Adam's two moments), of the shard. */
  readonly optimizer: number;
  /** Error feedback of the gradient codec. */
  readonly residuals: number;
  /** The reused buffers of whole layers (gathered parameters, open gradients) allocated so far. */
  readonly buffers: number;
  /** The sum. */
  readonly total: number;
}

/**
 * One parameter's element range in a checkpoint, with its optimizer state.
 *
 * @example
 * ```ts
 * import type { ZeroPiece } from "@dcomm/dcomm/zero";
 * const piece: ZeroPiece = { param: 0, start: 4, values: new Float32Array(4), m: new Float32Array(4), v: new Float32Array(4) };
 * ```
 */
export interface ZeroPiece {
  /** The parameter index. */
  readonly param: number;
  /** The first element. */
  readonly start: number;
  /** The values (the fp32 master). */
  readonly values: Float32Array;
  /** Adam's first moment. */
  readonly m?: Float32Array;
  /** Adam's second moment. */
  readonly v?: Float32Array;
  /** SGD's momentum buffer. */
  readonly buffer?: Float32Array;
}

/**
 * A checkpoint: the pieces of parameters (with their optimizer state) a rank saved, or all of them.
 *
 * @example Save shards on 1 rank, load them into another trainer
 * ```ts
 * import { init } from "@dcomm/dcomm";
 * import { ShardedDataParallel, type ZeroState } from "@dcomm/dcomm/zero";
 * import assert from "node:assert/strict";
 * await using pg = await init({ rank: 0, worldSize: 1, env: {} });
 * const options = { stage: 2, optimizer: { type: "sgd", lr: 0.5 } } as const;
 * await using a = await ShardedDataParallel.create(pg, [new Float32Array([1, 2])], options);
 * a.grads(0)[0].set([1, 1]);
 * a.gradReady(0);
 * await a.step();
 * const state: ZeroState = a.state();
 * await using b = await ShardedDataParallel.create(pg, [new Float32Array(2)], options);
 * await b.load([state]);
 * assert.deepEqual(b.params(0)[0], new Float32Array([0.5, 1.5]));
 * assert.equal(state.step, 1);
 * ```
 */
export interface ZeroState {
  /** The format, `"dcomm-zero/1"`. */
  readonly format: "dcomm-zero/1";
  /** The optimizer type. */
  readonly optimizer: ZeroOptimizer["type"];
  /** Optimizer steps taken. */
  readonly step: number;
  /** Every parameter's length. */
  readonly lengths: readonly number[];
  /** The rank that saved it and its group's size (a consolidated state: 0 and 1). */
  readonly rank: number;
  /** The saving group's size. */
  readonly size: number;
  /** The pieces. */
  readonly pieces: readonly ZeroPiece[];
}

interface Layer {
  readonly layout: LayerLayout;
  /** The whole layer: always (stages 1, 2), or while gathered (stage 3, from the pool). */
  full: Float32Array | undefined;
  /** The fp32 master shard: a view of `full` (stages 1, 2 without qwZ), or its own array. */
  master: Float32Array;
  /** hpZ, stage 3: this rank's block. */
  secondary: Float32Array | undefined;
  /** The layer's gradient: always (stage 1), or while open (stages 2, 3). */
  grad: Float32Array | undefined;
  /** The shard's averaged gradient: a view of `grad` (stage 1), or its own array. */
  shardGrad: Float32Array;
  m: Float32Array | undefined;
  v: Float32Array | undefined;
  residual: Float32Array | undefined;
  /** Stage 3: the gather in flight or done. */
  gather: Promise<void> | undefined;
  gathered: boolean;
  /** This step: "idle" (no grads taken), "open", "ready" (its reduce-scatter launched). */
  gradState: "idle" | "open" | "ready";
  reduce: Promise<void> | undefined;
  paramViews: Float32Array[] | undefined;
  gradViews: Float32Array[] | undefined;
}

/** Float32Arrays of whole layers, reused by length. */
class BufferPool {
  #free = new Map<number, Float32Array[]>();
  bytes = 0;

  take(n: number, zero: boolean): Float32Array {
    const list = this.#free.get(n);
    const got = list?.pop();
    if (got) {
      if (zero) got.fill(0);
      return got;
    }
    this.bytes += 4 * n;
    return new Float32Array(n);
  }

  give(buffer: Float32Array): void {
    const list = this.#free.get(buffer.length);
    if (list) list.push(buffer);
    else this.#free.set(buffer.length, [buffer]);
  }
}

const MIB = 1 << 20;

function fail(message: string): never {
  throw new DistError(message);
}

/** A 32-bit FNV-1a hash of a Float32Array's bits. */
function hashOf(a: Float32Array): number {
  const words = new Uint32Array(a.buffer, a.byteOffset, a.length);
  let h = 0x811c9dc5;
  for (let i = 0; i < words.length; i++) h = Math.imul(h ^ words[i], 0x01000193);
  return h >>> 0;
}

function checkOptimizer(o: unknown): ZeroOptimizer {
  const t = (o as { type?: unknown } | undefined)?.type;
  if (t !== "sgd" && t !== "adam" && t !== "adamw") {
    fail(`Cannot shard: expected optimizer.type "sgd", "adam" or "adamw", found ${JSON.stringify(t)}`);
  }
  if (t === "sgd" && typeof (o as { lr?: unknown }).lr !== "number") {
    fail(`Cannot shard: an sgd optimizer needs lr, found ${JSON.stringify((o as { lr?: unknown }).lr)}`);
  }
  return o as ZeroOptimizer;
}

/**
 * Sharded data parallel training (ZeRO 1/2/3, ZeRO++) over a process group.
 *
 * @example Stage 3 on a world of one: gather, compute, release, reduce, step
 * ```ts
 * import { init } from "@dcomm/dcomm";
 * import { ShardedDataParallel } from "@dcomm/dcomm/zero";
 * import assert from "node:assert/strict";
 * await using pg = await init({ rank: 0, worldSize: 1, env: {} });
 * const params = [new Float32Array([1, 2]), new Float32Array([3])];
 * await using sdp = await ShardedDataParallel.create(pg, params, {
 *   stage: 3,
 *   optimizer: { type: "sgd", lr: 0.5 },
 *   layers: [[0], [1]],
 * });
 * for (const layer of [0, 1]) await sdp.gather(layer); // forward
 * for (const layer of [1, 0]) { // backward
 *   sdp.grads(layer)[0].fill(1);
 *   sdp.gradReady(layer);
 *   sdp.release(layer);
 * }
 * await sdp.step();
 * await sdp.gather(0);
 * assert.deepEqual(sdp.params(0)[0], new Float32Array([0.5, 1.5]));
 * assert.throws(() => sdp.params(1), /not gathered/);
 * ```
 */
export class ShardedDataParallel implements AsyncDisposable {
  /** The stage. */
  readonly stage: 1 | 2 | 3;
  /** The layers, in index order. */
  readonly layers: readonly LayerInfo[];
  /** Every parameter's length. */
  readonly lengths: readonly number[];

  #pg: ProcessGroup;
  #topo: Topology;
  #host: ProcessGroup | undefined;
  #cross: ProcessGroup;
  #layers: Layer[];
  #optimizer: ZeroOptimizer;
  #lr: number;
  #step = 0;
  #prefetch: number;
  #weights: PieceCodec;
  #gradCodec: PieceCodec["kind"];
  #blockSize: number;
  #ratio: number;
  #timeoutMs: number | undefined;
  #kernels: CodecKernels;
  #ok: OptimizerKernels;
  #params = new BufferPool();
  #grads = new BufferPool();
  #bytesSent = 0;
  #codecMs = 0;
  #collectives = 0;
  #lastGathered = -1;
  #liveGradBytes = 0;
  #gradCap: number;
  #reducing: Layer[] = [];
  #sequence: Promise<void> = Promise.resolve();
  #direction = 1;
  #failure: unknown = undefined;
  #closed = false;

  private constructor(
    pg: ProcessGroup,
    stage: 1 | 2 | 3,
    lengths: number[],
    layouts: LayerLayout[],
    topo: Topology,
    host: ProcessGroup | undefined,
    cross: ProcessGroup,
    options: ZeroOptions,
    k: Kernels,
    ck: CompressionKernels,
    ok: OptimizerKernels,
  ) {
    this.#pg = pg;
    this.stage = stage;
    this.lengths = lengths;
    this.#topo = topo;
    this.#host = host;
    this.#cross = cross;
    this.#optimizer = options.optimizer;
    this.#lr = options.optimizer.lr ?? 1e-3;
    this.#prefetch = options.prefetch ?? 1;
    this.#blockSize = options.blockSize ??
      (options.compression?.codec === "sign" ? options.compression.blockSize ?? 256 : 256);
    this.#ratio = options.compression?.codec === "topk" ? options.compression.ratio : 0;
    this.#weights = options.quantizeWeights ? { kind: "int8", blockSize: this.#blockSize } : { kind: "none" };
    this.#gradCodec = options.quantizeGradients ? "int8" : options.compression?.codec ?? "none";
    this.#timeoutMs = options.timeoutMs;
    this.#gradCap = (options.reduceBucketMb ?? 25) * MIB;
    this.#kernels = { k, ck };
    this.#ok = ok;
    this.#layers = layouts.map((layout) => this.#makeLayer(layout));
    this.layers = layouts.map((l) => ({
      params: l.params,
      count: l.count,
      shardStart: l.shard.start,
      shardCount: l.shard.count,
    }));
  }

  /**
   * Shards `params` over `pg`: every rank of the group calls it with parameters of the same lengths (and
   * the same values, or `broadcastFrom`). The arrays are copied; read the parameters through
   * {@linkcode ShardedDataParallel.params} from then on.
   *
   * @param pg The group.
   * @param params The parameters (float32).
   * @param options The stage, the optimizer and the rest.
   * @returns The trainer.
   * @throws {DistError} On bad options or parameters, parameters that differ across ranks (or in number or
   *   lengths), or hosts of different sizes with `hierarchical`.
   */
  static async create(
    pg: ProcessGroup,
    params: readonly Float32Array[],
    options: ZeroOptions,
  ): Promise<ShardedDataParallel> {
    const stage = options?.stage;
    if (stage !== 1 && stage !== 2 && stage !== 3) {
      fail(`Cannot shard: expected stage 1, 2 or 3, found ${JSON.stringify(stage)}`);
    }
    checkOptimizer(options.optimizer);
    if (!Array.isArray(params) || params.length === 0) {
      fail("Cannot shard: expected a non-empty array of parameters");
    }
    params.forEach((p, i) => {
      if (!(p instanceof Float32Array)) {
        fail(
          `Cannot shard: parameter ${i} must be a Float32Array, found ${p?.constructor?.name ?? typeof p}`,
        );
      }
    });
    const bucketMb = options.bucketMb ?? 25;
    if (!(typeof bucketMb === "number" && bucketMb > 0)) {
      fail(`Cannot shard: expected bucketMb > 0, found ${String(bucketMb)}`);
    }
    const reduceMb = options.reduceBucketMb ?? 25;
    if (!(typeof reduceMb === "number" && reduceMb > 0)) {
      fail(`Cannot shard: expected reduceBucketMb > 0, found ${String(reduceMb)}`);
    }
    const prefetch = options.prefetch ?? 1;
    if (!Number.isSafeInteger(prefetch) || prefetch < 0) {
      fail(`Cannot shard: expected prefetch an integer >= 0, found ${String(prefetch)}`);
    }
    if (options.quantizeGradients && options.compression) {
      fail("Cannot shard: quantizeGradients and compression both code the gradients; pass one");
    }
    const c = options.compression;
    if (c && c.codec !== "sign" && !(c.codec === "topk" && c.ratio > 0 && c.ratio <= 1)) {
      fail(
        `Cannot shard: expected compression { codec: "sign" } or { codec: "topk", ratio in (0, 1] }, found ${
          JSON.stringify(c)
        }`,
      );
    }
    const lengths = params.map((p) => p.length);
    const layers = ShardedDataParallel.#checkLayers(
      options.layers,
      lengths,
      Math.floor((bucketMb * MIB) / 4),
    );
    await ShardedDataParallel.#agree(pg, params, options, stage);
    // hpZ: the host of every rank, then one group per host and one per local index.
    let topo = topologyOf(pg.rank, pg.size, undefined);
    let host: ProcessGroup | undefined, cross = pg;
    if (options.hierarchical) {
      const given = options.hierarchical === true ? undefined : options.hierarchical.hosts;
      let hostOf: number[];
      if (given) {
        if (!Array.isArray(given) || given.length !== pg.size) {
          fail(
            `Cannot shard: expected hierarchical.hosts to list ${pg.size} host numbers, found ${
              JSON.stringify(given)
            }`,
          );
        }
        hostOf = [...given];
      } else {
        const ids = await pg.allGatherObject(hostIdentity(), { timeoutMs: options.timeoutMs });
        hostOf = ids.map((id) => ids.indexOf(id));
      }
      const found = topologyOf(pg.rank, pg.size, hostOf);
      // One host, or one rank per host: a single level, the flat layout.
      if (found.local > 1 && found.hosts > 1) {
        topo = found;
        host = (await pg.split(topo.host, { key: topo.localRank })) ?? undefined;
        cross = (await pg.split(topo.localRank, { key: topo.host })) ?? pg;
      }
    }
    const layouts = layers.map((ps, i) => layoutLayer(i, ps, lengths, topo));
    const [k, ck, ok] = await Promise.all([kernels(), compressionKernels(), optimizerKernels()]);
    const sdp = new ShardedDataParallel(pg, stage, lengths, layouts, topo, host, cross, options, k, ck, ok);
    sdp.#fill(params);
    return sdp;
  }

  static #checkLayers(
    given: readonly (readonly number[])[] | undefined,
    lengths: readonly number[],
    cap: number,
  ): number[][] {
    if (given === undefined) return defaultLayers(lengths, cap);
    if (!Array.isArray(given) || given.length === 0) {
      fail("Cannot shard: expected layers, a non-empty list of lists of parameter indices");
    }
    const owner = new Array<number>(lengths.length).fill(-1);
    given.forEach((layer, li) => {
      if (!Array.isArray(layer) || layer.length === 0) fail(`Cannot shard: layer ${li} lists no parameter`);
      for (const i of layer) {
        if (!Number.isSafeInteger(i) || i < 0 || i >= lengths.length) {
          fail(
            `Cannot shard: layer ${li} names parameter ${String(i)}; expected an index in 0..${
              lengths.length - 1
            }`,
          );
        }
        if (owner[i] >= 0) fail(`Cannot shard: parameter ${i} is in layers ${owner[i]} and ${li}`);
        owner[i] = li;
      }
    });
    const missing = owner.indexOf(-1);
    if (missing >= 0) fail(`Cannot shard: parameter ${missing} is in no layer`);
    return given.map((l) => [...l]);
  }

  /** Every rank the same parameter lengths, stage, layers and (unless broadcast) values. */
  static async #agree(
    pg: ProcessGroup,
    params: readonly Float32Array[],
    options: ZeroOptions,
    stage: number,
  ): Promise<void> {
    const from = options.broadcastFrom ?? false;
    if (from !== false && (!Number.isSafeInteger(from) || from < 0 || from >= pg.size)) {
      fail(
        `Cannot shard: expected broadcastFrom a rank in 0..${pg.size - 1} or false, found ${String(from)}`,
      );
    }
    if (pg.size === 1) return;
    const mine = {
      lengths: params.map((p) => p.length),
      stage,
      layers: options.layers ?? null,
      hashes: from === false ? params.map(hashOf) : [],
    };
    const all = await pg.allGatherObject(mine, { timeoutMs: options.timeoutMs });
    for (let r = 0; r < all.length; r++) {
      const o = all[r];
      if (JSON.stringify(o.lengths) !== JSON.stringify(mine.lengths)) {
        fail(
          `Cannot shard: rank ${r} has parameters of lengths [${o.lengths}], rank ${pg.rank} of [${mine.lengths}]`,
        );
      }
      if (o.stage !== stage) {
        fail(`Cannot shard: rank ${r} runs stage ${o.stage}, rank ${pg.rank} stage ${stage}`);
      }
      if (JSON.stringify(o.layers) !== JSON.stringify(mine.layers)) {
        fail(`Cannot shard: rank ${r} cuts the parameters into other layers than rank ${pg.rank}`);
      }
      const differs = o.hashes.findIndex((h, i) => h !== mine.hashes[i]);
      if (differs >= 0) {
        fail(
          `Cannot shard: parameter ${differs} differs across ranks (rank ${r}'s hash ${
            o.hashes[differs]
          }, rank ${pg.rank}'s ${
            mine.hashes[differs]
          }); start every rank from the same values, or pass broadcastFrom: 0`,
        );
      }
    }
    if (from !== false) {
      await Promise.all(params.map((p) => pg.broadcast(p, { root: from, timeoutMs: options.timeoutMs })));
    }
  }

  #makeLayer(layout: LayerLayout): Layer {
    const { count, shard, block } = layout;
    const stage = this.stage, quantized = this.#weights.kind !== "none";
    const full = stage < 3 ? new Float32Array(count) : undefined;
    const master = full && !quantized
      ? full.subarray(shard.start, shard.start + shard.count)
      : new Float32Array(shard.count);
    const grad = stage === 1 ? new Float32Array(count) : undefined;
    const shardGrad = grad
      ? grad.subarray(shard.start, shard.start + shard.count)
      : new Float32Array(shard.count);
    const o = this.#optimizer;
    const withM = o.type !== "sgd" || (o.momentum ?? 0) > 0;
    const coded = this.#gradCodec === "sign" || this.#gradCodec === "topk";
    return {
      layout,
      full,
      master,
      secondary: stage === 3 && this.#host !== undefined ? new Float32Array(block.count) : undefined,
      grad,
      shardGrad,
      m: withM ? new Float32Array(shard.count) : undefined,
      v: o.type !== "sgd" ? new Float32Array(shard.count) : undefined,
      residual: coded ? new Float32Array(block.count) : undefined,
      gather: undefined,
      gathered: false,
      gradState: "idle",
      reduce: undefined,
      paramViews: undefined,
      gradViews: undefined,
    };
  }

  /** Copies the starting parameters into the layers (every rank holds them whole at the start). */
  #fill(params: readonly Float32Array[]): void {
    for (const layer of this.#layers) {
      const { params: ps, offsets, shard, block } = layer.layout;
      const flat = layer.full ?? new Float32Array(layer.layout.count);
      ps.forEach((p, j) => flat.set(params[p], offsets[j]));
      if (layer.full === undefined || this.#weights.kind !== "none") {
        layer.master.set(flat.subarray(shard.start, shard.start + shard.count));
      }
      layer.secondary?.set(flat.subarray(block.start, block.start + block.count));
    }
  }

  /** The learning rate the next steps use. */
  get lr(): number {
    return this.#lr;
  }

  set lr(value: number) {
    if (typeof value !== "number" || !Number.isFinite(value) || value < 0) {
      fail(`Cannot set lr: expected a finite number >= 0, found ${String(value)}`);
    }
    this.#lr = value;
  }

  /** Optimizer steps taken. */
  get steps(): number {
    return this.#step;
  }

  #layer(verb: string, index: number): Layer {
    this.#usable(verb);
    const layer = this.#layers[index];
    if (!Number.isSafeInteger(index) || layer === undefined) {
      fail(`Cannot ${verb}: expected a layer in 0..${this.#layers.length - 1}, found ${String(index)}`);
    }
    return layer;
  }

  #usable(verb: string): void {
    if (this.#closed) fail(`Cannot ${verb}: the trainer is closed`);
    if (this.#failure !== undefined) {
      const why = this.#failure instanceof Error ? this.#failure.message : String(this.#failure);
      throw new DistError(`Cannot ${verb}: a collective of this trainer failed: ${why}`, {
        cause: this.#failure,
      });
    }
  }

  /**
   * The whole parameters of a layer, one view per parameter of the layer (in its order). Stage 3: only
   * between `await gather(layer)` and `release(layer)`.
   *
   * @param layer The layer.
   * @returns Views of its parameters.
   * @throws {DistError} In stage 3, for a layer not gathered (or whose gather has not finished).
   */
  params(layer: number): readonly Float32Array[] {
    const l = this.#layer(`use the parameters of layer ${layer}`, layer);
    if (this.stage === 3 && !l.gathered) {
      fail(
        l.gather
          ? `Cannot use the parameters of layer ${layer}: its gather has not finished; await sdp.gather(${layer})`
          : `Cannot use the parameters of layer ${layer}: it is not gathered (stage 3 holds 1/${this.#pg.size} of it); await sdp.gather(${layer}) first`,
      );
    }
    l.paramViews ??= views(l.full as Float32Array, l.layout);
    return l.paramViews;
  }

  /**
   * Where this step's gradients of a layer go, one view per parameter: zeros when first taken in a step
   * (add to them to accumulate), until `gradReady(layer)`.
   *
   * @param layer The layer.
   * @returns Views of its gradients.
   * @throws {DistError} If the layer's gradient was already handed to its reduce-scatter this step.
   */
  grads(layer: number): readonly Float32Array[] {
    const l = this.#layer(`take the gradients of layer ${layer}`, layer);
    if (l.gradState === "ready") {
      fail(
        `Cannot take the gradients of layer ${layer}: gradReady(${layer}) already handed them on this step`,
      );
    }
    if (l.gradState === "idle") {
      if (l.grad) l.grad.fill(0);
      else {
        l.grad = this.#grads.take(l.layout.count, true);
        this.#liveGradBytes += l.grad.byteLength;
      }
      l.gradViews = views(l.grad, l.layout);
      l.gradState = "open";
    }
    return l.gradViews as Float32Array[];
  }

  /**
   * Says a layer's gradient is final for this step: its reduce-scatter starts at once, on the
   * communication thread, while the backward pass goes on. Every rank must call it for the same layers
   * in the same order.
   *
   * @param layer The layer.
   * @throws {DistError} If it was called already for the layer this step.
   */
  gradReady(layer: number): void {
    const l = this.#layer(`mark layer ${layer}'s gradient ready`, layer);
    if (l.gradState === "ready") {
      fail(`Cannot mark layer ${layer}'s gradient ready: it already is, this step`);
    }
    if (l.gradState === "idle") this.grads(layer); // a layer without gradient this step: zeros
    l.gradState = "ready";
    this.#reducing.push(l);
    l.reduce = this.#track(this.#issue(() => this.#reduceLayer(l)));
  }

  async #reduceLayer(l: Layer): Promise<void> {
    const { layout } = l, topo = this.#topo;
    const grad = l.grad as Float32Array;
    let block = grad;
    if (this.#host) {
      block = grad.subarray(layout.block.start, layout.block.start + layout.block.count);
      await this.#run(
        reduceScatterPieces(
          this.#host,
          grad,
          block,
          layout.blocks,
          { kind: "none" },
          this.#kernels,
          this.#timeoutMs,
        ),
      );
    }
    const pieces = layout.pieces[topo.localRank];
    const pieceStart = layout.shard.start - layout.block.start;
    const output = this.stage === 1
      ? block.subarray(pieceStart, pieceStart + layout.shard.count)
      : l.shardGrad;
    await this.#run(
      reduceScatterPieces(
        this.#cross,
        block,
        output,
        pieces,
        this.#gradPieceCodec(l),
        this.#kernels,
        this.#timeoutMs,
      ),
    );
    if (this.stage > 1) {
      this.#grads.give(grad);
      this.#liveGradBytes -= grad.byteLength;
      l.grad = undefined;
      l.gradViews = undefined;
    }
    this.#reducing.splice(this.#reducing.indexOf(l), 1);
  }

  /** Waits, oldest first, for reduce-scatters while the gradients in flight exceed the cap. */
  async #throttle(): Promise<void> {
    while (this.#liveGradBytes > this.#gradCap && this.#reducing.length > 0) {
      await this.#reducing[0].reduce;
    }
  }

  #gradPieceCodec(l: Layer): PieceCodec {
    switch (this.#gradCodec) {
      case "none":
        return { kind: "none" };
      case "int8":
        return { kind: "int8", blockSize: this.#blockSize };
      case "sign":
        return { kind: "sign", blockSize: this.#blockSize, residual: l.residual as Float32Array };
      case "topk":
        return { kind: "topk", ratio: this.#ratio, residual: l.residual as Float32Array };
    }
  }

  async #run(p: Promise<{ bytesSent: number; codecMs?: number }>): Promise<void> {
    const r = await p;
    this.#bytesSent += r.bytesSent;
    this.#codecMs += r.codecMs ?? 0;
    this.#collectives++;
  }

  /**
   * Runs an operation of the trainer's collectives. With the hierarchy they span two groups (the host's,
   * then the one across hosts), and a rank's calls run one after another in the order they were issued,
   * whatever their group: the operations must then be issued in the same order on every rank, so each
   * starts when the one before it has ended, in call order (which is the same on every rank). Without
   * it every operation is one call on one group, issued at once.
   */
  #issue(op: () => Promise<void>): Promise<void> {
    if (this.#host === undefined) return op();
    const p = this.#sequence.then(op);
    this.#sequence = p.catch(() => {});
    return p;
  }

  /** Remembers the first failure of a background collective, so later calls report it. */
  #track(p: Promise<void>): Promise<void> {
    return p.catch((e) => {
      this.#failure ??= e;
      throw e;
    });
  }

  /**
   * Stage 3: gathers a layer's whole parameters (and starts gathering the next `prefetch` layers in the
   * direction of the calls). Stages 1 and 2 hold every layer. In stages 2 and 3 it first waits while the
   * gradients in flight exceed `reduceBucketMb` (call it before each layer of the backward pass, as stage 3
   * must, to keep their memory bounded).
   *
   * @param layer The layer.
   * @throws {DistError} If a gather fails (a peer died, a timeout).
   */
  async gather(layer: number): Promise<void> {
    const l = this.#layer(`gather layer ${layer}`, layer);
    // (No await unless it must wait: the gather then starts before this call returns.)
    if (this.stage > 1 && this.#liveGradBytes > this.#gradCap) await this.#throttle();
    if (this.stage < 3) return;
    if (this.#lastGathered >= 0 && layer !== this.#lastGathered) {
      this.#direction = layer > this.#lastGathered ? 1 : -1;
    }
    this.#lastGathered = layer;
    const own = this.#startGather(l);
    for (let i = 1; i <= this.#prefetch; i++) {
      const next = this.#layers[layer + i * this.#direction];
      if (next) this.#startGather(next).catch(() => {}); // its own gather() reports a failure
    }
    await own;
  }

  #startGather(l: Layer): Promise<void> {
    if (l.gather) return l.gather;
    const full = this.#params.take(l.layout.count, false);
    l.full = full;
    l.paramViews = undefined;
    const work = this.#host
      ? this.#issue(() =>
        this.#run(
          allGatherPieces(
            this.#host as ProcessGroup,
            l.secondary as Float32Array,
            full,
            l.layout.blocks,
            { kind: "none" },
            this.#kernels,
            this.#timeoutMs,
          ),
        )
      )
      : this.#run(
        allGatherPieces(
          this.#cross,
          l.master,
          full,
          l.layout.pieces[0],
          this.#weights,
          this.#kernels,
          this.#timeoutMs,
        ),
      );
    l.gather = this.#track(work.then(() => {
      l.gathered = true;
    }));
    return l.gather;
  }

  /**
   * Stage 3: gives a gathered layer's whole parameters back (its views then hold other data). Stages 1 and
   * 2: nothing.
   *
   * @param layer The layer.
   * @throws {DistError} If the layer is not gathered, or is in use: its gather has not finished, or its
   *   gradient is open (taken, without `gradReady`).
   */
  release(layer: number): void {
    const l = this.#layer(`release layer ${layer}`, layer);
    if (this.stage < 3) return;
    if (!l.gather) fail(`Cannot release layer ${layer}: it is not gathered`);
    if (!l.gathered) fail(`Cannot release layer ${layer}: it is in use, its gather has not finished`);
    if (l.gradState === "open") {
      fail(
        `Cannot release layer ${layer}: it is in use, its gradient is open (call gradReady(${layer}) first)`,
      );
    }
    this.#params.give(l.full as Float32Array);
    l.full = undefined;
    l.paramViews = undefined;
    l.gather = undefined;
    l.gathered = false;
  }

  /**
   * Waits for every layer's reduce-scatter, runs the optimizer on this rank's shards and brings the
   * parameters up to date: an all-gather of every layer (stages 1 and 2), or of hpZ's secondary shards
   * (stage 3 with `hierarchical`; plain stage 3 gathers at the next `gather`).
   *
   * @returns What the step did.
   * Stage 3: every layer still gathered is released first (the update makes its values stale).
   *
   * @throws {DistError} If a layer got no `gradReady` this step, or a collective failed.
   */
  async step(): Promise<ZeroStepReport> {
    this.#usable("step");
    const missing = this.#layers.filter((l) => l.gradState !== "ready").map((l) => l.layout.index);
    if (missing.length > 0) {
      fail(`Cannot step: layers ${missing.join(", ")} got no gradReady() this step`);
    }
    const t0 = performance.now();
    await Promise.all(this.#layers.map((l) => l.reduce));
    if (this.stage === 3) {
      // A layer still gathered (or prefetched) holds values the update makes stale: give it back.
      await Promise.all(this.#layers.map((l) => l.gather));
      for (const l of this.#layers) if (l.gather) this.release(l.layout.index);
    }
    const t1 = performance.now();
    this.#step++;
    for (const l of this.#layers) this.#update(l);
    const t2 = performance.now();
    const gathers: Promise<void>[] = [];
    for (const l of this.#layers) {
      l.gradState = "idle";
      l.reduce = undefined;
      if (this.stage < 3) gathers.push(this.#track(this.#issue(() => this.#refresh(l))));
      else if (this.#host) gathers.push(this.#track(this.#issue(() => this.#refreshSecondary(l))));
    }
    await Promise.all(gathers);
    const report: ZeroStepReport = {
      step: this.#step,
      bytesSent: this.#bytesSent,
      collectives: this.#collectives,
      waitMs: t1 - t0,
      optimizerMs: t2 - t1,
      codecMs: this.#codecMs,
    };
    this.#bytesSent = 0;
    this.#codecMs = 0;
    this.#collectives = 0;
    return report;
  }

  #update(l: Layer): void {
    const o = this.#optimizer, g = l.shardGrad;
    if (l.master.length === 0) return;
    if (o.type === "sgd") {
      this.#ok.sgd(l.master, g, {
        lr: this.#lr,
        momentum: o.momentum,
        dampening: o.dampening,
        weightDecay: o.weightDecay,
        nesterov: o.nesterov,
        buffer: l.m,
        first: this.#step === 1,
      });
    } else {
      this.#ok.adam(l.master, g, {
        m: l.m as Float32Array,
        v: l.v as Float32Array,
        step: this.#step,
        lr: this.#lr,
        beta1: o.beta1,
        beta2: o.beta2,
        eps: o.eps,
        weightDecay: o.weightDecay ?? (o.type === "adamw" ? 0.01 : 0),
        decoupled: o.type === "adamw",
      });
    }
  }

  /** Stages 1, 2: every rank's updated shard into the whole layer: across hosts, then within. */
  async #refresh(l: Layer): Promise<void> {
    const { layout } = l, full = l.full as Float32Array;
    const block = full.subarray(layout.block.start, layout.block.start + layout.block.count);
    await this.#run(
      allGatherPieces(
        this.#cross,
        l.master,
        block,
        layout.pieces[this.#topo.localRank],
        this.#weights,
        this.#kernels,
        this.#timeoutMs,
      ),
    );
    if (this.#host) {
      await this.#run(
        allGatherPieces(
          this.#host,
          block,
          full,
          layout.blocks,
          { kind: "none" },
          this.#kernels,
          this.#timeoutMs,
        ),
      );
    }
  }

  /** Stage 3 with hpZ: the updated shards of this rank's block from the other hosts. */
  async #refreshSecondary(l: Layer): Promise<void> {
    const { layout } = l;
    await this.#run(
      allGatherPieces(
        this.#cross,
        l.master,
        l.secondary as Float32Array,
        layout.pieces[this.#topo.localRank],
        this.#weights,
        this.#kernels,
        this.#timeoutMs,
      ),
    );
  }

  /**
   * A copy of the error feedback of the gradient codec (`"sign"` or `"topk"`), one array per layer: what
   * this rank's encoded gradients have lost so far and will send later. Each covers the part of the layer
   * the codec runs on: the whole layer, or this rank's block with `hierarchical` (from the block's start).
   * Without such a codec, empty arrays.
   *
   * @returns The residuals, by layer.
   */
  residuals(): Float32Array[] {
    return this.#layers.map((l) => l.residual?.slice() ?? new Float32Array(0));
  }

  /**
   * The bytes this rank holds now, by kind.
   *
   * @returns The bytes.
   */
  memory(): ShardMemory {
    let params = 0, grads = 0, optimizer = 0, residuals = 0;
    for (const l of this.#layers) {
      if (this.stage < 3) params += 4 * l.layout.count;
      if (this.stage === 3 || this.#weights.kind !== "none") params += l.master.byteLength;
      params += l.secondary?.byteLength ?? 0;
      grads += this.stage === 1 ? 4 * l.layout.count : l.shardGrad.byteLength;
      optimizer += (l.m?.byteLength ?? 0) + (l.v?.byteLength ?? 0);
      residuals += l.residual?.byteLength ?? 0;
    }
    const buffers = this.#params.bytes + this.#grads.bytes;
    return {
      params,
      grads,
      optimizer,
      residuals,
      buffers,
      total: params + grads + optimizer + residuals + buffers,
    };
  }

  /** Where this rank's shard of each layer meets each of its parameters, in the layer's coordinates. */
  *#shardParts(): Generator<{ l: Layer; param: number; offset: number; from: number; to: number }> {
    for (const l of this.#layers) {
      const { params, offsets, shard } = l.layout;
      for (const [j, param] of params.entries()) {
        const from = Math.max(shard.start, offsets[j]);
        const to = Math.min(shard.start + shard.count, offsets[j] + this.lengths[param]);
        if (to > from) yield { l, param, offset: offsets[j], from, to };
      }
    }
  }

  /**
   * This rank's checkpoint: its shard of every parameter (the fp32 master values) with the optimizer state.
   *
   * @returns The state (its arrays are copies).
   */
  state(): ZeroState {
    this.#usable("save the state");
    const pieces: ZeroPiece[] = [];
    for (const { l, param, offset, from, to } of this.#shardParts()) {
      const a = from - l.layout.shard.start, b = to - l.layout.shard.start;
      pieces.push({
        param,
        start: from - offset,
        values: l.master.slice(a, b),
        ...(this.#optimizer.type === "sgd" ? (l.m ? { buffer: l.m.slice(a, b) } : {}) : {
          m: (l.m as Float32Array).slice(a, b),
          v: (l.v as Float32Array).slice(a, b),
        }),
      });
    }
    return {
      format: "dcomm-zero/1",
      optimizer: this.#optimizer.type,
      step: this.#step,
      lengths: this.lengths,
      rank: this.#pg.rank,
      size: this.#pg.size,
      pieces,
    };
  }

  /**
   * The whole checkpoint on rank 0 (every rank's shards gathered there), `null` on the other ranks. Every
   * rank must call it.
   *
   * @returns The state on rank 0.
   */
  async consolidatedState(): Promise<ZeroState | null> {
    const mine = this.state();
    const all = await this.#pg.gatherObject(mine, { root: 0, timeoutMs: this.#timeoutMs });
    if (all === null || all === undefined) return null;
    const merged = mergePieces(this.lengths, all.flatMap((s) => s.pieces), this.#optimizer.type);
    return { ...mine, rank: 0, size: 1, pieces: merged };
  }

  /**
   * Loads a checkpoint: a consolidated state, or the shards of every rank that saved one (from a world of
   * any size). Every rank must call it; the parameters are then brought up to date as after a step.
   *
   * @param states The state, or the states of every saving rank.
   * @throws {DistError} If the states are of another format, optimizer or parameter lengths, disagree on
   *   the step, or leave elements of this rank's shard uncovered.
   */
  async load(states: ZeroState | readonly ZeroState[]): Promise<void> {
    this.#usable("load a state");
    const list = Array.isArray(states) ? states as readonly ZeroState[] : [states as ZeroState];
    if (list.length === 0) fail("Cannot load a state: expected at least one");
    for (const s of list) {
      if (s?.format !== "dcomm-zero/1") {
        fail(`Cannot load a state: expected format "dcomm-zero/1", found ${JSON.stringify(s?.format)}`);
      }
      if (s.optimizer !== this.#optimizer.type) {
        fail(
          `Cannot load a state: it was saved by an ${s.optimizer} optimizer, this trainer runs ${this.#optimizer.type}`,
        );
      }
      if (JSON.stringify(s.lengths) !== JSON.stringify(this.lengths)) {
        fail(
          `Cannot load a state: it holds parameters of lengths [${s.lengths}], this trainer [${this.lengths}]`,
        );
      }
      if (s.step !== list[0].step) {
        fail(`Cannot load a state: the states disagree on the step (${list[0].step} and ${s.step})`);
      }
    }
    const byParam = new Map<number, ZeroPiece[]>();
    for (const s of list) {
      for (const p of s.pieces) byParam.get(p.param)?.push(p) ?? byParam.set(p.param, [p]);
    }
    for (const { l, param: p, offset, from, to } of this.#shardParts()) {
      const shard = l.layout.shard;
      let covered = 0;
      for (const piece of byParam.get(p) ?? []) {
        const a = Math.max(from - offset, piece.start),
          b = Math.min(to - offset, piece.start + piece.values.length);
        if (b <= a) continue;
        const at = offset + a - shard.start,
          src = (x: Float32Array): Float32Array => x.subarray(a - piece.start, b - piece.start);
        l.master.set(src(piece.values), at);
        const m = piece.m ?? piece.buffer;
        if (l.m && !m) {
          fail(
            `Cannot load a state: parameter ${p}'s piece at ${piece.start} has no momentum or first moment`,
          );
        }
        if (l.v && !piece.v) {
          fail(`Cannot load a state: parameter ${p}'s piece at ${piece.start} has no second moment`);
        }
        if (l.m) l.m.set(src(m as Float32Array), at);
        if (l.v) l.v.set(src(piece.v as Float32Array), at);
        covered += b - a;
      }
      if (covered < to - from) {
        fail(
          `Cannot load a state: elements ${from - offset}..${
            to - offset - 1
          } of parameter ${p} are not all in it (${covered} of ${
            to - from
          } found); pass the states of every rank that saved one`,
        );
      }
    }
    const steps = this.#pg.size > 1
      ? await this.#pg.allGatherObject(list[0].step, { timeoutMs: this.#timeoutMs })
      : [list[0].step];
    if (steps.some((s) => s !== steps[0])) {
      fail(`Cannot load a state: the ranks loaded different steps (${steps.join(", ")})`);
    }
    this.#step = list[0].step;
    const work: Promise<void>[] = [];
    for (const l of this.#layers) {
      if (this.stage < 3) work.push(this.#issue(() => this.#refresh(l)));
      else {
        if (l.gather) fail(`Cannot load a state: layer ${l.layout.index} is gathered; release it first`);
        if (this.#host) work.push(this.#issue(() => this.#refreshSecondary(l)));
      }
    }
    await Promise.all(work);
  }

  /** Waits for what is in flight and lets the buffers go. The group stays open. */
  async close(): Promise<void> {
    if (this.#closed) return;
    await Promise.allSettled(this.#layers.flatMap((l) => [l.reduce, l.gather]));
    this.#closed = true;
  }

  /** {@linkcode ShardedDataParallel.close}. */
  async [Symbol.asyncDispose](): Promise<void> {
    await this.close();
  }
}

/** One view per parameter of a layer's flat buffer. */
function views(flat: Float32Array, layout: LayerLayout): Float32Array[] {
  return layout.params.map((_, j) => flat.subarray(layout.offsets[j], layout.offsets[j + 1] ?? layout.count));
}

/** Whole parameters from pieces that cover them. */
function mergePieces(
  lengths: readonly number[],
  pieces: readonly ZeroPiece[],
  type: ZeroOptimizer["type"],
): ZeroPiece[] {
  return lengths.map((n, param) => {
    const values = new Float32Array(n);
    const hasM = pieces.some((p) => p.param === param && (p.m || p.buffer));
    const m = hasM ? new Float32Array(n) : undefined, v = type === "sgd" ? undefined : new Float32Array(n);
    for (const p of pieces) {
      if (p.param !== param) continue;
      values.set(p.values, p.start);
      if (m) m.set((p.m ?? p.buffer) as Float32Array, p.start);
      if (v) v.set(p.v as Float32Array, p.start);
    }
    return type === "sgd"
      ? { param, start: 0, values, ...(m ? { buffer: m } : {}) }
      : { param, start: 0, values, m, v };
  });
}
