/**
 * dcomm: the communication layer of distributed deep-learning training, for Deno.
 *
 * Process groups, rendezvous, collectives (all-reduce, broadcast, reduce, all-gather, reduce-scatter,
 * all-to-all, barrier, send/recv) over CPU transports, NCCL and MPI, with WebAssembly kernels for CPU
 * reductions and gradient compression.
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
  type ReduceOptions,
} from "./wasm/kernels.ts";
export {
  type KernelExports,
  type KernelFn,
  type KernelModule,
  loadKernelModule,
  type TypedArrayConstructor,
  WasmHeap,
} from "./wasm/loader.ts";
