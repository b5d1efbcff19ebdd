/**
 * What every backend's `alloc` and `release` share: the checks, and tensors in ordinary memory (the
 * backends without a pool of their own).
 *
 * @module
 */
import { checkDType, type DType, DTYPE_ARRAY, dtypeSize, type TypedArray } from "../core/dtype.ts";
import type { AllocOptions } from "./process_group.ts";

/**
 * Checks `alloc`'s arguments.
 *
 * @param count The element count asked for.
 * @param options The options.
 * @returns The dtype and the bytes.
 * @throws {RangeError} If `count` is not a whole number in 0..2^31.
 * @throws {TypeError} If the dtype is unknown.
 */
export function checkAlloc(count: number, options: AllocOptions = {}): { dtype: DType; bytes: number } {
  if (!Number.isInteger(count) || count < 0 || count > 2 ** 31) {
    throw new RangeError(`Cannot alloc: expected a whole number of elements in 0..2^31, found ${count}`);
  }
  const dtype = checkDType(options.dtype ?? "float32");
  return { dtype, bytes: count * dtypeSize(dtype) };
}

/**
 * A view of `dtype` over `bytes`.
 *
 * @param dtype The element type.
 * @param bytes The memory (its length a multiple of the element size).
 * @returns The tensor.
 */
export function tensorOver(dtype: DType, bytes: Uint8Array): TypedArray {
  return new DTYPE_ARRAY[dtype](
    bytes.buffer as ArrayBuffer,
    bytes.byteOffset,
    bytes.byteLength / dtypeSize(dtype),
  );
}

/** Tensors in ordinary memory that `alloc` made and `release` has not had back. */
const ordinary = new WeakSet<TypedArray>();

/**
 * `alloc` of a backend without a pool: ordinary memory.
 *
 * @param count Elements.
 * @param options The dtype.
 * @returns A zeroed tensor.
 */
export function allocOrdinary(count: number, options?: AllocOptions): TypedArray {
  const { dtype, bytes } = checkAlloc(count, options);
  const t = new DTYPE_ARRAY[dtype](new ArrayBuffer(bytes));
  ordinary.add(t);
  return t;
}

/**
 * `release` of a tensor of {@linkcode allocOrdinary}.
 *
 * @param tensor The tensor.
 * @returns Whether it was one (and is now released).
 */
export function releaseOrdinary(tensor: TypedArray): boolean {
  return ordinary.delete(tensor);
}
