/**
 * Communication hooks of {@linkcode DistributedDataParallel}, as torch's `register_comm_hook`: a hook
 * receives one bucket of gradients (a flat tensor, summed over the ranks' contributions) and must leave in
 * it the average over the ranks. The default, {@linkcode allReduceHook}, is one all-reduce with `op: "avg"`
 * in the bucket's own dtype: a float16 or bfloat16 bucket travels as 2 bytes per element, never upcast.
 *
 * A hook keeps whatever state it needs across steps (error feedback, a warm start) and hands it out with
 * `state()` and takes it back with `load()`, for checkpoints.
 *
 * @module
 */
import type { DType, TypedArray } from "../core/dtype.ts";
import type { Compression, ProcessGroup } from "../backend/process_group.ts";
import type { WorkReport } from "../backend/work.ts";

/**
 * One bucket as a hook sees it.
 *
 * @example Running a hook on a bucket by hand, as DistributedDataParallel does
 * ```ts
 * import { init } from "@dcomm/dcomm";
 * import { allReduceHook, type HookBucket } from "@dcomm/dcomm/ddp";
 * import assert from "node:assert/strict";
 * await using pg = await init({ rank: 0, worldSize: 1, env: {} });
 * const bucket: HookBucket = {
 *   index: 0,
 *   buffer: new Float32Array([1, 2, 3, 4, 5]), // two parameters' gradients, flat
 *   dtype: "float32",
 *   params: [1, 0],
 *   offsets: [0, 3],
 *   shapes: [[3], [2]],
 * };
 * await allReduceHook().run(pg, bucket);
 * assert.deepEqual(bucket.buffer, new Float32Array([1, 2, 3, 4, 5])); // the average over one rank
 * ```
 */
export interface HookBucket {
  /** The bucket's number in launch order (0 holds the last parameters registered). */
  readonly index: number;
  /** The bucket's gradients, flat: this rank's contribution on entry, the average over ranks on return. */
  readonly buffer: TypedArray;
  /** The element type of `buffer`. */
  readonly dtype: DType;
  /** The parameters whose gradients the bucket holds, by registration index. */
  readonly params: readonly number[];
  /** Where each of `params` starts in `buffer` (elements). */
  readonly offsets: readonly number[];
  /** The shape of each of `params` (`DdpOptions.shapes`), or undefined where none was given. */
  readonly shapes: readonly (readonly number[] | undefined)[];
}

/**
 * What a hook reports of one bucket: the collectives it ran and the dtype on the wire.
 *
 * @example
 * ```ts
 * import { init } from "@dcomm/dcomm";
 * import { type HookReport, int8CompressHook } from "@dcomm/dcomm/ddp";
 * import assert from "node:assert/strict";
 * await using pg = await init({ rank: 0, worldSize: 1, env: {} });
 * const buffer = new Float32Array(1024).fill(0.5);
 * const bucket = { index: 0, buffer, dtype: "float32", params: [0], offsets: [0], shapes: [undefined] } as const;
 * const report: HookReport = await int8CompressHook().run(pg, bucket);
 * assert.equal(report.wireDtype, "int8");
 * assert.equal(report.codec, "int8");
 * assert.equal(report.works.length, 1);
 * ```
 */
export interface HookReport {
  /** The reports of the collectives the hook ran, in order. */
  readonly works: readonly WorkReport[];
  /** The dtype the gradients travelled in (`uint8` for sign bits; the values' for top-k and PowerSGD). */
  readonly wireDtype: DType;
  /** The codec of a compressing hook (`"int8"`, `"sign"`, `"topk"`, `"powersgd"`), if it compressed. */
  readonly codec?: string;
}

/**
 * A communication hook: averages one bucket of gradients over the ranks of `pg`.
 *
 * @example A hook of your own: the sum, then a scale, in two steps
 * ```ts
 * import { init, type ProcessGroup } from "@dcomm/dcomm";
 * import {
 *   type CommHook,
 *   DistributedDataParallel,
 *   type HookBucket,
 *   type HookReport,
 * } from "@dcomm/dcomm/ddp";
 * import assert from "node:assert/strict";
 * const sumThenScale: CommHook = {
 *   name: "sum-then-scale",
 *   async run(pg: ProcessGroup, bucket: HookBucket): Promise<HookReport> {
 *     const report = await pg.allReduce(bucket.buffer, { op: "sum" }).wait();
 *     const g = bucket.buffer as Float32Array;
 *     for (let i = 0; i < g.length; i++) g[i] /= pg.size;
 *     return { works: report ? [report] : [], wireDtype: bucket.dtype };
 *   },
 *   state: () => undefined, // stateless
 *   load: () => {},
 * };
 * await using pg = await init({ rank: 0, worldSize: 1, env: {} });
 * await using ddp = await DistributedDataParallel.create(pg, [new Float32Array(4)], { hook: sumThenScale });
 * ddp.grads[0].fill(3);
 * ddp.gradReady(0);
 * const step = await ddp.synchronize();
 * assert.equal(step.buckets[0].hook.works[0].collective, "allReduce");
 * assert.deepEqual(ddp.grads[0], new Float32Array([3, 3, 3, 3]));
 * ```
 */
export interface CommHook {
  /** The hook's name, for reports (`"allreduce"`, ...). */
  readonly name: string;
  /**
   * Averages `bucket.buffer` over the ranks, in place. Every rank runs the same hook on the same buckets in
   * the same order.
   *
   * @param pg The process group.
   * @param bucket The bucket.
   * @returns What the hook ran.
   */
  run(pg: ProcessGroup, bucket: HookBucket): Promise<HookReport>;
  /** The hook's state across steps (for a checkpoint); `undefined` for a stateless hook. */
  state(): unknown;
  /**
   * Restores a state from {@linkcode CommHook.state}.
   *
   * @param state The state.
   */
  load(state: unknown): void;
}

/**
 * The default hook: one all-reduce of the bucket with `op: "avg"`, in the bucket's own dtype (a float16 or
 * bfloat16 bucket sends 2 bytes per element).
 *
 * @returns The hook.
 *
 * @example Averaging a bucket on a world of one
 * ```ts
 * import { init } from "@dcomm/dcomm";
 * import { allReduceHook } from "@dcomm/dcomm/ddp";
 * import assert from "node:assert/strict";
 * await using pg = await init({ rank: 0, worldSize: 1, env: {} });
 * const buffer = new Float32Array([1, 2, 3]);
 * const report = await allReduceHook().run(pg, { index: 0, buffer, dtype: "float32", params: [0], offsets: [0], shapes: [undefined] });
 * assert.equal(report.wireDtype, "float32");
 * assert.deepEqual([...buffer], [1, 2, 3]);
 * ```
 */
export function allReduceHook(): CommHook {
  return averagingHook("allreduce", undefined);
}

/**
 * Torch's `fp16_compress_hook`: a float32 bucket travels and is summed as float16, cast down and back on
 * the communication thread (`commDtype`), each rank's values divided by the group size first so that the
 * float16 sum cannot overflow where the average does not. Buckets of other dtypes are all-reduced in their
 * own dtype.
 *
 * @returns The hook.
 *
 * @example Half the bytes of a float32 bucket
 * ```ts
 * import { init } from "@dcomm/dcomm";
 * import { fp16CompressHook } from "@dcomm/dcomm/ddp";
 * import assert from "node:assert/strict";
 * await using pg = await init({ rank: 0, worldSize: 1, env: {} });
 * const buffer = new Float32Array([0.5, 1.5, 3]);
 * const report = await fp16CompressHook().run(pg, { index: 0, buffer, dtype: "float32", params: [0], offsets: [0], shapes: [undefined] });
 * assert.equal(report.wireDtype, "float16");
 * assert.equal(report.works[0].bytes, 3 * 2);
 * assert.deepEqual([...buffer], [0.5, 1.5, 3]);
 * ```
 */
export function fp16CompressHook(): CommHook {
  return narrowHook("fp16", "float16");
}

/**
 * Torch's `bf16_compress_hook`: as {@linkcode fp16CompressHook}, in bfloat16 (float32's range, 8 bits of
 * precision).
 *
 * @returns The hook.
 *
 * @example
 * ```ts
 * import { init } from "@dcomm/dcomm";
 * import { bf16CompressHook } from "@dcomm/dcomm/ddp";
 * import assert from "node:assert/strict";
 * await using pg = await init({ rank: 0, worldSize: 1, env: {} });
 * const buffer = new Float32Array([1e30, 2]);
 * const report = await bf16CompressHook().run(pg, { index: 0, buffer, dtype: "float32", params: [0], offsets: [0], shapes: [undefined] });
 * assert.equal(report.wireDtype, "bfloat16");
 * assert.equal(buffer[1], 2);
 * ```
 */
export function bf16CompressHook(): CommHook {
  return narrowHook("bf16", "bfloat16");
}

function narrowHook(name: string, commDtype: "float16" | "bfloat16"): CommHook {
  return averagingHook(name, commDtype);
}

/** A stateless hook of one all-reduce with `op: "avg"`, float32 buckets sent as `commDtype` if given. */
function averagingHook(name: string, commDtype: "float16" | "bfloat16" | undefined): CommHook {
  return {
    name,
    async run(pg: ProcessGroup, bucket: HookBucket): Promise<HookReport> {
      const wire = commDtype !== undefined && bucket.dtype === "float32" ? commDtype : bucket.dtype;
      const work = pg.allReduce(bucket.buffer, {
        op: "avg",
        dtype: bucket.dtype,
        commDtype: wire === bucket.dtype ? undefined : wire,
      });
      const report = await work.wait();
      return { works: report ? [report] : [], wireDtype: wire };
    },
    state(): undefined {
      return undefined;
    },
    load(): void {},
  };
}

/** What a compressing hook keeps for one bucket across steps. */
interface BucketState {
  residual?: Float32Array;
  serverResidual?: Float32Array;
  q?: Float32Array;
}

/**
 * A hook's state, as {@linkcode CommHook.state} returns it and {@linkcode CommHook.load} takes it.
 *
 * @example A checkpoint of the error feedback, restored into a new hook
 * ```ts
 * import { init } from "@dcomm/dcomm";
 * import { type CompressionHookState, signCompressHook } from "@dcomm/dcomm/ddp";
 * import assert from "node:assert/strict";
 * await using pg = await init({ rank: 0, worldSize: 1, env: {} });
 * const hook = signCompressHook({ blockSize: 4 });
 * const buffer = new Float32Array([0.5, -1.5, 1, 3]);
 * const bucket = { index: 0, buffer, dtype: "float32", params: [0], offsets: [0], shapes: [undefined] } as const;
 * await hook.run(pg, bucket);
 * const saved = hook.state() as CompressionHookState;
 * assert.equal(saved.hook, "1bit");
 * const resumed = signCompressHook({ blockSize: 4 });
 * resumed.load(saved);
 * assert.deepEqual(resumed.state(), saved);
 * assert.throws(() => resumed.load({ hook: "topk", buckets: [] }), TypeError); // another hook's state
 * ```
 */
export interface CompressionHookState {
  /** The hook's name, checked by `load`. */
  readonly hook: string;
  /** Per bucket (by `HookBucket.index`): copies of its arrays. */
  readonly buckets: readonly {
    readonly index: number;
    readonly residual?: Float32Array;
    readonly serverResidual?: Float32Array;
    readonly q?: Float32Array;
  }[];
}

/**
 * A hook that compresses float32 buckets with `compression(bucket, state)` on the communication thread and
 * averages other dtypes uncompressed; its per-bucket arrays persist across steps and checkpoints.
 */
function compressingHook(
  name: string,
  codec: Compression["codec"],
  wireDtype: DType,
  compression: (bucket: HookBucket, state: BucketState) => Compression,
): CommHook {
  const states = new Map<number, BucketState>();
  const plain = averagingHook(name, undefined);
  return {
    name,
    async run(pg: ProcessGroup, bucket: HookBucket): Promise<HookReport> {
      if (bucket.dtype !== "float32") return await plain.run(pg, bucket);
      let state = states.get(bucket.index);
      if (state === undefined) states.set(bucket.index, state = {});
      const c = compression(bucket, state);
      const report = await pg.allReduce(bucket.buffer, { op: "avg", compression: c }).wait();
      return { works: report ? [report] : [], wireDtype, codec };
    },
    state(): CompressionHookState {
      const copy = (a: Float32Array | undefined): Float32Array | undefined => a?.slice();
      return {
        hook: name,
        buckets: [...states].map(([index, s]) => ({
          index,
          residual: copy(s.residual),
          serverResidual: copy(s.serverResidual),
          q: copy(s.q),
        })),
      };
    },
    load(state: unknown): void {
      const s = state as CompressionHookState;
      if (typeof s !== "object" || s === null || s.hook !== name || !Array.isArray(s.buckets)) {
        throw new TypeError(
          `Cannot load the ${name} hook's state: expected the state() of a ${name} hook, found ${
            typeof s === "object" && s !== null ? `the state of "${String(s.hook)}"` : String(s)
          }`,
        );
      }
      states.clear();
      for (const b of s.buckets) {
        states.set(b.index, {
          residual: b.residual?.slice(),
          serverResidual: b.serverResidual?.slice(),
          q: b.q?.slice(),
        });
      }
    },
  };
}

/** The array of a bucket's state, made on first use; a loaded one of another length is refused. */
function stateArray(
  hook: string,
  bucket: HookBucket,
  state: BucketState,
  key: keyof BucketState,
  length: number,
  init?: (a: Float32Array) => void,
): Float32Array {
  let a = state[key];
  if (a === undefined) {
    a = state[key] = new Float32Array(length);
    init?.(a);
  } else if (a.length !== length) {
    throw new RangeError(
      `The ${hook} hook's ${key} of bucket ${bucket.index} has ${a.length} elements, expected ${length}: ` +
        `the state loaded was saved for other buckets`,
    );
  }
  return a;
}

/**
 * Options of {@linkcode int8CompressHook}.
 *
 * @example One scale per 64 elements
 * ```ts
 * import { init } from "@dcomm/dcomm";
 * import { int8CompressHook, type Int8HookOptions } from "@dcomm/dcomm/ddp";
 * import assert from "node:assert/strict";
 * await using pg = await init({ rank: 0, worldSize: 1, env: {} });
 * const options: Int8HookOptions = { blockSize: 64 };
 * const buffer = new Float32Array(128).map((_, i) => i < 64 ? 1 : 127);
 * const bucket = { index: 0, buffer, dtype: "float32", params: [0], offsets: [0], shapes: [undefined] } as const;
 * await int8CompressHook(options).run(pg, bucket);
 * assert.deepEqual([buffer[0], buffer[127]], [1, 127]); // each block's scale fits its own values
 * ```
 */
export interface Int8HookOptions {
  /** Elements per scale. @default 256 */
  blockSize?: number;
}

/**
 * Int8 with one absmax scale per block: a reduce-scatter then an all-gather of the quantised blocks, on
 * the communication thread (`compression: { codec: "int8" }`): about 4× fewer bytes than float32, each
 * step's error within half a quantisation step of each contribution and of the result. Buckets of other
 * dtypes are averaged uncompressed.
 *
 * @param options The block size.
 * @returns The hook.
 *
 * @example
 * ```ts
 * import { init } from "@dcomm/dcomm";
 * import { int8CompressHook } from "@dcomm/dcomm/ddp";
 * import assert from "node:assert/strict";
 * await using pg = await init({ rank: 0, worldSize: 1, env: {} });
 * const buffer = new Float32Array([127, -63.5, 1]);
 * const bucket = { index: 0, buffer, dtype: "float32", params: [0], offsets: [0], shapes: [undefined] } as const;
 * const report = await int8CompressHook().run(pg, bucket);
 * assert.equal(report.codec, "int8");
 * assert.deepEqual([...buffer], [127, -64, 1]); // scale 127/127 = 1, ties to even
 * ```
 */
export function int8CompressHook(options: Int8HookOptions = {}): CommHook {
  const blockSize = options.blockSize ?? 256;
  return compressingHook("int8", "int8", "int8", () => ({ codec: "int8", blockSize }));
}

/**
 * Options of {@linkcode signCompressHook}.
 *
 * @example Without error feedback: nothing is kept between steps
 * ```ts
 * import { init } from "@dcomm/dcomm";
 * import { signCompressHook, type SignHookOptions } from "@dcomm/dcomm/ddp";
 * import assert from "node:assert/strict";
 * await using pg = await init({ rank: 0, worldSize: 1, env: {} });
 * const options: SignHookOptions = { blockSize: 4, errorFeedback: false };
 * const hook = signCompressHook(options);
 * const buffer = new Float32Array([0.5, -1.5, 1, 3]);
 * const bucket = { index: 0, buffer, dtype: "float32", params: [0], offsets: [0], shapes: [undefined] } as const;
 * await hook.run(pg, bucket);
 * assert.deepEqual([...buffer], [1.5, -1.5, 1.5, 1.5]); // the signs times mean |x|
 * assert.equal(hook.name, "1bit-noef");
 * ```
 */
export interface SignHookOptions {
  /** Elements per scale. @default 256 */
  blockSize?: number;
  /** Keep what compression lost, on the workers and on the servers, and add it back the next step. @default true */
  errorFeedback?: boolean;
}

/**
 * 1-bit compression with error feedback (1-bit SGD; DeepSpeed's two-phase compressed all-reduce): signs
 * and one mean-|x| scale per block travel, 16–32× fewer bytes than float32; each rank's residual and the
 * residual of the chunk it serves carry what was lost into the next step, so that over the steps nothing
 * is (their sum is the sum of the true averages minus the residuals left). The residuals are per bucket,
 * in the hook's `state()`.
 *
 * @param options Block size, error feedback.
 * @returns The hook.
 *
 * @example The residual keeps what the signs lost
 * ```ts
 * import { init } from "@dcomm/dcomm";
 * import { signCompressHook } from "@dcomm/dcomm/ddp";
 * import assert from "node:assert/strict";
 * await using pg = await init({ rank: 0, worldSize: 1, env: {} });
 * const hook = signCompressHook({ blockSize: 4 });
 * const buffer = new Float32Array([0.5, -1.5, 1, 3]);
 * await hook.run(pg, { index: 0, buffer, dtype: "float32", params: [0], offsets: [0], shapes: [undefined] });
 * assert.deepEqual([...buffer], [1.5, -1.5, 1.5, 1.5]);
 * const state = hook.state() as { buckets: { residual: Float32Array }[] };
 * assert.deepEqual([...state.buckets[0].residual], [-1, 0, -0.5, 1.5]);
 * ```
 */
export function signCompressHook(options: SignHookOptions = {}): CommHook {
  const blockSize = options.blockSize ?? 256;
  const ef = options.errorFeedback ?? true;
  const name = ef ? "1bit" : "1bit-noef";
  return compressingHook(name, "sign", "uint8", (bucket, state) => ({
    codec: "sign",
    blockSize,
    residual: ef ? stateArray(name, bucket, state, "residual", bucket.buffer.length) : undefined,
    serverResidual: ef ? stateArray(name, bucket, state, "serverResidual", bucket.buffer.length) : undefined,
  }));
}

/**
 * Options of {@linkcode topKHook}.
 *
 * @example A quarter of the elements, the rest kept for the next step
 * ```ts
 * import { init } from "@dcomm/dcomm";
 * import { topKHook, type TopKHookOptions } from "@dcomm/dcomm/ddp";
 * import assert from "node:assert/strict";
 * await using pg = await init({ rank: 0, worldSize: 1, env: {} });
 * const options: TopKHookOptions = { ratio: 0.25, errorFeedback: true };
 * const hook = topKHook(options);
 * const buffer = new Float32Array([0.1, -3, 0.2, 2, 0, 0, 0, 0]);
 * const bucket = { index: 0, buffer, dtype: "float32", params: [0], offsets: [0], shapes: [undefined] } as const;
 * await hook.run(pg, bucket);
 * assert.deepEqual([...buffer], [0, -3, 0, 2, 0, 0, 0, 0]); // 2 of 8 sent
 * const { buckets } = hook.state() as { buckets: { residual: Float32Array }[] };
 * assert.deepEqual([...buckets[0].residual].map((x) => Math.round(x * 10)), [1, 0, 2, 0, 0, 0, 0, 0]);
 * ```
 */
export interface TopKHookOptions {
  /** The share of a bucket's elements each rank sends, in (0, 1]. @default 0.01 */
  ratio?: number;
  /** Keep the elements not sent and add them back the next step. @default true */
  errorFeedback?: boolean;
}

/**
 * Top-k sparsification with error feedback: each rank sends the `ratio` share of its bucket with the
 * largest magnitudes (index and value, 8 bytes each), all-gathered and summed by scatter-add; the rest
 * stays in the rank's residual for the next step. At 1%, 50× fewer bytes than float32 through the host
 * segment.
 *
 * @param options The ratio, error feedback.
 * @returns The hook.
 *
 * @example
 * ```ts
 * import { init } from "@dcomm/dcomm";
 * import { topKHook } from "@dcomm/dcomm/ddp";
 * import assert from "node:assert/strict";
 * await using pg = await init({ rank: 0, worldSize: 1, env: {} });
 * const buffer = new Float32Array([0.1, -3, 0.2, 2]);
 * await topKHook({ ratio: 0.5 }).run(pg, { index: 0, buffer, dtype: "float32", params: [0], offsets: [0], shapes: [undefined] });
 * assert.deepEqual([...buffer], [0, -3, 0, 2]);
 * ```
 */
export function topKHook(options: TopKHookOptions = {}): CommHook {
  const ratio = options.ratio ?? 0.01;
  if (typeof ratio !== "number" || !(ratio > 0 && ratio <= 1)) {
    throw new RangeError(`Invalid top-k ratio: expected a number in (0, 1], found ${String(ratio)}`);
  }
  const ef = options.errorFeedback ?? true;
  const name = ef ? "topk" : "topk-noef";
  return compressingHook(name, "topk", "float32", (bucket, state) => ({
    codec: "topk",
    k: Math.max(1, Math.round(bucket.buffer.length * ratio)),
    residual: ef ? stateArray(name, bucket, state, "residual", bucket.buffer.length) : undefined,
  }));
}

/**
 * Options of {@linkcode powerSgdHook}.
 *
 * @example Rank 4, and a threshold that leaves small matrices uncompressed
 * ```ts
 * import { init } from "@dcomm/dcomm";
 * import { powerSgdHook, type PowerSgdHookOptions } from "@dcomm/dcomm/ddp";
 * import assert from "node:assert/strict";
 * await using pg = await init({ rank: 0, worldSize: 1, env: {} });
 * const options: PowerSgdHookOptions = { rank: 4, minCompressionRate: 2, seed: 42, errorFeedback: true };
 * const buffer = new Float32Array(4 * 4).fill(1); // 16 elements < 2 × (4 + 4) × 4: sent as it is
 * const bucket = { index: 0, buffer, dtype: "float32", params: [0], offsets: [0], shapes: [[4, 4]] } as const;
 * const report = await powerSgdHook(options).run(pg, bucket);
 * assert.deepEqual([...buffer], new Array(16).fill(1));
 * console.log(report.codec, report.works.map((w) => w.bytes));
 * ```
 */
export interface PowerSgdHookOptions {
  /** The rank of each matrix's approximation. @default 2 */
  rank?: number;
  /** Keep M − P·Qᵀ and add it back the next step. @default true */
  errorFeedback?: boolean;
  /**
   * Compress a `rows × cols` matrix only if `rows·cols ≥ minCompressionRate · (rows + cols)·rank` (torch's
   * `min_compression_rate`); the others travel uncompressed.
   * @default 2
   */
  minCompressionRate?: number;
  /** The seed of the first Q, the same on every rank. @default 0 */
  seed?: number;
}

/**
 * PowerSGD (Vogels et al. 2019; torch's `powerSGD_hook`): each parameter with a shape (`DdpOptions.shapes`)
 * of at least 2 dimensions, seen as `rows × product(rest)`, travels as a rank-`rank` product P·Qᵀ found by
 * one step of subspace iteration from the previous step's Q, with error feedback; vectors (biases) and
 * matrices too small to gain travel uncompressed, in the same all-reduce as P.
 *
 * @param options Rank, error feedback, the compression threshold, the seed.
 * @returns The hook.
 *
 * @example A rank-1 matrix comes through a rank-1 approximation whole
 * ```ts
 * import { init } from "@dcomm/dcomm";
 * import { powerSgdHook } from "@dcomm/dcomm/ddp";
 * import assert from "node:assert/strict";
 * await using pg = await init({ rank: 0, worldSize: 1, env: {} });
 * const buffer = new Float32Array(64 * 32);
 * for (let i = 0; i < 64; i++) for (let j = 0; j < 32; j++) buffer[i * 32 + j] = (i + 1) * (j % 3 - 1);
 * const expected = [...buffer];
 * const bucket = { index: 0, buffer, dtype: "float32", params: [0], offsets: [0], shapes: [[64, 32]] } as const;
 * const report = await powerSgdHook({ rank: 1 }).run(pg, bucket);
 * assert.equal(report.codec, "powersgd");
 * assert.ok(buffer.every((v, i) => Math.abs(v - expected[i]) < 1e-3 * 64));
 * ```
 */
export function powerSgdHook(options: PowerSgdHookOptions = {}): CommHook {
  const rank = options.rank ?? 2;
  if (!Number.isInteger(rank) || rank < 1) {
    throw new RangeError(`Invalid PowerSGD rank: expected an integer >= 1, found ${String(rank)}`);
  }
  const ef = options.errorFeedback ?? true;
  const minRate = options.minCompressionRate ?? 2;
  const seed = options.seed ?? 0;
  const name = ef ? "powersgd" : "powersgd-noef";
  return compressingHook(name, "powersgd", "float32", (bucket, state) => {
    const matrices: { offset: number; rows: number; cols: number }[] = [];
    bucket.params.forEach((_, i) => {
      const shape = bucket.shapes[i];
      if (shape === undefined || shape.length < 2) return;
      const rows = shape[0], cols = shape.slice(1).reduce((a, b) => a * b, 1);
      const r = Math.min(rank, rows, cols);
      if (rows * cols >= minRate * (rows + cols) * r) {
        matrices.push({ offset: bucket.offsets[i], rows, cols });
      }
    });
    matrices.sort((a, b) => a.offset - b.offset);
    const qLength = matrices.reduce((n, m) => n + m.cols * Math.min(rank, m.rows, m.cols), 0);
    return {
      codec: "powersgd",
      rank,
      matrices,
      q: stateArray(name, bucket, state, "q", qLength, (q) => gaussian(q, seed * 1_000_003 + bucket.index)),
      residual: ef ? stateArray(name, bucket, state, "residual", bucket.buffer.length) : undefined,
    };
  });
}

/** Fills `a` with standard normal values from `seed` (the same on every rank): xorshift32, Box–Muller. */
function gaussian(a: Float32Array, seed: number): void {
  let s = (seed ^ 0x9e3779b9) >>> 0 || 1;
  const next = (): number => {
    s ^= s << 13;
    s >>>= 0;
    s ^= s >>> 17;
    s ^= s << 5;
    s >>>= 0;
    return (s + 0.5) / 2 ** 32;
  };
  for (let i = 0; i < a.length; i++) a[i] = Math.sqrt(-2 * Math.log(next())) * Math.cos(2 * Math.PI * next());
}
