/**
 * Scalar TypeScript references of the compression kernels (`compress.ts`, `kernels/compress.c`): the same
 * results bit for bit, written for clarity. Tests compare the kernels with them, and the benchmark times
 * them as the plain-TypeScript baseline. Every float32 operation is a double operation rounded once with
 * `Math.fround` (exact for +, -, *, / of float32 operands), so `Math.fround(x / scale)` is C's `x / scale`
 * in float.
 *
 * @example The reference and the kernel agree
 * ```ts
 * import { quantizeInt8Reference } from "./compress_reference.ts";
 * import { compressionKernels } from "./compress.ts";
 * import assert from "node:assert/strict";
 * const src = new Float32Array([0.3, -1.7, 2.5, 1e-3]);
 * const k = await compressionKernels();
 * assert.deepEqual(quantizeInt8Reference(src, { blockSize: 3 }), k.quantizeInt8(src, { blockSize: 3 }));
 * ```
 *
 * @module
 */
import {
  checkDequantizeInt8,
  checkQuantizeInt8,
  checkScatterAdd,
  checkSignCompress,
  checkSignDecompress,
  checkTopK,
  indexOutOfRange,
} from "./_compress_check.ts";
import type {
  DequantizeInt8Options,
  Int8Packed,
  QuantizeInt8Options,
  SignCompressOptions,
  SignDecompressOptions,
  SignPacked,
  SparseVector,
  TopKOptions,
} from "./compress.ts";

const FLT_MAX = 3.4028234663852886e38;
const word = new Uint32Array(1);
const float = new Float32Array(word.buffer);

/** The float32 whose bits are `u`. */
function fromBits(u: number): number {
  word[0] = u;
  return float[0];
}

/** The bits of a float32 array, without copying. */
function bitsOf(x: Float32Array): Uint32Array {
  return new Uint32Array(x.buffer, x.byteOffset, x.length);
}

/** Rounds to the nearest integer, ties to even (`Math.round` sends ties up). */
function roundHalfEven(v: number): number {
  const r = Math.round(v);
  return r - v === 0.5 && r % 2 !== 0 ? r - 1 : r;
}

/**
 * Reference of {@linkcode CompressionKernels.quantizeInt8}.
 *
 * @param src The values.
 * @param options The block size, and outputs to reuse.
 * @returns The int8 values and one scale per block.
 * @throws {TypeError} On a wrong array class or missing options.
 * @throws {RangeError} On a bad block size or outputs of the wrong length.
 */
export function quantizeInt8Reference(src: Float32Array, options: QuantizeInt8Options): Int8Packed {
  const { blockSize, q, scales } = checkQuantizeInt8(src, options);
  const n = src.length, bits = bitsOf(src);
  for (let start = 0, b = 0; start < n; start += blockSize, b++) {
    const end = Math.min(n, start + blockSize);
    let absmax = 0; // as bits: any NaN > +Inf > every finite magnitude
    for (let i = start; i < end; i++) absmax = Math.max(absmax, bits[i] & 0x7fffffff);
    const scale = Math.fround(fromBits(absmax) / 127);
    scales[b] = scale;
    if (!(scale > 0 && scale <= FLT_MAX)) {
      q.fill(0, start, end);
      continue;
    }
    for (let i = start; i < end; i++) {
      q[i] = Math.min(127, Math.max(-127, roundHalfEven(Math.fround(src[i] / scale))));
    }
  }
  return { q, scales };
}

/**
 * Reference of {@linkcode CompressionKernels.dequantizeInt8}.
 *
 * @param packed The int8 values and scales.
 * @param dst The output.
 * @param options The block size, and whether to accumulate.
 * @throws {TypeError} On a wrong array class or missing options.
 * @throws {RangeError} On a bad block size or arrays of the wrong length.
 */
export function dequantizeInt8Reference(
  packed: Int8Packed,
  dst: Float32Array,
  options: DequantizeInt8Options,
): void {
  const { blockSize, accumulate } = checkDequantizeInt8(packed, dst, options);
  const { q, scales } = packed, n = dst.length;
  for (let i = 0; i < n; i++) {
    const v = Math.fround(q[i] * scales[Math.floor(i / blockSize)]);
    dst[i] = accumulate ? dst[i] + v : v; // the store rounds the sum to float32
  }
}

/** Lanes of the block sum of sign compression; kernels/compress.c's SIGN_LANES. */
const SIGN_LANES = 16;

/**
 * Reference of {@linkcode CompressionKernels.signCompress}: updates `residual` in place.
 *
 * @param src The gradient.
 * @param residual The error-feedback residual, read then overwritten.
 * @param options The block size, and outputs to reuse.
 * @returns The packed bits and one scale per block.
 * @throws {TypeError} On a wrong array class or missing options.
 * @throws {RangeError} On a bad block size or arrays of the wrong length.
 */
export function signCompressReference(
  src: Float32Array,
  residual: Float32Array,
  options: SignCompressOptions,
): SignPacked {
  const { blockSize, bits, scales } = checkSignCompress(src, residual, options);
  const n = src.length, lanes = new Float32Array(SIGN_LANES);
  bits.fill(0);
  for (let start = 0, b = 0; start < n; start += blockSize, b++) {
    const end = Math.min(n, start + blockSize);
    lanes.fill(0);
    for (let i = start; i < end; i++) {
      residual[i] = src[i] + residual[i]; // x, rounded to float32 by the store
      lanes[(i - start) % SIGN_LANES] += Math.abs(residual[i]);
    }
    for (let w = SIGN_LANES >> 1; w > 0; w >>= 1) {
      for (let j = 0; j < w; j++) lanes[j] += lanes[j + w];
    }
    const scale = Math.fround(lanes[0] / Math.fround(end - start));
    scales[b] = scale;
    for (let i = start; i < end; i++) {
      const x = residual[i];
      if (x >= 0) {
        bits[i >> 3] |= 1 << (i & 7);
        residual[i] = x - scale;
      } else {
        residual[i] = x + scale;
      }
    }
  }
  return { bits, scales };
}

/**
 * Reference of {@linkcode CompressionKernels.signDecompress}.
 *
 * @param packed The bits and scales.
 * @param dst The output.
 * @param options The block size, and whether to accumulate.
 * @throws {TypeError} On a wrong array class or missing options.
 * @throws {RangeError} On a bad block size or arrays of the wrong length.
 */
export function signDecompressReference(
  packed: SignPacked,
  dst: Float32Array,
  options: SignDecompressOptions,
): void {
  const { blockSize, accumulate } = checkSignDecompress(packed, dst, options);
  const { bits, scales } = packed, n = dst.length;
  for (let i = 0; i < n; i++) {
    const scale = scales[Math.floor(i / blockSize)];
    const v = (bits[i >> 3] >> (i & 7)) & 1 ? scale : -scale;
    dst[i] = accumulate ? dst[i] + v : v;
  }
}

/** The magnitude key of top-k: |x| as bits, every NaN folded onto one key just above +Inf. */
const NAN_KEY = 0x7f800001;

/**
 * Reference of {@linkcode CompressionKernels.topK}. The threshold (the k-th largest key) comes from two
 * 16-bit histograms; every element above it is kept, and of those equal to it the first ones.
 *
 * @param src The values.
 * @param k How many to keep.
 * @param options Outputs to reuse.
 * @returns The indices, ascending, and their values.
 * @throws {TypeError} On a wrong array class.
 * @throws {RangeError} On k outside 0..src.length or outputs of the wrong length.
 */
export function topKReference(src: Float32Array, k: number, options?: TopKOptions): SparseVector {
  const { indices, values } = checkTopK(src, k, options);
  if (k === 0) return { indices, values };
  const n = src.length, bits = bitsOf(src);
  const keys = new Uint32Array(n);
  for (let i = 0; i < n; i++) keys[i] = Math.min(bits[i] & 0x7fffffff, NAN_KEY);
  const hist = new Uint32Array(1 << 16);
  for (let i = 0; i < n; i++) hist[keys[i] >>> 16]++;
  let need = k, high = hist.length - 1;
  for (; hist[high] < need; high--) need -= hist[high];
  hist.fill(0);
  for (let i = 0; i < n; i++) if (keys[i] >>> 16 === high) hist[keys[i] & 0xffff]++;
  let low = hist.length - 1;
  for (; hist[low] < need; low--) need -= hist[low];
  const threshold = high * 0x10000 + low; // `need` elements equal to it are kept, the first ones
  for (let i = 0, o = 0; o < k; i++) {
    if (keys[i] > threshold || (keys[i] === threshold && need-- > 0)) {
      indices[o] = i;
      values[o++] = src[i];
    }
  }
  return { indices, values };
}

/**
 * Reference of {@linkcode CompressionKernels.scatterAdd}.
 *
 * @param dst The dense accumulator.
 * @param sparse The indices and values.
 * @throws {TypeError} On a wrong array class.
 * @throws {RangeError} On an index >= dst.length (dst is left untouched) or unequal lengths.
 */
export function scatterAddReference(dst: Float32Array, sparse: SparseVector): void {
  checkScatterAdd(dst, sparse);
  const { indices, values } = sparse;
  const bad = indices.findIndex((i) => i >= dst.length);
  if (bad >= 0) throw indexOutOfRange(bad, indices[bad], dst.length);
  for (let i = 0; i < indices.length; i++) dst[indices[i]] += values[i];
}
