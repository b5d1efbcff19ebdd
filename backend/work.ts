/**
 * {@linkcode Work}: the handle of an asynchronous collective. It is PromiseLike, so `await work` waits;
 * not awaiting it lets the collective run while the caller computes. A failure is kept until someone
 * waits, so an un-awaited failed collective never crashes the process with an unhandled rejection.
 *
 * @module
 */

/** What a finished collective reports. */
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
}

/** The handle of an asynchronous collective. */
export class Work implements PromiseLike<void> {
  #promise: Promise<WorkReport | undefined>;
  #completed = false;
  #error: unknown = undefined;
  #report: WorkReport | undefined;

  /**
   * Wraps the promise of a collective; backends make these.
   *
   * @param promise Resolves with the report when the collective (and its copy back) is done.
   */
  constructor(promise: Promise<WorkReport | undefined>) {
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
      },
    );
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
    return this.#promise;
  }

  /** Lets `await work` wait for the collective. */
  then<T1 = void, T2 = never>(
    onfulfilled?: ((value: void) => T1 | PromiseLike<T1>) | null,
    onrejected?: ((reason: unknown) => T2 | PromiseLike<T2>) | null,
  ): Promise<T1 | T2> {
    return this.#promise.then(onfulfilled && (() => onfulfilled()), onrejected);
  }
}
