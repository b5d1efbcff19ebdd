/**
 * {@linkcode NcclWork}: the Work of the `nccl` backend. It settles when the collective's CUDA event
 * completes, which the backend polls (`cudaEventQuery`) between turns of the event loop, so awaiting it
 * never blocks the loop. {@linkcode NcclWork.waitOn} lets a compute stream wait for the collective on the
 * device instead, without the host waiting at all (PyTorch's `work.wait()` on a CUDA stream).
 *
 * @module
 */
import type { DType } from "../../core/dtype.ts";
import { streamWaitEvent } from "../../ffi/cudart/cudart.ts";
import { Stream } from "../../gpu/stream.ts";
import { Work, type WorkReport } from "../work.ts";
import type { NcclTuningReport } from "./tuning.ts";

/**
 * What a finished collective of the `nccl` backend reports.
 *
 * @example A device tensor and a host tensor (staged through pinned and device memory)
 * ```ts
 * import { createNcclGroup, ncclBackendMissing, type NcclWorkReport } from "@dcomm/dcomm/nccl";
 * import { DeviceBuffer } from "@dcomm/dcomm/gpu";
 * import { MemoryStore } from "@dcomm/dcomm/store";
 * import assert from "node:assert/strict";
 * if (ncclBackendMissing() === undefined) {
 *   await using store = new MemoryStore();
 *   await using pg = await createNcclGroup({ rank: 0, size: 1, store });
 *   using grad = DeviceBuffer.from(new Float32Array(1024));
 *   const report: NcclWorkReport | undefined = await pg.allReduce(grad).wait();
 *   console.log(`${report?.count} ${report?.dtype}: ${report?.gpuTimeMs} ms on GPU ${report?.device}`);
 *   assert.equal(report?.staged, false);
 *   const host = await pg.allReduce(new Float32Array(1024)).wait();
 *   assert.equal(host?.staged, true);
 * }
 * ```
 */
export interface NcclWorkReport extends WorkReport {
  /** GPU milliseconds between the events recorded before and after the NCCL call (`timeMs` is the same). */
  readonly gpuTimeMs: number;
  /** The element type. */
  readonly dtype: DType;
  /** Elements of the tensor (the input for allGather/reduceScatter/allToAll). */
  readonly count: number;
  /** The CUDA device. */
  readonly device: number;
  /** The NCCL version, e.g. `"2.30.7"`. */
  readonly ncclVersion: string;
  /** Whether a host tensor was staged through pinned and device memory. */
  readonly staged: boolean;
  /** The tuning in effect (NCCL_* variables, config fields). */
  readonly tuning: NcclTuningReport;
}

/**
 * The CUDA event a Work's device-side completion is recorded in, while it is valid. The backend sets
 * `event` to `null` before it reuses the event.
 *
 * @example A Work that failed before anything was queued: no event, nothing to wait for on the device
 * ```ts
 * import { type CompletionEvent, NcclWork } from "@dcomm/dcomm/nccl";
 * import { DistError } from "@dcomm/dcomm";
 * import assert from "node:assert/strict";
 * const completion: CompletionEvent = { event: null };
 * const work = new NcclWork(Promise.reject(new DistError("Refused before it started")), completion);
 * work.waitOn(null); // no event: a no-op
 * await assert.rejects(work.wait(), DistError);
 * ```
 */
export interface CompletionEvent {
  /** The `cudaEvent_t`, or `null` once the collective finished (or failed). */
  event: Deno.PointerValue | null;
}

/**
 * The handle of a collective of the `nccl` backend.
 *
 * @example Awaited, it settles once the collective's CUDA event completes (polled, never blocking)
 * ```ts
 * import { createNcclGroup, ncclBackendMissing, NcclWork } from "@dcomm/dcomm/nccl";
 * import { DeviceBuffer } from "@dcomm/dcomm/gpu";
 * import { MemoryStore } from "@dcomm/dcomm/store";
 * import assert from "node:assert/strict";
 * if (ncclBackendMissing() === undefined) {
 *   await using store = new MemoryStore();
 *   await using pg = await createNcclGroup({ rank: 0, size: 1, store });
 *   using grad = DeviceBuffer.from(new Float32Array([2, 4]));
 *   const work = pg.allReduce(grad, { op: "avg" });
 *   assert.ok(work instanceof NcclWork);
 *   // ... queue the next layer's backward pass here ...
 *   await work;
 *   assert.equal(work.report?.device, grad.device);
 * }
 * ```
 */
export class NcclWork extends Work {
  #completion: CompletionEvent;

  /**
   * Wraps a queued collective; the backend makes these.
   *
   * @param promise Resolves with the report when the collective (and a host tensor's copy back) is done.
   * @param completion The event the collective's end is recorded in.
   */
  constructor(promise: Promise<NcclWorkReport>, completion: CompletionEvent) {
    super(promise);
    this.#completion = completion;
  }

  /** The report, once completed successfully. */
  override get report(): NcclWorkReport | undefined {
    return super.report as NcclWorkReport | undefined;
  }

  /**
   * Waits for the collective.
   *
   * @returns The report.
   * @throws {DistError} The collective's failure.
   */
  override async wait(): Promise<NcclWorkReport | undefined> {
    return (await super.wait()) as NcclWorkReport | undefined;
  }

  /**
   * Makes `stream` wait, on the device, until the collective's result is in place (`cudaStreamWaitEvent`);
   * the host does not wait. Work queued on `stream` afterwards sees the result. A no-op once the Work has
   * completed. For a host tensor, the result reaches the array only when the Work settles: await it.
   *
   * @param stream The stream, or a raw `cudaStream_t` of another library (`null`: the legacy default stream).
   * @throws {CudaError} If the call fails.
   *
   * @example Overlap a collective with compute on the device
   * ```ts
   * import { createNcclGroup, ncclBackendMissing } from "@dcomm/dcomm/nccl";
   * import { DeviceBuffer, Stream } from "@dcomm/dcomm/gpu";
   * import { MemoryStore } from "@dcomm/dcomm/store";
   * import assert from "node:assert/strict";
   * if (ncclBackendMissing() === undefined) {
   *   await using store = new MemoryStore();
   *   await using pg = await createNcclGroup({ rank: 0, size: 1, store });
   *   using compute = Stream.create({ nonBlocking: true });
   *   using grads = DeviceBuffer.from(new Float32Array(1 << 20).fill(2));
   *   using copy = DeviceBuffer.alloc(1 << 20);
   *   const work = pg.allReduce(grads, { op: "avg" });
   *   work.waitOn(compute); // work queued on compute from now on sees the reduced grads; the host goes on
   *   copy.copyFrom(grads, { stream: compute });
   *   await compute.done({ timeoutMs: 30_000 });
   *   assert.equal((copy.view(12345, 1).toArray() as Float32Array)[0], 2);
   *   await work;
   * }
   * ```
   */
  waitOn(stream: Stream | Deno.PointerValue): void {
    const event = this.#completion.event;
    if (event === null || this.completed) return;
    const pointer = stream instanceof Stream ? stream.pointer : stream;
    streamWaitEvent(pointer, event);
  }
}
