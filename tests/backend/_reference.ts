/**
 * Seeded inputs and expected results by formula for the backend tests: every rank can compute every
 * other rank's input for a case, and so the exact (integers) or float64 (floats) expected result, without
 * trusting the system under test.
 *
 * @module
 */
import { boolOpAsUint8, type DType, premulFactor, type ReduceOp, type TypedArray } from "../../core/dtype.ts";
import { Rng } from "../_util/rng.ts";

const F32 = new Float32Array(1);
const U32 = new Uint32Array(F32.buffer);

/** float32 → bfloat16 bits, round to nearest even. */
export function toBf16(x: number): number {
  F32[0] = x;
  const u = U32[0];
  if ((u & 0x7fffffff) > 0x7f800000) return (u >>> 16) | 0x40;
  return ((u + 0x7fff + ((u >>> 16) & 1)) >>> 16) & 0xffff;
}

/** bfloat16 bits → number. */
export function fromBf16(b: number): number {
  U32[0] = b << 16;
  return F32[0];
}

/** A new array of `n` elements of `dtype` (bfloat16 as Uint16Array). */
export function makeArray(dtype: DType, n: number): TypedArray {
  switch (dtype) {
    case "int8":
      return new Int8Array(n);
    case "uint8":
      return new Uint8Array(n);
    case "int32":
      return new Int32Array(n);
    case "uint32":
      return new Uint32Array(n);
    case "int64":
      return new BigInt64Array(n);
    case "uint64":
      return new BigUint64Array(n);
    case "float16":
      return new Float16Array(n);
    case "bfloat16":
      return new Uint16Array(n);
    case "float32":
      return new Float32Array(n);
    case "float64":
      return new Float64Array(n);
    case "bool":
      return new Uint8Array(n);
  }
}

/** Element i of `a` as a number or bigint (bfloat16 decoded). */
export function get(dtype: DType, a: TypedArray, i: number): number | bigint {
  return dtype === "bfloat16" ? fromBf16(a[i] as number) : a[i];
}

const BITS: Partial<Record<DType, number>> = {
  int8: 8,
  uint8: 8,
  int32: 32,
  uint32: 32,
  int64: 64,
  uint64: 64,
};
const SIGNED: Partial<Record<DType, boolean>> = { int8: true, int32: true, int64: true };

/**
 * A seeded input of rank `rank` for case `seed`, values suited to `op` (small for prod; 0 or 1 for bool,
 * mostly 1 for the ops that and them, so the and is not always 0).
 */
export function input(dtype: DType, op: ReduceOp, n: number, seed: number, rank: number): TypedArray {
  const rng = new Rng(seed * 1009 + rank * 7919 + 1);
  const a = makeArray(dtype, n);
  const bits = BITS[dtype];
  const and = dtype === "bool" && boolOpAsUint8(op) === "min";
  for (let i = 0; i < n; i++) {
    if (dtype === "bool") {
      a[i] = (and ? (rng.u32() & 7) !== 0 : (rng.u32() & 1) === 1) ? 1 : 0;
    } else if (bits !== undefined) {
      // Full-range values, so sums and products really wrap.
      const v = bits === 64 ? rng.u64() : BigInt(rng.u32() & (bits === 8 ? 0xff : 0xffffffff));
      const wrapped = SIGNED[dtype] ? BigInt.asIntN(bits, v) : BigInt.asUintN(bits, v);
      a[i] = (bits === 64 ? wrapped : Number(wrapped)) as never;
    } else {
      const x = op === "prod" ? 0.5 + rng.float() : rng.float() * 2 - 1;
      if (dtype === "bfloat16") a[i] = toBf16(x);
      else a[i] = x;
    }
  }
  return a;
}

/** Unit roundoff of each float dtype. */
const EPS: Partial<Record<DType, number>> = {
  float16: 2 ** -11,
  bfloat16: 2 ** -8,
  float32: 2 ** -24,
  float64: 2 ** -53,
};

/** Rank r's premulSum factor in the backend tests: different on every rank (a weighted sum). */
export function rankFactor(rank: number): number {
  return 0.75 - 0.3 * rank;
}

/**
 * Checks `got` against the reduction of `inputs` by `op`; returns the index of the first wrong element and
 * what was expected, or undefined. `premulSum` takes each rank's factor (`factors[r]`, by default
 * {@linkcode rankFactor}), the product rounded to the dtype as the kernels round it.
 */
export function checkReduction(
  dtype: DType,
  op: ReduceOp,
  inputs: readonly TypedArray[],
  got: TypedArray,
  offset = 0,
  factors: readonly number[] = inputs.map((_, r) => rankFactor(r)),
): { index: number; expected: string; got: string } | undefined {
  const n = inputs.length;
  const bits = BITS[dtype];
  if (dtype === "bool") return checkBool(op, inputs, got, offset);
  if (bits === 64) return checkBig(dtype, op, inputs, got, offset);
  if (bits !== undefined) {
    const mod = 2 ** bits;
    const signed = SIGNED[dtype] ?? false;
    const wrap = (v: number): number => {
      const u = ((v % mod) + mod) % mod;
      return signed && u >= mod / 2 ? u - mod : u;
    };
    for (let i = 0; i < got.length; i++) {
      const j = offset + i;
      let acc = inputs[0][j] as number;
      for (let r = 1; r < n; r++) {
        const x = inputs[r][j] as number;
        if (op === "sum" || op === "avg") acc += x; // exact: n · 2^32 < 2^53
        else if (op === "prod") acc = wrap(Math.imul(acc, x)); // low 32 bits of the product, exactly
        else if (op === "min") acc = x < acc ? x : acc;
        else if (op === "band") acc = wrap(acc & x);
        else if (op === "bor") acc = wrap(acc | x);
        else if (op === "bxor") acc = wrap(acc ^ x);
        else acc = x > acc ? x : acc;
      }
      let e = wrap(acc);
      if (op === "avg") e = Math.trunc(e / n);
      if (got[i] !== e) return { index: i, expected: String(e), got: String(got[i]) };
    }
    return undefined;
  }
  const eps = EPS[dtype] ?? 0;
  const round = dtype === "float16" ? Math.f16round : dtype === "float64" ? (x: number) => x : Math.fround;
  for (let i = 0; i < got.length; i++) {
    const j = offset + i;
    let e = op === "prod" ? 1 : op === "min" ? Infinity : op === "max" ? -Infinity : 0;
    let mag = 0;
    for (let r = 0; r < n; r++) {
      let x = get(dtype, inputs[r], j) as number;
      // premulSum: the product in the dtype (bfloat16's within its rounding, which the tolerance covers).
      if (op === "premulSum") x = round(x * premulFactor(dtype, factors[r]));
      if (op === "prod") e *= x;
      else if (op === "min") e = Math.min(e, x);
      else if (op === "max") e = Math.max(e, x);
      else e += x;
      mag += Math.abs(x);
    }
    let tol = op === "prod"
      ? 2 * n * eps * Math.abs(e)
      : op === "min" || op === "max"
      ? 0
      : 2 * n * eps * mag;
    if (op === "avg") {
      e /= n;
      tol = tol / n + 2 * eps * Math.abs(e);
    }
    const g = get(dtype, got, i) as number;
    if (!(Math.abs(g - e) <= tol)) return { index: i, expected: `${e} ± ${tol}`, got: String(g) };
  }
  return undefined;
}

function checkBig(
  dtype: DType,
  op: ReduceOp,
  inputs: readonly TypedArray[],
  got: TypedArray,
  offset: number,
): { index: number; expected: string; got: string } | undefined {
  const n = inputs.length;
  const signed = SIGNED[dtype] ?? false;
  for (let i = 0; i < got.length; i++) {
    const j = offset + i;
    let acc = inputs[0][j] as bigint;
    for (let r = 1; r < n; r++) {
      const x = inputs[r][j] as bigint;
      if (op === "sum" || op === "avg") acc += x;
      else if (op === "prod") acc *= x;
      else if (op === "min") acc = x < acc ? x : acc;
      else if (op === "band") acc &= x;
      else if (op === "bor") acc |= x;
      else if (op === "bxor") acc ^= x;
      else acc = x > acc ? x : acc;
    }
    let e = signed ? BigInt.asIntN(64, acc) : BigInt.asUintN(64, acc);
    if (op === "avg") e = e / BigInt(n); // BigInt division truncates toward zero, as C does.
    if (got[i] !== e) return { index: i, expected: String(e), got: String(got[i]) };
  }
  return undefined;
}

/** Bools: or (sum, max, bor), and (prod, min, band), xor (bxor) of 0/1 bytes. */
function checkBool(
  op: ReduceOp,
  inputs: readonly TypedArray[],
  got: TypedArray,
  offset: number,
): { index: number; expected: string; got: string } | undefined {
  const as = boolOpAsUint8(op);
  for (let i = 0; i < got.length; i++) {
    const j = offset + i;
    let acc = inputs[0][j] as number;
    for (let r = 1; r < inputs.length; r++) {
      const x = inputs[r][j] as number;
      acc = as === "max" ? acc | x : as === "min" ? acc & x : acc ^ x;
    }
    if (got[i] !== acc) return { index: i, expected: String(acc), got: String(got[i]) };
  }
  return undefined;
}

/** A fast content hash of an array's bytes (FNV-1a over 32-bit words), to compare ranks' results. */
export function hashBytes(a: TypedArray): string {
  const bytes = new Uint8Array(a.buffer, a.byteOffset, a.byteLength);
  let h = 0x811c9dc5;
  for (let i = 0; i < bytes.length; i++) h = Math.imul(h ^ bytes[i], 0x01000193);
  return (h >>> 0).toString(16) + ":" + bytes.length;
}
