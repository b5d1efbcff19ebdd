/**
 * Element types and reduction operators shared by every layer, and the rules that tie a TypedArray to a
 * dtype. The names mirror NCCL's `ncclDataType_t` and `ncclRedOp_t`.
 *
 * @module
 */

/**
 * The element types dcomm moves and reduces; they mirror NCCL's `ncclDataType_t`.
 *
 * @example Naming a dtype
 * ```ts
 * import { type DType, dtypeOf, dtypeSize } from "@dcomm/dcomm";
 * import assert from "node:assert/strict";
 * const dtype: DType = "bfloat16";
 * assert.equal(dtypeSize(dtype), 2);
 * // bfloat16 travels as its Uint16Array bits, so the dtype is spelled out
 * assert.equal(dtypeOf(new Uint16Array(8), dtype), "bfloat16");
 * ```
 */
export type DType =
  | "int8"
  | "uint8"
  | "int32"
  | "uint32"
  | "int64"
  | "uint64"
  | "float16"
  | "bfloat16"
  | "float32"
  | "float64";

/**
 * Every {@linkcode DType}, in dcomm's own order: an index here is the dtype's code in the kernels and in call
 * descriptors (the nccl backend maps to NCCL's enum itself, `backend/nccl/_mapping.ts`).
 *
 * @example Listing the dtypes
 * ```ts
 * import { DTYPES, dtypeSize } from "@dcomm/dcomm";
 * import assert from "node:assert/strict";
 * assert.equal(DTYPES.length, 10);
 * assert.ok(DTYPES.includes("float16"));
 * const wide = DTYPES.filter((d) => dtypeSize(d) === 8);
 * assert.deepEqual(wide, ["int64", "uint64", "float64"]);
 * ```
 */
export const DTYPES: readonly DType[] = [
  "int8",
  "uint8",
  "int32",
  "uint32",
  "int64",
  "uint64",
  "float16",
  "bfloat16",
  "float32",
  "float64",
] as const;

/**
 * Reduction operators; `avg` divides the sum by the number of contributions (as NCCL's `ncclAvg`).
 *
 * @example The maximum over the ranks; an unknown operator is refused before anything is sent
 * ```ts
 * import { init, type ReduceOp } from "@dcomm/dcomm";
 * import assert from "node:assert/strict";
 * await using pg = await init({ rank: 0, worldSize: 1, env: {} });
 * const op: ReduceOp = "max";
 * const loss = new Float32Array([0.25]);
 * await pg.allReduce(loss, { op });
 * assert.throws(() => pg.allReduce(loss, { op: "mean" as ReduceOp }), TypeError);
 * ```
 */
export type ReduceOp = "sum" | "prod" | "min" | "max" | "avg";

/**
 * Every {@linkcode ReduceOp}, in dcomm's own order: an index here is the op's code in the kernels and in call
 * descriptors (NCCL's enum differs; `backend/nccl/_mapping.ts` maps it).
 *
 * @example Parsing an operator from a command-line flag
 * ```ts
 * import { REDUCE_OPS, type ReduceOp } from "@dcomm/dcomm";
 * import assert from "node:assert/strict";
 * assert.deepEqual(REDUCE_OPS, ["sum", "prod", "min", "max", "avg"]);
 * const parse = (flag: string): ReduceOp | undefined => REDUCE_OPS.find((op) => op === flag);
 * assert.equal(parse("max"), "max");
 * assert.equal(parse("mean"), undefined);
 * ```
 */
export const REDUCE_OPS: readonly ReduceOp[] = ["sum", "prod", "min", "max", "avg"] as const;

/**
 * Any TypedArray dcomm accepts as a tensor.
 *
 * @example Taking any tensor
 * ```ts
 * import { dtypeOf, dtypeSize, type TypedArray } from "@dcomm/dcomm";
 * import assert from "node:assert/strict";
 * const count = (t: TypedArray): number => t.byteLength / dtypeSize(dtypeOf(t));
 * assert.equal(count(new Float32Array(6)), 6);
 * assert.equal(count(new BigInt64Array(3)), 3);
 * ```
 */
export type TypedArray =
  | Int8Array
  | Uint8Array
  | Uint8ClampedArray
  | Int16Array
  | Uint16Array
  | Int32Array
  | Uint32Array
  | BigInt64Array
  | BigUint64Array
  | Float16Array
  | Float32Array
  | Float64Array;

/** A TypedArray class, as it is called over existing memory. */
export type TypedArrayClass = new (buffer: ArrayBuffer, byteOffset?: number, length?: number) => TypedArray;

/** The array class that holds each dtype's elements (float16 and bfloat16 as their Uint16Array bits). */
export const DTYPE_ARRAY: Readonly<Record<DType, TypedArrayClass>> = {
  int8: Int8Array,
  uint8: Uint8Array,
  int32: Int32Array,
  uint32: Uint32Array,
  int64: BigInt64Array,
  uint64: BigUint64Array,
  float16: Uint16Array,
  bfloat16: Uint16Array,
  float32: Float32Array,
  float64: Float64Array,
};

const BYTES: Record<DType, number> = {
  int8: 1,
  uint8: 1,
  int32: 4,
  uint32: 4,
  int64: 8,
  uint64: 8,
  float16: 2,
  bfloat16: 2,
  float32: 4,
  float64: 8,
};

/**
 * The size in bytes of one element of `dtype`.
 *
 * @example Sizing a buffer
 * ```ts
 * import { dtypeSize } from "@dcomm/dcomm";
 * import assert from "node:assert/strict";
 * assert.equal(dtypeSize("float32"), 4);
 * assert.equal(1024 * dtypeSize("bfloat16"), 2048);
 * assert.throws(() => dtypeSize("complex64" as never), TypeError);
 * ```
 */
export function dtypeSize(dtype: DType): number {
  const n = BYTES[dtype];
  if (n === undefined) {
    throw new TypeError(`Unknown dtype: expected one of ${DTYPES.join(", ")}, found ${String(dtype)}`);
  }
  return n;
}

/** True for the floating-point dtypes (float16, bfloat16, float32, float64). */
export function isFloat(dtype: DType): boolean {
  return dtype === "float16" || dtype === "bfloat16" || dtype === "float32" || dtype === "float64";
}

/**
 * Throws a TypeError unless `op` is a {@linkcode ReduceOp}.
 *
 * @example Checking an operator from outside
 * ```ts
 * import { checkOp, type ReduceOp } from "./dtype.ts";
 * import assert from "node:assert/strict";
 * const op: ReduceOp = checkOp("avg");
 * assert.equal(op, "avg");
 * assert.throws(() => checkOp("mean"), TypeError);
 * ```
 */
export function checkOp(op: unknown): ReduceOp {
  if (typeof op !== "string" || !(REDUCE_OPS as readonly string[]).includes(op)) {
    throw new TypeError(`Unknown reduce op: expected one of ${REDUCE_OPS.join(", ")}, found ${String(op)}`);
  }
  return op as ReduceOp;
}

/** Throws a TypeError unless `dtype` is a {@linkcode DType}. */
export function checkDType(dtype: unknown): DType {
  if (typeof dtype !== "string" || !(DTYPES as readonly string[]).includes(dtype)) {
    throw new TypeError(`Unknown dtype: expected one of ${DTYPES.join(", ")}, found ${String(dtype)}`);
  }
  return dtype as DType;
}

/** The name of a TypedArray's constructor, for error messages. */
export function arrayKind(a: unknown): string {
  if (a === null) return "null";
  if (typeof a !== "object") return typeof a;
  return (a as object).constructor?.name ?? "object";
}

/**
 * The dtype of a TypedArray. A `Uint16Array` holds float16 or bfloat16 bits and needs the dtype spelled
 * out; a `Float16Array` is float16.
 *
 * @param array The tensor.
 * @param dtype The dtype the caller gave, if any; checked against the array's element size.
 * @returns The dtype.
 * @throws {TypeError} If the array is not a supported TypedArray, or `dtype` does not fit it.
 *
 * @example Inferring dtypes
 * ```ts
 * import { dtypeOf } from "@dcomm/dcomm";
 * import assert from "node:assert/strict";
 * assert.equal(dtypeOf(new Float32Array(4)), "float32");
 * assert.equal(dtypeOf(new Uint16Array(4), "bfloat16"), "bfloat16");
 * ```
 */
export function dtypeOf(array: TypedArray, dtype?: DType): DType {
  if (array instanceof Uint16Array) {
    if (dtype === "float16" || dtype === "bfloat16") return dtype;
    throw new TypeError(
      'A Uint16Array needs an explicit dtype: expected "float16" or "bfloat16", found ' +
        (dtype === undefined ? "none" : String(dtype)),
    );
  }
  const inferred = inferDType(array);
  if (dtype === undefined || dtype === inferred) return inferred;
  checkDType(dtype);
  throw new TypeError(`Dtype mismatch: ${arrayKind(array)} holds ${inferred}, found dtype ${dtype}`);
}

function inferDType(array: TypedArray): DType {
  const dtype = arrayDType(array);
  if (dtype !== undefined) return dtype;
  throw new TypeError(
    `Unsupported tensor: expected a TypedArray of a dcomm dtype, found ${arrayKind(array)}`,
  );
}

/**
 * The dtype a TypedArray holds by its class, or undefined for other values (a Uint16Array is float16 or
 * bfloat16 only by the caller's word, so it is undefined too).
 *
 * @param array Any value.
 * @returns The dtype, or undefined.
 */
export function arrayDType(array: unknown): DType | undefined {
  if (array instanceof Float32Array) return "float32";
  if (array instanceof Float64Array) return "float64";
  if (array instanceof Int32Array) return "int32";
  if (array instanceof Uint32Array) return "uint32";
  if (array instanceof Int8Array) return "int8";
  if (array instanceof Uint8Array) return "uint8";
  if (array instanceof BigInt64Array) return "int64";
  if (array instanceof BigUint64Array) return "uint64";
  if (array instanceof Float16Array) return "float16";
  return undefined;
}

/** A Uint8Array over the same bytes as `array` (no copy). */
export function bytesOf(array: TypedArray): Uint8Array {
  return new Uint8Array(array.buffer, array.byteOffset, array.byteLength);
}
