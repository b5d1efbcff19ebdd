/**
 * The TypeScript reference of every WASM kernel: plain loops with the same semantics bit for bit
 * (NaN payloads aside: any NaN is as good as another, except in the casts, which keep the payload). It is
 * the oracle of the kernel tests and the "plain TypeScript loop" column of `deno task bench:kernels`.
 * Each function checks its arguments exactly as the `Kernels` method of the same name does.
 *
 * How it gets float32 arithmetic right: a Float32Array store rounds to float32, and for +, - and x of two
 * float32 values, rounding the exact double result to float32 equals rounding the exact result (double
 * has more than 2 x 24 + 2 bits). The same argument covers float16/bfloat16 values computed in float32.
 * The 16-bit formats are read and written through Float16Array (the engine rounds to nearest even) and
 * through explicit bit manipulation for bfloat16 and for NaN payloads.
 *
 * @example
 * ```ts
 * import * as reference from "./reference.ts";
 * import assert from "node:assert/strict";
 * const a = new Int8Array([127, -128]);
 * reference.reduce(a, new Int8Array([1, -1]), { op: "sum" });
 * assert.deepEqual(a, new Int8Array([-128, 127]));
 * ```
 *
 * @module
 */
import { boolOpAsUint8, type DType, type TypedArray } from "../core/dtype.ts";
import {
  checkAxpy,
  checkCast,
  checkDivide,
  checkMatmul,
  checkReduce,
  checkReduceMany,
  checkScale,
} from "./_check.ts";
import type { AxpyOptions, DivideOptions, MatmulOptions, ReduceOptions } from "./kernels.ts";

type Loop = (d: TypedArray, s: TypedArray, n: number) => void;
/** The ops of one binary step (avg and premulSum are sums with a finish or a start of their own). */
type BinaryOp = "sum" | "prod" | "min" | "max" | "band" | "bor" | "bxor";
type Loops = Record<"sum" | "prod" | "min" | "max", Loop> & Partial<Record<BinaryOp, Loop>>;

// One literal per array class and op, so that every loop stays monomorphic in the JIT.
// deno-fmt-ignore
const LOOPS: Record<"i8" | "u8" | "i32" | "u32" | "i64" | "u64" | "f32" | "f64", Loops> = {
  i8: {
    sum: (d, s, n) => { const a = d as Int8Array, b = s as Int8Array; for (let i = 0; i < n; i++) a[i] += b[i]; },
    prod: (d, s, n) => { const a = d as Int8Array, b = s as Int8Array; for (let i = 0; i < n; i++) a[i] *= b[i]; },
    min: (d, s, n) => { const a = d as Int8Array, b = s as Int8Array; for (let i = 0; i < n; i++) a[i] = Math.min(a[i], b[i]); },
    max: (d, s, n) => { const a = d as Int8Array, b = s as Int8Array; for (let i = 0; i < n; i++) a[i] = Math.max(a[i], b[i]); },
    band: (d, s, n) => { const a = d as Int8Array, b = s as Int8Array; for (let i = 0; i < n; i++) a[i] &= b[i]; },
    bor: (d, s, n) => { const a = d as Int8Array, b = s as Int8Array; for (let i = 0; i < n; i++) a[i] |= b[i]; },
    bxor: (d, s, n) => { const a = d as Int8Array, b = s as Int8Array; for (let i = 0; i < n; i++) a[i] ^= b[i]; },
  },
  u8: {
    sum: (d, s, n) => { const a = d as Uint8Array, b = s as Uint8Array; for (let i = 0; i < n; i++) a[i] += b[i]; },
    prod: (d, s, n) => { const a = d as Uint8Array, b = s as Uint8Array; for (let i = 0; i < n; i++) a[i] *= b[i]; },
    min: (d, s, n) => { const a = d as Uint8Array, b = s as Uint8Array; for (let i = 0; i < n; i++) a[i] = Math.min(a[i], b[i]); },
    max: (d, s, n) => { const a = d as Uint8Array, b = s as Uint8Array; for (let i = 0; i < n; i++) a[i] = Math.max(a[i], b[i]); },
    band: (d, s, n) => { const a = d as Uint8Array, b = s as Uint8Array; for (let i = 0; i < n; i++) a[i] &= b[i]; },
    bor: (d, s, n) => { const a = d as Uint8Array, b = s as Uint8Array; for (let i = 0; i < n; i++) a[i] |= b[i]; },
    bxor: (d, s, n) => { const a = d as Uint8Array, b = s as Uint8Array; for (let i = 0; i < n; i++) a[i] ^= b[i]; },
  },
  i32: {
    sum: (d, s, n) => { const a = d as Int32Array, b = s as Int32Array; for (let i = 0; i < n; i++) a[i] += b[i]; },
    prod: (d, s, n) => { const a = d as Int32Array, b = s as Int32Array; for (let i = 0; i < n; i++) a[i] = Math.imul(a[i], b[i]); },
    min: (d, s, n) => { const a = d as Int32Array, b = s as Int32Array; for (let i = 0; i < n; i++) a[i] = Math.min(a[i], b[i]); },
    max: (d, s, n) => { const a = d as Int32Array, b = s as Int32Array; for (let i = 0; i < n; i++) a[i] = Math.max(a[i], b[i]); },
    band: (d, s, n) => { const a = d as Int32Array, b = s as Int32Array; for (let i = 0; i < n; i++) a[i] &= b[i]; },
    bor: (d, s, n) => { const a = d as Int32Array, b = s as Int32Array; for (let i = 0; i < n; i++) a[i] |= b[i]; },
    bxor: (d, s, n) => { const a = d as Int32Array, b = s as Int32Array; for (let i = 0; i < n; i++) a[i] ^= b[i]; },
  },
  u32: {
    sum: (d, s, n) => { const a = d as Uint32Array, b = s as Uint32Array; for (let i = 0; i < n; i++) a[i] += b[i]; },
    prod: (d, s, n) => { const a = d as Uint32Array, b = s as Uint32Array; for (let i = 0; i < n; i++) a[i] = Math.imul(a[i], b[i]); },
    min: (d, s, n) => { const a = d as Uint32Array, b = s as Uint32Array; for (let i = 0; i < n; i++) a[i] = Math.min(a[i], b[i]); },
    max: (d, s, n) => { const a = d as Uint32Array, b = s as Uint32Array; for (let i = 0; i < n; i++) a[i] = Math.max(a[i], b[i]); },
    band: (d, s, n) => { const a = d as Uint32Array, b = s as Uint32Array; for (let i = 0; i < n; i++) a[i] &= b[i]; },
    bor: (d, s, n) => { const a = d as Uint32Array, b = s as Uint32Array; for (let i = 0; i < n; i++) a[i] |= b[i]; },
    bxor: (d, s, n) => { const a = d as Uint32Array, b = s as Uint32Array; for (let i = 0; i < n; i++) a[i] ^= b[i]; },
  },
  i64: {
    sum: (d, s, n) => { const a = d as BigInt64Array, b = s as BigInt64Array; for (let i = 0; i < n; i++) a[i] += b[i]; },
    prod: (d, s, n) => { const a = d as BigInt64Array, b = s as BigInt64Array; for (let i = 0; i < n; i++) a[i] *= b[i]; },
    min: (d, s, n) => { const a = d as BigInt64Array, b = s as BigInt64Array; for (let i = 0; i < n; i++) if (b[i] < a[i]) a[i] = b[i]; },
    max: (d, s, n) => { const a = d as BigInt64Array, b = s as BigInt64Array; for (let i = 0; i < n; i++) if (b[i] > a[i]) a[i] = b[i]; },
    band: (d, s, n) => { const a = d as BigInt64Array, b = s as BigInt64Array; for (let i = 0; i < n; i++) a[i] &= b[i]; },
    bor: (d, s, n) => { const a = d as BigInt64Array, b = s as BigInt64Array; for (let i = 0; i < n; i++) a[i] |= b[i]; },
    bxor: (d, s, n) => { const a = d as BigInt64Array, b = s as BigInt64Array; for (let i = 0; i < n; i++) a[i] ^= b[i]; },
  },
  u64: {
    sum: (d, s, n) => { const a = d as BigUint64Array, b = s as BigUint64Array; for (let i = 0; i < n; i++) a[i] += b[i]; },
    prod: (d, s, n) => { const a = d as BigUint64Array, b = s as BigUint64Array; for (let i = 0; i < n; i++) a[i] *= b[i]; },
    min: (d, s, n) => { const a = d as BigUint64Array, b = s as BigUint64Array; for (let i = 0; i < n; i++) if (b[i] < a[i]) a[i] = b[i]; },
    max: (d, s, n) => { const a = d as BigUint64Array, b = s as BigUint64Array; for (let i = 0; i < n; i++) if (b[i] > a[i]) a[i] = b[i]; },
    band: (d, s, n) => { const a = d as BigUint64Array, b = s as BigUint64Array; for (let i = 0; i < n; i++) a[i] &= b[i]; },
    bor: (d, s, n) => { const a = d as BigUint64Array, b = s as BigUint64Array; for (let i = 0; i < n; i++) a[i] |= b[i]; },
    bxor: (d, s, n) => { const a = d as BigUint64Array, b = s as BigUint64Array; for (let i = 0; i < n; i++) a[i] ^= b[i]; },
  },
  // Math.min/Math.max are IEEE 754-2019 minimum/maximum: NaN wins, and -0 < +0.
  f32: {
    sum: (d, s, n) => { const a = d as Float32Array, b = s as Float32Array; for (let i = 0; i < n; i++) a[i] += b[i]; },
    prod: (d, s, n) => { const a = d as Float32Array, b = s as Float32Array; for (let i = 0; i < n; i++) a[i] *= b[i]; },
    min: (d, s, n) => { const a = d as Float32Array, b = s as Float32Array; for (let i = 0; i < n; i++) a[i] = Math.min(a[i], b[i]); },
    max: (d, s, n) => { const a = d as Float32Array, b = s as Float32Array; for (let i = 0; i < n; i++) a[i] = Math.max(a[i], b[i]); },
  },
  f64: {
    sum: (d, s, n) => { const a = d as Float64Array, b = s as Float64Array; for (let i = 0; i < n; i++) a[i] += b[i]; },
    prod: (d, s, n) => { const a = d as Float64Array, b = s as Float64Array; for (let i = 0; i < n; i++) a[i] *= b[i]; },
    min: (d, s, n) => { const a = d as Float64Array, b = s as Float64Array; for (let i = 0; i < n; i++) a[i] = Math.min(a[i], b[i]); },
    max: (d, s, n) => { const a = d as Float64Array, b = s as Float64Array; for (let i = 0; i < n; i++) a[i] = Math.max(a[i], b[i]); },
  },
};

/** The loops that compute a dtype: its own, float32's for the 16-bit formats, uint8's for bool. */
function loopsOf(dtype: DType): Loops {
  switch (dtype) {
    case "int8":
      return LOOPS.i8;
    case "uint8":
    case "bool":
      return LOOPS.u8;
    case "int32":
      return LOOPS.i32;
    case "uint32":
      return LOOPS.u32;
    case "int64":
      return LOOPS.i64;
    case "uint64":
      return LOOPS.u64;
    case "float64":
      return LOOPS.f64;
    default:
      return LOOPS.f32;
  }
}

function isHalf(dtype: DType): dtype is "float16" | "bfloat16" {
  return dtype === "float16" || dtype === "bfloat16";
}

function u16(a: TypedArray): Uint16Array {
  return a instanceof Uint16Array ? a : new Uint16Array(a.buffer, a.byteOffset, a.length);
}

function f16(a: TypedArray): Float16Array {
  return a instanceof Float16Array ? a : new Float16Array(a.buffer, a.byteOffset, a.length);
}

/** The float32 bits of a bfloat16 (a quiet NaN for a NaN). */
function bf16Bits32(h: number): number {
  return (h & 0x7fff) > 0x7f80 ? ((h << 16) | 0x400000) >>> 0 : (h << 16) >>> 0;
}

/** The bfloat16 of float32 bits: round to nearest even; NaN stays NaN, quiet, with its sign. */
function bf16FromBits32(u: number): number {
  if ((u & 0x7fffffff) > 0x7f800000) return (u >>> 16) | 0x40;
  return (u + 0x7fff + ((u >>> 16) & 1)) >>> 16;
}

/** The float32 bits of a float16 NaN: sign, quiet bit, payload. */
function f16NaNBits32(h: number): number {
  return (((h & 0x8000) << 16) | 0x7fc00000 | ((h & 0x3ff) << 13)) >>> 0;
}

/** The float16 of the float32 bits of a NaN: sign, quiet bit, top of the payload. */
function f16NaNFromBits32(u: number): number {
  return ((u >>> 16) & 0x8000) | 0x7e00 | ((u >>> 13) & 0x3ff);
}

/** The values of `a` in its compute type, as a fresh array: float32 for the 16-bit formats. */
function widen(a: TypedArray, dtype: DType): TypedArray {
  if (dtype === "float16") {
    const out = new Float32Array(a.length);
    out.set(f16(a));
    return out;
  }
  if (dtype === "bfloat16") {
    const out = new Float32Array(a.length), bits = new Uint32Array(out.buffer), h = u16(a);
    for (let i = 0; i < h.length; i++) bits[i] = bf16Bits32(h[i]);
    return out;
  }
  return a.slice();
}

/** Stores compute-type values into `dst`, rounding to the 16-bit formats once. */
function narrow(acc: TypedArray, dst: TypedArray, dtype: DType): void {
  if (dtype === "float16") {
    f16(dst).set(acc as Float32Array);
  } else if (dtype === "bfloat16") {
    const bits = new Uint32Array(acc.buffer, acc.byteOffset, acc.length), out = u16(dst);
    for (let i = 0; i < bits.length; i++) out[i] = bf16FromBits32(bits[i]);
  } else {
    (dst as Float64Array).set(acc as Float64Array);
  }
}

/** Divides compute-type values in place as avg and divide do: scale floats, truncate integers. */
function finish(acc: TypedArray, divisor: number): void {
  const n = acc.length;
  if (acc instanceof Float32Array) {
    const inv = Math.fround(1 / Math.fround(divisor));
    for (let i = 0; i < n; i++) acc[i] *= inv;
  } else if (acc instanceof Float64Array) {
    const inv = 1 / divisor;
    for (let i = 0; i < n; i++) acc[i] *= inv;
  } else if (acc instanceof BigInt64Array || acc instanceof BigUint64Array) {
    const q = BigInt(divisor);
    for (let i = 0; i < n; i++) acc[i] /= q;
  } else {
    // |value| < 2^32 and divisor <= 2^53: the double quotient never crosses an integer.
    const a = acc as Int32Array;
    for (let i = 0; i < n; i++) a[i] = Math.trunc(a[i] / divisor);
  }
}

/** The loop of one binary step of `op` on `dtype` (bool by its uint8 op); the checks made it exist. */
function loopOf(dtype: DType, op: BinaryOp): Loop {
  return loopsOf(dtype)[dtype === "bool" ? boolOpAsUint8(op) as BinaryOp : op] as Loop;
}

/** float32 bits → the nearest bfloat16, as a number (round to nearest even; NaN stays NaN). */
function bf16Round(x: number): number {
  F32[0] = x;
  U32[0] = bf16FromBits32(U32[0]) << 16;
  return F32[0];
}
const F32 = new Float32Array(1);
const U32 = new Uint32Array(F32.buffer);

/**
 * premulSum into `acc` (the compute type): every product `src · factor` rounded to the dtype, summed in
 * source order in the compute type (the factor is already the dtype's).
 */
function premulSum(dtype: DType, srcs: readonly TypedArray[], factor: number, n: number): TypedArray {
  const acc = dtype === "float64" ? new Float64Array(n) : new Float32Array(n);
  const round = dtype === "float16"
    ? Math.f16round
    : dtype === "bfloat16"
    ? (x: number) => bf16Round(Math.fround(x))
    : dtype === "float32"
    ? Math.fround
    : (x: number) => x;
  for (let j = 0; j < srcs.length; j++) {
    // The sources' values, exactly (the 16-bit formats widened); a product of two of them is exact in
    // double, so `round` rounds it once, as the kernel's float32 (or float64) product does.
    const x = widen(srcs[j], dtype);
    for (let i = 0; i < n; i++) {
      const p = round((x[i] as number) * factor);
      acc[i] = j === 0 ? p : (acc[i] as number) + p;
    }
  }
  return acc;
}

/**
 * `dst = op(dst, src)`; see `Kernels.reduce()`.
 *
 * @param dst The accumulator, updated in place.
 * @param src The other operand.
 * @param options The op and dtype.
 * @throws {TypeError} On an unsupported array, a dtype mismatch, or an unknown op or dtype.
 * @throws {RangeError} On op avg or arrays of different lengths.
 */
export function reduce(dst: TypedArray, src: TypedArray, options: ReduceOptions = {}): void {
  const { dtype, op } = checkReduce(dst, src, options);
  const loop = loopOf(dtype, op as BinaryOp);
  if (!isHalf(dtype)) {
    // A source sharing dst's buffer is read as it was before the call, as the staged kernel sees it.
    loop(dst, src.buffer === dst.buffer ? src.slice() : src, dst.length);
    return;
  }
  const acc = widen(dst, dtype);
  loop(acc, widen(src, dtype), dst.length);
  narrow(acc, dst, dtype);
}

/**
 * `dst = op(srcs[0], ..., srcs[k-1])`, accumulating in the compute type; see
 * `Kernels.reduceMany()`.
 *
 * @param dst The result; it may be one of the sources.
 * @param srcs The sources.
 * @param options The op and dtype.
 * @throws {TypeError} On an unsupported array, a dtype mismatch, or an unknown op or dtype.
 * @throws {RangeError} On no sources or arrays of different lengths.
 */
export function reduceMany(dst: TypedArray, srcs: readonly TypedArray[], options: ReduceOptions = {}): void {
  const { dtype, op, factor } = checkReduceMany(dst, srcs, options);
  const n = dst.length;
  if (op === "premulSum") {
    narrow(premulSum(dtype, srcs, factor as number, n), dst, dtype);
    return;
  }
  const loop = loopOf(dtype, op === "avg" ? "sum" : op as BinaryOp);
  const acc = widen(srcs[0], dtype);
  for (let j = 1; j < srcs.length; j++) loop(acc, isHalf(dtype) ? widen(srcs[j], dtype) : srcs[j], n);
  if (op === "avg") finish(acc, srcs.length);
  narrow(acc, dst, dtype);
}

/**
 * `dst = dst / divisor`; see `Kernels.divide()`.
 *
 * @param dst The values, divided in place.
 * @param divisor The divisor.
 * @param options The dtype.
 * @throws {TypeError} On an unsupported array or dtype. @throws {RangeError} On a bad divisor.
 */
export function divide(dst: TypedArray, divisor: number, options: DivideOptions = {}): void {
  const dtype = checkDivide(dst, divisor, options);
  if (isHalf(dtype)) {
    const acc = widen(dst, dtype);
    finish(acc, divisor);
    narrow(acc, dst, dtype);
  } else {
    finish(dst, divisor);
  }
}

/**
 * float32 -> float16 bits; see `Kernels.castF32ToF16()`.
 *
 * @param src The float32 values.
 * @param dst The float16 bits.
 * @throws {TypeError} On a wrong array class. @throws {RangeError} On different lengths.
 */
export function castF32ToF16(src: Float32Array, dst: Uint16Array | Float16Array): void {
  checkCast("float16", true, src, dst);
  const out = f16(dst), bits = u16(dst), n = src.length;
  for (let i = 0; i < n; i++) out[i] = src[i];
  const from = new Uint32Array(src.buffer, src.byteOffset, n);
  for (let i = 0; i < n; i++) if (src[i] !== src[i]) bits[i] = f16NaNFromBits32(from[i]);
}

/**
 * float16 bits -> float32; see `Kernels.castF16ToF32()`.
 *
 * @param src The float16 bits.
 * @param dst The float32 values.
 * @throws {TypeError} On a wrong array class. @throws {RangeError} On different lengths.
 */
export function castF16ToF32(src: Uint16Array | Float16Array, dst: Float32Array): void {
  checkCast("float16", false, src, dst);
  const h = f16(src), n = src.length;
  for (let i = 0; i < n; i++) dst[i] = h[i];
  const bits = new Uint32Array(dst.buffer, dst.byteOffset, n), raw = u16(src);
  for (let i = 0; i < n; i++) if (dst[i] !== dst[i]) bits[i] = f16NaNBits32(raw[i]);
}

/**
 * float32 -> bfloat16 bits; see `Kernels.castF32ToBf16()`.
 *
 * @param src The float32 values.
 * @param dst The bfloat16 bits.
 * @throws {TypeError} On a wrong array class. @throws {RangeError} On different lengths.
 */
export function castF32ToBf16(src: Float32Array, dst: Uint16Array): void {
  checkCast("bfloat16", true, src, dst);
  const bits = new Uint32Array(src.buffer, src.byteOffset, src.length);
  for (let i = 0; i < bits.length; i++) dst[i] = bf16FromBits32(bits[i]);
}

/**
 * bfloat16 bits -> float32; see `Kernels.castBf16ToF32()`.
 *
 * @param src The bfloat16 bits.
 * @param dst The float32 values.
 * @throws {TypeError} On a wrong array class. @throws {RangeError} On different lengths.
 */
export function castBf16ToF32(src: Uint16Array, dst: Float32Array): void {
  checkCast("bfloat16", false, src, dst);
  const bits = new Uint32Array(dst.buffer, dst.byteOffset, dst.length);
  for (let i = 0; i < bits.length; i++) bits[i] = bf16Bits32(src[i]);
}

/**
 * `x = alpha * x`; see `Kernels.scale()`.
 *
 * @param x The values, scaled in place.
 * @param alpha The factor.
 * @throws {TypeError} On a wrong array class or a non-number alpha.
 */
export function scale(x: Float32Array | Float64Array, alpha: number): void {
  const dtype = checkScale(x, alpha);
  const a = dtype === "float32" ? Math.fround(alpha) : alpha;
  for (let i = 0; i < x.length; i++) x[i] *= a;
}

/**
 * `y = y + alpha * x`, the product rounded first; see `Kernels.axpy()`.
 *
 * @param y The accumulator, updated in place.
 * @param x The addend.
 * @param options The factor alpha.
 * @throws {TypeError} On a wrong array class or mixed dtypes. @throws {RangeError} On different lengths.
 */
export function axpy(
  y: Float32Array | Float64Array,
  x: Float32Array | Float64Array,
  options: AxpyOptions = {},
): void {
  const { dtype, alpha } = checkAxpy(y, x, options);
  if (dtype === "float32") {
    const a = Math.fround(alpha);
    for (let i = 0; i < y.length; i++) y[i] += Math.fround(a * x[i]);
  } else {
    for (let i = 0; i < y.length; i++) y[i] += alpha * x[i];
  }
}

/**
 * `C = op(A) · op(B)` (+ C), each element summed in order p = 0 .. k-1 from +0 (or from C), every
 * product and sum rounded to float32; see `Kernels.matmul()`.
 *
 * @param a A.
 * @param b B.
 * @param options The output, shapes and flags.
 * @throws {TypeError} On a wrong array class. @throws {RangeError} On shapes that do not match.
 */
export function matmul(a: Float32Array, b: Float32Array, options: MatmulOptions): void {
  const { m, k, n } = checkMatmul(a, b, options);
  const { c, transA = false, transB = false, accumulate = false } = options;
  const A = a.slice(), B = b.slice(); // c may share their buffer: read the inputs as they were
  for (let i = 0; i < m; i++) {
    for (let j = 0; j < n; j++) {
      let acc = accumulate ? c[i * n + j] : 0;
      for (let p = 0; p < k; p++) {
        const x = transA ? A[p * m + i] : A[i * k + p];
        const y = transB ? B[j * k + p] : B[p * n + j];
        acc = Math.fround(acc + Math.fround(x * y));
      }
      c[i * n + j] = acc;
    }
  }
}
