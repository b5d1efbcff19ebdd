/**
 * CUDA streams and events as disposable objects. A {@linkcode Stream} queues work in order on one device;
 * an {@linkcode Event} marks a point in a stream, which the host can poll ({@linkcode Event.done}, never
 * blocking the event loop), another stream can wait on ({@linkcode Stream.waitEvent}, on the device), and
 * two of which time the work between them.
 *
 * Every call is synchronous on the calling thread: CUDA's current device is per thread, so one rank's
 * streams and events belong to the thread that made them.
 *
 * @module
 */
import { EventFlags, SpecialStream, StreamFlags } from "../ffi/cudart/constants.ts";
import {
  createEvent,
  createStream,
  destroyEvent,
  destroyStream,
  eventElapsedMs,
  getDevice,
  queryEvent,
  queryStream,
  recordEvent,
  streamWaitEvent,
  synchronizeEvent,
  synchronizeStream,
} from "../ffi/cudart/cudart.ts";
import { type PollOptions, pollUntil } from "./poll.ts";
import { withDevice } from "./device.ts";

/**
 * Options of {@linkcode Stream.create}.
 *
 * @example A stream of GPU 0 that does not wait for the legacy default stream
 * ```ts
 * import { cudaStatus, Stream, type StreamOptions } from "@dcomm/dcomm/gpu";
 * import assert from "node:assert/strict";
 * const options: StreamOptions = { device: 0, nonBlocking: true };
 * if (cudaStatus().available) {
 *   using stream = Stream.create(options);
 *   assert.equal(stream.device, 0);
 *   assert.ok(stream.query()); // nothing queued yet
 * }
 * ```
 */
export interface StreamOptions {
  /** The device. @default the calling thread's current device */
  device?: number;
  /** Whether the stream runs concurrently with the legacy default stream instead of synchronizing with it. @default false */
  nonBlocking?: boolean;
}

function disposedError(what: string): TypeError {
  return new TypeError(`Cannot use a disposed ${what}`);
}

/**
 * A CUDA stream.
 *
 * @example Work queued in order, awaited without blocking the event loop
 * ```ts
 * import { cudaStatus, DeviceBuffer, Stream } from "@dcomm/dcomm/gpu";
 * import { DistError } from "@dcomm/dcomm";
 * import assert from "node:assert/strict";
 * if (cudaStatus().available) {
 *   using stream = Stream.create();
 *   using buf = DeviceBuffer.from(new Int32Array([7, 7]));
 *   buf.zero(0, { stream }); // queued
 *   await stream.done({ timeoutMs: 10_000 });
 *   assert.deepEqual(buf.toArray(), new Int32Array(2));
 * } else {
 *   assert.throws(() => Stream.create(), DistError); // CudaError or LibraryNotFoundError
 * }
 * ```
 */
export class Stream implements Disposable {
  #pointer: Deno.PointerValue;
  #device: number;
  #owned: boolean;
  #disposed = false;

  private constructor(pointer: Deno.PointerValue, device: number, owned: boolean) {
    this.#pointer = pointer;
    this.#device = device;
    this.#owned = owned;
  }

  /**
   * Creates a stream.
   *
   * @param options The device, and whether it is non-blocking.
   * @returns The stream; dispose it when done.
   * @throws {CudaError} If the stream cannot be created.
   *
   * @example
   * ```ts
   * import { cudaStatus, Stream } from "@dcomm/dcomm/gpu";
   * import { DistError } from "@dcomm/dcomm";
   * import assert from "node:assert/strict";
   * if (cudaStatus().available) {
   *   using stream = Stream.create({ nonBlocking: true });
   *   await stream.done();
   * } else {
   *   assert.throws(() => Stream.create({ nonBlocking: true }), DistError);
   * }
   * ```
   */
  static create(options: StreamOptions = {}): Stream {
    const device = options.device ?? getDevice();
    const flags = options.nonBlocking ? StreamFlags.NonBlocking : StreamFlags.Default;
    const pointer = withDevice(device, () => createStream(flags));
    return new Stream(pointer, device, true);
  }

  /**
   * Wraps a `cudaStream_t` made elsewhere (another library's stream); disposing it does not destroy it.
   *
   * @param pointer The stream (`null` is the legacy default stream).
   * @param device Its device. @default the current device
   * @returns The wrapper.
   */
  static wrap(pointer: Deno.PointerValue, device?: number): Stream {
    return new Stream(pointer, device ?? getDevice(), false);
  }

  /**
   * The legacy default stream (`cudaStreamLegacy`) of the current device.
   *
   * @returns A wrapper that is never destroyed.
   */
  static legacy(): Stream {
    return Stream.wrap(Deno.UnsafePointer.create(SpecialStream.Legacy));
  }

  /** The `cudaStream_t`. */
  get pointer(): Deno.PointerValue {
    if (this.#disposed) throw disposedError("Stream");
    return this.#pointer;
  }

  /** The device the stream belongs to. */
  get device(): number {
    return this.#device;
  }

  /** Whether {@linkcode Stream[Symbol.dispose]} has run. */
  get disposed(): boolean {
    return this.#disposed;
  }

  /**
   * Blocks the calling thread until the stream is idle. Prefer {@linkcode Stream.done} in async code.
   *
   * @throws {CudaError} If the stream's work failed.
   */
  synchronize(): void {
    synchronizeStream(this.pointer);
  }

  /**
   * Whether all queued work is done; never blocks.
   *
   * @returns `true` when idle.
   * @throws {CudaError} If the stream's work failed.
   */
  query(): boolean {
    return queryStream(this.pointer);
  }

  /**
   * Resolves once the stream is idle, polling without blocking the event loop.
   *
   * @param options Timeout and abort signal.
   * @returns Resolves when idle.
   * @throws {TimeoutError} If the timeout passes first.
   * @throws {CudaError} If the stream's work failed.
   */
  done(options: PollOptions = {}): Promise<void> {
    const pointer = this.pointer;
    return pollUntil(() => queryStream(pointer), { what: "a CUDA stream", ...options });
  }

  /**
   * Makes this stream wait, on the device, for the work recorded in `event`.
   *
   * @param event The event.
   * @throws {CudaError} If the call fails.
   */
  waitEvent(event: Event): void {
    streamWaitEvent(this.pointer, event.pointer);
  }

  /** Destroys the stream (its queued work still runs); a wrapped stream is left alone. */
  [Symbol.dispose](): void {
    if (this.#disposed) return;
    this.#disposed = true;
    if (this.#owned) destroyStream(this.#pointer);
  }
}

/**
 * Options of {@linkcode Event.create}.
 *
 * @example An event without timing, for one stream to wait on another
 * ```ts
 * import { cudaStatus, Event, type EventOptions, Stream } from "@dcomm/dcomm/gpu";
 * import assert from "node:assert/strict";
 * const options: EventOptions = { timing: false }; // cheaper to record and to wait on
 * if (cudaStatus().available) {
 *   using copies = Stream.create();
 *   using compute = Stream.create();
 *   using copied = Event.create(options);
 *   copied.record(copies);
 *   compute.waitEvent(copied); // work queued on compute from now on runs after the copies
 *   await compute.done();
 *   assert.ok(copied.query());
 * }
 * ```
 */
export interface EventOptions {
  /** The device. @default the calling thread's current device */
  device?: number;
  /** Whether the event can time work (`cudaEventElapsedTime`); events without timing are cheaper. @default true */
  timing?: boolean;
}

/**
 * A CUDA event.
 *
 * @example Timing work on the GPU
 * ```ts
 * import { cudaStatus, DeviceBuffer, Event, Stream } from "@dcomm/dcomm/gpu";
 * import { DistError } from "@dcomm/dcomm";
 * import assert from "node:assert/strict";
 * if (cudaStatus().available) {
 *   using stream = Stream.create();
 *   using buf = DeviceBuffer.alloc(1 << 20);
 *   using start = Event.create();
 *   using end = Event.create();
 *   start.record(stream);
 *   buf.zero(0, { stream });
 *   end.record(stream);
 *   await end.done();
 *   assert.ok(end.elapsedSince(start) >= 0); // milliseconds of GPU time
 * } else {
 *   assert.throws(() => Event.create(), DistError); // CudaError or LibraryNotFoundError
 * }
 * ```
 */
export class Event implements Disposable {
  #pointer: Deno.PointerValue;
  #device: number;
  #disposed = false;

  private constructor(pointer: Deno.PointerValue, device: number) {
    this.#pointer = pointer;
    this.#device = device;
  }

  /**
   * Creates an event.
   *
   * @param options The device, and whether it records timing.
   * @returns The event; dispose it when done.
   * @throws {CudaError} If it cannot be created.
   */
  static create(options: EventOptions = {}): Event {
    const device = options.device ?? getDevice();
    const flags = options.timing === false ? EventFlags.DisableTiming : EventFlags.Default;
    return new Event(withDevice(device, () => createEvent(flags)), device);
  }

  /** The `cudaEvent_t`. */
  get pointer(): Deno.PointerValue {
    if (this.#disposed) throw disposedError("Event");
    return this.#pointer;
  }

  /** The device the event belongs to. */
  get device(): number {
    return this.#device;
  }

  /**
   * Records the event at the current end of `stream`.
   *
   * @param stream The stream.
   * @throws {CudaError} If the call fails.
   */
  record(stream: Stream): void {
    recordEvent(this.pointer, stream.pointer);
  }

  /**
   * Whether the recorded work is done; never blocks. An event never recorded counts as done.
   *
   * @returns `true` when done.
   * @throws {CudaError} If the recorded work failed.
   */
  query(): boolean {
    return queryEvent(this.pointer);
  }

  /**
   * Blocks the calling thread until the recorded work is done. Prefer {@linkcode Event.done}.
   *
   * @throws {CudaError} If the recorded work failed.
   */
  synchronize(): void {
    synchronizeEvent(this.pointer);
  }

  /**
   * Resolves once the recorded work is done, polling without blocking the event loop.
   *
   * @param options Timeout and abort signal.
   * @returns Resolves when done.
   * @throws {TimeoutError} If the timeout passes first.
   * @throws {CudaError} If the recorded work failed.
   */
  done(options: PollOptions = {}): Promise<void> {
    const pointer = this.pointer;
    return pollUntil(() => queryEvent(pointer), { what: "a CUDA event", ...options });
  }

  /**
   * Milliseconds of GPU time from `start` to this event; both must be done and have timing.
   *
   * @param start The earlier event.
   * @returns The time.
   * @throws {CudaError} If either is pending or lacks timing.
   */
  elapsedSince(start: Event): number {
    return eventElapsedMs(start.pointer, this.pointer);
  }

  /** Destroys the event. */
  [Symbol.dispose](): void {
    if (this.#disposed) return;
    this.#disposed = true;
    destroyEvent(this.#pointer);
  }
}
