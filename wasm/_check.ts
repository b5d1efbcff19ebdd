/**
 * Argument checks shared by the WASM wrappers (`kernels.ts`) and the TypeScript reference
 * (`reference.ts`), so both reject the same inputs with the same messages, and the dtype/op codes of the
 * kernels' ABI.
 *
 * @module
 */
import {
  arrayDType,
  arrayKind,
  checkFactor,
  checkOpDType,
  type DType,
  DTYPES,
  isFloat,
  premulFactor,
  REDUCE_OPS,
  type ReduceOp,
  type TypedArray,
} from "../core/dtype.ts";
import type { AxpyOptions, DivideOptions, MatmulOptions, ReduceOptions } from "./kernels.ts";

/** The kernels' dtype codes: the index in `DTYPES` (dcomm's own order, not `ncclDataType_t`'s). */
export const DTYPE_CODE: Readonly<Record<DType, number>> = Object.freeze(
  Object.fromEntries(DTYPES.map((d, i) => [d, i])) as Record<DType, number>,
);

/** The kernels' op codes: the index in `REDUCE_OPS` (dcomm's own order, not `ncclRedOp_t`'s). */
export const OP_CODE: Readonly<Record<ReduceOp, number>> = Object.freeze(
  Object.fromEntries(REDUCE_OPS.map((o, i) => [o, i])) as Record<ReduceOp, number>,
);

/** What `reduce`/`reduceMany` run once their arguments are checked. */
export interface ReducePlan {
  /** The dtype of every array. */
  dtype: DType;
  /** The operator. */
  op: ReduceOp;
  /** `premulSum`'s factor, rounded to the dtype (`premulFactor` of `core/dtype.ts`). */
  factor?: number;
}

function show(value: unknown): string {
  return typeof value === "string" ? JSON.stringify(value) : String(value);
}

/** Throws a TypeError unless `op` applies to `dtype`, in the words of the process groups. */
function checkApplies(verb: string, op: ReduceOp, dtype: DType): void {
  try {
    checkOpDType(op, dtype);
  } catch (e) {
    throw new TypeError(`Cannot ${verb}: ${(e as Error).message}`);
  }
}

/** `premulSum`'s factor checked (and none for any other op), in the words of the process groups. */
function checkedFactor(verb: string, op: ReduceOp, factor: unknown, dtype: DType): number | undefined {
  try {
    return checkFactor(op, factor, dtype);
  } catch (e) {
    const Kind = e instanceof RangeError ? RangeError : TypeError;
    throw new Kind(`Cannot ${verb}: ${(e as Error).message}`);
  }
}

/** Throws a TypeError unless `dtype` is undefined or a dtype name. */
export function checkDTypeName(verb: string, dtype: unknown): DType | undefined {
  if (dtype === undefined || (DTYPES as readonly unknown[]).includes(dtype)) {
    return dtype as DType | undefined;
  }
  throw new TypeError(`Cannot ${verb}: expected dtype one of ${DTYPES.join(", ")}, found ${show(dtype)}`);
}

/**
 * The dtype of a tensor argument: inferred from its class, or `dtype` for a Uint16Array (16-bit floats)
 * and for a Uint8Array named `"bool"`.
 *
 * @throws {TypeError} If `array` is not a TypedArray of a dcomm dtype, its buffer is detached, or `dtype`
 *   does not fit it.
 */
export function tensorDType(verb: string, role: string, array: unknown, dtype: DType | undefined): DType {
  if (!ArrayBuffer.isView(array) || array instanceof DataView) {
    throw new TypeError(`Cannot ${verb}: expected ${role} to be a TypedArray, found ${arrayKind(array)}`);
  }
  if ((array.buffer as ArrayBuffer).detached) {
    throw new TypeError(
      `Cannot ${verb}: ${role} is a view of a detached buffer (wasm memory grows by replacing its ` +
        `buffer); take the view again after the last allocation`,
    );
  }
  if (array instanceof Uint16Array) {
    if (dtype === "float16" || dtype === "bfloat16") return dtype;
    throw new TypeError(
      `Cannot ${verb}: ${role} is a Uint16Array, which needs dtype "float16" or "bfloat16", found ` +
        (dtype === undefined ? "none" : show(dtype)),
    );
  }
  const inferred = arrayDType(array);
  if (inferred === undefined) {
    throw new TypeError(
      `Cannot ${verb}: expected ${role} to be a TypedArray of a dcomm dtype, found ${arrayKind(array)}`,
    );
  }
  if (dtype === "bool" && inferred === "uint8") return "bool";
  if (dtype !== undefined && dtype !== inferred) {
    throw new TypeError(
      `Cannot ${verb}: ${role} is a ${arrayKind(array)} (${inferred}) but dtype is ${dtype}`,
    );
  }
  return inferred;
}

/**
 * The dtype of a second operand: a Uint16Array takes the first operand's 16-bit float dtype, a Uint8Array
 * the first operand's bool.
 */
function operandDType(
  verb: string,
  role: string,
  array: unknown,
  given: DType | undefined,
  first: DType,
): DType {
  const halfs = first === "float16" || first === "bfloat16";
  const implied = array instanceof Uint16Array && halfs
    ? first
    : array instanceof Uint8Array && first === "bool"
    ? first
    : undefined;
  return tensorDType(verb, role, array, given ?? implied);
}

function sameAs(
  verb: string,
  dst: TypedArray,
  dtype: DType,
  role: string,
  other: TypedArray,
  odt: DType,
): void {
  if (odt !== dtype) throw new TypeError(`Cannot ${verb}: dst is ${dtype} but ${role} is ${odt}`);
  if (other.length !== dst.length) {
    throw new RangeError(`Cannot ${verb}: dst has ${dst.length} elements but ${role} has ${other.length}`);
  }
}

function checkOp(verb: string, op: unknown): ReduceOp {
  if (typeof op !== "string" || !(REDUCE_OPS as readonly string[]).includes(op)) {
    throw new TypeError(`Cannot ${verb}: expected op one of ${REDUCE_OPS.join(", ")}, found ${show(op)}`);
  }
  return op as ReduceOp;
}

/**
 * Checks the arguments of `reduce(dst, src, options)`.
 *
 * @throws {TypeError} On a bad array, dtype or op, or an op that does not apply to the dtype.
 * @throws {RangeError} On op avg or premulSum, or unequal lengths.
 */
export function checkReduce(
  dst: TypedArray,
  src: TypedArray,
  options: ReduceOptions | undefined,
): ReducePlan {
  const verb = "reduce";
  const op = checkOp(verb, options?.op ?? "sum");
  if (op === "avg") {
    throw new RangeError(
      'Cannot reduce: op "avg" needs the number of contributions; use reduceMany() with every source, ' +
        'or reduce with "sum" and then divide()',
    );
  }
  if (op === "premulSum") {
    throw new RangeError(
      'Cannot reduce: op "premulSum" multiplies every source by the factor; use reduceMany() with every ' +
        "source",
    );
  }
  const given = checkDTypeName(verb, options?.dtype);
  const dtype = tensorDType(verb, "dst", dst, given);
  sameAs(verb, dst, dtype, "src", src, operandDType(verb, "src", src, given, dtype));
  checkApplies(verb, op, dtype);
  checkedFactor(verb, op, options?.factor, dtype);
  return { dtype, op };
}

/**
 * Checks the arguments of `reduceMany(dst, srcs, options)`.
 *
 * @throws {TypeError} On a bad array, dtype or op, an op that does not apply to the dtype, or premulSum
 *   without a factor (or another op with one).
 * @throws {RangeError} On no sources, unequal lengths, or a factor that is not finite.
 */
export function checkReduceMany(
  dst: TypedArray,
  srcs: readonly TypedArray[],
  options: ReduceOptions | undefined,
): ReducePlan {
  const verb = "reduce";
  const op = checkOp(verb, options?.op ?? "sum");
  const given = checkDTypeName(verb, options?.dtype);
  const dtype = tensorDType(verb, "dst", dst, given);
  if (!Array.isArray(srcs)) {
    throw new TypeError(
      `Cannot reduce: expected srcs to be an array of TypedArrays, found ${arrayKind(srcs)}`,
    );
  }
  if (srcs.length === 0) throw new RangeError("Cannot reduce: expected at least one source in srcs, found 0");
  for (let j = 0; j < srcs.length; j++) {
    const role = `srcs[${j}]`;
    sameAs(verb, dst, dtype, role, srcs[j], operandDType(verb, role, srcs[j], given, dtype));
  }
  checkApplies(verb, op, dtype);
  const factor = checkedFactor(verb, op, options?.factor, dtype);
  return factor === undefined ? { dtype, op } : { dtype, op, factor: premulFactor(dtype, factor) };
}

/**
 * Checks a dtype and op for the `*Ptr` kernels: the op applies to the dtype, and premulSum has a finite
 * factor (no other op has one).
 *
 * @returns The factor rounded to the dtype, for premulSum.
 */
export function checkPtrOp(dtype: DType, op: ReduceOp, factor: unknown): number | undefined {
  checkApplies("reduce", op, dtype);
  const f = checkedFactor("reduce", op, factor, dtype);
  return f === undefined ? undefined : premulFactor(dtype, f);
}

/** The largest integer divisor: integer division runs in 64 bits on values JavaScript holds exactly. */
const MAX_INT_DIVISOR = 2 ** 53;

/**
 * Checks the arguments of `divide(dst, divisor, options)` and returns the dtype.
 *
 * @throws {TypeError} On a bad array or dtype (bool), or a divisor that is not a number.
 * @throws {RangeError} On a divisor that is 0 or not finite, or, for integer dtypes, not an integer >= 1.
 */
export function checkDivide(dst: TypedArray, divisor: number, options: DivideOptions | undefined): DType {
  const verb = "divide";
  const dtype = tensorDType(verb, "dst", dst, checkDTypeName(verb, options?.dtype));
  checkDivisor(dtype, divisor);
  return dtype;
}

/** Throws unless `divisor` can divide `dtype` (see {@linkcode checkDivide}). */
export function checkDivisor(dtype: DType, divisor: number): void {
  if (dtype === "bool") {
    throw new TypeError("Cannot divide bool: bools have no division (avg does not apply to them)");
  }
  if (typeof divisor !== "number") {
    throw new TypeError(`Cannot divide: expected divisor to be a number, found ${typeof divisor}`);
  }
  if (isFloat(dtype)) {
    if (!Number.isFinite(divisor) || divisor === 0) {
      throw new RangeError(`Cannot divide ${dtype}: expected a finite non-zero divisor, found ${divisor}`);
    }
  } else if (!Number.isInteger(divisor) || divisor < 1 || divisor > MAX_INT_DIVISOR) {
    throw new RangeError(
      `Cannot divide ${dtype}: expected an integer divisor from 1 to 2^53, found ${divisor}`,
    );
  }
}

/** The 16-bit side of a cast. */
export type HalfKind = "float16" | "bfloat16";

/**
 * Checks a cast between float32 and a 16-bit format: the float32 side must be a Float32Array, the 16-bit
 * side a Uint16Array (or a Float16Array for float16), both of the same length.
 *
 * @throws {TypeError} On a wrong array class. @throws {RangeError} On unequal lengths.
 */
export function checkCast(half: HalfKind, toHalf: boolean, src: TypedArray, dst: TypedArray): void {
  const verb = toHalf ? `cast float32 to ${half}` : `cast ${half} to float32`;
  const [f32, f32Role, h16, h16Role] = toHalf ? [src, "src", dst, "dst"] : [dst, "dst", src, "src"];
  tensorDType(verb, f32Role, f32, "float32");
  if (!(h16 instanceof Uint16Array) && !(half === "float16" && h16 instanceof Float16Array)) {
    const expected = half === "float16" ? "a Uint16Array or Float16Array" : "a Uint16Array (bfloat16 bits)";
    throw new TypeError(`Cannot ${verb}: expected ${h16Role} to be ${expected}, found ${arrayKind(h16)}`);
  }
  tensorDType(verb, h16Role, h16, half);
  if (src.length !== dst.length) {
    throw new RangeError(`Cannot ${verb}: src has ${src.length} elements but dst has ${dst.length}`);
  }
}

/** float32 or float64, the dtypes of scale and axpy. */
function floatVector(verb: string, role: string, x: unknown): "float32" | "float64" {
  if (x instanceof Float32Array) return "float32";
  if (x instanceof Float64Array) return "float64";
  throw new TypeError(
    `Cannot ${verb}: expected ${role} to be a Float32Array or Float64Array, found ${arrayKind(x)}`,
  );
}

function checkScalar(verb: string, name: string, value: unknown): number {
  if (typeof value !== "number") {
    throw new TypeError(`Cannot ${verb}: expected ${name} to be a number, found ${typeof value}`);
  }
  return value;
}

/**
 * Checks the arguments of `scale(x, alpha)` and returns the dtype.
 *
 * @throws {TypeError} If `x` is not a Float32Array/Float64Array or `alpha` is not a number.
 */
export function checkScale(x: Float32Array | Float64Array, alpha: number): "float32" | "float64" {
  const dtype = floatVector("scale", "x", x);
  tensorDType("scale", "x", x, dtype);
  checkScalar("scale", "alpha", alpha);
  return dtype;
}

/**
 * Checks the arguments of `axpy(y, x, options)` and returns the dtype and alpha.
 *
 * @throws {TypeError} On a wrong array class, mixed dtypes, or a non-number alpha.
 * @throws {RangeError} On unequal lengths.
 */
export function checkAxpy(
  y: Float32Array | Float64Array,
  x: Float32Array | Float64Array,
  options: AxpyOptions | undefined,
): { dtype: "float32" | "float64"; alpha: number } {
  const dtype = floatVector("axpy", "y", y);
  const xdt = floatVector("axpy", "x", x);
  tensorDType("axpy", "y", y, dtype);
  tensorDType("axpy", "x", x, xdt);
  if (xdt !== dtype) throw new TypeError(`Cannot axpy: y is ${dtype} but x is ${xdt}`);
  if (x.length !== y.length) {
    throw new RangeError(`Cannot axpy: y has ${y.length} elements but x has ${x.length}`);
  }
  return { dtype, alpha: checkScalar("axpy", "alpha", options?.alpha ?? 1) };
}

/** What `matmul` runs once its arguments are checked. */
export interface MatmulPlan {
  /** Rows of op(A) and C. */
  m: number;
  /** Columns of op(A), rows of op(B). */
  k: number;
  /** Columns of op(B) and C. */
  n: number;
  /** The kernel's flags: bit 0 transA, bit 1 transB, bit 2 accumulate. */
  flags: number;
}

function checkDim(name: string, value: unknown): number {
  if (typeof value !== "number" || !Number.isInteger(value) || value < 0 || value > 2 ** 30) {
    throw new RangeError(
      `Cannot matmul: expected ${name} to be an integer from 0 to 2^30, found ${show(value)}`,
    );
  }
  return value;
}

function checkShape(role: string, array: Float32Array, rows: number, cols: number, names: string): void {
  if (array.length !== rows * cols) {
    throw new RangeError(
      `Cannot matmul: ${role} has ${array.length} elements but ${names} is ${rows} x ${cols} = ${
        rows * cols
      }`,
    );
  }
}

/**
 * Checks the arguments of `matmul(a, b, options)`.
 *
 * @throws {TypeError} If a, b or c is not a Float32Array.
 * @throws {RangeError} If a dimension is not a non-negative integer or an array's length does not match it.
 */
export function checkMatmul(a: Float32Array, b: Float32Array, options: MatmulOptions): MatmulPlan {
  if (typeof options !== "object" || options === null) {
    throw new TypeError(`Cannot matmul: expected options { c, m, k, n }, found ${show(options)}`);
  }
  for (const [role, x] of [["a", a], ["b", b], ["c", options.c]] as const) {
    if (!(x instanceof Float32Array)) {
      throw new TypeError(`Cannot matmul: expected ${role} to be a Float32Array, found ${arrayKind(x)}`);
    }
    tensorDType("matmul", role, x, "float32");
  }
  const m = checkDim("m", options.m), k = checkDim("k", options.k), n = checkDim("n", options.n);
  const transA = options.transA ?? false, transB = options.transB ?? false;
  if (transA) checkShape("a", a, k, m, "k x m (transA)");
  else checkShape("a", a, m, k, "m x k");
  if (transB) checkShape("b", b, n, k, "n x k (transB)");
  else checkShape("b", b, k, n, "k x n");
  checkShape("c", options.c, m, n, "m x n");
  return { m, k, n, flags: (transA ? 1 : 0) | (transB ? 2 : 0) | (options.accumulate ? 4 : 0) };
}
