/**
 * Element types and reduction operators shared by every layer, and the rules that tie a TypedArray to a
 * dtype. The names mirror NCCL's `ncclDataType_t` and `ncclRedOp_t`.
 *
 * @module
 */

/**
 * The element types dcomm moves and reduces; they mirror NCCL's `ncclDataType_t`, plus `bool` (torch's
 * `torch.bool`: a `Uint8Array` of 0s and 1s, named explicitly with `{ dtype: "bool" }`).
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
  | "float64"
  | "bool";

/**
 * Every {@linkcode DType}, in dcomm's own order: an index here is the dtype's code in the kernels and in call
 * descriptors (the nccl backend maps to NCCL's enum itself, `backend/nccl/_mapping.ts`).
 *
 * @example Listing the dtypes
 * ```ts
 * import { DTYPES, dtypeSize } from "@dcomm/dcomm";
 * import assert from "node:assert/strict";
 * assert.equal(DTYPES.length, 11);
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
  "bool",
] as const;

/**
 * Reduction operators, torch's `ReduceOp`s:
 * - `sum`, `prod`, `min`, `max`; `avg` divides the sum by the number of contributions (NCCL's `ncclAvg`).
 * - `band`, `bor`, `bxor`: bitwise and, or, xor, of integer and bool tensors (torch's `BAND`, `BOR`,
 *   `BXOR`; NCCL has none, so the nccl backend refuses them).
 * - `premulSum`: each rank's input multiplied by the call's `factor` (in the tensor's dtype), then summed
 *   (torch's `PREMUL_SUM`, NCCL's `ncclRedOpCreatePreMulSum`); float tensors only.
 *
 * On `bool` tensors, `sum`, `max` and `bor` are a logical or, `prod`, `min` and `band` a logical and
 * (torch's rules), `bxor` an exclusive or; `avg` and `premulSum` are refused. A combination that does not
 * apply (`band` of float32, `premulSum` of int32) is a `TypeError` naming the dtypes the op takes.
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
 *
 * @example Flags or'ed bit by bit, and a bool "any rank done?"
 * ```ts
 * import { init } from "@dcomm/dcomm";
 * import assert from "node:assert/strict";
 * await using pg = await init({ rank: 0, worldSize: 1, env: {} });
 * const flags = new Uint32Array([0b0101]);
 * await pg.allReduce(flags, { op: "bor" });
 * const done = new Uint8Array([1]);
 * await pg.allReduce(done, { dtype: "bool", op: "max" });
 * assert.deepEqual([flags[0], done[0]], [0b0101, 1]);
 * assert.throws(() => pg.allReduce(new Float32Array(1), { op: "band" }), TypeError);
 * ```
 */
export type ReduceOp =
  | "sum"
  | "prod"
  | "min"
  | "max"
  | "avg"
  | "band"
  | "bor"
  | "bxor"
  | "premulSum";

/**
 * Every {@linkcode ReduceOp}, in dcomm's own order: an index here is the op's code in the kernels and in call
 * descriptors (NCCL's enum differs; `backend/nccl/_mapping.ts` maps it). New ops are appended, so the
 * codes of the others never change.
 *
 * @example Parsing an operator from a command-line flag
 * ```ts
 * import { REDUCE_OPS, type ReduceOp } from "@dcomm/dcomm";
 * import assert from "node:assert/strict";
 * assert.deepEqual(REDUCE_OPS.slice(0, 5), ["sum", "prod", "min", "max", "avg"]);
 * const parse = (flag: string): ReduceOp | undefined => REDUCE_OPS.find((op) => op === flag);
 * assert.equal(parse("max"), "max");
 * assert.equal(parse("mean"), undefined);
 * ```
 */
export const REDUCE_OPS: readonly ReduceOp[] = [
  "sum",
  "prod",
  "min",
  "max",
  "avg",
  "band",
  "bor",
  "bxor",
  "premulSum",
] as const;

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

/**
 * The array class that holds each dtype's elements (float16 and bfloat16 as their Uint16Array bits, bool
 * as a Uint8Array of 0s and 1s).
 */
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
  bool: Uint8Array,
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
  bool: 1,
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

/** True for the integer dtypes (int8, uint8, int32, uint32, int64, uint64); bool is not one. */
export function isInteger(dtype: DType): boolean {
  return dtype === "int8" || dtype === "uint8" || dtype === "int32" || dtype === "uint32" ||
    dtype === "int64" || dtype === "uint64";
}

/** Whether `op` is one of the bitwise ops (band, bor, bxor). */
export function isBitwise(op: ReduceOp): boolean {
  return op === "band" || op === "bor" || op === "bxor";
}

/**
 * The uint8 op that reduces a bool tensor (0/1 bytes) as `op` does: `sum`, `max` and `bor` are `max` (a
 * logical or), `prod`, `min` and `band` are `min` (a logical and), `bxor` stays (an exclusive or). Every
 * backend reduces bools by this table, so bytes other than 0 and 1 (not bools) get the same bytes
 * everywhere too.
 */
const BOOL_AS_UINT8: Readonly<Partial<Record<ReduceOp, ReduceOp>>> = {
  sum: "max",
  max: "max",
  bor: "max",
  prod: "min",
  min: "min",
  band: "min",
  bxor: "bxor",
};

/**
 * The op on the uint8 bytes that computes `op` on a bool tensor (see {@linkcode ReduceOp}).
 *
 * @param op An op that applies to bools (see {@linkcode checkOpDType}).
 * @returns `max`, `min` or `bxor`.
 *
 * @example
 * ```ts
 * import { boolOpAsUint8 } from "./dtype.ts";
 * import assert from "node:assert/strict";
 * assert.equal(boolOpAsUint8("sum"), "max"); // a logical or, as torch sums bools
 * assert.equal(boolOpAsUint8("band"), "min");
 * ```
 */
export function boolOpAsUint8(op: ReduceOp): ReduceOp {
  const mapped = BOOL_AS_UINT8[op];
  if (mapped === undefined) throw new TypeError(opDTypeMessage(op, "bool"));
  return mapped;
}

/** The ops that apply to bool tensors, in `REDUCE_OPS` order. */
const BOOL_OPS: readonly ReduceOp[] = REDUCE_OPS.filter((op) => BOOL_AS_UINT8[op] !== undefined);
const FLOAT_OPS: readonly ReduceOp[] = REDUCE_OPS.filter((op) => !isBitwise(op));
const INTEGER_OPS: readonly ReduceOp[] = REDUCE_OPS.filter((op) => op !== "premulSum");

/**
 * The reduce ops that apply to `dtype`: every op but the bitwise ones for floats, every op but
 * `premulSum` for integers, and `sum`, `prod`, `min`, `max`, `band`, `bor`, `bxor` for bools.
 *
 * @param dtype The dtype.
 * @returns Its ops, in {@linkcode REDUCE_OPS} order (one array per kind of dtype, made once).
 *
 * @example
 * ```ts
 * import { reduceOpsFor } from "./dtype.ts";
 * import assert from "node:assert/strict";
 * assert.ok(reduceOpsFor("int32").includes("bxor"));
 * assert.ok(!reduceOpsFor("float32").includes("bxor"));
 * assert.ok(reduceOpsFor("float16").includes("premulSum"));
 * ```
 */
export function reduceOpsFor(dtype: DType): readonly ReduceOp[] {
  return dtype === "bool" ? BOOL_OPS : isFloat(dtype) ? FLOAT_OPS : INTEGER_OPS;
}

function opDTypeMessage(op: ReduceOp, dtype: DType): string {
  if (isBitwise(op)) {
    return `op "${op}" takes integer or bool tensors (${
      DTYPES.filter((d) => !isFloat(d)).join(", ")
    }), found ${dtype}`;
  }
  if (op === "premulSum") {
    return `op "premulSum" takes float tensors (${DTYPES.filter(isFloat).join(", ")}), found ${dtype}`;
  }
  return `op "${op}" does not apply to bool tensors: expected one of ${
    BOOL_OPS.join(", ")
  } (sum and max are a logical or, prod and min a logical and), found ${op}`;
}

/**
 * Throws a TypeError unless `op` applies to `dtype` (see {@linkcode reduceOpsFor}); the message names the
 * dtypes the op takes, or the ops bool takes.
 *
 * @param op A known op.
 * @param dtype A known dtype.
 * @throws {TypeError} If the op does not apply.
 *
 * @example
 * ```ts
 * import { checkOpDType } from "./dtype.ts";
 * import assert from "node:assert/strict";
 * checkOpDType("bxor", "uint64");
 * assert.throws(() => checkOpDType("band", "float32"), /op "band" takes integer or bool tensors/);
 * assert.throws(() => checkOpDType("avg", "bool"), /does not apply to bool tensors/);
 * ```
 */
export function checkOpDType(op: ReduceOp, dtype: DType): void {
  if (!reduceOpsFor(dtype).includes(op)) throw new TypeError(opDTypeMessage(op, dtype));
}

function showValue(v: unknown): string {
  if (typeof v === "number") return String(v);
  if (typeof v === "string") return `string ${JSON.stringify(v)}`;
  if (v === null) return "null";
  if (typeof v === "object") return `an object (${(v as object).constructor?.name ?? "Object"})`;
  return `${typeof v} ${String(v)}`;
}

const F32 = new Float32Array(1);
const U32 = new Uint32Array(F32.buffer);

/**
 * `premulSum`'s factor in the dtype's precision, as the kernels and NCCL's scalar take it: float64 as is,
 * float32 and float16 rounded once to nearest even, bfloat16 through float32 (as the nccl backend writes
 * its scalar); other dtypes as is.
 *
 * @param dtype The tensor's dtype.
 * @param factor The factor.
 * @returns The factor, exactly representable in a float dtype (possibly infinite: see
 *   {@linkcode checkFactor}).
 *
 * @example
 * ```ts
 * import { premulFactor } from "./dtype.ts";
 * import assert from "node:assert/strict";
 * assert.equal(premulFactor("float16", 0.1), 0.0999755859375);
 * assert.equal(premulFactor("float64", 0.1), 0.1);
 * ```
 */
export function premulFactor(dtype: DType, factor: number): number {
  switch (dtype) {
    case "float32":
      return Math.fround(factor);
    case "float16":
      return Math.f16round(factor);
    case "bfloat16": {
      F32[0] = factor;
      const u = U32[0];
      const b = (u & 0x7fffffff) > 0x7f800000 ? (u >>> 16) | 0x40 : (u + 0x7fff + ((u >>> 16) & 1)) >>> 16;
      U32[0] = b << 16;
      return F32[0];
    }
    default:
      return factor;
  }
}

/**
 * Checks the `factor` of a reduction: `premulSum` needs a finite number that stays finite in the
 * tensor's dtype, and no other op takes one.
 *
 * @param op The op.
 * @param factor The factor given, if any.
 * @param dtype The tensor's dtype, when known (the factor must not overflow it).
 * @returns The factor as given (`undefined` for any op but `premulSum`).
 * @throws {TypeError} If `premulSum` has no factor or one that is not a number, or another op has one.
 * @throws {RangeError} If the factor is NaN or infinite, or rounds to infinity in the dtype.
 *
 * @example
 * ```ts
 * import { checkFactor } from "./dtype.ts";
 * import assert from "node:assert/strict";
 * assert.equal(checkFactor("premulSum", 0.5), 0.5);
 * assert.equal(checkFactor("sum", undefined), undefined);
 * assert.throws(() => checkFactor("premulSum", undefined), TypeError);
 * assert.throws(() => checkFactor("premulSum", Infinity), RangeError);
 * assert.throws(() => checkFactor("premulSum", 1e5, "float16"), RangeError); // float16 stops at 65504
 * assert.throws(() => checkFactor("sum", 2), TypeError);
 * ```
 */
export function checkFactor(op: ReduceOp, factor: unknown, dtype?: DType): number | undefined {
  if (op !== "premulSum") {
    if (factor === undefined) return undefined;
    throw new TypeError(
      `factor goes with op "premulSum" only, found op "${op}" with factor ${showValue(factor)}`,
    );
  }
  if (typeof factor !== "number") {
    throw new TypeError(
      `op "premulSum" needs a factor: expected factor to be a finite number, found ${
        factor === undefined ? "none" : showValue(factor)
      }`,
    );
  }
  if (!Number.isFinite(factor)) {
    throw new RangeError(`op "premulSum" needs a finite factor: expected a finite number, found ${factor}`);
  }
  if (dtype !== undefined && !Number.isFinite(premulFactor(dtype, factor))) {
    throw new RangeError(
      `op "premulSum" needs a factor that ${dtype} holds: expected a finite ${dtype}, found ${factor} ` +
        `(it rounds to ${premulFactor(dtype, factor)})`,
    );
  }
  return factor;
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
 * out; a `Float16Array` is float16. A `Uint8Array` is uint8 unless `dtype` says `"bool"` (torch.bool's
 * 0/1 bytes): bool is never inferred.
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
 * assert.equal(dtypeOf(new Uint8Array(4)), "uint8");
 * assert.equal(dtypeOf(new Uint8Array(4), "bool"), "bool");
 * assert.throws(() => dtypeOf(new Int8Array(4), "bool"), TypeError);
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
  if (dtype === "bool" && inferred === "uint8") return "bool";
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
 * bfloat16 only by the caller's word, so it is undefined too; a Uint8Array is uint8, bool only by the
 * caller's word).
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
