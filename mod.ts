/**
 * dcomm: the communication layer of distributed deep-learning training, for Deno.
 *
 * Process groups and rendezvous (`env://` like torchrun, `tcp://`), collectives (all-reduce, broadcast,
 * reduce, all-gather, reduce-scatter, all-to-all, barrier, send/recv) on the `cpu` backend (TCP, shared
 * memory, in-process; ring, tree, halving-doubling, parameter-server algorithms), on NCCL (`nccl`) and on
 * MPI (`mpi`); WebAssembly kernels for CPU reductions and gradient compression.
 *
 * @example All-reduce on a world of one (start more ranks with `jsr:@dcomm/dcomm/launch`)
 * ```ts
 * import { init } from "./mod.ts";
 * await using pg = await init({ rank: 0, worldSize: 1, env: {} });
 * const grad = new Float32Array([1, 2, 3]);
 * const work = pg.allReduce(grad, { op: "avg" }); // runs on the communication thread
 * await work;
 * console.log(work.report?.algorithm, grad);
 * ```
 *
 * @example Kernels
 * ```ts
 * import { kernels } from "./mod.ts";
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
  AnyTensor,
  CallOptions,
  DeviceTensor,
  GroupOptions,
  ProcessGroup,
  ReduceOptions,
  RootOptions,
  RootReduceOptions,
  Tensor,
} from "./backend/process_group.ts";
export { Work, type WorkReport } from "./backend/work.ts";
export { spawnThreads, type SpawnThreadsOptions, type ThreadContext } from "./backend/threads.ts";
export { type RankInfo, rankInfo, type RankInfoOptions } from "./backend/env.ts";
export type { Store, StoreOptions, StoreValue, StoreWaitOptions } from "./store/store.ts";
export { MemoryStore, type MemoryStoreOptions } from "./store/memory_store.ts";
export { PrefixStore, type PrefixStoreOptions } from "./store/prefix_store.ts";
export { TcpStore, type TcpStoreConnectOptions } from "./store/tcp_store.ts";
export { TcpStoreServer, type TcpStoreServerOptions } from "./store/tcp_store_server.ts";
export { generateSecret, secretFromEnv, STORE_SECRET_ENV } from "./store/secret.ts";
export type { DType, ReduceOp, TypedArray } from "./core/dtype.ts";
export { dtypeOf, DTYPES, dtypeSize, REDUCE_OPS } from "./core/dtype.ts";
export {
  CudaError,
  DistError,
  type DistErrorOptions,
  LibraryNotFoundError,
  MismatchError,
  NcclError,
  StoreError,
  TimeoutError,
  TransportError,
  UnsupportedError,
} from "./core/errors.ts";
export {
  type AxpyOptions,
  type DivideOptions,
  Kernels,
  kernels,
  type MatmulOptions,
  type ReduceOptions as KernelReduceOptions,
} from "./wasm/kernels.ts";
export {
  CompressionKernels,
  compressionKernels,
  type DequantizeInt8Options,
  type Int8Packed,
  type Int8Sizes,
  int8Sizes,
  type QuantizeInt8Options,
  type SignCompressOptions,
  type SignDecompressOptions,
  type SignPacked,
  type SignSizes,
  signSizes,
  type SparseVector,
  type TopKOptions,
} from "./wasm/compress.ts";
export {
  type KernelExports,
  type KernelFn,
  type KernelModule,
  loadKernelModule,
  type TypedArrayConstructor,
  WasmHeap,
} from "./wasm/loader.ts";
