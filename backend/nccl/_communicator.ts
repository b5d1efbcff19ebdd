/**
 * One NCCL communicator of this rank: created without blocking the event loop (a non-blocking
 * `ncclConfig_t`, then `ncclCommGetAsyncError` polled until it stops returning `ncclInProgress`), with a
 * timeout that aborts it, split into sub-communicators the same way, and finalized, destroyed or aborted.
 * Every call is synchronous on the thread that owns the communicator.
 *
 * @module
 */
import { DistError, TimeoutError } from "../../core/errors.ts";
import { buildNcclConfig, type NcclConfig, type NcclConfigOptions } from "../../ffi/nccl/config.ts";
import { NCCL_SPLIT_NOCOLOR, NcclResult } from "../../ffi/nccl/constants.ts";
import { hasFeature } from "../../ffi/nccl/features.ts";
import {
  checkStarted,
  commGetAsyncError,
  commInitRank,
  commInitRankConfig,
  commSplit,
  nccl,
  ncclError,
  resultName,
} from "../../ffi/nccl/nccl.ts";
import { pollUntil } from "../../gpu/poll.ts";
import { noteNcclStarted } from "./tuning.ts";

/** How long a synchronous settle (after a call returned `ncclInProgress`) sleeps between checks. */
const SETTLE_SLEEP_MS = 0.05;
const sleeper = new Int32Array(new SharedArrayBuffer(4));

/** Options of {@linkcode Communicator.init}. */
export interface CommunicatorInit {
  /** The number of ranks. */
  size: number;
  /** This rank. */
  rank: number;
  /** The unique id (128 bytes). */
  id: Uint8Array;
  /** Config fields beyond `blocking`. */
  config: NcclConfigOptions;
  /** Milliseconds before init is aborted. */
  timeoutMs: number;
  /** Stops waiting (and aborts). */
  signal?: AbortSignal;
}

/** A communicator of this rank. */
export class Communicator {
  #comm: Deno.PointerValue;
  #size: number;
  #rank: number;
  #config: NcclConfig | undefined;
  #nonblocking: boolean;
  #state: "ready" | "aborted" | "destroyed" = "ready";

  private constructor(comm: Deno.PointerValue, size: number, rank: number, config: NcclConfig | undefined) {
    this.#comm = comm;
    this.#size = size;
    this.#rank = rank;
    this.#config = config;
    this.#nonblocking = config !== undefined;
  }

  /**
   * Creates this rank's communicator. The calling thread's current device must be the rank's device.
   *
   * @param init Size, rank, id, config, timeout.
   * @returns The communicator, once every rank has joined.
   * @throws {NcclError} If NCCL fails, with its reason.
   * @throws {TimeoutError} If the other ranks did not join in time (the attempt is aborted).
   */
  static async init(init: CommunicatorInit): Promise<Communicator> {
    const lib = nccl();
    noteNcclStarted();
    if (!hasFeature("nonblockingInit", lib.version, lib.symbols)) {
      // Before 2.14 there is no non-blocking init: this blocks until every rank joins.
      return new Communicator(commInitRank(init.size, init.id, init.rank), init.size, init.rank, undefined);
    }
    const config = buildNcclConfig({ ...init.config, blocking: 0 }, lib.version.code);
    const started = commInitRankConfig(init.size, init.id, init.rank, config);
    const comm = new Communicator(started.comm, init.size, init.rank, config);
    if (started.inProgress) {
      await comm.#settleAsync(
        `NCCL init of rank ${init.rank} of ${init.size}`,
        init.timeoutMs,
        init.signal,
        true,
      );
    }
    return comm;
  }

  /** The `ncclComm_t`. */
  get handle(): Deno.PointerValue {
    if (this.#state !== "ready") throw new DistError(`The NCCL communicator was ${this.#state}`);
    return this.#comm;
  }

  /** The number of ranks. */
  get size(): number {
    return this.#size;
  }

  /** This rank. */
  get rank(): number {
    return this.#rank;
  }

  /** Whether the communicator can still be used. */
  get ready(): boolean {
    return this.#state === "ready";
  }

  /** The state: `"ready"`, `"aborted"` or `"destroyed"`. */
  get state(): string {
    return this.#state;
  }

  /** Whether calls on it may return `ncclInProgress`. */
  get nonblocking(): boolean {
    return this.#nonblocking;
  }

  /**
   * `ncclCommGetAsyncError`.
   *
   * @returns The state: success, in progress, or an error code.
   * @throws {NcclError} If the query fails.
   */
  asyncError(): number {
    return commGetAsyncError(this.handle);
  }

  /**
   * After a call returned `ncclInProgress`, waits on this thread until NCCL has finished queuing it
   * (usually microseconds; the first call on a new connection can take longer). Aborts on timeout.
   *
   * @param call The call, for messages.
   * @param deadline `performance.now()` time to give up at.
   * @throws {TimeoutError} If the deadline passes (the communicator is aborted).
   * @throws {NcclError} If the operation failed.
   */
  settle(call: string, deadline: number): void {
    for (;;) {
      const state = this.asyncError();
      if (state === NcclResult.Success) return;
      if (state !== NcclResult.InProgress) throw ncclError(state, call, this.#comm);
      if (performance.now() > deadline) {
        this.abort();
        throw new TimeoutError(
          `${call} was still being queued by NCCL at its deadline; the communicator was aborted`,
        );
      }
      Atomics.wait(sleeper, 0, 0, SETTLE_SLEEP_MS);
    }
  }

  async #settleAsync(
    what: string,
    timeoutMs: number,
    signal: AbortSignal | undefined,
    destroyOnFail: boolean,
  ): Promise<void> {
    let state: number = NcclResult.InProgress;
    try {
      await pollUntil(() => (state = commGetAsyncError(this.#comm)) !== NcclResult.InProgress, {
        timeoutMs,
        signal,
        what,
      });
    } catch (e) {
      this.abort();
      if (e instanceof TimeoutError) {
        throw new TimeoutError(
          `${what} did not finish within ${timeoutMs} ms (did every rank start, with the same unique id?); ` +
            `it was aborted`,
          { cause: e },
        );
      }
      throw e;
    }
    if (state !== NcclResult.Success) {
      const error = ncclError(state, `${what} (ncclCommGetAsyncError)`, this.#comm);
      if (destroyOnFail) this.abort();
      throw error;
    }
  }

  /**
   * `ncclCommSplit`: every rank of this communicator calls it; the ranks with the same `color` form a new
   * communicator, ordered by `key`. Needs NCCL 2.18.
   *
   * @param member Whether this rank joins (false: `NCCL_SPLIT_NOCOLOR`).
   * @param key This rank's order in the new communicator.
   * @param options Config fields, timeout and abort signal.
   * @returns The new communicator, or `null` for a rank that does not join.
   * @throws {NcclError} If NCCL fails.
   * @throws {TimeoutError} If the split does not finish in time (this communicator is aborted).
   */
  async split(
    member: boolean,
    key: number,
    options: { config: NcclConfigOptions; timeoutMs: number; signal?: AbortSignal },
  ): Promise<Communicator | null> {
    const version = nccl().version.code;
    const config = this.#nonblocking
      ? buildNcclConfig({ ...options.config, blocking: 0 }, version)
      : buildNcclConfig(options.config, version);
    const what = `ncclCommSplit(key ${key})`;
    const deadline = performance.now() + options.timeoutMs;
    const left = (): number => Math.max(1, deadline - performance.now());
    // NCCL refuses a split while an earlier non-blocking operation of this communicator is in progress.
    if (this.#nonblocking) {
      await this.#settleAsync(`${what}: the operations before it`, left(), options.signal, false);
    }
    const started = commSplit(this.handle, member ? 0 : NCCL_SPLIT_NOCOLOR, key, config);
    if (this.#nonblocking) {
      // The parent reports the split's progress (whatever the call returned); NCCL writes the child's
      // handle when the split completes.
      await this.#settleAsync(what, left(), options.signal, false);
    }
    const child = Deno.UnsafePointer.create(started.out[0]);
    if (!member) return null;
    if (child === null) {
      throw new DistError(`${what} completed without a communicator for this rank, which is a member`);
    }
    const comm = new Communicator(child, 0, key, config);
    if (this.#nonblocking) {
      await comm.#settleAsync(`the child of ${what}`, left(), options.signal, true);
    }
    const out = new Int32Array(1);
    const rc = nccl().symbols.ncclCommCount(child, out);
    if (rc !== NcclResult.Success) throw ncclError(rc, "ncclCommCount", child);
    comm.#size = out[0];
    return comm;
  }

  /**
   * `ncclCommAbort`: stops every pending operation and frees the communicator. Safe to call twice.
   */
  abort(): void {
    if (this.#state !== "ready") return;
    this.#state = "aborted";
    const rc = nccl().symbols.ncclCommAbort(this.#comm);
    // A non-blocking communicator may report the abort as in progress; it completes on its own.
    if (rc !== NcclResult.Success && rc !== NcclResult.InProgress) {
      console.warn(`ncclCommAbort returned ${resultName(rc)} (${rc})`);
    }
  }

  /**
   * Finalizes (flushing pending operations, without blocking the event loop) and destroys the
   * communicator; aborts it if finalizing fails or times out.
   *
   * @param timeoutMs How long finalizing may take.
   * @throws {NcclError} If destroying fails.
   */
  async destroy(timeoutMs: number): Promise<void> {
    if (this.#state !== "ready") return;
    const { symbols } = nccl();
    if (symbols.ncclCommFinalize !== null && this.#nonblocking) {
      try {
        const inProgress = checkStarted(symbols.ncclCommFinalize(this.#comm), "ncclCommFinalize", this.#comm);
        if (inProgress) await this.#settleAsync("ncclCommFinalize", timeoutMs, undefined, false);
      } catch {
        this.abort();
        return;
      }
    }
    this.#state = "destroyed";
    const rc = symbols.ncclCommDestroy(this.#comm);
    if (rc !== NcclResult.Success && rc !== NcclResult.InProgress) throw ncclError(rc, "ncclCommDestroy");
    this.#config = undefined;
  }
}
