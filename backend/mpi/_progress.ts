/**
 * The progress engine of the mpi backend: every non-blocking MPI call in flight is completed by `MPI_Test`
 * polling on the main thread, so that awaiting a collective never blocks the event loop.
 *
 * MPICH makes progress only inside MPI calls (no progress thread unless MPI_THREAD_MULTIPLE and
 * `MPIR_CVAR_ASYNC_PROGRESS`), so the poller alternates two things:
 * - a tick: `MPI_Test` on every request in flight, over and over, for at most `spinUs` microseconds or
 *   until nothing is left in flight (so a large message streams at the library's speed);
 * - a yield to the event loop between ticks: `setImmediate` (tens of µs) while a call is young (under
 *   `hotMs` plus its bytes at 100 MB/s); for a call that has waited longer (a peer that is still
 *   computing) one `MPI_Test` pass per tick and `setTimeout` 0, then 1 ms, between ticks.
 *
 * The first tick after a call starts is a microtask: it runs as soon as the caller yields (its `await`),
 * before the event loop turns, so a call that completes within one spin costs no event-loop round trip.
 *
 * MPI keeps using a buffer until its request completes, and `Deno.UnsafePointer.of` does not keep the
 * array alive, so each flight holds its arrays until every one of its requests is `MPI_REQUEST_NULL`, even
 * after its promise has settled by a timeout.
 *
 * @module
 */
import { DistError, TimeoutError } from "../../core/errors.ts";
import { MPI_REQUEST_NULL, MPI_STATUS_SIZE } from "../../ffi/mpi/constants.ts";
import { check, type MpiSymbols } from "../../ffi/mpi/mpi.ts";

/** `MPI_Test` passes between two readings of the clock while spinning. */
const SPIN_PASSES = 32;

/** How the poller trades latency for the event loop's time. */
export interface PollerOptions {
  /** The longest a tick spins on `MPI_Test` before yielding, in microseconds. @default 1000 */
  spinUs?: number;
  /** How long a call counts as young (spinning, `setImmediate` yields), plus 10 ns per byte. @default 50 */
  hotMs?: number;
}

/** A non-blocking MPI call (or a few, for a tensor split into chunks) to complete. */
export interface FlightSpec<T = void> {
  /** What it is, for messages: `"all-reduce of 1024 float32 on ranks [0, 1]"` (built only when needed). */
  readonly what: () => string;
  /** Its requests, each in its own Int32Array(1), as the `MPI_I*` calls filled them. */
  readonly requests: readonly Int32Array[];
  /** The arrays MPI reads or writes: held until every request is complete. */
  readonly keep: readonly unknown[];
  /** Bytes it moves, to size how long it stays young. */
  readonly bytes: number;
  /** Milliseconds before it fails with a TimeoutError. */
  readonly timeoutMs: number;
  /** Aborts it. */
  readonly signal?: AbortSignal;
  /**
   * A receive: on timeout or abort it is cancelled (`MPI_Cancel`) and the group stays usable. Any other
   * call cannot be taken back, so its timeout makes the backend unusable (see `onStuck`).
   */
  readonly cancellable?: boolean;
  /** Runs when request `index` completes, with its `MPI_Status`; a throw fails the flight. */
  readonly onRequestDone?: (index: number, status: Deno.PointerObject) => void;
  /**
   * Runs once, when the flight succeeds: what its promise resolves with (a throw rejects it instead). It
   * runs inside the poller, so the caller needs no `.then` of its own (each costs a microtask and a
   * promise, which add up against a small MPI call's few microseconds).
   */
  readonly done?: () => T;
  /** Runs once, when the flight fails: what its promise rejects with. */
  readonly failed?: (error: unknown) => unknown;
}

interface Flight {
  // deno-lint-ignore no-explicit-any
  readonly spec: FlightSpec<any>;
  readonly started: number;
  readonly hotUntil: number;
  readonly resolve: (value: unknown) => void;
  readonly reject: (e: unknown) => void;
  /** Requests still in flight. */
  open: number;
  /** The flight's promise has settled: only its memory is still held. */
  settled: boolean;
  /** Cancelling after a timeout or abort: the error to reject with once MPI confirms. */
  cancelling?: Error;
  /** Some request was cancelled (others may have matched a message first). */
  cancelled: boolean;
  /** The first failure of a request's completion hook. */
  failure?: unknown;
}

/** Completes non-blocking MPI calls by polling; one per process. */
export class Poller {
  #mpi: MpiSymbols;
  #spinMs: number;
  #hotMs: number;
  /**
   * The flights in start order. An array, not a Set: a Set of fresh objects makes V8 create each one's
   * identity hash through its runtime, which with the delete costs a few percent of a 64 KiB all-reduce.
   */
  #flights: Flight[] = [];
  #scheduled = false;
  /** The timer of a tick scheduled with setTimeout (cold, or only settled flights left). */
  #timer: ReturnType<typeof setTimeout> | undefined;
  #coldTicks = 0;
  #flag = new Int32Array(1);
  /**
   * Request slots to reuse: a small TypedArray costs about a microsecond to allocate in Deno (its
   * memory lives off the JS heap), as much as a whole small MPI call, so each is made once.
   */
  #free: Int32Array[] = [];
  /** The latest clock reading, for a first pass that need not read the clock. */
  #lastNow = 0;
  #status = new Int32Array(MPI_STATUS_SIZE / 4);
  #statusPtr: Deno.PointerObject;
  #onStuck: (error: Error) => void;

  /**
   * @param mpi The MPI symbols.
   * @param onStuck Called when a call that cannot be cancelled times out or is aborted: MPI may still
   *   use its buffers and its communicator is out of step, so the backend must stop.
   * @param options Spin and back-off.
   */
  constructor(mpi: MpiSymbols, onStuck: (error: Error) => void, options: PollerOptions = {}) {
    this.#mpi = mpi;
    this.#onStuck = onStuck;
    this.#spinMs = (options.spinUs ?? 1000) / 1000;
    this.#hotMs = options.hotMs ?? 50;
    this.#statusPtr = Deno.UnsafePointer.of(this.#status) as Deno.PointerObject;
  }

  /**
   * A request slot for an `MPI_I*` call, set to `MPI_REQUEST_NULL`. Pass it to {@linkcode track} in a
   * spec's `requests`, which gives it back once MPI has completed it, or give it back with
   * {@linkcode release} if the call was never started.
   */
  request(): Int32Array {
    const req = this.#free.pop() ?? new Int32Array(1);
    req[0] = MPI_REQUEST_NULL;
    return req;
  }

  /** Gives back slots of {@linkcode request} whose calls were never started (still `MPI_REQUEST_NULL`). */
  release(requests: readonly Int32Array[]): void {
    for (const req of requests) if (req[0] === MPI_REQUEST_NULL) this.#free.push(req);
  }

  /** Whether a call is still in flight (calls settled by a timeout, whose memory MPI holds, excluded). */
  get busy(): boolean {
    return this.#anyOpen();
  }

  /**
   * Tracks a started call until MPI completes it.
   *
   * @param spec The call's requests and what they hold.
   * @param now `performance.now()` when the call started, if the caller has it.
   * @returns Resolves when every request has completed, with what `spec.done` returns.
   * @throws {TimeoutError} After `timeoutMs`.
   * @throws {MpiError} If MPI reports an error.
   */
  track<T = void>(spec: FlightSpec<T>, now: number = performance.now()): Promise<T> {
    const { promise, resolve, reject } = Promise.withResolvers<T>();
    const started = now;
    this.#lastNow = started;
    const flight: Flight = {
      spec,
      started,
      hotUntil: started + this.#hotMs + spec.bytes * 1e-5,
      resolve: resolve as (value: unknown) => void,
      reject,
      open: spec.requests.length,
      settled: false,
      cancelled: false,
    };
    this.#flights.push(flight);
    if (spec.signal) {
      const signal = spec.signal;
      const onAbort = (): void => {
        this.#expire(
          flight,
          new DistError(`Aborted ${spec.what()}: ${String(signal.reason)}`, { code: "ABORTED" }),
        );
      };
      signal.addEventListener("abort", onAbort, { once: true });
      promise.finally(() => signal.removeEventListener("abort", onAbort)).catch(() => {});
    }
    // One pass now (it starts MPI's progress), then a tick as soon as the caller yields: as a microtask,
    // so that `await pg.allReduce(x)` costs no trip through the event loop.
    this.#pass(started);
    this.#schedule(true, true);
    return promise;
  }

  #schedule(hot: boolean, soon = false): void {
    if (this.#flights.length === 0) return;
    if (this.#scheduled) {
      // A tick is due; only one waiting on a timer is brought forward, for a new call.
      if (!hot || this.#timer === undefined) return;
      clearTimeout(this.#timer);
      this.#timer = undefined;
    }
    this.#scheduled = true;
    if (!this.#anyOpen()) {
      // Only memory MPI still holds after a timeout: keep polling, but do not keep the process alive.
      this.#timer = setTimeout(this.#tick, 1);
      this.#timer.unref();
    } else if (hot) {
      this.#coldTicks = 0;
      if (soon) queueMicrotask(this.#tick);
      else setImmediate(this.#tick);
    } else {
      // setTimeout 0 for the first few cold ticks, then 1 ms.
      this.#timer = setTimeout(this.#tick, this.#coldTicks++ < 4 ? 0 : 1);
    }
  }

  #anyOpen(): boolean {
    for (const f of this.#flights) if (!f.settled) return true;
    return false;
  }

  #tick = (): void => {
    this.#scheduled = false;
    this.#timer = undefined;
    // Most calls complete in this first pass: it skips reading the clock.
    this.#pass(this.#lastNow);
    if (this.#flights.length === 0) return;
    const start = performance.now();
    const spinning = this.#anyHot(start);
    let now = start;
    if (spinning && this.#flights.length === 1) now = this.#spinOne(this.#flights[0], start);
    if (this.#flights.length === 0) return;
    for (;;) {
      // Many passes per clock reading: MPI moves a large message a step per MPI_Test, so the rate of
      // calls is the rate of progress.
      for (let k = spinning ? SPIN_PASSES : 1; k > 0; k--) {
        this.#pass(now);
        if (this.#flights.length === 0) return;
      }
      now = performance.now();
      if (!spinning || now - start >= this.#spinMs) break;
    }
    this.#schedule(this.#anyHot(now));
  };

  #anyHot(now: number): boolean {
    for (const f of this.#flights) if (!f.settled && now < f.hotUntil) return true;
    return false;
  }

  /**
   * The common case, one call with one request in flight, in a loop of its own: `MPI_Test` on that
   * request alone, with nothing else between two tests, so that MPI advances a large message as fast as
   * a C loop would (the general pass costs a few hundred ns per test more, which shows at 512 KiB).
   *
   * @returns The clock's last reading (the flight is finished, or the spin budget or its deadline is spent).
   */
  #spinOne(f: Flight, start: number): number {
    if (f.settled || f.cancelling || f.open !== 1) return start;
    const requests = f.spec.requests;
    let index = 0;
    while (requests[index][0] === MPI_REQUEST_NULL) index++;
    const req = requests[index];
    const flag = this.#flag;
    const status = this.#statusPtr;
    const test = this.#mpi.MPI_Test;
    const deadline = Math.min(start + this.#spinMs, f.started + f.spec.timeoutMs);
    for (;;) {
      for (let k = SPIN_PASSES; k > 0; k--) {
        flag[0] = 0;
        const rc = test(req, flag, status);
        if (rc !== 0 || flag[0] !== 0) {
          this.#completed(f, index, rc);
          this.#finish(f);
          return start;
        }
      }
      const now = performance.now();
      if (now >= deadline) return now;
    }
  }

  /** Request `index` of `f` has completed (`rc` 0) or failed: MPI has freed it. */
  #completed(f: Flight, index: number, rc: number): void {
    f.spec.requests[index][0] = MPI_REQUEST_NULL;
    f.open--;
    // A failed request is freed too; the flight fails but its other requests stay held.
    if (rc !== 0) this.#fail(f, rc);
    else this.#requestDone(f, index);
  }

  /** One `MPI_Test` of every open request, then the deadlines. */
  #pass(now: number): void {
    const flights = this.#flights;
    // By index: a flight that finishes leaves the array (and only that one does).
    for (let k = 0; k < flights.length;) {
      const f = flights[k];
      const requests = f.spec.requests;
      for (let i = 0; i < requests.length && f.open > 0; i++) {
        const req = requests[i];
        if (req[0] === MPI_REQUEST_NULL) continue;
        this.#flag[0] = 0;
        const rc = this.#mpi.MPI_Test(req, this.#flag, this.#statusPtr);
        if (rc !== 0 || this.#flag[0] !== 0) this.#completed(f, i, rc);
      }
      if (f.open === 0) this.#finish(f);
      else if (!f.settled && !f.cancelling && now - f.started > f.spec.timeoutMs) {
        this.#expire(
          f,
          new TimeoutError(`Timed out after ${f.spec.timeoutMs} ms waiting for ${f.spec.what()}`),
        );
      }
      if (flights[k] === f) k++;
    }
  }

  #requestDone(f: Flight, index: number): void {
    if (f.cancelling) {
      const cancelled = new Int32Array(1);
      this.#mpi.MPI_Test_cancelled(this.#statusPtr, cancelled);
      // A receive that matched a message before the cancel got through completed normally.
      if (cancelled[0] !== 0) {
        f.cancelled = true;
        return;
      }
    }
    if (f.settled || f.failure !== undefined) return;
    try {
      f.spec.onRequestDone?.(index, this.#statusPtr);
    } catch (e) {
      f.failure = e;
    }
  }

  #finish(f: Flight): void {
    const flights = this.#flights;
    const at = flights.indexOf(f);
    if (at === flights.length - 1) flights.pop();
    else if (at >= 0) flights.splice(at, 1);
    // Every request is MPI_REQUEST_NULL now: MPI is done with them.
    this.release(f.spec.requests);
    if (f.settled) return;
    f.settled = true;
    if (f.cancelling && f.cancelled) this.#reject(f, f.cancelling);
    else if (f.failure !== undefined) this.#reject(f, f.failure);
    else {
      let value: unknown;
      try {
        value = f.spec.done?.();
      } catch (e) {
        // done's own failure: not mapped by failed (one of the two runs, once).
        f.reject(e);
        return;
      }
      f.resolve(value);
    }
  }

  #reject(f: Flight, error: unknown): void {
    let reason = error;
    try {
      reason = f.spec.failed ? f.spec.failed(error) : error;
    } catch (e) {
      reason = e;
    }
    f.reject(reason);
  }

  #fail(f: Flight, rc: number): void {
    if (f.settled || f.failure !== undefined) return;
    try {
      check(rc, "MPI_Test", f.spec.what());
    } catch (e) {
      f.failure = e;
    }
  }

  #expire(f: Flight, error: Error): void {
    if (f.settled || f.cancelling || f.open === 0) return;
    if (f.spec.cancellable) {
      f.cancelling = error;
      for (const req of f.spec.requests) {
        if (req[0] !== MPI_REQUEST_NULL) this.#mpi.MPI_Cancel(req);
      }
      this.#schedule(true);
      return;
    }
    f.settled = true;
    this.#reject(f, error);
    this.#onStuck(error);
  }
}
