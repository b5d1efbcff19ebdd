/**
 * {@linkcode DeviceBuffer}: `length` elements of a dtype in GPU memory, owned through `cudaMalloc` and
 * freed by `Symbol.dispose` (so `using` works). It is what the `nccl` backend reduces in place, and it
 * satisfies the `DeviceTensor` shape of `backend/process_group.ts` (dtype, length, byteLength, device,
 * pointer), so it can be passed wherever a tensor is expected.
 *
 * Copies to and from TypedArrays are synchronous, or queued on a {@linkcode Stream}. CUDA's rules for
 * queued copies apply: a copy from pageable memory (an ordinary TypedArray) returns once the bytes are
 * staged, so the array may be reused at once; a copy INTO pageable memory returns only when it is done.
 * For copies that really overlap, use a TypedArray over pinned memory (`PinnedBuffer`).
 *
 * Views ({@linkcode DeviceBuffer.view}) are sub-ranges that own nothing; they stop working once their
 * parent is disposed.
 *
 * @example Round trip (without a usable GPU, the first CUDA call says why)
 * ```ts
 * import { cudaStatus, DeviceBuffer } from "@dcomm/dcomm/gpu";
 * import { DistError } from "@dcomm/dcomm";
 * import assert from "node:assert/strict";
 * if (cudaStatus().available) {
 *   using buf = DeviceBuffer.from(new Float32Array([1, 2, 3]));
 *   assert.deepEqual(buf.toArray(), new Float32Array([1, 2, 3]));
 * } else {
 *   // a CudaError (no driver, no GPU), or a LibraryNotFoundError (no CUDA runtime)
 *   assert.throws(() => DeviceBuffer.from(new Float32Array([1, 2, 3])), DistError);
 * }
 * ```
 *
 * @module
 */
import { arrayKind, type DType, dtypeOf, dtypeSize, type TypedArray } from "../core/dtype.ts";
import { MemcpyKind } from "../ffi/cudart/constants.ts";
import {
  freeDevice,
  getDevice,
  mallocDevice,
  memcpy,
  memcpyAsync,
  memset,
  memsetAsync,
} from "../ffi/cudart/cudart.ts";
import { checkHostArray, newArray } from "./_arrays.ts";
import { withDevice } from "./device.ts";
import type { Stream } from "./stream.ts";

/**
 * Options of {@linkcode DeviceBuffer.alloc}.
 *
 * @example 1024 zeroed float64 on the current device
 * ```ts
 * import { cudaStatus, DeviceBuffer, type DeviceBufferOptions } from "@dcomm/dcomm/gpu";
 * import assert from "node:assert/strict";
 * const options: DeviceBufferOptions = { dtype: "float64" };
 * if (cudaStatus().available) {
 *   using buf = DeviceBuffer.alloc(1024, options);
 *   buf.zero();
 *   assert.equal(buf.byteLength, 8192);
 *   assert.deepEqual(buf.toArray(), new Float64Array(1024));
 * }
 * assert.throws(() => DeviceBuffer.alloc(-1, options), RangeError); // checked before CUDA is called
 * ```
 */
export interface DeviceBufferOptions {
  /** The element type. @default "float32" */
  dtype?: DType;
  /** The device. @default the calling thread's current device */
  device?: number;
}

/**
 * Options of {@linkcode DeviceBuffer.from}.
 *
 * @example bfloat16 held as bits, copied on a stream
 * ```ts
 * import { cudaStatus, DeviceBuffer, type DeviceBufferFromOptions, Stream } from "@dcomm/dcomm/gpu";
 * import assert from "node:assert/strict";
 * const bits = new Uint16Array([0x3f80, 0x4000]); // 1 and 2 in bfloat16
 * if (cudaStatus().available) {
 *   using stream = Stream.create();
 *   const options: DeviceBufferFromOptions = { dtype: "bfloat16", stream };
 *   using buf = DeviceBuffer.from(bits, options);
 *   await stream.done();
 *   assert.equal(buf.dtype, "bfloat16");
 *   assert.deepEqual(buf.toArray(), bits);
 * }
 * // A Uint16Array is float16 or bfloat16: without a dtype it is refused, before CUDA is called.
 * assert.throws(() => DeviceBuffer.from(bits), TypeError);
 * ```
 */
export interface DeviceBufferFromOptions {
  /** The element type; needed for a `Uint16Array` (float16 or bfloat16). @default inferred from the array */
  dtype?: DType;
  /** The device. @default the calling thread's current device */
  device?: number;
  /** Queue the copy on this stream instead of waiting for it. @default synchronous */
  stream?: Stream;
}

/**
 * Options of copies.
 *
 * @example A copy queued on a stream, then waited for without blocking the event loop
 * ```ts
 * import { type CopyOptions, cudaStatus, DeviceBuffer, Stream } from "@dcomm/dcomm/gpu";
 * import assert from "node:assert/strict";
 * if (cudaStatus().available) {
 *   using stream = Stream.create();
 *   using buf = DeviceBuffer.alloc(3);
 *   const options: CopyOptions = { stream };
 *   buf.copyFrom(new Float32Array([1, 2, 3]), options); // the array may be reused at once
 *   await stream.done();
 *   assert.deepEqual(buf.toArray(), new Float32Array([1, 2, 3]));
 * }
 * ```
 */
export interface CopyOptions {
  /** Queue the copy on this stream instead of waiting for it. @default synchronous */
  stream?: Stream;
}

interface Owner {
  disposed: boolean;
}

/**
 * `length` elements of a dtype in GPU memory.
 *
 * @example A view, a zeroed range and a copy back
 * ```ts
 * import { cudaStatus, DeviceBuffer } from "@dcomm/dcomm/gpu";
 * import { DistError } from "@dcomm/dcomm";
 * import assert from "node:assert/strict";
 * if (cudaStatus().available) {
 *   using buf = DeviceBuffer.from(new Float32Array([1, 2, 3, 4]));
 *   using tail = buf.view(2); // elements 2 and 3, owning nothing
 *   tail.zero();
 *   const back = new Float32Array(4);
 *   buf.copyTo(back);
 *   assert.deepEqual(back, new Float32Array([1, 2, 0, 0]));
 *   assert.equal(String(tail), "DeviceBuffer(2 float32 on device 0, view)");
 * } else {
 *   assert.throws(() => DeviceBuffer.alloc(4), DistError); // CudaError or LibraryNotFoundError
 * }
 * ```
 */
export class DeviceBuffer implements Disposable {
  #base: Deno.PointerValue;
  #dtype: DType;
  #length: number;
  #device: number;
  #owner: Owner;
  #isView: boolean;

  private constructor(
    base: Deno.PointerValue,
    dtype: DType,
    length: number,
    device: number,
    owner: Owner,
    isView: boolean,
  ) {
    this.#base = base;
    this.#dtype = dtype;
    this.#length = length;
    this.#device = device;
    this.#owner = owner;
    this.#isView = isView;
  }

  /**
   * Allocates `length` elements (contents undefined; see {@linkcode DeviceBuffer.zero}).
   *
   * @param length The element count.
   * @param options The dtype and device.
   * @returns The buffer; dispose it when done.
   * @throws {RangeError} If `length` is not a non-negative safe integer.
   * @throws {CudaError} If the allocation fails (`cudaErrorMemoryAllocation`, or no GPU).
   */
  static alloc(length: number, options: DeviceBufferOptions = {}): DeviceBuffer {
    if (!Number.isSafeInteger(length) || length < 0) {
      throw new RangeError(
        `Cannot allocate a DeviceBuffer: expected a non-negative integer length, found ${length}`,
      );
    }
    const dtype = options.dtype ?? "float32";
    const bytes = length * dtypeSize(dtype);
    const device = options.device ?? getDevice();
    const base = withDevice(device, () => mallocDevice(bytes));
    return new DeviceBuffer(base, dtype, length, device, { disposed: false }, false);
  }

  /**
   * Allocates a buffer and copies `array` into it.
   *
   * @param array The host data.
   * @param options The dtype (for a `Uint16Array`), device and stream.
   * @returns The buffer; dispose it when done.
   * @throws {TypeError} If the array's dtype cannot be inferred.
   * @throws {CudaError} If allocation or copy fails.
   */
  static from(array: TypedArray, options: DeviceBufferFromOptions = {}): DeviceBuffer {
    let dtype: DType;
    try {
      dtype = dtypeOf(array, options.dtype);
    } catch (e) {
      throw new TypeError(`Cannot copy a ${arrayKind(array)} into a DeviceBuffer: ${(e as Error).message}`);
    }
    const buffer = DeviceBuffer.alloc(array.length, { dtype, device: options.device });
    try {
      buffer.copyFrom(array, { stream: options.stream });
    } catch (e) {
      buffer[Symbol.dispose]();
      throw e;
    }
    return buffer;
  }

  /** The element type. */
  get dtype(): DType {
    return this.#dtype;
  }

  /** The number of elements. */
  get length(): number {
    return this.#length;
  }

  /** The size in bytes. */
  get byteLength(): number {
    return this.#length * dtypeSize(this.#dtype);
  }

  /** The device the memory is on. */
  get device(): number {
    return this.#device;
  }

  /** Whether this is a view into another buffer (it owns no memory). */
  get isView(): boolean {
    return this.#isView;
  }

  /** Whether the memory has been freed (for a view: whether its parent was disposed). */
  get disposed(): boolean {
    return this.#owner.disposed;
  }

  /**
   * The device address of the first element (`null` for an empty buffer).
   *
   * @throws {TypeError} If the memory has been freed.
   */
  get pointer(): Deno.PointerValue {
    if (this.#owner.disposed) {
      throw new TypeError(
        `Cannot use a disposed DeviceBuffer (${this.#length} ${this.#dtype} on device ${this.#device}` +
          `${this.#isView ? ", a view whose parent was disposed" : ""})`,
      );
    }
    return this.#base;
  }

  /**
   * A sub-range that shares this buffer's memory and owns none of it.
   *
   * @param offset The first element.
   * @param length The element count. @default to the end
   * @returns The view; disposing it does nothing, disposing this buffer invalidates it.
   * @throws {RangeError} If the range does not fit.
   */
  view(offset: number, length: number = this.#length - offset): DeviceBuffer {
    if (
      !Number.isSafeInteger(offset) || !Number.isSafeInteger(length) || offset < 0 || length < 0 ||
      offset + length > this.#length
    ) {
      throw new RangeError(
        `Cannot view elements ${offset}..${offset + length} of a DeviceBuffer of ${this.#length} elements`,
      );
    }
    const base = this.pointer;
    const pointer = length === 0 || base === null
      ? null
      : Deno.UnsafePointer.offset(base, offset * dtypeSize(this.#dtype));
    return new DeviceBuffer(pointer, this.#dtype, length, this.#device, this.#owner, true);
  }

  /**
   * Copies from a host array (same dtype and length) or another device buffer (same dtype and length).
   *
   * @param source The data.
   * @param options A stream to queue the copy on. @default synchronous
   * @throws {TypeError} If the dtypes differ.
   * @throws {RangeError} If the lengths differ.
   * @throws {CudaError} If the copy fails.
   */
  copyFrom(source: TypedArray | DeviceBuffer, options: CopyOptions = {}): void {
    if (source instanceof DeviceBuffer) {
      this.#checkPeer("copy from a DeviceBuffer", source);
      this.#copy(this.pointer, source.pointer, MemcpyKind.Default, options);
      return;
    }
    checkHostArray("copy into a DeviceBuffer", source, this.#dtype, this.#length);
    this.#copy(this.pointer, Deno.UnsafePointer.of(source), MemcpyKind.HostToDevice, options);
  }

  /**
   * Copies into a host array (same dtype and length) or another device buffer.
   *
   * @param target Where the data goes.
   * @param options A stream to queue the copy on. @default synchronous
   * @throws {TypeError} If the dtypes differ.
   * @throws {RangeError} If the lengths differ.
   * @throws {CudaError} If the copy fails.
   */
  copyTo(target: TypedArray | DeviceBuffer, options: CopyOptions = {}): void {
    if (target instanceof DeviceBuffer) {
      target.copyFrom(this, options);
      return;
    }
    checkHostArray("copy out of a DeviceBuffer", target, this.#dtype, this.#length);
    this.#copy(Deno.UnsafePointer.of(target), this.pointer, MemcpyKind.DeviceToHost, options);
  }

  /**
   * Copies the contents into a new TypedArray (synchronously): `Float16Array` for float16, `Uint16Array`
   * for bfloat16, and the natural array for the other dtypes.
   *
   * @returns The array.
   * @throws {CudaError} If the copy fails.
   */
  toArray(): TypedArray {
    const out = newArray(this.#dtype, this.#length);
    this.copyTo(out);
    return out;
  }

  /**
   * Sets every byte to `value` (0 gives zeros of every dtype).
   *
   * @param value The byte value. @default 0
   * @param options A stream to queue it on. @default synchronous
   * @throws {CudaError} If the call fails.
   */
  zero(value = 0, options: CopyOptions = {}): void {
    const pointer = this.pointer;
    withDevice(this.#device, () => {
      if (options.stream) memsetAsync(pointer, value, this.byteLength, options.stream.pointer);
      else memset(pointer, value, this.byteLength);
    });
  }

  /** Frees the memory; a view does nothing. Disposing twice is a no-op. */
  [Symbol.dispose](): void {
    if (this.#isView || this.#owner.disposed) return;
    this.#owner.disposed = true;
    withDevice(this.#device, () => freeDevice(this.#base));
  }

  /** A short description, e.g. `DeviceBuffer(1024 float32 on device 0)`. */
  toString(): string {
    return `DeviceBuffer(${this.#length} ${this.#dtype} on device ${this.#device}${
      this.#isView ? ", view" : ""
    }${this.#owner.disposed ? ", disposed" : ""})`;
  }

  #checkPeer(what: string, other: DeviceBuffer): void {
    if (other.dtype !== this.#dtype) {
      throw new TypeError(`Cannot ${what}: this buffer holds ${this.#dtype}, the other ${other.dtype}`);
    }
    if (other.length !== this.#length) {
      throw new RangeError(`Cannot ${what}: expected ${this.#length} elements, found ${other.length}`);
    }
  }

  #copy(dst: Deno.PointerValue, src: Deno.PointerValue, kind: number, options: CopyOptions): void {
    const bytes = this.byteLength;
    if (bytes === 0) return;
    withDevice(this.#device, () => {
      if (options.stream) memcpyAsync(dst, src, bytes, kind, options.stream.pointer);
      else memcpy(dst, src, bytes, kind);
    });
  }
}
