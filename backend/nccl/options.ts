/**
 * The option types of the `nccl` backend's collectives: the interface's options plus `waitFor` (a stream
 * the collective waits for on the device) and `scale` (a pre-multiplied sum), and what
 * `NcclProcessGroup.run` hands to its function.
 *
 * @module
 */
import type { NcclSymbols } from "../../ffi/nccl/symbols.ts";
import type { Stream } from "../../gpu/stream.ts";
import type {
  AlgorithmOptions,
  CallOptions,
  ReduceOptions,
  RootOptions,
  RootReduceOptions,
} from "../process_group.ts";

/** Options every collective of the `nccl` backend takes, beyond {@linkcode CallOptions}. */
export interface NcclCallOptions extends CallOptions {
  /**
   * A stream whose queued work must finish before the collective starts (on the device: the group's
   * stream waits for it; the host does not). Use it when the tensor was written on another stream.
   * @default none (the group's stream synchronizes with the legacy default stream only)
   */
  waitFor?: Stream;
}

/** Options of reducing collectives of the `nccl` backend. */
export interface NcclReduceOptions extends ReduceOptions, NcclCallOptions {
  /**
   * Multiplies each rank's input by this scalar before summing (`ncclRedOpCreatePreMulSum`, NCCL 2.11);
   * only with `op: "sum"`. `scale: 1 / size` gives an average on libraries without `avg`.
   * @default none
   */
  scale?: number;
}

/** Options of `reduce` on the `nccl` backend. */
export interface NcclRootReduceOptions extends RootReduceOptions, NcclReduceOptions {}

/** Options of collectives with a root on the `nccl` backend. */
export interface NcclRootOptions extends RootOptions, NcclCallOptions {}

/** Options of collectives without op or root on the `nccl` backend. */
export interface NcclAlgorithmOptions extends AlgorithmOptions, NcclCallOptions {}

/** What {@linkcode NcclProcessGroup.run} hands to its function. */
export interface NcclRunContext {
  /** The group's `ncclComm_t`. */
  readonly comm: Deno.PointerValue;
  /** The group's `cudaStream_t`. */
  readonly stream: Deno.PointerValue;
  /** NCCL's symbols. */
  readonly symbols: NcclSymbols;
}
