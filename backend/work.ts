/**
 * {@linkcode Work}: the handle of an asynchronous collective. It is PromiseLike, so `await work` waits;
 * not awaiting it lets the collective run while the caller computes. A failure is kept until someone
 * waits, so an un-awaited failed collective never crashes the process with an unhandled rejection.
 *
 * @module
 */
import type { CallPhases } from "../core/phases.ts";

/**
 * What a finished collective reports.
 *
 * @example Reading an all-reduce's report
 * ```ts
 * import { init, type WorkReport } from "@dcomm/dcomm";
 * import assert from "node:assert/strict";
 * await using pg = await init({ rank: 0, worldSize: 1, env: {}, transport: "tcp" });
 * const report: WorkReport | undefined = await pg.allReduce(new Float32Array(256)).wait();
 * assert.ok(report);
 * assert.equal(report.collective, "allReduce");
 * assert.equal(report.bytes, 1024);
 * assert.ok(report.finishedAt >= report.startedAt);
 * ```
 */
export interface WorkReport {
  /** The collective, e.g. `"allReduce"`. */
  readonly collective: string;
  /** The algorithm that ran, e.g. `"ring"` (the backend's name for NCCL/MPI). */
  readonly algorithm: string;
  /** The transport it ran over, e.g. `"tcp"`, `"shm"`, `"inproc"`, `"nccl"`. */
  readonly transport: string;
  /** Bytes of the tensor (the input for allGather/reduceScatter/allToAll). */
  readonly bytes: number;
  /** Payload bytes this rank sent. */
  readonly bytesSent: number;
  /** Milliseconds from the start of the collective on the communication thread to its end. */
  readonly timeMs: number;
  /** When it started, as a Unix epoch in milliseconds by the communication thread's clock. */
  readonly startedAt: number;
  /** When it finished, as a Unix epoch in milliseconds by the communication thread's clock. */
  readonly finishedAt: number;
  /**
   * The codec of a compressed all-reduce (`ReduceOptions.compression`): `"int8"`, `"sign"`, `"topk"` or
   * `"powersgd"`; `bytesSent` then sums its stages, and `algorithm` is its first stage's.
   */
  readonly compression?: string;
  /**
   * The other rank of a `send` or `recv`, within the group: for a receive from `ANY_SOURCE`, the rank
   * that sent the message.
   */
  readonly peer?: number;
  /**
   * Where the call's time went (the cpu backend's calls on the communication thread): waiting for peers
   * (where the transport measures it), moving bytes, reducing, codec. The timeline draws them.
   */
  readonly phases?: CallPhases;
}

/**
 * What a backend knows of a finished call, for {@linkcode workReport}: the report's fields, with
 * `compression` left `undefined` for a call that compressed nothing and `peer` for one that is not a send
 * or a receive.
 */
export type WorkReportInit = Omit<WorkReport, "compression" | "peer" | "phases"> & {
  readonly compression?: string | undefined;
  readonly peer?: number | undefined;
  readonly phases?: CallPhases | undefined;
};

/**
 * The report of a finished collective: every backend builds its reports here, so they all have the same
 * fields in the same order (they cross threads and are compared whole), and a report of an uncompressed
 * call has no `compression` key at all.
 *
 * @param init The collective, algorithm, transport, bytes and times.
 * @returns The report.
 *
 * @example A report of an uncompressed all-reduce
 * ```ts
 * import { workReport } from "./work.ts";
 * import assert from "node:assert/strict";
 * const report = workReport({
 *   collective: "allReduce",
 *   algorithm: "ring",
 *   transport: "tcp",
 *   bytes: 1024,
 *   bytesSent: 1536,
 *   timeMs: 0.5,
 *   startedAt: 1_700_000_000_000,
 *   finishedAt: 1_700_000_000_000.5,
 *   compression: undefined,
 * });
 * assert.equal(report.bytesSent, 1536);
 * assert.equal("compression" in report, false);
 * ```
 */
export function workReport(init: WorkReportInit): WorkReport {
  const report: WorkReport = {
    collective: init.collective,
    algorithm: init.algorithm,
    transport: init.transport,
    bytes: init.bytes,
    bytesSent: init.bytesSent,
    timeMs: init.timeMs,
    startedAt: init.startedAt,
    finishedAt: init.finishedAt,
  };
  if (init.compression !== undefined) (report as { compression?: string }).compression = init.compression;
  if (init.peer !== undefined) (report as { peer?: number }).peer = init.peer;
  if (init.phases !== undefined) (report as { phases?: CallPhases }).phases = init.phases;
  return report;
}

/** Told of every Work that fails (the flight recorder's dump on a timeout or a peer's failure). */
let failureObserver: ((error: unknown) => void) | undefined;

/**
 * Sets the function told of every Work that fails, once its error is recorded.
 *
 * @param observer The function (it must not throw; what it throws is dropped).
 * @internal For the flight recorder (`flight.ts`).
 */
export function observeWorkFailures(observer: (error: unknown) => void): void {
  failureObserver = observer;
}

/** What a Work done when it was made is constructed with (never settles, never escapes this module). */
const DONE: Promise<never> = new Promise<never>(() => {});
/** The promise `then` of a Work done when it was made chains on. */
const NOTHING: Promise<void> = Promise.resolve();
let makeDone: (report: WorkReport | undefined) => Work;

/**
 * The handle of an asynchronous collective.
 *
 * @example Computing while a collective runs
 * ```ts
 * import { init } from "@dcomm/dcomm";
 * import assert from "node:assert/strict";
 * await using pg = await init({ rank: 0, worldSize: 1, env: {} });
 * const work = pg.allReduce(new Float32Array([1, 2, 3])); // runs on the communication thread
 * // ... compute the next layer's gradients here ...
 * const report = await work.wait();
 * assert.ok(work.completed);
 * assert.equal(work.error, undefined);
 * assert.equal(report?.collective, "allReduce");
 * ```
 *
 * @example A failure is kept until someone waits
 * ```ts
 * import { init } from "@dcomm/dcomm";
 * import assert from "node:assert/strict";
 * await using pg = await init({ rank: 0, worldSize: 1, env: {} });
 * const work = pg.barrier({ signal: AbortSignal.abort("stop") }); // no unhandled rejection
 * await assert.rejects(work.wait(), { code: "ABORTED" });
 * assert.ok(work.completed && work.error instanceof Error);
 * ```
 */
export class Work implements PromiseLike<void> {
  /** The backend's promise; made on first use for a Work that was done when it was made. */
  #promise: Promise<WorkReport | undefined> | undefined;
  #completed = false;
  #error: unknown = undefined;
  #report: WorkReport | undefined;

  /**
   * Wraps the promise of a collective; backends make these.
   *
   * @param promise Resolves with the report when the collective (and its copy back) is done.
   */
  constructor(promise: Promise<WorkReport | undefined>) {
    // A call done before its Work was made (doneWork) has no promise until someone asks for one.
    if (promise === DONE) return;
    this.#promise = promise;
    // One reaction records the outcome, and handles a rejection (nobody waiting must not crash the
    // process); waiters chain on the backend's promise itself, and their reactions run after this one. One
    // promise per call, not three: on a small MPI call each costs as much as the call.
    promise.then(
      (report) => {
        this.#report = report;
        this.#completed = true;
      },
      (error) => {
        this.#error = error;
        this.#completed = true;
        if (failureObserver !== undefined) {
          try {
            failureObserver(error);
          } catch { /* a dump that failed must not turn into an unhandled rejection */ }
        }
      },
    );
  }

  static {
    makeDone = (report) => {
      const work = new Work(DONE);
      work.#report = report;
      work.#completed = true;
      return work;
    };
  }

  /** Whether the collective has finished, successfully or not. */
  get completed(): boolean {
    return this.#completed;
  }

  /** The error it failed with, once completed; `undefined` on success or while running. */
  get error(): unknown {
    return this.#error;
  }

  /** The report, once completed successfully. */
  get report(): WorkReport | undefined {
    return this.#report;
  }

  /**
   * Waits for the collective.
   *
   * @returns The report, when the backend gives one.
   * @throws {DistError} The collective's failure.
   */
  wait(): Promise<WorkReport | undefined> {
    return this.#promise ??= Promise.resolve(this.#report);
  }

  /** Lets `await work` wait for the collective. */
  then<T1 = void, T2 = never>(
    onfulfilled?: ((value: void) => T1 | PromiseLike<T1>) | null,
    onrejected?: ((reason: unknown) => T2 | PromiseLike<T2>) | null,
  ): Promise<T1 | T2> {
    // Done when made: a promise of nothing, shared by every such Work, carries the reactions (no
    // closure per call, one microtask).
    if (this.#promise === undefined) return NOTHING.then(onfulfilled, onrejected);
    return this.#promise.then(onfulfilled && (() => onfulfilled()), onrejected);
  }
}

/**
 * The Work of a call that is already done when it returns (a call the calling thread ran to its end):
 * `completed` at once, and no promise or reaction unless someone asks for one (`wait()`); `await` takes
 * one microtask on a promise every such Work shares.
 *
 * @param report The call's report.
 * @returns The Work.
 * @internal For backends; users get Works from the collectives.
 */
export function doneWork(report: WorkReport | undefined): Work {
  return makeDone(report);
}
