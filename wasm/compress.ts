/**
 * Gradient compression kernels in WASM: int8 quantization with one absmax scale per block, 1-bit sign
 * compression with error feedback (1-bit SGD, DeepSpeed's 1-bit Adam), top-k sparsification by magnitude,
 * and the scatter-add that sums sparse contributions. The results are bit for bit those of the
 * TypeScript reference in `compress_reference.ts`; the C sources are `kernels/compress.c`.
 *
 * Semantics:
 * - **int8**: the elements go in blocks of `blockSize` (the last may be shorter). A block's scale is
 *   `absmax / 127` in float32, and `q = clamp(roundHalfEven(x / scale), -127, 127)` with the division in
 *   float32; `x' = q * scale`. A block whose scale is 0 (all zeros, or so tiny that absmax / 127 rounds
 *   to 0) has q = 0. A block holding a NaN gets a NaN scale, one holding ±Inf (and no NaN) a +Inf scale;
 *   both have q = 0, so the whole block decodes to NaN and the receiver sees it.
 * - **sign**: `x = g + e` (g the gradient, e the residual); a block's scale is the mean of |x|, summed in
 *   float32 in a fixed order (element i of the block into lane i % 16, then the lanes folded in halves);
 *   bit i is `x >= 0` (so -0 is positive and NaN negative), packed LSB first into byte `i >> 3`, padding
 *   bits zero; the decompressed value is `+scale` or `-scale`, and `e = x - decompressed`. A NaN in a
 *   block makes its scale and every residual of the block NaN; an infinity makes the scale +Inf and the
 *   residuals non-finite. Check gradients for overflow before compressing (as loss scaling does).
 * - **top-k**: the k elements of largest |x|, returned in ascending index order with their signed values.
 *   NaN counts as larger than +Inf, and all NaNs tie; among equal magnitudes (+0 and -0 are equal) the
 *   smaller index wins. Selection is O(n), no sort: a sampled bracket, then a radix select on the bits of
 *   |x|; the result does not depend on the sample, only the speed does.
 * - **scatter-add**: `dst[indices[i]] += values[i]` for i in order (duplicates accumulate left to right);
 *   every index is checked before anything is written.
 *
 * Arrays may be views at any byte offset. Arrays in wasm memory (from {@linkcode WasmHeap.alloc} and
 * {@linkcode WasmHeap.view}) are used in place; the others are copied onto the heap's stack for the call
 * (outputs only back), which is popped before the call returns, so calls allocate no wasm memory once it
 * has grown to its working size. Staging can grow memory, which detaches every view of it taken earlier
 * (the addresses stay valid, and the returned outputs are fresh views): allocate first, take views last.
 * Arrays of one call must not share memory.
 *
 * @example Compress a gradient to int8 and sum it into an accumulator
 * ```ts
 * import { compressionKernels } from "@dcomm/dcomm/compress";
 * import assert from "node:assert/strict";
 * const k = await compressionKernels();
 * const grad = new Float32Array([63.5, -127, 1, 2.5]);
 * const packed = k.quantizeInt8(grad, { blockSize: 4 }); // scale = absmax / 127 = 1
 * assert.deepEqual(packed.q, new Int8Array([64, -127, 1, 2])); // ties go to even
 * const sum = new Float32Array(4).fill(1);
 * k.dequantizeInt8(packed, sum, { blockSize: 4, accumulate: true });
 * assert.deepEqual(sum, new Float32Array([65, -126, 2, 3]));
 * ```
 *
 * @module
 */
import type { TypedArray } from "../core/dtype.ts";
import {
  blockCount,
  checkBlockSize,
  checkCount,
  checkDequantizeInt8,
  checkQuantizeInt8,
  checkScatterAdd,
  checkSignCompress,
  checkSignDecompress,
  checkTopK,
  indexOutOfRange,
} from "./_compress_check.ts";
import {
  type KernelFn,
  type KernelModule,
  loadKernelModule,
  type TypedArrayConstructor,
  type WasmHeap,
} from "./loader.ts";

export type { TypedArray } from "../core/dtype.ts";
export type { KernelExports, KernelFn, KernelModule, TypedArrayConstructor, WasmHeap } from "./loader.ts";

/**
 * Options of {@linkcode CompressionKernels.quantizeInt8}.
 *
 * @example Two blocks of two, each with its own scale
 * ```ts
 * import { compressionKernels, type QuantizeInt8Options } from "@dcomm/dcomm/compress";
 * import assert from "node:assert/strict";
 * const k = await compressionKernels();
 * const options: QuantizeInt8Options = { blockSize: 2 };
 * const { q, scales } = k.quantizeInt8(new Float32Array([1, -0.5, 254, 127]), options);
 * assert.deepEqual(q, new Int8Array([127, -64, 127, 64])); // -63.5 and 63.5 round to even
 * assert.deepEqual(scales, new Float32Array([1 / 127, 2]));
 * ```
 */
export interface QuantizeInt8Options {
  /** Elements per scale, an integer >= 1; the last block may be shorter. */
  blockSize: number;
  /** Where to write the quantized values: one per element of src. @default a new Int8Array */
  q?: Int8Array;
  /** Where to write the scales: `ceil(n / blockSize)` of them. @default a new Float32Array */
  scales?: Float32Array;
}

/**
 * An int8-quantized tensor: the values and one scale per block.
 *
 * @example A round trip loses at most half a step per element
 * ```ts
 * import { compressionKernels, type Int8Packed } from "@dcomm/dcomm/compress";
 * import assert from "node:assert/strict";
 * const k = await compressionKernels();
 * const grad = new Float32Array([0.3, -1.7, 2.5, 1e-3]);
 * const packed: Int8Packed = k.quantizeInt8(grad, { blockSize: 4 });
 * const back = new Float32Array(4);
 * k.dequantizeInt8(packed, back, { blockSize: 4 });
 * assert.ok(back.every((v, i) => Math.abs(v - grad[i]) <= packed.scales[0] / 2 + 1e-7));
 * ```
 */
export interface Int8Packed {
  /** One int8 per element, in -127..127. */
  q: Int8Array;
  /** One float32 scale per block. */
  scales: Float32Array;
}

/**
 * Options of {@linkcode CompressionKernels.dequantizeInt8}.
 *
 * @example Summing two ranks' int8 contributions
 * ```ts
 * import { compressionKernels, type DequantizeInt8Options } from "@dcomm/dcomm/compress";
 * import assert from "node:assert/strict";
 * const k = await compressionKernels();
 * const options: DequantizeInt8Options = { blockSize: 2, accumulate: true };
 * const sum = new Float32Array(2);
 * k.dequantizeInt8({ q: new Int8Array([127, 0]), scales: new Float32Array([1]) }, sum, options);
 * k.dequantizeInt8({ q: new Int8Array([1, 2]), scales: new Float32Array([0.5]) }, sum, options);
 * assert.deepEqual(sum, new Float32Array([127.5, 1]));
 * ```
 */
export interface DequantizeInt8Options {
  /** The block size the values were quantized with. */
  blockSize: number;
  /** Add `q * scale` into dst (to sum contributions) instead of overwriting it. @default false */
  accumulate?: boolean;
}

/**
 * Options of {@linkcode CompressionKernels.signCompress}.
 *
 * @example Outputs sized once and reused every step
 * ```ts
 * import { compressionKernels, type SignCompressOptions, signSizes } from "@dcomm/dcomm/compress";
 * import assert from "node:assert/strict";
 * const k = await compressionKernels();
 * const sizes = signSizes(4, 2);
 * const options: SignCompressOptions = {
 *   blockSize: 2,
 *   bits: new Uint8Array(sizes.bits),
 *   scales: new Float32Array(sizes.scales),
 * };
 * k.signCompress(new Float32Array([1, -3, 0.5, 0.5]), new Float32Array(4), options);
 * assert.deepEqual(options.bits, new Uint8Array([0b1101]));
 * assert.deepEqual(options.scales, new Float32Array([2, 0.5]));
 * ```
 */
export interface SignCompressOptions {
  /** Elements per scale, an integer >= 1; the last block may be shorter. */
  blockSize: number;
  /** Where to write the sign bits: `ceil(n / 8)` bytes. @default a new Uint8Array */
  bits?: Uint8Array;
  /** Where to write the scales: `ceil(n / blockSize)` of them. @default a new Float32Array */
  scales?: Float32Array;
}

/**
 * A sign-compressed tensor: one bit per element and one scale (the mean magnitude) per block.
 *
 * @example Reading the signs back
 * ```ts
 * import { compressionKernels, type SignPacked } from "@dcomm/dcomm/compress";
 * import assert from "node:assert/strict";
 * const k = await compressionKernels();
 * const residual = new Float32Array(4);
 * const packed: SignPacked = k.signCompress(new Float32Array([2, -2, 0, -1]), residual, { blockSize: 4 });
 * const signs = [0, 1, 2, 3].map((i) => (packed.bits[i >> 3] >> (i & 7)) & 1 ? "+" : "-");
 * assert.deepEqual(signs, ["+", "-", "+", "-"]); // zero counts as non-negative
 * assert.deepEqual(packed.scales, new Float32Array([1.25]));
 * ```
 */
export interface SignPacked {
  /** Bit i (byte `i >> 3`, bit `i & 7`) is 1 for a non-negative element. */
  bits: Uint8Array;
  /** One float32 scale per block. */
  scales: Float32Array;
}

/**
 * Options of {@linkcode CompressionKernels.signDecompress}.
 *
 * @example
 * ```ts
 * import { compressionKernels, type SignDecompressOptions } from "@dcomm/dcomm/compress";
 * import assert from "node:assert/strict";
 * const k = await compressionKernels();
 * const options: SignDecompressOptions = { blockSize: 2 };
 * const dst = new Float32Array(4);
 * k.signDecompress({ bits: new Uint8Array([0b0110]), scales: new Float32Array([1, 3]) }, dst, options);
 * assert.deepEqual(dst, new Float32Array([-1, 1, 3, -3]));
 * ```
 */
export interface SignDecompressOptions {
  /** The block size the values were compressed with. */
  blockSize: number;
  /** Add ±scale into dst (to sum contributions) instead of overwriting it. @default false */
  accumulate?: boolean;
}

/**
 * Options of {@linkcode CompressionKernels.topK}.
 *
 * @example Writing into outputs of your own
 * ```ts
 * import { compressionKernels, type TopKOptions } from "@dcomm/dcomm/compress";
 * import assert from "node:assert/strict";
 * const k = await compressionKernels();
 * const options: TopKOptions = { indices: new Uint32Array(2), values: new Float32Array(2) };
 * k.topK(new Float32Array([0.5, -4, 3, 1]), 2, options);
 * assert.deepEqual(options.indices, new Uint32Array([1, 2]));
 * assert.deepEqual(options.values, new Float32Array([-4, 3]));
 * ```
 */
export interface TopKOptions {
  /** Where to write the k indices. @default a new Uint32Array */
  indices?: Uint32Array;
  /** Where to write the k values. @default a new Float32Array */
  values?: Float32Array;
}

/**
 * A sparse vector: values at indices (top-k's output, scatter-add's input).
 *
 * @example
 * ```ts
 * import { compressionKernels, type SparseVector } from "@dcomm/dcomm/compress";
 * import assert from "node:assert/strict";
 * const k = await compressionKernels();
 * const update: SparseVector = { indices: new Uint32Array([0, 3]), values: new Float32Array([1, -1]) };
 * const dense = new Float32Array(4);
 * k.scatterAdd(dense, update);
 * assert.deepEqual(dense, new Float32Array([1, 0, 0, -1]));
 * ```
 */
export interface SparseVector {
  /** The element indices. */
  indices: Uint32Array;
  /** The value at each index. */
  values: Float32Array;
}

/**
 * Output sizes of int8 quantization, from {@linkcode int8Sizes}.
 *
 * @example The bytes an int8 bucket of 1M elements sends
 * ```ts
 * import { type Int8Sizes, int8Sizes } from "@dcomm/dcomm/compress";
 * import assert from "node:assert/strict";
 * const sizes: Int8Sizes = int8Sizes(1 << 20, 256);
 * assert.equal(sizes.q * 1 + sizes.scales * 4, (1 << 20) + 16384); // about a quarter of float32
 * ```
 */
export interface Int8Sizes {
  /** Elements of `q`. */
  q: number;
  /** Elements of `scales`. */
  scales: number;
}

/**
 * Output sizes of sign compression, from {@linkcode signSizes}.
 *
 * @example The bytes a 1-bit bucket of 1M elements sends
 * ```ts
 * import { type SignSizes, signSizes } from "@dcomm/dcomm/compress";
 * import assert from "node:assert/strict";
 * const sizes: SignSizes = signSizes(1 << 20, 256);
 * assert.equal(sizes.bits + sizes.scales * 4, (1 << 17) + 16384); // about 1/28 of float32
 * ```
 */
export interface SignSizes {
  /** Bytes of `bits`. */
  bits: number;
  /** Elements of `scales`. */
  scales: number;
}

/**
 * The sizes of the outputs of {@linkcode CompressionKernels.quantizeInt8}, to allocate them once.
 *
 * @param n The number of elements.
 * @param blockSize Elements per scale.
 * @returns The lengths of `q` and `scales`.
 * @throws {RangeError} If n is not an integer >= 0 or blockSize not an integer >= 1.
 *
 * @example
 * ```ts
 * import { int8Sizes } from "@dcomm/dcomm/compress";
 * import assert from "node:assert/strict";
 * assert.deepEqual(int8Sizes(1000, 256), { q: 1000, scales: 4 });
 * ```
 */
export function int8Sizes(n: number, blockSize: number): Int8Sizes {
  checkCount("size int8 outputs", "n", n);
  checkBlockSize("size int8 outputs", blockSize);
  return { q: n, scales: blockCount(n, blockSize) };
}

/**
 * The sizes of the outputs of {@linkcode CompressionKernels.signCompress}, to allocate them once.
 *
 * @param n The number of elements.
 * @param blockSize Elements per scale.
 * @returns The lengths of `bits` and `scales`.
 * @throws {RangeError} If n is not an integer >= 0 or blockSize not an integer >= 1.
 *
 * @example
 * ```ts
 * import { signSizes } from "@dcomm/dcomm/compress";
 * import assert from "node:assert/strict";
 * assert.deepEqual(signSizes(1000, 256), { bits: 125, scales: 4 });
 * ```
 */
export function signSizes(n: number, blockSize: number): SignSizes {
  checkCount("size sign outputs", "n", n);
  checkBlockSize("size sign outputs", blockSize);
  return { bits: Math.ceil(n / 8), scales: blockCount(n, blockSize) };
}

/** The address of an array that lives in wasm memory, or -1. Read before anything is staged. */
function inPlace(heap: WasmHeap, array: TypedArray): number {
  return heap.owns(array) ? array.byteOffset : -1;
}

/** The block size handed to a kernel: a larger one means one block, and must still fit a wasm32 size_t. */
function kernelBlock(blockSize: number, n: number): number {
  return Math.min(blockSize, Math.max(n, 1));
}

/**
 * The compression kernels, bound to one instance of `kernels.wasm` (one per thread). Get it with
 * {@linkcode compressionKernels}. The module documentation states the semantics.
 *
 * @example Top-k, then the sum of two sparse contributions
 * ```ts
 * import { compressionKernels } from "@dcomm/dcomm/compress";
 * import assert from "node:assert/strict";
 * const k = await compressionKernels();
 * const top = k.topK(new Float32Array([0.1, -3, 2, 0, -2]), 3);
 * assert.deepEqual(top.indices, new Uint32Array([1, 2, 4])); // |2| = |-2|: both, in index order
 * assert.deepEqual(top.values, new Float32Array([-3, 2, -2]));
 * const sum = new Float32Array(5);
 * k.scatterAdd(sum, top);
 * k.scatterAdd(sum, { indices: new Uint32Array([1, 1]), values: new Float32Array([1, 1]) });
 * assert.deepEqual(sum, new Float32Array([0, -1, 2, 0, -2]));
 * ```
 */
export class CompressionKernels {
  #heap: WasmHeap;
  #quantize: KernelFn;
  #dequantize: KernelFn;
  #dequantizeAcc: KernelFn;
  #signCompress: KernelFn;
  #signDecompress: KernelFn;
  #signDecompressAcc: KernelFn;
  #topkScratch: KernelFn;
  #topk: KernelFn;
  #scatterAdd: KernelFn;

  /**
   * Binds the kernels to a loaded module; {@linkcode compressionKernels} does this once per thread.
   *
   * @param module The loaded module (see {@linkcode loadKernelModule}).
   * @throws {TypeError} If the module lacks a kernel (a stale `kernels.wasm`).
   */
  constructor(module: KernelModule) {
    this.#heap = module.heap;
    this.#quantize = module.fn("quantize_int8_f32");
    this.#dequantize = module.fn("dequantize_int8_f32");
    this.#dequantizeAcc = module.fn("dequantize_int8_acc_f32");
    this.#signCompress = module.fn("sign_compress_f32");
    this.#signDecompress = module.fn("sign_decompress_f32");
    this.#signDecompressAcc = module.fn("sign_decompress_acc_f32");
    this.#topkScratch = module.fn("topk_scratch_bytes");
    this.#topk = module.fn("topk_f32");
    this.#scatterAdd = module.fn("scatter_add_f32");
  }

  /** The stack allocator over wasm memory, for arrays the kernels should use in place. */
  get heap(): WasmHeap {
    return this.#heap;
  }

  /**
   * Quantizes float32 to int8 with one absmax scale per block.
   *
   * @param src The values.
   * @param options The block size, and outputs to reuse.
   * @returns The int8 values (one per element) and the scales (one per block): `options.q` and
   *   `options.scales` when given (fresh views if they live in wasm memory and it grew).
   * @throws {TypeError} On a wrong array class or missing options.
   * @throws {RangeError} On a block size that is not an integer >= 1, outputs of the wrong length, or
   *   arrays that share memory.
   *
   * @example Reuse the outputs from step to step
   * ```ts
   * import { compressionKernels, int8Sizes } from "@dcomm/dcomm/compress";
   * import assert from "node:assert/strict";
   * const k = await compressionKernels();
   * const sizes = int8Sizes(3, 256);
   * const out = { q: new Int8Array(sizes.q), scales: new Float32Array(sizes.scales) };
   * k.quantizeInt8(new Float32Array([-2.54, 1, 0]), { blockSize: 256, ...out });
   * assert.deepEqual(out.q, new Int8Array([-127, 50, 0]));
   * assert.deepEqual(out.scales, new Float32Array([Math.fround(2.54) / 127]));
   * ```
   */
  quantizeInt8(src: Float32Array, options: QuantizeInt8Options): Int8Packed {
    const { blockSize, q, scales } = checkQuantizeInt8(src, options);
    const n = src.length, heap = this.#heap;
    if (n === 0) return { q, scales };
    const sAt = inPlace(heap, src), qAt = inPlace(heap, q), cAt = inPlace(heap, scales);
    const mark = heap.top;
    try {
      const s = sAt >= 0 ? sAt : heap.stage(src);
      const qp = qAt >= 0 ? qAt : heap.alloc(q.byteLength);
      const cp = cAt >= 0 ? cAt : heap.alloc(scales.byteLength);
      this.#quantize(s, n, kernelBlock(blockSize, n), qp, cp);
      return {
        q: this.#unstage(qp, q, qAt, n),
        scales: this.#unstage(cp, scales, cAt, blockCount(n, blockSize)),
      };
    } finally {
      heap.reset(mark);
    }
  }

  /**
   * Dequantizes int8 values: `dst = q * scale`, or `dst += q * scale` with `accumulate`.
   *
   * @param packed The int8 values and scales from {@linkcode CompressionKernels.quantizeInt8}.
   * @param dst The output, one element per value.
   * @param options The block size they were quantized with, and whether to accumulate.
   * @throws {TypeError} On a wrong array class or missing options.
   * @throws {RangeError} On a bad block size, arrays of the wrong length, or arrays that share memory.
   *
   * @example
   * ```ts
   * import { compressionKernels } from "@dcomm/dcomm/compress";
   * import assert from "node:assert/strict";
   * const k = await compressionKernels();
   * const dst = new Float32Array(3);
   * k.dequantizeInt8({ q: new Int8Array([127, -64, 0]), scales: new Float32Array([0.5]) }, dst, { blockSize: 4 });
   * assert.deepEqual(dst, new Float32Array([63.5, -32, 0]));
   * ```
   */
  dequantizeInt8(packed: Int8Packed, dst: Float32Array, options: DequantizeInt8Options): void {
    const { blockSize, accumulate } = checkDequantizeInt8(packed, dst, options);
    const n = dst.length, heap = this.#heap, { q, scales } = packed;
    if (n === 0) return;
    const qAt = inPlace(heap, q), cAt = inPlace(heap, scales), dAt = inPlace(heap, dst);
    const mark = heap.top;
    try {
      const qp = qAt >= 0 ? qAt : heap.stage(q);
      const cp = cAt >= 0 ? cAt : heap.stage(scales);
      const d = dAt >= 0 ? dAt : accumulate ? heap.stage(dst) : heap.alloc(dst.byteLength);
      (accumulate ? this.#dequantizeAcc : this.#dequantize)(qp, cp, n, kernelBlock(blockSize, n), d);
      this.#unstage(d, dst, dAt, n);
    } finally {
      heap.reset(mark);
    }
  }

  /**
   * Compresses `src + residual` to one sign bit per element and one scale (the mean magnitude) per block,
   * and leaves in `residual` what the compression lost: `x - (±scale)`. Feed the same residual to the next
   * step's call (error feedback), so what is lost now is sent later.
   *
   * @param src The gradient.
   * @param residual The error-feedback residual, same length; read, then overwritten in place.
   * @param options The block size, and outputs to reuse.
   * @returns The packed bits (`ceil(n / 8)` bytes) and the scales (one per block): `options.bits` and
   *   `options.scales` when given (fresh views if they live in wasm memory and it grew).
   * @throws {TypeError} On a wrong array class or missing options.
   * @throws {RangeError} On a bad block size, arrays of the wrong length, or arrays that share memory.
   *
   * @example One step of 1-bit SGD with error feedback
   * ```ts
   * import { compressionKernels } from "@dcomm/dcomm/compress";
   * import assert from "node:assert/strict";
   * const k = await compressionKernels();
   * const residual = new Float32Array(4); // zeros before the first step
   * const packed = k.signCompress(new Float32Array([1, -3, 0.5, 2]), residual, { blockSize: 4 });
   * assert.deepEqual(packed.bits, new Uint8Array([0b1101]));
   * assert.deepEqual(packed.scales, new Float32Array([1.625])); // mean |x|
   * assert.deepEqual(residual, new Float32Array([-0.625, -1.375, -1.125, 0.375]));
   * ```
   */
  signCompress(src: Float32Array, residual: Float32Array, options: SignCompressOptions): SignPacked {
    const { blockSize, bits, scales } = checkSignCompress(src, residual, options);
    const n = src.length, heap = this.#heap;
    if (n === 0) return { bits, scales };
    const sAt = inPlace(heap, src), rAt = inPlace(heap, residual);
    const bAt = inPlace(heap, bits), cAt = inPlace(heap, scales);
    const mark = heap.top;
    try {
      const s = sAt >= 0 ? sAt : heap.stage(src);
      const r = rAt >= 0 ? rAt : heap.stage(residual);
      const bp = bAt >= 0 ? bAt : heap.alloc(bits.byteLength);
      const cp = cAt >= 0 ? cAt : heap.alloc(scales.byteLength);
      this.#signCompress(s, r, n, kernelBlock(blockSize, n), bp, cp);
      this.#unstage(r, residual, rAt, n);
      return {
        bits: this.#unstage(bp, bits, bAt, Math.ceil(n / 8)),
        scales: this.#unstage(cp, scales, cAt, blockCount(n, blockSize)),
      };
    } finally {
      heap.reset(mark);
    }
  }

  /**
   * Expands sign bits to `+scale` / `-scale`: overwrites dst, or adds into it with `accumulate`.
   *
   * @param packed The bits and scales from {@linkcode CompressionKernels.signCompress}.
   * @param dst The output, one element per bit.
   * @param options The block size they were compressed with, and whether to accumulate.
   * @throws {TypeError} On a wrong array class or missing options.
   * @throws {RangeError} On a bad block size, arrays of the wrong length, or arrays that share memory.
   *
   * @example Sum two ranks' contributions
   * ```ts
   * import { compressionKernels } from "@dcomm/dcomm/compress";
   * import assert from "node:assert/strict";
   * const k = await compressionKernels();
   * const sum = new Float32Array(3);
   * k.signDecompress({ bits: new Uint8Array([0b101]), scales: new Float32Array([2]) }, sum, { blockSize: 3 });
   * k.signDecompress({ bits: new Uint8Array([0b001]), scales: new Float32Array([1]) }, sum, {
   *   blockSize: 3,
   *   accumulate: true,
   * });
   * assert.deepEqual(sum, new Float32Array([3, -3, 1]));
   * ```
   */
  signDecompress(packed: SignPacked, dst: Float32Array, options: SignDecompressOptions): void {
    const { blockSize, accumulate } = checkSignDecompress(packed, dst, options);
    const n = dst.length, heap = this.#heap, { bits, scales } = packed;
    if (n === 0) return;
    const bAt = inPlace(heap, bits), cAt = inPlace(heap, scales), dAt = inPlace(heap, dst);
    const mark = heap.top;
    try {
      const bp = bAt >= 0 ? bAt : heap.stage(bits);
      const cp = cAt >= 0 ? cAt : heap.stage(scales);
      const d = dAt >= 0 ? dAt : accumulate ? heap.stage(dst) : heap.alloc(dst.byteLength);
      (accumulate ? this.#signDecompressAcc : this.#signDecompress)(bp, cp, n, kernelBlock(blockSize, n), d);
      this.#unstage(d, dst, dAt, n);
    } finally {
      heap.reset(mark);
    }
  }

  /**
   * The k elements of largest magnitude, in ascending index order; equal magnitudes go to the smaller
   * index, and NaN ranks above +Inf. Runs in O(n), without sorting: a sample of the input brackets the
   * k-th largest magnitude, one pass counts what lies above the bracket and keeps what lies inside, and a
   * radix select on the bits of |x| finds the exact threshold among those (or among everything, when the
   * bracket misses). Takes `4n + 16 KiB` bytes of scratch on the wasm heap for the call.
   *
   * @param src The values.
   * @param k How many to keep, from 0 to `src.length`.
   * @param options Outputs to reuse, of k elements each.
   * @returns The indices and their signed values: `options.indices` and `options.values` when given
   *   (fresh views if they live in wasm memory and it grew).
   * @throws {TypeError} On a wrong array class.
   * @throws {RangeError} On k outside 0..src.length, outputs of the wrong length, or arrays that share
   *   memory, or when the scratch does not fit in wasm memory.
   *
   * @example
   * ```ts
   * import { compressionKernels } from "@dcomm/dcomm/compress";
   * import assert from "node:assert/strict";
   * const k = await compressionKernels();
   * const { indices, values } = k.topK(new Float32Array([1, NaN, -4, 4, 2]), 2);
   * assert.deepEqual(indices, new Uint32Array([1, 2])); // NaN first, then -4 before 4 (smaller index)
   * assert.ok(Number.isNaN(values[0]) && values[1] === -4);
   * ```
   */
  topK(src: Float32Array, k: number, options?: TopKOptions): SparseVector {
    const { indices, values } = checkTopK(src, k, options);
    const n = src.length, heap = this.#heap;
    if (k === 0) return { indices, values };
    const sAt = inPlace(heap, src), iAt = inPlace(heap, indices), vAt = inPlace(heap, values);
    const mark = heap.top;
    try {
      const s = sAt >= 0 ? sAt : heap.stage(src);
      const ip = iAt >= 0 ? iAt : heap.alloc(indices.byteLength);
      const vp = vAt >= 0 ? vAt : heap.alloc(values.byteLength);
      const scratch = heap.alloc(this.#topkScratch(n) >>> 0);
      this.#topk(s, n, k, ip, vp, scratch);
      return { indices: this.#unstage(ip, indices, iAt, k), values: this.#unstage(vp, values, vAt, k) };
    } finally {
      heap.reset(mark);
    }
  }

  /**
   * `dst[indices[i]] += values[i]` for every i, in order, so duplicate indices accumulate left to right.
   * Every index is checked before anything is written.
   *
   * @param dst The dense accumulator, updated in place.
   * @param sparse The indices and values, of equal length (a {@linkcode CompressionKernels.topK} result).
   * @throws {TypeError} On a wrong array class.
   * @throws {RangeError} On an index >= dst.length (dst is left untouched), indices and values of
   *   different lengths, or arrays that share memory.
   *
   * @example
   * ```ts
   * import { compressionKernels } from "@dcomm/dcomm/compress";
   * import assert from "node:assert/strict";
   * const k = await compressionKernels();
   * const dst = new Float32Array(3);
   * k.scatterAdd(dst, { indices: new Uint32Array([2, 0, 2]), values: new Float32Array([1, 5, 0.5]) });
   * assert.deepEqual(dst, new Float32Array([5, 0, 1.5]));
   * assert.throws(() => k.scatterAdd(dst, { indices: new Uint32Array([3]), values: new Float32Array(1) }), RangeError);
   * ```
   */
  scatterAdd(dst: Float32Array, sparse: SparseVector): void {
    checkScatterAdd(dst, sparse);
    const { indices, values } = sparse, n = dst.length, k = indices.length, heap = this.#heap;
    if (k === 0) return;
    const dAt = inPlace(heap, dst), iAt = inPlace(heap, indices), vAt = inPlace(heap, values);
    const mark = heap.top;
    try {
      const d = dAt >= 0 ? dAt : heap.stage(dst);
      const ip = iAt >= 0 ? iAt : heap.stage(indices);
      const vp = vAt >= 0 ? vAt : heap.stage(values);
      const bad = this.#scatterAdd(d, n, ip, vp, k);
      if (bad >= 0) throw indexOutOfRange(bad, heap.view(Uint32Array, ip + 4 * bad, 1)[0], n);
      this.#unstage(d, dst, dAt, n);
    } finally {
      heap.reset(mark);
    }
  }

  /**
   * Brings an output back from `ptr`: copies it into `array` when it was staged (`at` < 0), and otherwise
   * returns `array` itself, or a fresh view of its `length` elements when memory grew and detached it
   * (a detached view reports length 0, so the caller passes the length it checked).
   */
  #unstage<T extends TypedArray>(ptr: number, array: T, at: number, length: number): T {
    const heap = this.#heap;
    if (at < 0) {
      new Uint8Array(array.buffer, array.byteOffset, array.byteLength).set(
        heap.bytes().subarray(ptr, ptr + array.byteLength),
      );
      return array;
    }
    if (array.buffer === heap.memory.buffer) return array;
    return heap.view(array.constructor as TypedArrayConstructor<T>, at, length);
  }
}

let instance: CompressionKernels | undefined;

/**
 * The compression kernels of this thread, loading `kernels.wasm` on first use.
 *
 * @returns The kernels.
 * @throws {TypeError} If `kernels.wasm` lacks a compression kernel (rebuild it with `deno task build:wasm`).
 *
 * @example
 * ```ts
 * import { compressionKernels } from "@dcomm/dcomm/compress";
 * import assert from "node:assert/strict";
 * const k = await compressionKernels();
 * assert.equal(k, await compressionKernels());
 * ```
 */
export async function compressionKernels(): Promise<CompressionKernels> {
  instance ??= new CompressionKernels(await loadKernelModule());
  return instance;
}
