/**
 * The `nccl` backend: one rank per GPU, collectives through NCCL on each group's own CUDA stream, Works
 * that settle on polled CUDA events (never blocking the event loop) or that a compute stream waits on
 * ({@linkcode NcclWork.waitOn}), a watchdog that aborts a communicator whose collective runs past its
 * timeout, sub-groups through `ncclCommSplit`, and NCCL's tuning as options. Start it with
 * `init({ backend: "nccl" })`, or {@linkcode createNcclGroup} with a store of your own.
 *
 * @example An all-reduce of GPU memory (without NCCL or a GPU, `ncclBackendMissing` says why)
 * ```ts
 * import { init } from "@dcomm/dcomm";
 * import { DeviceBuffer } from "@dcomm/dcomm/gpu";
 * import { ncclBackendMissing } from "@dcomm/dcomm/nccl";
 * const missing = ncclBackendMissing();
 * if (missing === undefined) {
 *   // Under a launcher, init({ backend: "nccl" }) alone: the rank and world come from the environment.
 *   await using pg = await init({ backend: "nccl", rank: 0, worldSize: 1, env: {} });
 *   using grad = DeviceBuffer.from(new Float32Array(1 << 20).fill(1));
 *   await pg.allReduce(grad, { op: "avg" });
 * } else {
 *   console.log(`The nccl backend cannot run here: ${missing}`);
 * }
 * ```
 *
 * @module
 */
export {
  createNcclGroup,
  type CreateNcclGroupOptions,
  initNccl,
  ncclBackendMissing,
  type NcclOptions,
} from "./create.ts";
export { NcclProcessGroup } from "./nccl_group.ts";
export { type HierarchyPlan, hierarchyPlan, NcclHierarchy } from "./hierarchical.ts";
export type {
  NcclAlgorithmOptions,
  NcclCallOptions,
  NcclReduceOptions,
  NcclRootOptions,
  NcclRootReduceOptions,
  NcclRunContext,
} from "./options.ts";
export { type CompletionEvent, NcclWork, type NcclWorkReport } from "./nccl_work.ts";
export { applyTuning, type NcclTuning, type NcclTuningReport, tuningConfig, tuningEnv } from "./tuning.ts";
// Types the API above refers to, defined elsewhere in dcomm.
export type { DType, ReduceOp, TypedArray } from "../../core/dtype.ts";
export type { Store, StoreValue, StoreWaitOptions } from "../../store/store.ts";
export type {
  AlgorithmOptions,
  AnyTensor,
  CallOptions,
  DeviceTensor,
  GroupOptions,
  ProcessGroup,
  ReduceOptions,
  RootOptions,
  RootReduceOptions,
  Tensor,
} from "../process_group.ts";
export type { Work, WorkReport } from "../work.ts";
export type { InitOptions } from "../init.ts";
export type { NcclConfigIntField, NcclConfigOptions } from "../../ffi/nccl/config.ts";
export { NCCL_SYMBOLS, type NcclSymbols } from "../../ffi/nccl/symbols.ts";
