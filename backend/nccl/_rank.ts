/**
 * The state one rank of the `nccl` backend shares across its groups: the device, the loaded NCCL, the
 * tuning, pooled CUDA events and staging slots, the order of its calls across groups, and the poller.
 *
 * The poller is the backend's watchdog: between turns of the event loop it queries each pending
 * collective's completion event (`cudaEventQuery`) and each busy communicator's state
 * (`ncclCommGetAsyncError`). A collective past its deadline, an aborted signal or an asynchronous NCCL
 * error aborts the communicator (`ncclCommAbort`) and fails every collective pending on it.
 *
 * @module
 */
import { DistError, TimeoutError } from "../../core/errors.ts";
import { EventFlags } from "../../ffi/cudart/constants.ts";
import {
  createEvent,
  destroyEvent,
  eventElapsedMs,
  queryEvent,
  streamWaitEvent,
} from "../../ffi/cudart/cudart.ts";
import { NcclResult } from "../../ffi/nccl/constants.ts";
import { ncclError, type NcclLibrary } from "../../ffi/nccl/nccl.ts";
import { nextTurn } from "../../gpu/poll.ts";
import type { Communicator } from "./_communicator.ts";
import { StagingPool } from "./_staging.ts";
import type { CompletionEvent } from "./nccl_work.ts";
import type { NcclTuningReport } from "./tuning.ts";

/** A collective queued on the GPU and not yet known to be done. */
export interface PendingOp {
  /** Its communicator. */
  readonly comm: Communicator;
  /** What it is, for messages: e.g. `"all-reduce of 1024 float32 on group 0"`. */
  readonly describe: string;
  /** Recorded before the NCCL call. */
  readonly start: Deno.PointerValue;
  /** Recorded after the NCCL call. */
  readonly end: Deno.PointerValue;
  /** Recorded after everything (the copy back of a host tensor); may be `end`. */
  readonly done: Deno.PointerValue;
  /** `performance.now()` time past which the watchdog aborts. */
  readonly deadline: number;
  /** Its timeout, for messages. */
  readonly timeoutMs: number;
  /** Aborts it (and its communicator). */
  readonly signal?: AbortSignal;
  /** The event a Work hands to `waitOn`; cleared before the event is reused. */
  readonly completion: CompletionEvent;
  /** Called once the done event completed, with the GPU time between start and end. */
  finish(gpuTimeMs: number): void;
  /** Called if it failed. */
  fail(error: Error): void;
}

/** One rank's shared state. */
export class NcclRank implements Disposable {
  /** The CUDA device of every communicator of this rank. */
  readonly device: number;
  /** The loaded NCCL. */
  readonly library: NcclLibrary;
  /** The tuning in effect. */
  readonly tuning: NcclTuningReport;
  /** Staging slots for host tensors. */
  readonly staging: StagingPool;
  #events: Deno.PointerValue[] = [];
  #pending: PendingOp[] = [];
  #polling = false;
  #last: { stream: Deno.PointerValue; op: PendingOp } | undefined;
  #idle: (() => void)[] = [];

  /**
   * @param device The CUDA device.
   * @param library The loaded NCCL.
   * @param tuning The tuning in effect.
   */
  constructor(device: number, library: NcclLibrary, tuning: NcclTuningReport) {
    this.device = device;
    this.library = library;
    this.tuning = tuning;
    this.staging = new StagingPool(device);
  }

  /** The number of collectives not yet known to be done. */
  get pending(): number {
    return this.#pending.length;
  }

  /**
   * A timing event from the pool.
   *
   * @returns The event.
   * @throws {CudaError} If a new one cannot be created.
   */
  acquireEvent(): Deno.PointerValue {
    return this.#events.pop() ?? createEvent(EventFlags.Default);
  }

  /**
   * Returns an event whose recorded work is done (or whose wait was already queued).
   *
   * @param event The event.
   */
  releaseEvent(event: Deno.PointerValue): void {
    this.#events.push(event);
  }

  /**
   * Keeps this rank's calls in issue order across its groups' streams: a call on `stream` waits, on the
   * device, for the previous call if that one went to another stream.
   *
   * @param stream The stream of the call about to be queued.
   * @throws {CudaError} If the wait cannot be queued.
   */
  order(stream: Deno.PointerValue): void {
    const last = this.#last;
    if (last && last.stream !== stream && last.op.completion.event !== null) {
      streamWaitEvent(stream, last.op.end);
    }
  }

  /**
   * Starts watching a queued collective.
   *
   * @param op The collective.
   * @param stream The stream it was queued on.
   */
  track(op: PendingOp, stream: Deno.PointerValue): void {
    this.#pending.push(op);
    this.#last = { stream, op };
    if (!this.#polling) {
      this.#polling = true;
      this.#loop().catch((e) => console.error("dcomm nccl poller crashed:", e));
    }
  }

  /**
   * Resolves once no collective is pending (the watchdog still fails late ones).
   *
   * @returns Resolves when idle.
   */
  idle(): Promise<void> {
    if (this.#pending.length === 0) return Promise.resolve();
    return new Promise((resolve) => this.#idle.push(resolve));
  }

  async #loop(): Promise<void> {
    let quietSince = performance.now();
    let backoff = 0.25;
    try {
      while (this.#pending.length > 0) {
        if (this.#tick()) {
          quietSince = performance.now();
          backoff = 0.25;
        }
        if (this.#pending.length === 0) break;
        // Every turn of the event loop for 2 ms after progress, then timers backing off to 4 ms.
        if (performance.now() - quietSince < 2) await nextTurn();
        else {
          await new Promise((resolve) => setTimeout(resolve, backoff));
          backoff = Math.min(backoff * 2, 4);
        }
      }
    } finally {
      this.#polling = false;
      for (const resolve of this.#idle.splice(0)) resolve();
    }
  }

  // One pass over the pending collectives; returns whether any finished.
  #tick(): boolean {
    let progress = false;
    const busy = new Set(this.#pending.map((op) => op.comm));
    for (const comm of busy) {
      if (!comm.ready) continue;
      let state: number;
      try {
        state = comm.asyncError();
      } catch (e) {
        this.abort(comm, e as Error);
        continue;
      }
      if (state !== NcclResult.Success && state !== NcclResult.InProgress) {
        this.abort(comm, ncclError(state, "A collective (asynchronous error from ncclCommGetAsyncError)"));
      }
    }
    const now = performance.now();
    for (const op of [...this.#pending]) {
      if (!this.#pending.includes(op)) continue;
      if (!op.comm.ready) {
        // Aborted elsewhere (a call that timed out while NCCL was still queuing it): the aborted kernels
        // complete their events without having done their work, so nothing pending on it may succeed.
        this.#remove(op);
        op.completion.event = null;
        op.fail(new DistError(`Aborted the ${op.describe}: its NCCL communicator was ${op.comm.state}`));
        continue;
      }
      let done: boolean;
      try {
        done = queryEvent(op.done);
      } catch (e) {
        // A CUDA error here is sticky (an illegal address, a failed kernel): nothing on this device works.
        this.abort(op.comm, e as Error, op);
        continue;
      }
      if (done) {
        this.#complete(op);
        progress = true;
      } else if (op.signal?.aborted) {
        this.abort(
          op.comm,
          new DistError(
            `Aborted the ${op.describe}: ${String(op.signal.reason)}; the communicator was aborted`,
            {
              cause: op.signal.reason,
            },
          ),
          op,
        );
      } else if (now > op.deadline) {
        this.abort(
          op.comm,
          new TimeoutError(
            `The ${op.describe} did not finish within ${op.timeoutMs} ms; the communicator was aborted ` +
              `(ncclCommAbort) and every call pending on it failed`,
          ),
          op,
        );
      }
    }
    return progress;
  }

  #remove(op: PendingOp): void {
    const i = this.#pending.indexOf(op);
    if (i >= 0) this.#pending.splice(i, 1);
    if (this.#last?.op === op) this.#last = undefined;
  }

  #complete(op: PendingOp): void {
    this.#remove(op);
    let gpuTimeMs = NaN;
    try {
      gpuTimeMs = eventElapsedMs(op.start, op.end);
    } catch {
      // Timing is a report, not a result: a failure here must not fail the collective.
    }
    op.completion.event = null;
    for (const e of new Set([op.start, op.end, op.done])) this.releaseEvent(e);
    try {
      op.finish(gpuTimeMs);
    } catch (e) {
      // E.g. the host array was transferred while the collective ran: the copy back cannot land.
      op.fail(e as Error);
    }
  }

  /**
   * Aborts a communicator and fails every collective pending on it: the first with `error`, the others
   * with a DistError that names it.
   *
   * @param comm The communicator.
   * @param error Why.
   * @param culprit The collective that caused it, which gets `error` itself. @default the oldest pending
   */
  abort(comm: Communicator, error: Error, culprit?: PendingOp): void {
    comm.abort();
    const victims = this.#pending.filter((op) => op.comm === comm);
    const first = culprit ?? victims[0];
    for (const op of victims) {
      this.#remove(op);
      op.completion.event = null;
      // The aborted work may still reference its events: they are not reused.
      op.fail(
        op === first
          ? error
          : new DistError(`Aborted the ${op.describe}: ${error.message}`, { cause: error }),
      );
    }
  }

  /** Destroys the pooled events and staging slots; call when every stream is idle. */
  [Symbol.dispose](): void {
    for (const e of this.#events.splice(0)) {
      try {
        destroyEvent(e);
      } catch {
        // The context may already be gone (a sticky error): nothing more to free.
      }
    }
    this.staging[Symbol.dispose]();
  }
}
