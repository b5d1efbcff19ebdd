/**
 * The interface every backend implements (`cpu`, `nccl`, `mpi`), and the option types of its
 * collectives. Collectives return a {@linkcode Work}: await it to wait, or keep computing while it runs.
 *
 * Ordering: a rank runs its collectives one after another in the order it issued them, across all of its
 * groups (as NCCL runs a stream). Ranks that share a group must issue that group's collectives in the same
 * order; a rank that issues a different call at the same point is reported by a `MismatchError`.
 *
 * @module
 */
import type { DType, ReduceOp, TypedArray } from "../core/dtype.ts";
import type { Work } from "./work.ts";
import type { FlightDump } from "./flight.ts";

/**
 * A tensor: any TypedArray of a supported dtype.
 *
 * @example Tensors of several dtypes, and float16 in a `Uint16Array`
 * ```ts
 * import { init, type Tensor } from "@dcomm/dcomm";
 * await using pg = await init({ rank: 0, worldSize: 1, env: {} });
 * const tensors: Tensor[] = [new Float32Array([1, 2]), new Int32Array([3]), new Float64Array([4])];
 * for (const t of tensors) await pg.allReduce(t);
 * const half: Tensor = new Uint16Array([0x3c00]); // 1.0 in float16
 * await pg.allReduce(half, { dtype: "float16" });
 * ```
 */
export type Tensor = TypedArray;

/**
 * A tensor in GPU memory: the shape `DeviceBuffer` (gpu/device_buffer.ts) has, so this interface needs no
 * GPU code. Backends that run on GPUs (`nccl`) accept it wherever they accept a {@linkcode Tensor}; the
 * others throw `UnsupportedError`.
 *
 * @example The cpu backend refuses a device tensor
 * ```ts
 * import { type DeviceTensor, init, UnsupportedError } from "@dcomm/dcomm";
 * import assert from "node:assert/strict";
 * // The shape of a DeviceBuffer (gpu/device_buffer.ts): here an empty one, so no GPU is needed.
 * const t: DeviceTensor = { dtype: "float32", length: 0, byteLength: 0, device: 0, pointer: null };
 * await using pg = await init({ rank: 0, worldSize: 1, env: {} });
 * assert.throws(() => pg.allReduce(t), UnsupportedError);
 * ```
 */
export interface DeviceTensor {
  /** The element type. */
  readonly dtype: DType;
  /** The number of elements. */
  readonly length: number;
  /** The size in bytes. */
  readonly byteLength: number;
  /** The CUDA device the memory is on. */
  readonly device: number;
  /** The device address of the first element (`null` only when empty). */
  readonly pointer: Deno.PointerValue;
}

/**
 * What collectives accept: a host {@linkcode Tensor} or a {@linkcode DeviceTensor}.
 *
 * @example Telling host tensors from device tensors
 * ```ts
 * import type { AnyTensor } from "@dcomm/dcomm";
 * import assert from "node:assert/strict";
 * const where = (t: AnyTensor): string => "device" in t ? `GPU ${t.device}` : "host";
 * assert.equal(where(new Float32Array(4)), "host");
 * assert.equal(where({ dtype: "float32", length: 4, byteLength: 16, device: 1, pointer: null }), "GPU 1");
 * ```
 */
export type AnyTensor = Tensor | DeviceTensor;

/**
 * Whether a value is a {@linkcode DeviceTensor} (not a TypedArray, and has a device and a pointer).
 *
 * @param value Anything.
 * @returns `true` for a device tensor.
 */
export function isDeviceTensor(value: unknown): value is DeviceTensor {
  return typeof value === "object" && value !== null && !ArrayBuffer.isView(value) &&
    typeof (value as DeviceTensor).device === "number" && typeof (value as DeviceTensor).dtype === "string" &&
    "pointer" in value;
}

/**
 * Options every collective takes.
 *
 * @example A timeout and an abort signal
 * ```ts
 * import { type CallOptions, init } from "@dcomm/dcomm";
 * import assert from "node:assert/strict";
 * await using pg = await init({ rank: 0, worldSize: 1, env: {} });
 * const controller = new AbortController();
 * const options: CallOptions = { timeoutMs: 5_000, signal: controller.signal };
 * await pg.barrier(options);
 * controller.abort("stop");
 * await assert.rejects(pg.barrier(options).wait(), { code: "ABORTED" });
 * ```
 */
export interface CallOptions {
  /** Milliseconds before the call fails with a TimeoutError. @default the group's timeout */
  timeoutMs?: number;
  /** Aborts the call; a collective already running aborts the whole group (the bytes in flight cannot be taken back). */
  signal?: AbortSignal;
  /** The dtype, needed for a `Uint16Array` holding float16 or bfloat16. @default inferred from the array */
  dtype?: DType;
}

/**
 * Options of collectives that reduce.
 *
 * @example An average over the ring algorithm
 * ```ts
 * import { init, type ReduceOptions } from "@dcomm/dcomm";
 * import assert from "node:assert/strict";
 * await using pg = await init({ rank: 0, worldSize: 1, env: {} });
 * const grad = new Float32Array([1, 2, 3]);
 * const options: ReduceOptions = { op: "avg", algorithm: "ring", timeoutMs: 10_000 };
 * const report = await pg.allReduce(grad, options).wait();
 * assert.equal(report?.algorithm, "ring");
 * assert.deepEqual(grad, new Float32Array([1, 2, 3])); // the average of one rank
 * ```
 */
export interface ReduceOptions extends CallOptions {
  /**
   * The reduction (see {@linkcode ReduceOp}): `band`, `bor` and `bxor` take integer and bool tensors (the
   * nccl backend has no bitwise ops and refuses them with an `UnsupportedError`, bar `band`/`bor` of
   * bools), `premulSum` float tensors and a `factor`; bools take `sum`/`max`/`bor` (or),
   * `prod`/`min`/`band` (and) and `bxor`. A combination that does not apply is a `TypeError`.
   * @default "sum"
   */
  op?: ReduceOp;
  /**
   * `op: "premulSum"` only, and required there: a finite number that multiplies this rank's input (in the
   * tensor's dtype, as NCCL's `ncclRedOpCreatePreMulSum`) before the sum, so the result is Σ factorᵣ·xᵣ
   * over the ranks r. Each rank's factor scales its own input: ranks may pass different ones (a weighted
   * sum), and `factor: 1 / size` is an average taken before the sum. The cpu and mpi backends scale a
   * copy of the input (the tensor itself for an all-reduce) with the WASM kernels, then sum; the nccl
   * backend runs NCCL's PreMulSum (NCCL 2.11). Another op with a factor is a `TypeError`, a factor that
   * is not finite (or overflows the dtype) a `RangeError`. @default none
   *
   * @example Gradients scaled by 1/size before the sum: an average that cannot overflow
   * ```ts
   * import { init } from "@dcomm/dcomm";
   * import assert from "node:assert/strict";
   * await using pg = await init({ rank: 0, worldSize: 1, env: {} });
   * const grad = new Float32Array([2, 4]);
   * await pg.allReduce(grad, { op: "premulSum", factor: 1 / pg.size });
   * assert.deepEqual(grad, new Float32Array([2, 4]));
   * await pg.allReduce(grad, { op: "premulSum", factor: 0.5 });
   * assert.deepEqual(grad, new Float32Array([1, 2]));
   * assert.throws(() => pg.allReduce(grad, { op: "premulSum" }), TypeError); // no factor
   * assert.throws(() => pg.allReduce(new Int32Array(2), { op: "premulSum", factor: 2 }), TypeError);
   * ```
   */
  factor?: number;
  /** The algorithm, or `"auto"` to let the cost model choose. @default "auto" */
  algorithm?: string;
  /** For the `"ps"` all-reduce: how many ranks (0..servers-1) serve shards. @default the group size (co-located) */
  servers?: number;
  /**
   * All-reduce only, cpu backend: the dtype the values travel and are summed in, narrower than the
   * tensor's (`"float16"` or `"bfloat16"` for a float32 tensor). The communication thread casts the tensor
   * down, all-reduces that, and casts the result back into the tensor; with `op: "avg"` each rank's values
   * are divided by the group size before the cast, so the float16 sum cannot overflow where the average
   * does not. The call's report counts the narrow bytes. @default the tensor's dtype
   */
  commDtype?: DType;
  /**
   * All-reduce only, cpu backend, float32 tensors with `op` `"sum"` or `"avg"`: the codec the values travel
   * in, encoded and decoded by the WASM kernels on the communication thread (see {@linkcode Compression}).
   * Every rank must pass the same codec and sizes. @default none
   */
  compression?: Compression;
  /**
   * Deterministic mode (cpu backend): a sum, average or product of floats folds the ranks' contributions
   * in rank order (0, 1, …, n−1), whatever the algorithm, chunking, transport, arrival order or hosts, so
   * the same inputs give the same bits on every run: through the host segment where the ranks share one,
   * else by the `"ordered"` algorithms (an explicit other algorithm is refused). Not with `compression` or
   * `commDtype`. The mpi and nccl backends refuse it. @default the group's (`init({ deterministic })`)
   */
  deterministic?: boolean;
}

/**
 * A compressed all-reduce (`ReduceOptions.compression`): the codec, its sizes, and the arrays that keep its
 * state from call to call, which the caller owns (the communication thread reads and writes them in place
 * while the call runs; see `@dcomm/dcomm/ddp`'s hooks, which keep one set per bucket).
 *
 * - `"int8"`: one absmax/127 scale per `blockSize` elements; a reduce-scatter then an all-gather of the
 *   int8 blocks (about 4× fewer bytes). No state.
 * - `"sign"`: 1 bit per element and one mean-|x| scale per block, DeepSpeed's two-phase 1-bit all-reduce:
 *   `residual` (this rank's error feedback) and `serverResidual` (the error of the chunk this rank
 *   reduces), each `tensor.length` float32s, or none for no error feedback.
 * - `"topk"`: the `k` elements of largest magnitude of each rank, all-gathered and summed; `residual` for
 *   error feedback.
 * - `"powersgd"`: each of `matrices` as a rank-`rank` product P·Qᵀ (Vogels et al. 2019), warm-started from
 *   `q` (Qᵀ of each matrix, `min(rank, rows, cols) × cols` float32s in order, the same on every rank at
 *   the first call, e.g. from one seed); the elements outside the matrices travel uncompressed;
 *   `residual` for error feedback.
 *
 * @example A 1-bit all-reduce with error feedback on a world of one
 * ```ts
 * import { type Compression, init } from "@dcomm/dcomm";
 * import assert from "node:assert/strict";
 * await using pg = await init({ rank: 0, worldSize: 1, env: {} });
 * const grad = new Float32Array([0.5, -1.5, 1, 3]);
 * const compression: Compression = {
 *   codec: "sign",
 *   blockSize: 4,
 *   residual: new Float32Array(4),
 *   serverResidual: new Float32Array(4),
 * };
 * const report = await pg.allReduce(grad, { op: "avg", compression }).wait();
 * assert.equal(report?.compression, "sign");
 * assert.deepEqual(grad, new Float32Array([1.5, -1.5, 1.5, 1.5])); // ±mean|x|
 * assert.deepEqual(compression.residual, new Float32Array([-1, 0, -0.5, 1.5])); // what the signs lost
 * ```
 */
export interface Compression {
  /** The codec. */
  readonly codec: "int8" | "sign" | "topk" | "powersgd";
  /** `"int8"`, `"sign"`: elements per scale, an integer >= 1. @default 256 */
  readonly blockSize?: number;
  /** `"topk"`: elements each rank sends, an integer in 1..tensor.length. */
  readonly k?: number;
  /** `"powersgd"`: the rank of the approximation, an integer >= 1. @default 1 */
  readonly rank?: number;
  /**
   * `"powersgd"`: the matrices of the tensor (row-major, each `rows × cols` elements from `offset`), in
   * order and disjoint.
   */
  readonly matrices?: readonly { readonly offset: number; readonly rows: number; readonly cols: number }[];
  /** `"sign"`, `"topk"`, `"powersgd"`: this rank's error feedback, `tensor.length` float32s. */
  readonly residual?: Float32Array;
  /** `"sign"`: the server side's error feedback, `tensor.length` float32s. */
  readonly serverResidual?: Float32Array;
  /** `"powersgd"`: Q, kept from call to call. */
  readonly q?: Float32Array;
  /**
   * Compress only between hosts (any codec): the ranks of each host first sum their tensors on the host's
   * first rank over the host's own links, those ranks run the codec among themselves, and each broadcasts
   * the result to its host. With one rank per host (or one host) it changes nothing. The first ranks'
   * state arrays are the ones used. @default false
   */
  readonly interHost?: boolean;
}

/**
 * Options of collectives with a root.
 *
 * @example Broadcasting rank 0's weights along a chain
 * ```ts
 * import { init, type RootOptions } from "@dcomm/dcomm";
 * import assert from "node:assert/strict";
 * await using pg = await init({ rank: 0, worldSize: 1, env: {} });
 * const weights = new Float32Array([0.5, -1]);
 * const options: RootOptions = { root: 0, algorithm: "chain" };
 * const report = await pg.broadcast(weights, options).wait();
 * assert.equal(report?.algorithm, "chain");
 * ```
 */
export interface RootOptions extends CallOptions {
  /** The root rank, within the group. @default 0 */
  root?: number;
  /** The algorithm, or `"auto"`. @default "auto" */
  algorithm?: string;
}

/**
 * Options of `reduce`.
 *
 * @example The maximum, on rank 0 only
 * ```ts
 * import { init, type RootReduceOptions } from "@dcomm/dcomm";
 * import assert from "node:assert/strict";
 * await using pg = await init({ rank: 0, worldSize: 1, env: {} });
 * const loss = new Float64Array([0.25]);
 * const options: RootReduceOptions = { root: 0, op: "max" };
 * await pg.reduce(loss, options);
 * if (pg.rank === options.root) assert.equal(loss[0], 0.25);
 * ```
 */
export interface RootReduceOptions extends ReduceOptions {
  /** The rank that receives the result, within the group. @default 0 */
  root?: number;
}

/**
 * Options of collectives without an op or a root.
 *
 * @example An all-gather by recursive doubling
 * ```ts
 * import { type AlgorithmOptions, init } from "@dcomm/dcomm";
 * import assert from "node:assert/strict";
 * await using pg = await init({ rank: 0, worldSize: 1, env: {} });
 * const input = new Float32Array([1, 2]);
 * const output = new Float32Array(pg.size * input.length);
 * const options: AlgorithmOptions = { algorithm: "recursive-doubling", timeoutMs: 10_000 };
 * await pg.allGather(output, input, options);
 * assert.deepEqual(output, input);
 * ```
 */
export interface AlgorithmOptions extends CallOptions {
  /** The algorithm, or `"auto"`. @default "auto" */
  algorithm?: string;
}

/**
 * Options of the collectives with a v-form whose blocks are the same list on every rank: `allGather`,
 * `reduceScatter` (with `op`), `gather` and `scatter` (with `root`). `counts[r]` is rank r's block, in
 * elements (zeros allowed), torch's `output_split_sizes`/MPI's `recvcounts`: every rank passes the same
 * list, the n-block buffer holds their sum and rank r's own block `counts[r]` elements.
 *
 * @example Eval outputs of different lengths, gathered by every rank
 * ```ts
 * import { type CountsOptions, init } from "@dcomm/dcomm";
 * import assert from "node:assert/strict";
 * await using pg = await init({ rank: 0, worldSize: 1, env: {} });
 * const mine = new Float32Array([0.5, 0.25, 1]); // this rank's 3 predictions
 * const counts = [mine.length]; // every rank's count, e.g. all-gathered first
 * const options: CountsOptions = { counts };
 * const all = new Float32Array(counts.reduce((a, b) => a + b, 0));
 * await pg.allGather(all, mine, options);
 * assert.deepEqual(all, mine);
 * ```
 */
export interface CountsOptions extends CallOptions {
  /** Rank r's block, in elements, the same list on every rank. @default equal blocks */
  counts?: readonly number[];
  /** The algorithm, or `"auto"`. @default "auto" */
  algorithm?: string;
}

/**
 * Options of `reduceScatter`: an op and, for uneven blocks, `counts`.
 *
 * @example Uneven shards of a sum (a world of one: its shard is the whole)
 * ```ts
 * import { init, type ReduceScatterOptions } from "@dcomm/dcomm";
 * import assert from "node:assert/strict";
 * await using pg = await init({ rank: 0, worldSize: 1, env: {} });
 * const options: ReduceScatterOptions = { op: "sum", counts: [3] };
 * const shard = new Float32Array(3);
 * await pg.reduceScatter(shard, new Float32Array([1, 2, 3]), options);
 * assert.deepEqual(shard, new Float32Array([1, 2, 3]));
 * ```
 */
export interface ReduceScatterOptions extends ReduceOptions {
  /** Rank r's block of the result, in elements, the same list on every rank. @default equal blocks */
  counts?: readonly number[];
}

/**
 * Options of `gather` and `scatter`: a root and, for uneven blocks, `counts`.
 *
 * @example Gathering blocks of different lengths on rank 0
 * ```ts
 * import { type GatherOptions, init } from "@dcomm/dcomm";
 * import assert from "node:assert/strict";
 * await using pg = await init({ rank: 0, worldSize: 1, env: {} });
 * const options: GatherOptions = { root: 0, counts: [2] };
 * const all = pg.rank === 0 ? new Int32Array(2) : null;
 * await pg.gather(all, new Int32Array([4, 5]), options);
 * if (all) assert.deepEqual(all, new Int32Array([4, 5]));
 * ```
 */
export interface GatherOptions extends RootOptions {
  /** Rank r's block, in elements, the same list on every rank. @default equal blocks */
  counts?: readonly number[];
}

/**
 * Options of `allToAll`: for uneven blocks (torch's `all_to_all_single` with split sizes, MoE token
 * routing), `sendCounts[j]` elements of the input go to rank j, in rank order, and `recvCounts[i]`
 * elements from rank i land in the output, in rank order; rank i's `sendCounts[j]` must equal rank j's
 * `recvCounts[i]` (a rank that receives more or less than was sent fails the call). Both or neither.
 *
 * @example Routing 3 tokens to this rank itself
 * ```ts
 * import { type AllToAllOptions, init } from "@dcomm/dcomm";
 * import assert from "node:assert/strict";
 * await using pg = await init({ rank: 0, worldSize: 1, env: {} });
 * const tokens = new Int32Array([7, 8, 9]);
 * const options: AllToAllOptions = { sendCounts: [3], recvCounts: [3] };
 * const routed = new Int32Array(3);
 * await pg.allToAll(routed, tokens, options);
 * assert.deepEqual(routed, tokens);
 * ```
 */
export interface AllToAllOptions extends AlgorithmOptions {
  /** Elements for each rank, in rank order (their sum is the input's length). */
  sendCounts?: readonly number[];
  /** Elements from each rank, in rank order (their sum is the output's length). */
  recvCounts?: readonly number[];
}

/**
 * Options of the object collectives with a root (`broadcastObject`, `gatherObject`, `scatterObject`).
 *
 * @example A config from rank 0
 * ```ts
 * import { init, type ObjectRootOptions } from "@dcomm/dcomm";
 * import assert from "node:assert/strict";
 * await using pg = await init({ rank: 0, worldSize: 1, env: {} });
 * const options: ObjectRootOptions = { root: 0, timeoutMs: 30_000 };
 * const config = await pg.broadcastObject(pg.rank === 0 ? { lr: 0.1, layers: [784, 10] } : null, options);
 * assert.deepEqual(config, { lr: 0.1, layers: [784, 10] });
 * ```
 */
export interface ObjectRootOptions extends CallOptions {
  /** The root rank, within the group. @default 0 */
  root?: number;
}

/**
 * Options of `split`.
 *
 * @example Two halves, each numbered by descending rank
 * ```ts
 * import { init, type SplitOptions } from "@dcomm/dcomm";
 * import assert from "node:assert/strict";
 * await using pg = await init({ rank: 0, worldSize: 1, env: {} });
 * const options: SplitOptions = { key: -pg.rank };
 * const half = await pg.split(pg.rank < pg.size / 2 ? 0 : 1, options);
 * assert.deepEqual(half?.ranks, [0]);
 * ```
 */
export interface SplitOptions {
  /** Orders the ranks of a colour (ascending; ties by rank). @default 0 */
  key?: number;
  /** The timeout of the exchange of colours and keys. @default the group's */
  timeoutMs?: number;
  /** The new groups' default timeout. @default the parent's */
  groupTimeoutMs?: number;
}

/**
 * The peer of a receive from whichever rank sends first (torch's `recv(tensor, src=None)`, MPI's
 * `MPI_ANY_SOURCE`); the report of the receive names the sender (`WorkReport.peer`). The cpu and mpi
 * backends take it; the nccl backend refuses it (NCCL has no receive from any rank).
 *
 * @example Receiving from whichever rank sends first
 * ```ts
 * import { ANY_SOURCE, init } from "@dcomm/dcomm";
 * import assert from "node:assert/strict";
 * await using pg = await init({ rank: 0, worldSize: 1, env: {} });
 * if (pg.rank === 0 && pg.size > 1) {
 *   const got = new Float32Array(4);
 *   const report = await pg.recv(got, ANY_SOURCE).wait();
 *   console.log(`rank ${report?.peer} sent ${got}`);
 * }
 * assert.equal(ANY_SOURCE, -1);
 * ```
 */
export const ANY_SOURCE: number = -1;

/**
 * One operation of `batchIsendIrecv` (torch's `P2POp`).
 *
 * @example A ring exchange: send to the next rank, receive from the previous, in one batch
 * ```ts
 * import { init, type P2POp } from "@dcomm/dcomm";
 * import assert from "node:assert/strict";
 * await using pg = await init({ rank: 0, worldSize: 1, env: {} });
 * if (pg.size > 1) {
 *   const next = (pg.rank + 1) % pg.size, prev = (pg.rank + pg.size - 1) % pg.size;
 *   const out = new Float32Array([pg.rank]), got = new Float32Array(1);
 *   const ops: P2POp[] = [{ op: "send", tensor: out, peer: next }, { op: "recv", tensor: got, peer: prev }];
 *   await Promise.all(pg.batchIsendIrecv(ops).map((w) => w.wait()));
 *   assert.equal(got[0], prev);
 * }
 * ```
 */

export interface P2POp {
  /** A send to `peer`, or a receive from it. */
  op: "send" | "recv";
  /** The tensor sent, or received into. */
  tensor: AnyTensor;
  /** The other rank, within the group; {@linkcode ANY_SOURCE} for a receive from any rank. */
  peer: number;
  /** The dtype, for a `Uint16Array` holding float16 or bfloat16. @default inferred */
  dtype?: DType;
}

/**
 * Options of `monitoredBarrier` (torch's `monitored_barrier`'s `timeout` and `wait_all_ranks`).
 *
 * @example Naming every rank that did not arrive within 30 s
 * ```ts
 * import { init, type MonitoredBarrierOptions } from "@dcomm/dcomm";
 * await using pg = await init({ rank: 0, worldSize: 1, env: {} });
 * const options: MonitoredBarrierOptions = { timeoutMs: 30_000, waitAll: true };
 * await pg.monitoredBarrier(options);
 * ```
 */
export interface MonitoredBarrierOptions {
  /** Milliseconds the ranks have to arrive. @default the group's timeout */
  timeoutMs?: number;
  /** Name every rank that did not arrive, not only the first found. @default false */
  waitAll?: boolean;
  /** Aborts the call; the other ranks then fail naming this one. */
  signal?: AbortSignal;
}

/**
 * Options of `newGroup`.
 *
 * @example A sub-group with its own default timeout
 * ```ts
 * import { type GroupOptions, init } from "@dcomm/dcomm";
 * import assert from "node:assert/strict";
 * await using pg = await init({ rank: 0, worldSize: 1, env: {} });
 * const options: GroupOptions = { timeoutMs: 60_000 };
 * await using group = await pg.newGroup([0], options);
 * assert.deepEqual(group.ranks, [0]);
 * await group.allReduce(new Float32Array([1]));
 * ```
 */
export interface GroupOptions {
  /** The default timeout of the group's calls. @default the parent's */
  timeoutMs?: number;
}

/**
 * Options of `shrink()`.
 *
 * @example Leave rank 3 out, wait at most 2 s for the others
 * ```ts
 * import type { ShrinkOptions } from "@dcomm/dcomm";
 * const options: ShrinkOptions = { exclude: [3], windowMs: 2_000 };
 * ```
 */
export interface ShrinkOptions {
  /** Ranks (of this group) to leave out, alive or not. @default none */
  exclude?: readonly number[];
  /**
   * How long to wait for the other ranks to call `shrink()`: those that have not by then are left out.
   * @default 5000, or the group's timeout if smaller
   */
  windowMs?: number;
  /** The new world's default timeout. @default this group's */
  timeoutMs?: number;
}

/**
 * A group of ranks that run collectives together.
 *
 * @example Averaging gradients with any backend's group
 * ```ts
 * import { init, type ProcessGroup } from "@dcomm/dcomm";
 * import assert from "node:assert/strict";
 * async function averageGradients(pg: ProcessGroup, grads: Float32Array[]): Promise<void> {
 *   await Promise.all(grads.map((g) => pg.allReduce(g, { op: "avg" })));
 * }
 * await using pg = await init({ rank: 0, worldSize: 1, env: {} });
 * assert.deepEqual([pg.rank, pg.size, pg.ranks, pg.backend], [0, 1, [0], "cpu"]);
 * await averageGradients(pg, [new Float32Array([1, 2]), new Float32Array([3])]);
 * ```
 */
export interface ProcessGroup extends AsyncDisposable {
  /** This rank within the group, or -1 if this rank is not a member. */
  readonly rank: number;
  /** The number of ranks in the group. */
  readonly size: number;
  /** The global ranks of the members, in group order. */
  readonly ranks: readonly number[];
  /** The backend's name. */
  readonly backend: string;

  /** Reduces `tensor` across all ranks, in place on every rank. */
  allReduce(tensor: AnyTensor, options?: ReduceOptions): Work;
  /** Copies the root's `tensor` into every rank's `tensor`. */
  broadcast(tensor: AnyTensor, options?: RootOptions): Work;
  /** Reduces every rank's `tensor` into the root's; other ranks' tensors are left unchanged. */
  reduce(tensor: AnyTensor, options?: RootReduceOptions): Work;
  /**
   * Concatenates every rank's `input` into `output` (size × input.length), in rank order. In place when
   * `input` is this rank's block of `output` (a view of it), as NCCL's and torch's in-place all-gather.
   */
  allGather(output: AnyTensor, input: AnyTensor, options?: CountsOptions): Work;
  /**
   * Reduces `input` (size × output.length) across ranks; rank r receives block r in `output`. In place
   * when `output` is this rank's block of `input` (a view of it); the rest of `input` is then unspecified.
   */
  reduceScatter(output: AnyTensor, input: AnyTensor, options?: ReduceScatterOptions): Work;
  /** Block j of rank i's `input` lands in block i of rank j's `output` (equal blocks). */
  allToAll(output: AnyTensor, input: AnyTensor, options?: AllToAllOptions): Work;
  /**
   * Gathers every rank's `input` into the root's `output` (size × input.length elements, in rank order);
   * `output` is `null` on the other ranks (torch's `gather`).
   *
   * @example Every rank's loss on rank 0
   * ```ts
   * import { init } from "@dcomm/dcomm";
   * import assert from "node:assert/strict";
   * await using pg = await init({ rank: 0, worldSize: 1, env: {} });
   * const loss = new Float32Array([0.5]);
   * const losses = pg.rank === 0 ? new Float32Array(pg.size) : null;
   * await pg.gather(losses, loss, { root: 0 });
   * if (losses) assert.deepEqual(losses, new Float32Array([0.5]));
   * ```
   */
  gather(output: AnyTensor | null, input: AnyTensor, options?: GatherOptions): Work;
  /**
   * Scatters the root's `input` (size × output.length elements): block r lands in rank r's `output`;
   * `input` is `null` on the other ranks (torch's `scatter`).
   *
   * @example Each rank's share of the root's indices
   * ```ts
   * import { init } from "@dcomm/dcomm";
   * import assert from "node:assert/strict";
   * await using pg = await init({ rank: 0, worldSize: 1, env: {} });
   * const shard = new Int32Array(2);
   * const all = pg.rank === 0 ? Int32Array.from({ length: 2 * pg.size }, (_, i) => i) : null;
   * await pg.scatter(shard, all, { root: 0 });
   * assert.deepEqual(shard, new Int32Array([0, 1]));
   * ```
   */
  scatter(output: AnyTensor, input: AnyTensor | null, options?: GatherOptions): Work;
  /**
   * The root's object on every rank (torch's `broadcast_object_list`): any structured-clone value
   * (objects, arrays, strings, numbers, bigints, Maps, Sets, Dates, TypedArrays), serialised on the root
   * and sent as its length, then its bytes; every rank gets a copy (the root too).
   *
   * @example Rank 0's data split, on every rank
   * ```ts
   * import { init } from "@dcomm/dcomm";
   * import assert from "node:assert/strict";
   * await using pg = await init({ rank: 0, worldSize: 1, env: {} });
   * const split = await pg.broadcastObject(pg.rank === 0 ? { train: [0, 1, 2], test: [3] } : null);
   * assert.deepEqual(split.test, [3]);
   * ```
   */
  broadcastObject<T>(value: T | null, options?: ObjectRootOptions): Promise<T>;
  /**
   * Every rank's object on every rank, in rank order (torch's `all_gather_object`).
   *
   * @example Every rank's metrics
   * ```ts
   * import { init } from "@dcomm/dcomm";
   * import assert from "node:assert/strict";
   * await using pg = await init({ rank: 0, worldSize: 1, env: {} });
   * const all = await pg.allGatherObject({ rank: pg.rank, loss: 0.25 });
   * assert.deepEqual(all, [{ rank: 0, loss: 0.25 }]);
   * ```
   */
  allGatherObject<T>(value: T, options?: CallOptions): Promise<T[]>;
  /**
   * Every rank's object on the root, in rank order, `null` elsewhere (torch's `gather_object`).
   *
   * @example Eval results on rank 0
   * ```ts
   * import { init } from "@dcomm/dcomm";
   * import assert from "node:assert/strict";
   * await using pg = await init({ rank: 0, worldSize: 1, env: {} });
   * const results = await pg.gatherObject({ correct: 93, seen: 100 }, { root: 0 });
   * if (pg.rank === 0) assert.deepEqual(results, [{ correct: 93, seen: 100 }]);
   * ```
   */
  gatherObject<T>(value: T, options?: ObjectRootOptions): Promise<T[] | null>;
  /**
   * Object r of the root's list on rank r; `null` on the other ranks (torch's `scatter_object_list`).
   *
   * @example Each rank's shard of file names
   * ```ts
   * import { init } from "@dcomm/dcomm";
   * import assert from "node:assert/strict";
   * await using pg = await init({ rank: 0, worldSize: 1, env: {} });
   * const shards = pg.rank === 0 ? Array.from({ length: pg.size }, (_, r) => [`part-${r}.bin`]) : null;
   * const mine = await pg.scatterObject(shards, { root: 0 });
   * assert.deepEqual(mine, ["part-0.bin"]);
   * ```
   */
  scatterObject<T>(values: readonly T[] | null, options?: ObjectRootOptions): Promise<T>;
  /**
   * Sends an object to `peer` (torch's `send_object_list`), which takes it with `recvObject`.
   *
   * @example A world of one has no peer to send to
   * ```ts
   * import { init } from "@dcomm/dcomm";
   * import assert from "node:assert/strict";
   * await using pg = await init({ rank: 0, worldSize: 1, env: {} });
   * if (pg.size > 1) {
   *   if (pg.rank === 0) await pg.sendObject({ step: 10 }, 1);
   *   if (pg.rank === 1) assert.deepEqual(await pg.recvObject(0), { step: 10 });
   * } else await assert.rejects(pg.sendObject({ step: 10 }, 0), RangeError);
   * ```
   */
  sendObject(value: unknown, peer: number, options?: CallOptions): Promise<void>;
  /** Receives the object `peer` sends with `sendObject` (torch's `recv_object_list`). */
  recvObject<T>(peer: number, options?: CallOptions): Promise<T>;
  /** Resolves once every rank has entered the barrier. */
  barrier(options?: CallOptions): Work;
  /**
   * A barrier that names who is missing (torch's `monitored_barrier`): it resolves once every rank has
   * entered it; past `timeoutMs`, it fails with a `TimeoutError` on every rank that came, naming the ranks
   * that did not (all of them with `waitAll`, else the first found, e.g. `Monitored barrier timed out
   * after 500 ms on rank 0: rank 2, rank 3 did not arrive`), and a rank that comes after the others gave
   * up fails too, at once (it never succeeds after the others failed). The same words on every backend. A
   * plain `barrier` past its timeout names only the rank it was waiting on, and fails the group on the
   * cpu and nccl backends; a failed monitored barrier leaves the group usable. For finding ranks that
   * hang or crashed, not for every step: it costs a few round trips through the rendezvous store (cpu,
   * nccl) or two messages to and from every other rank (mpi).
   *
   * @example A barrier that would say which rank hangs
   * ```ts
   * import { init, TimeoutError } from "@dcomm/dcomm";
   * await using pg = await init({ rank: 0, worldSize: 1, env: {} });
   * try {
   *   await pg.monitoredBarrier({ timeoutMs: 60_000, waitAll: true });
   * } catch (e) {
   *   if (e instanceof TimeoutError) console.error(e.message); // "... rank 3 did not arrive"
   *   throw e;
   * }
   * ```
   *
   * @param options The timeout, `waitAll` and an abort signal.
   * @returns When every rank has arrived.
   * @throws {RangeError} If `timeoutMs` is not a number > 0, or this rank is not a member.
   * @throws {TypeError} If `waitAll` is not a boolean, or `signal` not an AbortSignal.
   */
  monitoredBarrier(options?: MonitoredBarrierOptions): Promise<void>;
  /** Sends `tensor` to rank `peer` (within the group). */
  send(tensor: AnyTensor, peer: number, options?: CallOptions): Work;
  /**
   * Receives into `tensor` from rank `peer` (within the group), or with {@linkcode ANY_SOURCE} from
   * whichever rank's send to this rank comes first; the report's `peer` names the sender.
   *
   * @example Rank 0 collects one result from each other rank, in the order they finish
   * ```ts
   * import { ANY_SOURCE, init } from "@dcomm/dcomm";
   * await using pg = await init({ rank: 0, worldSize: 1, env: {} });
   * const result = new Float64Array(1);
   * if (pg.rank === 0) {
   *   for (let i = 1; i < pg.size; i++) {
   *     const report = await pg.recv(result, ANY_SOURCE).wait();
   *     console.log(`rank ${report?.peer} finished with ${result[0]}`);
   *   }
   * } else {
   *   result[0] = pg.rank;
   *   await pg.send(result, 0);
   * }
   * ```
   *
   * @throws {UnsupportedError} For {@linkcode ANY_SOURCE} on the nccl backend.
   */
  recv(tensor: AnyTensor, peer: number, options?: CallOptions): Work;
  /**
   * Issues sends and receives together (torch's `batch_isend_irecv`): every op is checked before any is
   * issued; none waits for another, so pairs that go both ways cannot deadlock (on the nccl backend they
   * are one NCCL group).
   *
   * @example A world of one has no peer: the ops are refused before anything is sent
   * ```ts
   * import { init } from "@dcomm/dcomm";
   * import assert from "node:assert/strict";
   * await using pg = await init({ rank: 0, worldSize: 1, env: {} });
   * assert.throws(() => pg.batchIsendIrecv([{ op: "send", tensor: new Float32Array(1), peer: 0 }]), RangeError);
   * ```
   */
  batchIsendIrecv(ops: readonly P2POp[], options?: CallOptions): Work[];
  /**
   * Creates a sub-group. Every rank of this group must call it, with the same ranks, in the same order
   * relative to its other `newGroup` calls; ranks outside `ranks` get a group whose `rank` is -1 and whose
   * collectives throw.
   *
   * The members are numbered in this group's order whatever the order of `ranks`, as torch.distributed's
   * `new_group` numbers them (it sorts the list too): on the world group `newGroup([2, 1])` is the same
   * group as `newGroup([1, 2])`, whose rank 0 is global rank 1 and whose `ranks` are `[1, 2]`. The result's
   * `ranks` (global ranks, in group order) say which member is which.
   *
   * @param ranks The members, as ranks of this group, each once, in any order.
   * @param options The sub-group's default timeout.
   * @returns The sub-group; on a rank outside `ranks`, a group whose `rank` is -1.
   * @throws {RangeError} If `ranks` is empty, holds a rank outside 0..size-1, or lists a rank twice.
   */
  newGroup(ranks: readonly number[], options?: GroupOptions): Promise<ProcessGroup>;
  /**
   * Splits this group by colour (MPI's `MPI_Comm_split`, torch's `split_group`), in one collective call:
   * every rank passes its colour (an integer >= 0, or `null` or a negative number for no group) and a key;
   * the ranks of a colour form a group ordered by key, then by rank. Every rank of this group must call it.
   *
   * @example Even and odd ranks
   * ```ts
   * import { init } from "@dcomm/dcomm";
   * import assert from "node:assert/strict";
   * await using pg = await init({ rank: 0, worldSize: 1, env: {} });
   * await using parity = await pg.split(pg.rank % 2);
   * assert.deepEqual(parity?.ranks, [0]);
   * assert.equal(await pg.split(null), null); // no group for this rank
   * ```
   */
  split(color: number | null, options?: SplitOptions): Promise<ProcessGroup | null>;
  /**
   * A zeroed tensor of `count` elements for this group's collectives. On the cpu backend over shared
   * memory with a pool (`init({ segment: { poolBytes } })`) it lives in this rank's pool in the host
   * segment, where the peers read it in place: an all-reduce of such tensors copies nothing in or out
   * (every rank of the call must pass one). Elsewhere it is ordinary memory. Give it back with
   * {@linkcode ProcessGroup.release}.
   *
   * @param count Elements.
   * @param options The dtype.
   * @returns The tensor (a `Uint16Array` for float16 and bfloat16).
   * @throws {RangeError} If `count` is not a whole number, or the pool has no room left.
   * @throws {UnsupportedError} On the nccl backend (use `DeviceBuffer.alloc`).
   */
  alloc(count: number, options?: AllocOptions): TypedArray;
  /**
   * Gives back a tensor of {@linkcode ProcessGroup.alloc}; it must not be used afterwards.
   *
   * @param tensor The tensor.
   * @throws {TypeError} If `tensor` did not come from `alloc` of this backend, or was released already.
   */
  release(tensor: TypedArray): void;
  /**
   * The flight recorder's dump: every group of this thread with its last calls (each collective's
   * sequence number, dtype, count, root, algorithm, state and times), as written on a timeout, a mismatch
   * or a peer's failure. With `DCOMM_TRACE_DIR` set it is also written there, as
   * `rank-<world rank>.json`, for `deno task trace analyze DIR` to read with the other ranks' dumps.
   *
   * @example What this rank did last
   * ```ts
   * import { init } from "@dcomm/dcomm";
   * import assert from "node:assert/strict";
   * await using pg = await init({ rank: 0, worldSize: 1, env: {} });
   * await pg.barrier();
   * const [world] = pg.dump().groups;
   * assert.deepEqual(world.calls.map((c) => [c.seq, c.collective, c.state]), [[1, "barrier", "done"]]);
   * ```
   *
   * @returns The dump.
   */
  dump(): FlightDump;
  /**
   * Revokes the group: every call of it in flight or queued fails at once with a `RevokedError` on this
   * rank, the other ranks learn it as they learn of an abort (their calls fail with the same error, naming
   * this rank and `reason`), and every later call fails with it too. On the cpu backend the groups of a
   * world share its transport, so every group of the world is revoked with it. The mpi backend cannot
   * (MPICH 4.0 has no ULFM) and the nccl backend does not yet: both throw an `UnsupportedError`.
   *
   * @example A revoked group refuses every call
   * ```ts
   * import { init, RevokedError } from "@dcomm/dcomm";
   * import assert from "node:assert/strict";
   * await using pg = await init({ rank: 0, worldSize: 1, env: {} });
   * pg.revoke("a rank is gone");
   * await assert.rejects(pg.barrier().wait(), (e) => e instanceof RevokedError && /a rank is gone/.test(e.message));
   * ```
   *
   * @param reason Why, for the errors. @default "revoked"
   * @throws {UnsupportedError} On the mpi and nccl backends.
   * @throws {DistError} If the group is closed.
   */
  revoke(reason?: string): void;
  /**
   * A new world of the ranks still here: every surviving rank calls it (after a failure, or a `revoke()`),
   * the ranks that do within `windowMs` (less those in `exclude`, and any the failure names as dead) form
   * it, numbered in their old order, through the store, in bounded time. The group itself stays as it was
   * (failed): close it when done. cpu backend, world group, over TCP, shared memory or hybrid; the mpi and
   * nccl backends throw an `UnsupportedError`.
   *
   * @example A world of one shrinks to itself
   * ```ts
   * import { init } from "@dcomm/dcomm";
   * import assert from "node:assert/strict";
   * await using pg = await init({ rank: 0, worldSize: 1, env: {}, transport: "tcp" });
   * await using next = await pg.shrink();
   * assert.deepEqual([next.rank, next.size], [0, 1]);
   * await next.barrier();
   * ```
   *
   * @param options The ranks to leave out and how long to wait.
   * @returns The new world group.
   * @throws {UnsupportedError} On a sub-group, over threads (`inproc`), or on the mpi and nccl backends.
   * @throws {DistError} If this rank is excluded or arrives too late for the new group, `exclude` leaves no
   *   rank, or another shrink of this group is running.
   */
  shrink(options?: ShrinkOptions): Promise<ProcessGroup>;
  /** Closes the group (for the world group: the whole backend). */
  close(): Promise<void>;
}

/**
 * Options of {@linkcode ProcessGroup.alloc}.
 *
 * @example A float64 tensor for collectives
 * ```ts
 * import { type AllocOptions, init } from "@dcomm/dcomm";
 * import assert from "node:assert/strict";
 * await using pg = await init({ rank: 0, worldSize: 1, env: {} });
 * const options: AllocOptions = { dtype: "float64" };
 * const t = pg.alloc(4, options);
 * assert.ok(t instanceof Float64Array);
 * await pg.allReduce(t);
 * pg.release(t);
 * ```
 */
export interface AllocOptions {
  /** The element type. @default "float32" */
  dtype?: DType;
}
