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

/** A tensor: any TypedArray of a supported dtype. */
export type Tensor = TypedArray;

/**
 * A tensor in GPU memory: the shape `DeviceBuffer` (gpu/device_buffer.ts) has, so this interface needs no
 * GPU code. Backends that run on GPUs (`nccl`) accept it wherever they accept a {@linkcode Tensor}; the
 * others throw `UnsupportedError`.
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

/** What collectives accept: a host {@linkcode Tensor} or a {@linkcode DeviceTensor}. */
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

/** Options every collective takes. */
export interface CallOptions {
  /** Milliseconds before the call fails with a TimeoutError. @default the group's timeout */
  timeoutMs?: number;
  /** Aborts the call; a collective already running aborts the whole group (the bytes in flight cannot be taken back). */
  signal?: AbortSignal;
  /** The dtype, needed for a `Uint16Array` holding float16 or bfloat16. @default inferred from the array */
  dtype?: DType;
}

/** Options of collectives that reduce. */
export interface ReduceOptions extends CallOptions {
  /** The reduction. @default "sum" */
  op?: ReduceOp;
  /** The algorithm, or `"auto"` to let the cost model choose. @default "auto" */
  algorithm?: string;
  /** For the `"ps"` all-reduce: how many ranks (0..servers-1) serve shards. @default the group size (co-located) */
  servers?: number;
}

/** Options of collectives with a root. */
export interface RootOptions extends CallOptions {
  /** The root rank, within the group. @default 0 */
  root?: number;
  /** The algorithm, or `"auto"`. @default "auto" */
  algorithm?: string;
}

/** Options of `reduce`. */
export interface RootReduceOptions extends ReduceOptions {
  /** The rank that receives the result, within the group. @default 0 */
  root?: number;
}

/** Options of collectives without an op or a root. */
export interface AlgorithmOptions extends CallOptions {
  /** The algorithm, or `"auto"`. @default "auto" */
  algorithm?: string;
}

/** Options of `newGroup`. */
export interface GroupOptions {
  /** The default timeout of the group's calls. @default the parent's */
  timeoutMs?: number;
}

/** A group of ranks that run collectives together. */
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
  /** Concatenates every rank's `input` into `output` (size × input.length), in rank order. */
  allGather(output: AnyTensor, input: AnyTensor, options?: AlgorithmOptions): Work;
  /** Reduces `input` (size × output.length) across ranks; rank r receives block r in `output`. */
  reduceScatter(output: AnyTensor, input: AnyTensor, options?: ReduceOptions): Work;
  /** Block j of rank i's `input` lands in block i of rank j's `output` (equal blocks). */
  allToAll(output: AnyTensor, input: AnyTensor, options?: AlgorithmOptions): Work;
  /** Resolves once every rank has entered the barrier. */
  barrier(options?: CallOptions): Work;
  /** Sends `tensor` to rank `peer` (within the group). */
  send(tensor: AnyTensor, peer: number, options?: CallOptions): Work;
  /** Receives into `tensor` from rank `peer` (within the group). */
  recv(tensor: AnyTensor, peer: number, options?: CallOptions): Work;
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
  /** Closes the group (for the world group: the whole backend). */
  close(): Promise<void>;
}

/** Options of {@linkcode ProcessGroup.alloc}. */
export interface AllocOptions {
  /** The element type. @default "float32" */
  dtype?: DType;
}
