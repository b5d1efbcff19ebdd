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

/**
 * Options every collective of the `nccl` backend takes, beyond {@linkcode CallOptions}.
 *
 * @example A tensor written on another stream: the collective waits for it on the device
 * ```ts
 * import { createNcclGroup, ncclBackendMissing, type NcclCallOptions } from "@dcomm/dcomm/nccl";
 * import { DeviceBuffer, Stream } from "@dcomm/dcomm/gpu";
 * import { MemoryStore } from "@dcomm/dcomm/store";
 * import assert from "node:assert/strict";
 * if (ncclBackendMissing() === undefined) {
 *   await using store = new MemoryStore();
 *   await using pg = await createNcclGroup({ rank: 0, size: 1, store });
 *   using producer = Stream.create();
 *   using grad = DeviceBuffer.alloc(1024);
 *   grad.zero(0, { stream: producer }); // queued on the producer's stream
 *   const options: NcclCallOptions = { waitFor: producer, timeoutMs: 30_000 };
 *   await pg.allReduce(grad, options); // the host never waited for the producer
 *   assert.deepEqual(grad.toArray(), new Float32Array(1024));
 * }
 * ```
 */
export interface NcclCallOptions extends CallOptions {
  /**
   * A stream whose queued work must finish before the collective starts (on the device: the group's
   * stream waits for it; the host does not). Use it when the tensor was written on another stream.
   * @default none (the group's stream synchronizes with the legacy default stream only)
   */
  waitFor?: Stream;
}

/**
 * Options of reducing collectives of the `nccl` backend.
 *
 * @example A sum of inputs scaled first (NCCL's PreMulSum)
 * ```ts
 * import { createNcclGroup, ncclBackendMissing, type NcclReduceOptions } from "@dcomm/dcomm/nccl";
 * import { DeviceBuffer } from "@dcomm/dcomm/gpu";
 * import { MemoryStore } from "@dcomm/dcomm/store";
 * import assert from "node:assert/strict";
 * const options: NcclReduceOptions = { op: "sum", scale: 0.25 };
 * if (ncclBackendMissing() === undefined) {
 *   await using store = new MemoryStore();
 *   await using pg = await createNcclGroup({ rank: 0, size: 1, store });
 *   using grad = DeviceBuffer.from(new Float32Array([4, 8]));
 *   await pg.allReduce(grad, options);
 *   assert.deepEqual(grad.toArray(), new Float32Array([1, 2])); // 4 × 0.25 and 8 × 0.25, over one rank
 * }
 * ```
 */
export interface NcclReduceOptions extends ReduceOptions, NcclCallOptions {
  /**
   * Multiplies each rank's input by this scalar before summing (`ncclRedOpCreatePreMulSum`, NCCL 2.11);
   * only with `op: "sum"`. `scale: 1 / size` gives an average on libraries without `avg`. The same as
   * `{ op: "premulSum", factor }`, which every backend takes (and which refuses `scale` besides).
   * @default none
   */
  scale?: number;
}

/**
 * Options of `reduce` on the `nccl` backend.
 *
 * @example The mean loss, on rank 0 only
 * ```ts
 * import { createNcclGroup, ncclBackendMissing, type NcclRootReduceOptions } from "@dcomm/dcomm/nccl";
 * import { DeviceBuffer } from "@dcomm/dcomm/gpu";
 * import { MemoryStore } from "@dcomm/dcomm/store";
 * import assert from "node:assert/strict";
 * if (ncclBackendMissing() === undefined) {
 *   await using store = new MemoryStore();
 *   await using pg = await createNcclGroup({ rank: 0, size: 1, store });
 *   const options: NcclRootReduceOptions = { root: 0, op: "sum", scale: 1 / pg.size };
 *   using loss = DeviceBuffer.from(new Float32Array([0.5]));
 *   await pg.reduce(loss, options);
 *   if (pg.rank === options.root) assert.deepEqual(loss.toArray(), new Float32Array([0.5]));
 * }
 * ```
 */
export interface NcclRootReduceOptions extends RootReduceOptions, NcclReduceOptions {}

/**
 * Options of collectives with a root on the `nccl` backend.
 *
 * @example Rank 0's weights to every rank
 * ```ts
 * import { createNcclGroup, ncclBackendMissing, type NcclRootOptions } from "@dcomm/dcomm/nccl";
 * import { DeviceBuffer } from "@dcomm/dcomm/gpu";
 * import { MemoryStore } from "@dcomm/dcomm/store";
 * import assert from "node:assert/strict";
 * const options: NcclRootOptions = { root: 0, timeoutMs: 60_000 };
 * if (ncclBackendMissing() === undefined) {
 *   await using store = new MemoryStore();
 *   await using pg = await createNcclGroup({ rank: 0, size: 1, store });
 *   using weights = DeviceBuffer.from(new Float32Array([0.5, -1]));
 *   await pg.broadcast(weights, options);
 *   assert.deepEqual(weights.toArray(), new Float32Array([0.5, -1]));
 * }
 * ```
 */
export interface NcclRootOptions extends RootOptions, NcclCallOptions {}

/**
 * Options of collectives without op or root on the `nccl` backend.
 *
 * @example An all-gather; the only algorithm names are `"auto"` and `"nccl"` (NCCL picks its own)
 * ```ts
 * import { createNcclGroup, ncclBackendMissing, type NcclAlgorithmOptions } from "@dcomm/dcomm/nccl";
 * import { DeviceBuffer } from "@dcomm/dcomm/gpu";
 * import { MemoryStore } from "@dcomm/dcomm/store";
 * import assert from "node:assert/strict";
 * import { UnsupportedError } from "@dcomm/dcomm";
 * if (ncclBackendMissing() === undefined) {
 *   await using store = new MemoryStore();
 *   await using pg = await createNcclGroup({ rank: 0, size: 1, store });
 *   using input = DeviceBuffer.from(new Float32Array([1, 2]));
 *   using output = DeviceBuffer.alloc(2 * pg.size);
 *   const options: NcclAlgorithmOptions = { algorithm: "nccl" };
 *   await pg.allGather(output, input, options);
 *   assert.deepEqual(output.toArray(), new Float32Array([1, 2]));
 *   assert.throws(() => pg.allGather(output, input, { algorithm: "ring" }), UnsupportedError);
 * }
 * ```
 */
export interface NcclAlgorithmOptions extends AlgorithmOptions, NcclCallOptions {}

/**
 * What {@linkcode NcclProcessGroup.run} hands to its function.
 *
 * @example A custom call: an in-place all-reduce through NCCL's own symbol
 * ```ts
 * import { createNcclGroup, ncclBackendMissing, type NcclRunContext } from "@dcomm/dcomm/nccl";
 * import { DeviceBuffer } from "@dcomm/dcomm/gpu";
 * import { MemoryStore } from "@dcomm/dcomm/store";
 * import assert from "node:assert/strict";
 * if (ncclBackendMissing() === undefined) {
 *   await using store = new MemoryStore();
 *   await using pg = await createNcclGroup({ rank: 0, size: 1, store });
 *   using x = DeviceBuffer.from(new Float32Array([3, 4]));
 *   const sum = ({ comm, stream, symbols }: NcclRunContext): number =>
 *     symbols.ncclAllReduce(x.pointer, x.pointer, BigInt(x.length), 7, 0, comm, stream); // float32, ncclSum
 *   await pg.run("custom-sum", sum);
 *   assert.deepEqual(x.toArray(), new Float32Array([3, 4]));
 * }
 * ```
 */
export interface NcclRunContext {
  /** The group's `ncclComm_t`. */
  readonly comm: Deno.PointerValue;
  /** The group's `cudaStream_t`. */
  readonly stream: Deno.PointerValue;
  /** NCCL's symbols. */
  readonly symbols: NcclSymbols;
}
