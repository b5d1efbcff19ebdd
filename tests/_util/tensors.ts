/**
 * Test tensors for the kernel tests: random data of every dtype (with the special values mixed in),
 * placed in a plain array, at an odd byte offset inside a larger buffer, or in wasm memory; and a
 * bit-for-bit comparison that treats any two NaNs as equal.
 *
 * @module
 */
import type { DType, TypedArray } from "../../core/dtype.ts";
import { DTYPE_ARRAY, dtypeSize, isFloat } from "../../core/dtype.ts";
import type { WasmHeap } from "../../wasm/loader.ts";
import type { Rng } from "./rng.ts";

/** A TypedArray constructor over a buffer. */
/** Where a test tensor lives. */
export type Placement = "plain" | "offset" | "wasm";

/** Special float32 values, as bits: NaNs (quiet, negative, signaling), zeros, infinities, extremes. */
export const F32_SPECIAL_BITS: readonly number[] = [
  0x7fc00000,
  0xffc00000,
  0x7f800001,
  0x7fbfffff,
  0x00000000,
  0x80000000,
  0x7f800000,
  0xff800000,
  0x7f7fffff,
  0xff7fffff,
  0x00000001,
  0x80000001,
  0x00800000,
  0x007fffff,
  0x3f800000,
  0xbf800000,
];

/** Special float64 values. */
export const F64_SPECIALS: readonly number[] = [
  NaN,
  0,
  -0,
  Infinity,
  -Infinity,
  Number.MAX_VALUE,
  -Number.MAX_VALUE,
  Number.MIN_VALUE,
  -Number.MIN_VALUE,
  2.2250738585072014e-308,
  1,
  -1,
];

/** Special float16 bit patterns. */
export const F16_SPECIAL_BITS: readonly number[] = [
  0x7e00,
  0xfe00,
  0x7c01,
  0x7dff,
  0x0000,
  0x8000,
  0x7c00,
  0xfc00,
  0x7bff,
  0xfbff,
  0x0001,
  0x8001,
  0x0400,
  0x03ff,
  0x3c00,
  0xbc00,
];

/** Special bfloat16 bit patterns. */
export const BF16_SPECIAL_BITS: readonly number[] = [
  0x7fc0,
  0xffc0,
  0x7f81,
  0x7fbf,
  0x0000,
  0x8000,
  0x7f80,
  0xff80,
  0x7f7f,
  0xff7f,
  0x0001,
  0x8001,
  0x0080,
  0x007f,
  0x3f80,
  0xbf80,
];

const f32Scratch = new Float32Array(1);
const u32Scratch = new Uint32Array(f32Scratch.buffer);

/** A float32 from its bits. */
export function f32FromBits(bits: number): number {
  u32Scratch[0] = bits;
  return f32Scratch[0];
}

/** The bits of a float32 value. */
export function bitsOfF32(value: number): number {
  f32Scratch[0] = value;
  return u32Scratch[0];
}

/**
 * Fills `array` (of `dtype`) with random data: integers take uniform bits (so sums and products wrap);
 * floats are mostly of moderate size (so that sums and products mostly stay finite), with uniform bit
 * patterns (NaNs, infinities, subnormals, huge values) and the special values mixed in.
 */
export function fillRandom(rng: Rng, dtype: DType, array: TypedArray): void {
  rng.fillBits(array);
  if (!isFloat(dtype)) return;
  // One draw per element: its low byte picks the kind (5% special, 7% uniform bits, 88% moderate); a
  // moderate value keeps its random sign and mantissa and gets an exponent within 2^±12 of 1.
  const n = array.length;
  const draws = new Uint32Array(n);
  rng.fillBits(draws);
  if (dtype === "float64") {
    const a = array as Float64Array, w = new Uint32Array(array.buffer, array.byteOffset, 2 * n);
    for (let i = 0; i < n; i++) {
      const d = draws[i], kind = d & 0xff, e = ((d >>> 8) % 25) - 12;
      if (kind < 13) a[i] = F64_SPECIALS[(d >>> 8) % F64_SPECIALS.length];
      else if (kind >= 31) w[2 * i + 1] = (w[2 * i + 1] & 0x800fffff) | ((1023 + e) << 20);
    }
    return;
  }
  const [bits, specials, keep, shift, bias] = dtype === "float32"
    ? [new Uint32Array(array.buffer, array.byteOffset, n), F32_SPECIAL_BITS, 0x807fffff, 23, 127]
    : dtype === "float16"
    ? [array as Uint16Array, F16_SPECIAL_BITS, 0x83ff, 10, 15]
    : [array as Uint16Array, BF16_SPECIAL_BITS, 0x807f, 7, 127];
  const range = dtype === "float16" ? 8 : 12; // float16 stays finite up to 2^15
  for (let i = 0; i < n; i++) {
    const d = draws[i], kind = d & 0xff, e = ((d >>> 8) % (2 * range + 1)) - range;
    if (kind < 13) bits[i] = specials[(d >>> 8) % specials.length];
    else if (kind >= 31) bits[i] = ((bits[i] & keep) | ((bias + e) << shift)) >>> 0;
  }
}

/**
 * `count` tensors of `n` elements of `dtype`. "offset" places each one element (one byte for int8/uint8:
 * an odd address) into a larger buffer; "wasm" allocates them on `heap`, at addresses that are not
 * 16-aligned, and takes the views after the last allocation (an allocation that grows memory detaches
 * the views taken before it).
 */
export function tensors(
  dtype: DType,
  n: number,
  count: number,
  placement: Placement = "plain",
  heap?: WasmHeap,
): TypedArray[] {
  return tensorsOf(Array(count).fill(dtype), n, placement, heap);
}

/** Like {@linkcode tensors}, one tensor of each of `dtypes`. */
export function tensorsOf(
  dtypes: readonly DType[],
  n: number,
  placement: Placement = "plain",
  heap?: WasmHeap,
): TypedArray[] {
  if (placement === "plain") {
    return dtypes.map((d) => new DTYPE_ARRAY[d](new ArrayBuffer(n * dtypeSize(d)), 0, n));
  }
  if (placement === "offset") {
    return dtypes.map((d) => new DTYPE_ARRAY[d](new ArrayBuffer((n + 2) * dtypeSize(d)), dtypeSize(d), n));
  }
  if (heap === undefined) throw new TypeError("A wasm tensor needs the heap");
  const ptrs = dtypes.map((d) => heap.alloc((n + 1) * dtypeSize(d), 16) + dtypeSize(d));
  return ptrs.map((p, i) => new DTYPE_ARRAY[dtypes[i]](heap.memory.buffer as ArrayBuffer, p, n));
}

/** Random tensors: {@linkcode tensors} filled by {@linkcode fillRandom}. */
export function randomTensors(
  rng: Rng,
  dtype: DType,
  n: number,
  count: number,
  placement: Placement = "plain",
  heap?: WasmHeap,
): TypedArray[] {
  const out = tensors(dtype, n, count, placement, heap);
  for (const t of out) fillRandom(rng, dtype, t);
  return out;
}

/** A 32-bit seed from any labels (FNV-1a of their text), so each test case has its own stream. */
export function seedOf(...labels: unknown[]): number {
  let h = 0x811c9dc5;
  for (const c of labels.join("/")) h = Math.imul(h ^ c.charCodeAt(0), 0x01000193);
  return h >>> 0;
}

/** A plain copy of a tensor (outside wasm memory). */
export function copyOf(array: TypedArray): TypedArray {
  return array.slice();
}

/** Whether element `i` of a tensor of `dtype` is a NaN. */
function isNaNAt(dtype: DType, array: TypedArray, i: number): boolean {
  const v = array[i];
  if (dtype === "float16") return ((v as number) & 0x7fff) > 0x7c00;
  if (dtype === "bfloat16") return ((v as number) & 0x7fff) > 0x7f80;
  if (dtype === "float32" || dtype === "float64") return Number.isNaN(v);
  return false;
}

function show(dtype: DType, v: number | bigint): string {
  if (dtype === "float16" || dtype === "bfloat16") return `0x${(v as number).toString(16).padStart(4, "0")}`;
  if (dtype === "float32") return `${Object.is(v, -0) ? "-0" : v} (0x${bitsOfF32(v as number).toString(16)})`;
  return Object.is(v, -0) ? "-0" : String(v);
}

/** The bytes of a tensor as the widest unsigned words its alignment allows, and words per element. */
function words(array: TypedArray, size: number): [Uint8Array | Uint16Array | Uint32Array, number] {
  if (size === 1) return [new Uint8Array(array.buffer, array.byteOffset, array.length), 1];
  if (size === 2) return [new Uint16Array(array.buffer, array.byteOffset, array.length), 1];
  return [new Uint32Array(array.buffer, array.byteOffset, array.length * size / 4), size / 4];
}

/**
 * Asserts that two tensors of `dtype` hold the same bits, except that any NaN equals any NaN.
 *
 * @throws {Error} Naming the first differing index, both values and `context`.
 */
export function assertSameBits(actual: TypedArray, expected: TypedArray, dtype: DType, context = ""): void {
  if (actual.length !== expected.length) {
    throw new Error(`${context}: length ${actual.length}, expected ${expected.length}`);
  }
  const size = dtypeSize(dtype);
  const [a, per] = words(actual, size), [e] = words(expected, size);
  for (let w = 0; w < a.length; w++) {
    if (a[w] === e[w]) continue;
    const i = Math.floor(w / per);
    if (isNaNAt(dtype, actual, i) && isNaNAt(dtype, expected, i)) {
      w = (i + 1) * per - 1;
      continue;
    }
    throw new Error(
      `${context}: element ${i} of ${actual.length} is ${show(dtype, actual[i])}, expected ${
        show(dtype, expected[i])
      }`,
    );
  }
}
