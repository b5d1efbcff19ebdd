/**
 * dcomm: the communication layer of distributed deep-learning training, for Deno.
 *
 * Process groups and rendezvous (`env://` like torchrun, `tcp://`), collectives (all-reduce, broadcast,
 * reduce, all-gather, reduce-scatter, all-to-all, barrier, send/recv) on the `cpu` backend (TCP, shared
 * memory, in-process; ring, tree, halving-doubling, parameter-server algorithms), on NCCL (`nccl`) and on
 * MPI (`mpi`); WebAssembly kernels for CPU reductions and gradient compression.
 *
 * This module holds what a training script needs: `init`, the process group and its options, `Work`,
 * `spawnThreads`, the dtypes and the errors. The rest has a sub-path of its own:
 * `@dcomm/dcomm/store` (the rendezvous stores), `@dcomm/dcomm/kernels` (every kernel and the WASM loader),
 * `@dcomm/dcomm/compress` (gradient compression kernels), `@dcomm/dcomm/gpu` (device buffers, pinned
 * memory, streams), `@dcomm/dcomm/rdma` (RDMA memory registration, `registerMemory`),
 * `@dcomm/dcomm/nccl` (the nccl backend's group, tuning and NCCL's config), `@dcomm/dcomm/launch` and
 * `@dcomm/dcomm/doctor` (the CLIs).
 *
 * @example All-reduce on a world of one (start more ranks with `jsr:@dcomm/dcomm/launch`)
 * ```ts
 * import { init } from "@dcomm/dcomm";
 * await using pg = await init({ rank: 0, worldSize: 1, env: {} });
 * const grad = new Float32Array([1, 2, 3]);
 * const work = pg.allReduce(grad, { op: "avg" }); // runs on the communication thread
 * await work;
 * console.log(work.report?.algorithm, grad);
 * ```
 *
 * @example Kernels (`@dcomm/dcomm/kernels`)
 * ```ts
 * import { kernels } from "@dcomm/dcomm/kernels";
 * const k = await kernels();
 * const a = new Float32Array([1, 2, 3]);
 * k.reduce(a, new Float32Array([10, 20, 30]), { op: "sum" });
 * console.log(a); // Float32Array [11, 22, 33]
 * ```
 *
 * @module
 */
export { init, type InitOptions, type SegmentOptions } from "./backend/init.ts";
export type { NcclOptions } from "./backend/nccl/create.ts";
export type { NcclTuning } from "./backend/nccl/tuning.ts";
export type { NcclConfigIntField, NcclConfigOptions } from "./ffi/nccl/config.ts";
export type {
  AlgorithmOptions,
  AllocOptions,
  AllToAllOptions,
  AnyTensor,
  CallOptions,
  Compression,
  CountsOptions,
  DeviceTensor,
  GatherOptions,
  GroupOptions,
  MonitoredBarrierOptions,
  ObjectRootOptions,
  P2POp,
  ProcessGroup,
  ReduceOptions,
  ReduceScatterOptions,
  RootOptions,
  RootReduceOptions,
  ShrinkOptions,
  SplitOptions,
  Tensor,
} from "./backend/process_group.ts";
export { ANY_SOURCE } from "./backend/process_group.ts";
export { Work, type WorkReport } from "./backend/work.ts";
export type { CallPhases } from "./core/phases.ts";
export { type FlightCall, type FlightDump, type FlightGroup, type FlightState } from "./backend/flight.ts";
export { spawnThreads, type SpawnThreadsOptions, type ThreadContext } from "./backend/threads.ts";
export { type RankInfo, rankInfo, type RankInfoOptions } from "./backend/env.ts";
export type { DType, ReduceOp, TypedArray } from "./core/dtype.ts";
export { dtypeOf, DTYPES, dtypeSize, REDUCE_OPS } from "./core/dtype.ts";
export {
  CudaError,
  DistError,
  type DistErrorOptions,
  LibraryNotFoundError,
  MismatchError,
  NcclError,
  RevokedError,
  StoreError,
  TimeoutError,
  TransportError,
  UnsupportedError,
} from "./core/errors.ts";
