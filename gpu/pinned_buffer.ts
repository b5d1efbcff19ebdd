/**
 * Page-locked ("pinned") host memory: {@linkcode PinnedBuffer} allocates it with `cudaMallocHost`, and
 * {@linkcode HostRegistration} page-locks an existing TypedArray with `cudaHostRegister`. Copies between
 * pinned memory and the GPU run asynchronously on a stream (pageable memory forces CUDA to stage or wait),
 * which is what lets a host tensor's copies overlap with other work.
 *
 * @module
 */
import type { DType, TypedArray } from "../core/dtype.ts";
import { dtypeSize } from "../core/dtype.ts";
import { freeHost, hostRegister, hostUnregister, mallocHost } from "../ffi/cudart/cudart.ts";
import { arrayView } from "./_arrays.ts";

/**
 * Pinned host memory from `cudaMallocHost`.
 *
 * @example A host tensor whose copies to the GPU run asynchronously
 * ```ts
 * import { cudaStatus, DeviceBuffer, PinnedBuffer, Stream } from "@dcomm/dcomm/gpu";
 * import { DistError } from "@dcomm/dcomm";
 * import assert from "node:assert/strict";
 * if (cudaStatus().available) {
 *   using pinned = PinnedBuffer.alloc(4 * 1024);
 *   const host = pinned.array("float32") as Float32Array; // 1024 elements over the pinned bytes
 *   host.fill(0.5);
 *   using stream = Stream.create();
 *   using grad = DeviceBuffer.alloc(1024);
 *   grad.copyFrom(host, { stream }); // returns at once: the copy overlaps with what follows
 *   await stream.done();
 *   assert.deepEqual(grad.toArray(), new Float32Array(1024).fill(0.5));
 * } else {
 *   assert.throws(() => PinnedBuffer.alloc(4 * 1024), DistError); // CudaError or LibraryNotFoundError
 * }
 * ```
 */
export class PinnedBuffer implements Disposable {
  #pointer: Deno.PointerValue;
  #byteLength: number;
  #buffer: ArrayBuffer;
  #disposed = false;

  private constructor(pointer: Deno.PointerValue, byteLength: number) {
    this.#pointer = pointer;
    this.#byteLength = byteLength;
    this.#buffer = pointer === null
      ? new ArrayBuffer(0)
      : Deno.UnsafePointerView.getArrayBuffer(pointer, byteLength);
  }

  /**
   * Allocates pinned memory.
   *
   * @param byteLength How many bytes.
   * @returns The buffer; dispose it when done (its views must not be touched afterwards).
   * @throws {RangeError} If `byteLength` is not a non-negative safe integer.
   * @throws {CudaError} If the allocation fails.
   */
  static alloc(byteLength: number): PinnedBuffer {
    if (!Number.isSafeInteger(byteLength) || byteLength < 0) {
      throw new RangeError(
        `Cannot allocate pinned memory: expected a non-negative integer size, found ${byteLength}`,
      );
    }
    return new PinnedBuffer(mallocHost(byteLength), byteLength);
  }

  /** The host address. */
  get pointer(): Deno.PointerValue {
    if (this.#disposed) throw new TypeError("Cannot use a disposed PinnedBuffer");
    return this.#pointer;
  }

  /** Its size in bytes. */
  get byteLength(): number {
    return this.#byteLength;
  }

  /** Whether it has been freed. */
  get disposed(): boolean {
    return this.#disposed;
  }

  /**
   * A TypedArray over the pinned bytes (no copy). It must not be used after the buffer is disposed: the
   * memory is gone and an access crashes the process.
   *
   * @param dtype The element type. @default "uint8"
   * @param length The element count. @default as many as fit
   * @returns The view.
   * @throws {RangeError} If `length` elements do not fit.
   */
  array(dtype: DType = "uint8", length?: number): TypedArray {
    if (this.#disposed) throw new TypeError("Cannot use a disposed PinnedBuffer");
    const n = length ?? Math.floor(this.#byteLength / dtypeSize(dtype));
    if (n * dtypeSize(dtype) > this.#byteLength) {
      throw new RangeError(`Cannot view ${n} ${dtype} in ${this.#byteLength} pinned bytes`);
    }
    return arrayView(dtype, this.#buffer, 0, n);
  }

  /** Frees the memory. Disposing twice is a no-op. */
  [Symbol.dispose](): void {
    if (this.#disposed) return;
    this.#disposed = true;
    freeHost(this.#pointer);
  }
}

/**
 * An existing TypedArray page-locked with `cudaHostRegister` until disposed.
 *
 * @example Page-locking a gradient for the time of a copy
 * ```ts
 * import { cudaStatus, DeviceBuffer, HostRegistration, Stream } from "@dcomm/dcomm/gpu";
 * import { DistError } from "@dcomm/dcomm";
 * import assert from "node:assert/strict";
 * const grad = new Float32Array(1 << 16).fill(2);
 * if (cudaStatus().available) {
 *   using registration = HostRegistration.register(grad);
 *   using stream = Stream.create();
 *   using buf = DeviceBuffer.alloc(grad.length);
 *   buf.copyFrom(registration.array, { stream });
 *   await stream.done();
 *   assert.deepEqual(buf.toArray(), grad);
 * } else {
 *   assert.throws(() => HostRegistration.register(grad), DistError); // CudaError or LibraryNotFoundError
 * }
 * ```
 */
export class HostRegistration implements Disposable {
  #array: TypedArray;
  #pointer: Deno.PointerValue;
  #registered: boolean;

  private constructor(array: TypedArray, pointer: Deno.PointerValue, registered: boolean) {
    this.#array = array;
    this.#pointer = pointer;
    this.#registered = registered;
  }

  /**
   * Page-locks the memory of `array`.
   *
   * @param array The array; keep it alive as long as the registration.
   * @param flags `HostRegisterFlags`. @default 0
   * @returns The registration; dispose it to unregister.
   * @throws {CudaError} If registration fails (712 if the memory is already registered).
   */
  static register(array: TypedArray, flags = 0): HostRegistration {
    const pointer = Deno.UnsafePointer.of(array);
    if (array.byteLength === 0) return new HostRegistration(array, pointer, false);
    hostRegister(pointer, array.byteLength, flags);
    return new HostRegistration(array, pointer, true);
  }

  /** The registered array. */
  get array(): TypedArray {
    return this.#array;
  }

  /** Unregisters the memory. Disposing twice is a no-op. */
  [Symbol.dispose](): void {
    if (!this.#registered) return;
    this.#registered = false;
    hostUnregister(this.#pointer);
  }
}
