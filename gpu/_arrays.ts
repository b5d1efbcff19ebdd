/**
 * TypedArrays by dtype, and the checks every copy between host and device memory shares.
 *
 * @module
 */
import { arrayKind, type DType, dtypeOf, type TypedArray } from "../core/dtype.ts";

/**
 * A new zeroed TypedArray for `length` elements of `dtype` (`Uint16Array` holds bfloat16 bits, `Uint8Array`
 * bools).
 *
 * @param dtype The dtype.
 * @param length The element count.
 * @returns The array.
 */
export function newArray(dtype: DType, length: number): TypedArray {
  switch (dtype) {
    case "int8":
      return new Int8Array(length);
    case "uint8":
      return new Uint8Array(length);
    case "int32":
      return new Int32Array(length);
    case "uint32":
      return new Uint32Array(length);
    case "int64":
      return new BigInt64Array(length);
    case "uint64":
      return new BigUint64Array(length);
    case "float16":
      return new Float16Array(length);
    case "bfloat16":
      return new Uint16Array(length);
    case "float32":
      return new Float32Array(length);
    case "float64":
      return new Float64Array(length);
    case "bool":
      return new Uint8Array(length);
  }
  throw new TypeError(`Unknown dtype: ${String(dtype)}`);
}

/**
 * A TypedArray of `dtype` over existing bytes (no copy).
 *
 * @param dtype The dtype.
 * @param buffer The bytes.
 * @param byteOffset Where the elements start (a multiple of the element size).
 * @param length The element count.
 * @returns The view.
 */
export function arrayView(dtype: DType, buffer: ArrayBuffer, byteOffset: number, length: number): TypedArray {
  switch (dtype) {
    case "int8":
      return new Int8Array(buffer, byteOffset, length);
    case "uint8":
      return new Uint8Array(buffer, byteOffset, length);
    case "int32":
      return new Int32Array(buffer, byteOffset, length);
    case "uint32":
      return new Uint32Array(buffer, byteOffset, length);
    case "int64":
      return new BigInt64Array(buffer, byteOffset, length);
    case "uint64":
      return new BigUint64Array(buffer, byteOffset, length);
    case "float16":
      return new Float16Array(buffer, byteOffset, length);
    case "bfloat16":
      return new Uint16Array(buffer, byteOffset, length);
    case "float32":
      return new Float32Array(buffer, byteOffset, length);
    case "float64":
      return new Float64Array(buffer, byteOffset, length);
    case "bool":
      return new Uint8Array(buffer, byteOffset, length);
  }
  throw new TypeError(`Unknown dtype: ${String(dtype)}`);
}

/**
 * Checks that a host array can be copied to or from `length` elements of `dtype`.
 *
 * @param what The operation, for the message.
 * @param array The host array.
 * @param dtype The device side's dtype.
 * @param length The device side's length.
 * @throws {TypeError} If the array holds another dtype.
 * @throws {RangeError} If the lengths differ.
 */
export function checkHostArray(what: string, array: TypedArray, dtype: DType, length: number): void {
  if (!ArrayBuffer.isView(array)) {
    throw new TypeError(`Cannot ${what}: expected a TypedArray, found ${arrayKind(array)}`);
  }
  // A Uint16Array carries float16 or bfloat16 bits, a Uint8Array uint8 or bools: the device side says which.
  const hint = array instanceof Uint16Array || (array instanceof Uint8Array && dtype === "bool")
    ? dtype
    : undefined;
  let found: DType;
  try {
    found = dtypeOf(array, hint);
  } catch (e) {
    throw new TypeError(`Cannot ${what}: ${(e as Error).message}`);
  }
  if (found !== dtype) {
    throw new TypeError(
      `Cannot ${what}: the device buffer holds ${dtype}, the array ${arrayKind(array)} holds ${found}`,
    );
  }
  if (array.length !== length) {
    throw new RangeError(`Cannot ${what}: expected ${length} elements, found ${array.length}`);
  }
}
