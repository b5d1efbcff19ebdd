/**
 * Typed wrappers over the WASM kernels of `kernels.wasm`: element-wise reductions for every dtype and op
 * (bitwise ones for integers and bools, `premulSum` for floats), float32 <-> float16/bfloat16 casts, and
 * the BLAS-like `scale`, `axpy` and `matmul`, and the optimizer steps (`optimizerKernels()`: SGD, Adam, AdamW).
 *
 * The wrappers accept any TypedArray view at any byte offset. Arrays that live in wasm memory (from
 * {@linkcode WasmHeap.alloc} and {@linkcode WasmHeap.view}) are used in place; any other array is copied
 * onto the heap's stack for the call and back (outputs only back), and the stack is popped before the
 * call returns, so a call allocates nothing once memory has grown to its working size. Staging can grow
 * wasm memory, which detaches every view of it taken earlier (the addresses stay valid): allocate first,
 * take views last. The `*Ptr` methods skip all of that and run on addresses in wasm memory.
 *
 * The semantics, bit for bit, are those of the TypeScript reference in `reference.ts` (see
 * `kernels/reduce.c` for the rules): integers wrap; float16/bfloat16 compute in float32 and round to
 * nearest even once per binary step (`reduceMany` accumulates every source in float32 and rounds once);
 * min/max propagate NaN and order -0 below +0; avg sums then scales by 1/k (floats) or divides with
 * truncation (integers), as NCCL does; premulSum rounds the factor and each product to the dtype, then
 * sums; bools (0/1 bytes) reduce as uint8 max (sum, max, bor: or), min (prod, min, band: and) and xor.
 *
 * @example Sum, then average over three ranks
 * ```ts
 * import { kernels } from "@dcomm/dcomm/kernels";
 * import assert from "node:assert/strict";
 * const k = await kernels();
 * const grad = new Float32Array([1, 2, 3]);
 * k.reduceMany(grad, [grad, new Float32Array([4, 5, 6]), new Float32Array([7, 8, 9])], { op: "avg" });
 * assert.deepEqual(grad, new Float32Array([4, 5, 6]));
 * ```
 *
 * @module
 */
import type { DType, ReduceOp, TypedArray } from "../core/dtype.ts";
import { dtypeSize } from "../core/dtype.ts";
import {
  checkAxpy,
  checkCast,
  checkDivide,
  checkDivisor,
  checkMatmul,
  checkPtrOp,
  checkReduce,
  checkReduceMany,
  checkScale,
  DTYPE_CODE,
  OP_CODE,
} from "./_check.ts";
import { type KernelFn, type KernelModule, loadKernelModule, type WasmHeap } from "./loader.ts";

export type { DType, ReduceOp, TypedArray } from "../core/dtype.ts";
export {
  type KernelExports,
  type KernelFn,
  type KernelModule,
  loadKernelModule,
  type TypedArrayConstructor,
  WasmHeap,
} from "./loader.ts";
export { type AdamOptions, OptimizerKernels, optimizerKernels, type SgdOptions } from "./optim.ts";

/**
 * Options of {@linkcode Kernels.reduce} and {@linkcode Kernels.reduceMany}.
 *
 * @example The maximum of bfloat16 values held as bits
 * ```ts
 * import { kernels, type ReduceOptions } from "@dcomm/dcomm/kernels";
 * import assert from "node:assert/strict";
 * const k = await kernels();
 * const options: ReduceOptions = { op: "max", dtype: "bfloat16" };
 * const a = new Uint16Array([0x3f80, 0xc000]); // 1, -2
 * k.reduce(a, new Uint16Array([0x4000, 0xbf80]), options); // 2, -1
 * assert.deepEqual(a, new Uint16Array([0x4000, 0xbf80]));
 * assert.throws(() => k.reduce(a, a.slice(), { ...options, op: "avg" }), RangeError); // use reduceMany
 * ```
 *
 * @example A pre-multiplied sum of float32 sources, and bools or'ed
 * ```ts
 * import { kernels, type ReduceOptions } from "@dcomm/dcomm/kernels";
 * import assert from "node:assert/strict";
 * const k = await kernels();
 * const premul: ReduceOptions = { op: "premulSum", factor: 0.5 };
 * const out = new Float32Array(2);
 * k.reduceMany(out, [new Float32Array([1, 2]), new Float32Array([3, 4])], premul);
 * assert.deepEqual(out, new Float32Array([2, 3]));
 * const any = new Uint8Array([0, 1]);
 * k.reduce(any, new Uint8Array([1, 0]), { op: "sum", dtype: "bool" }); // a logical or
 * assert.deepEqual(any, new Uint8Array([1, 1]));
 * ```
 */
export interface ReduceOptions {
  /**
   * The operator; `reduce` rejects `"avg"`, which needs the number of contributions, and `"premulSum"`
   * (use `reduceMany`). `band`, `bor` and `bxor` take integer and bool arrays, `premulSum` float ones.
   * @default "sum"
   */
  op?: ReduceOp;
  /**
   * The dtype; required for a Uint16Array (`"float16"` or `"bfloat16"`), and `"bool"` for a Uint8Array
   * of 0s and 1s. @default inferred from dst
   */
  dtype?: DType;
  /**
   * `premulSum` only (and required there): each source is multiplied by this finite number, rounded to
   * the dtype, before the sum. @default none
   */
  factor?: number;
}

/**
 * Options of {@linkcode Kernels.divide}.
 *
 * @example Averaging a float16 sum over four ranks
 * ```ts
 * import { type DivideOptions, kernels } from "@dcomm/dcomm/kernels";
 * import assert from "node:assert/strict";
 * const k = await kernels();
 * const options: DivideOptions = { dtype: "float16" };
 * const sum = new Uint16Array([0x4400, 0x4800]); // 4, 8
 * k.divide(sum, 4, options);
 * assert.deepEqual(sum, new Uint16Array([0x3c00, 0x4000])); // 1, 2
 * ```
 */
export interface DivideOptions {
  /** The dtype; required for a Uint16Array (`"float16"` or `"bfloat16"`). @default inferred from dst */
  dtype?: DType;
}

/**
 * Options of {@linkcode Kernels.axpy}.
 *
 * @example y += alpha · x, in float64
 * ```ts
 * import { type AxpyOptions, kernels } from "@dcomm/dcomm/kernels";
 * import assert from "node:assert/strict";
 * const k = await kernels();
 * const options: AxpyOptions = { alpha: 0.5 };
 * const y = new Float64Array([1, 1]);
 * k.axpy(y, new Float64Array([2, 4]), options);
 * assert.deepEqual(y, new Float64Array([2, 3]));
 * ```
 */
export interface AxpyOptions {
  /** The factor of x, rounded to float32 for Float32Arrays. @default 1 */
  alpha?: number;
}

/**
 * Options of {@linkcode Kernels.matmul}: the output and the shapes, row-major.
 *
 * @example A weight gradient, Xᵀ · dY, accumulated over two mini-batches
 * ```ts
 * import { kernels, type MatmulOptions } from "@dcomm/dcomm/kernels";
 * import assert from "node:assert/strict";
 * const k = await kernels();
 * const x = new Float32Array([1, 2, 3, 4]); // 2 samples × 2 inputs
 * const dy = new Float32Array([1, 0, 0, 1]); // 2 samples × 2 outputs
 * const options: MatmulOptions = { c: new Float32Array(4), m: 2, k: 2, n: 2, transA: true };
 * k.matmul(x, dy, options);
 * k.matmul(x, dy, { ...options, accumulate: true });
 * assert.deepEqual(options.c, new Float32Array([2, 6, 4, 8]));
 * ```
 */
export interface MatmulOptions {
  /** The output C, m x n. */
  c: Float32Array;
  /** Rows of op(A) and of C. */
  m: number;
  /** Columns of op(A), rows of op(B). */
  k: number;
  /** Columns of op(B) and of C. */
  n: number;
  /** A is stored k x m and used transposed. @default false */
  transA?: boolean;
  /** B is stored n x k and used transposed. @default false */
  transB?: boolean;
  /** Add the product to C instead of overwriting it. @default false */
  accumulate?: boolean;
}

/**
 * The kernels' code of a dtype (dcomm's order, `DTYPES`: int8 = 0 ... float64 = 9, bool = 10).
 *
 * @param dtype The dtype.
 * @returns Its code.
 * @throws {TypeError} If `dtype` is not a dtype name.
 *
 * @example
 * ```ts
 * import { dtypeCode } from "@dcomm/dcomm/kernels";
 * import assert from "node:assert/strict";
 * assert.equal(dtypeCode("float32"), 8);
 * ```
 */
export function dtypeCode(dtype: DType): number {
  const code = Object.hasOwn(DTYPE_CODE, dtype) ? DTYPE_CODE[dtype] : undefined;
  if (code === undefined) {
    throw new TypeError(
      `Unknown dtype: expected one of ${Object.keys(DTYPE_CODE).join(", ")}, found ${dtype}`,
    );
  }
  return code;
}

/**
 * The kernels' code of a reduce op (dcomm's order, `REDUCE_OPS`: sum = 0, prod, min, max, avg = 4, band,
 * bor, bxor, premulSum = 8).
 *
 * @param op The op.
 * @returns Its code.
 * @throws {TypeError} If `op` is not a reduce op.
 *
 * @example
 * ```ts
 * import { opCode } from "@dcomm/dcomm/kernels";
 * import assert from "node:assert/strict";
 * assert.equal(opCode("max"), 3);
 * ```
 */
export function opCode(op: ReduceOp): number {
  const code = Object.hasOwn(OP_CODE, op) ? OP_CODE[op] : undefined;
  if (code === undefined) {
    throw new TypeError(`Unknown reduce op: expected one of ${Object.keys(OP_CODE).join(", ")}, found ${op}`);
  }
  return code;
}

/** Whether two byte ranges in wasm memory share a byte. */
function overlaps(a: number, aBytes: number, b: number, bBytes: number): boolean {
  return a < b + bBytes && b < a + aBytes;
}

/** The address of an array that lives in wasm memory, or -1. Read before anything is staged. */
function inPlace(heap: WasmHeap, array: TypedArray): number {
  return heap.owns(array) ? array.byteOffset : -1;
}

/**
 * The WASM kernels, bound to one instance of `kernels.wasm` (one per thread). Get it with
 * {@linkcode kernels}.
 *
 * @example Reduce in place in wasm memory
 * ```ts
 * import { kernels } from "@dcomm/dcomm/kernels";
 * import assert from "node:assert/strict";
 * const k = await kernels();
 * const mark = k.heap.top;
 * const dst = k.heap.alloc(3 * 4), src = k.heap.alloc(3 * 4);
 * k.heap.view(Float32Array, dst, 3).set([1, 2, 3]);
 * k.heap.view(Float32Array, src, 3).set([3, 2, 1]);
 * k.reducePtr("float32", "max", dst, src, 3);
 * assert.deepEqual(k.heap.view(Float32Array, dst, 3), new Float32Array([3, 2, 3]));
 * k.heap.reset(mark);
 * ```
 */
export class Kernels {
  #heap: WasmHeap;
  #words: Uint32Array;
  #reduce: KernelFn;
  #reduceN: KernelFn;
  #premulN: KernelFn;
  #divide: KernelFn;
  #castF32F16: KernelFn;
  #castF16F32: KernelFn;
  #castF32Bf16: KernelFn;
  #castBf16F32: KernelFn;
  #scale: KernelFn;
  #axpy: KernelFn;
  #matmul: KernelFn;

  /**
   * Binds the kernels of a loaded module; {@linkcode kernels} does this once per thread.
   *
   * @param module The loaded module (see {@linkcode loadKernelModule}).
   * @throws {TypeError} If the module lacks a kernel (a stale `kernels.wasm`).
   */
  constructor(module: KernelModule) {
    this.#heap = module.heap;
    this.#words = new Uint32Array(module.heap.memory.buffer);
    this.#reduce = module.fn("reduce");
    this.#reduceN = module.fn("reduce_n");
    this.#premulN = module.fn("premul_sum_n");
    this.#divide = module.fn("divide");
    this.#castF32F16 = module.fn("cast_f32_f16");
    this.#castF16F32 = module.fn("cast_f16_f32");
    this.#castF32Bf16 = module.fn("cast_f32_bf16");
    this.#castBf16F32 = module.fn("cast_bf16_f32");
    this.#scale = module.fn("scale");
    this.#axpy = module.fn("axpy");
    this.#matmul = module.fn("matmul");
  }

  /** The stack allocator over wasm memory, for arrays the kernels should use in place. */
  get heap(): WasmHeap {
    return this.#heap;
  }

  /**
   * `dst = op(dst, src)`, element-wise. float16/bfloat16 are computed in float32 and rounded once.
   *
   * @param dst The accumulator, updated in place.
   * @param src The other operand: same dtype and length (it may be `dst` itself).
   * @param options The op and, for a Uint16Array or a bool Uint8Array, the dtype.
   * @throws {TypeError} On an unsupported array, a dtype mismatch, an unknown op or dtype, or an op that
   *   does not apply to the dtype (`band` of floats).
   * @throws {RangeError} On op `"avg"` (use {@linkcode Kernels.reduceMany} or {@linkcode Kernels.divide})
   *   or `"premulSum"` (use {@linkcode Kernels.reduceMany}), or arrays of different lengths.
   *
   * @example Sum float16 gradients held as bits
   * ```ts
   * import { kernels } from "@dcomm/dcomm/kernels";
   * import assert from "node:assert/strict";
   * const k = await kernels();
   * const a = new Uint16Array([0x3c00, 0x4000]); // 1, 2
   * k.reduce(a, new Uint16Array([0x3c00, 0x3c00]), { op: "sum", dtype: "float16" });
   * assert.deepEqual(a, new Uint16Array([0x4000, 0x4200])); // 2, 3
   * ```
   */
  reduce(dst: TypedArray, src: TypedArray, options: ReduceOptions = {}): void {
    const { dtype, op } = checkReduce(dst, src, options);
    const n = dst.length, bytes = dst.byteLength, heap = this.#heap;
    if (n === 0) return;
    const dOwn = inPlace(heap, dst), sOwn = inPlace(heap, src);
    const mark = heap.top;
    try {
      const d = dOwn >= 0 ? dOwn : heap.stage(dst);
      let s = sOwn >= 0 ? sOwn : src === dst ? d : heap.stage(src);
      if (s !== d && overlaps(d, bytes, s, bytes)) s = this.#copy(s, bytes);
      this.#ok(this.#reduce(DTYPE_CODE[dtype], OP_CODE[op], d, s, n), "reduce");
      if (dOwn < 0) heap.unstage(d, dst);
    } finally {
      heap.reset(mark);
    }
  }

  /**
   * `dst = op(srcs[0], ..., srcs[k-1])`, element-wise, for every op including `"avg"` and
   * `"premulSum"` (`srcs[0]·f + ... + srcs[k-1]·f`, the factor and each product rounded to the dtype).
   * float16/bfloat16 accumulate all sources in float32 and round once (after the scaling of avg).
   *
   * @param dst The result; it may be one of the sources.
   * @param srcs One or more sources, each of dst's dtype and length.
   * @param options The op, `factor` for premulSum and, for Uint16Arrays or bool Uint8Arrays, the dtype.
   * @throws {TypeError} On an unsupported array, a dtype mismatch, an unknown op or dtype, an op that does
   *   not apply to the dtype, or premulSum without a factor.
   * @throws {RangeError} On no sources, arrays of different lengths, or a factor that is not finite.
   *
   * @example Average int32 counters over four ranks (truncating, as NCCL does)
   * ```ts
   * import { kernels } from "@dcomm/dcomm/kernels";
   * import assert from "node:assert/strict";
   * const k = await kernels();
   * const out = new Int32Array(2);
   * const ranks = [[1, -1], [2, -2], [3, -3], [5, -5]].map((r) => new Int32Array(r));
   * k.reduceMany(out, ranks, { op: "avg" });
   * assert.deepEqual(out, new Int32Array([2, -2])); // 11 / 4 and -11 / 4
   * ```
   */
  reduceMany(dst: TypedArray, srcs: readonly TypedArray[], options: ReduceOptions = {}): void {
    const { dtype, op, factor } = checkReduceMany(dst, srcs, options);
    const n = dst.length, bytes = dst.byteLength, k = srcs.length, heap = this.#heap;
    if (n === 0) return;
    const dOwn = inPlace(heap, dst);
    const own = srcs.map((s) => inPlace(heap, s));
    const mark = heap.top;
    try {
      const d = dOwn >= 0 ? dOwn : heap.stage(dst);
      const ptrs = own.map((o, j) => {
        if (o < 0) return srcs[j] === dst ? d : heap.stage(srcs[j]);
        return o !== d && overlaps(d, bytes, o, bytes) ? this.#copy(o, bytes) : o;
      });
      const list = heap.alloc(4 * k, 4);
      this.#wordView().set(ptrs, list >>> 2);
      this.#ok(
        factor === undefined
          ? this.#reduceN(DTYPE_CODE[dtype], OP_CODE[op], d, list, k, n)
          : this.#premulN(DTYPE_CODE[dtype], d, list, k, n, factor),
        "reduce",
      );
      if (dOwn < 0) heap.unstage(d, dst);
    } finally {
      heap.reset(mark);
    }
  }

  /**
   * `dst = dst / divisor`: the finisher of an average after a sum over ranks. Floats multiply by
   * `1 / divisor` computed in the compute precision (float32 for float16/bfloat16/float32); integers
   * divide and truncate toward zero.
   *
   * @param dst The values, divided in place.
   * @param divisor A finite non-zero number; for integer dtypes an integer from 1 to 2^53.
   * @param options The dtype, for a Uint16Array.
   * @throws {TypeError} On an unsupported array or dtype, or a divisor that is not a number.
   * @throws {RangeError} On a divisor out of range.
   *
   * @example
   * ```ts
   * import { kernels } from "@dcomm/dcomm/kernels";
   * import assert from "node:assert/strict";
   * const k = await kernels();
   * const sum = new Float64Array([3, 6]);
   * k.divide(sum, 3);
   * assert.deepEqual(sum, new Float64Array([1, 2]));
   * ```
   */
  divide(dst: TypedArray, divisor: number, options: DivideOptions = {}): void {
    const dtype = checkDivide(dst, divisor, options);
    if (dst.length === 0) return;
    const heap = this.#heap, dOwn = inPlace(heap, dst), mark = heap.top;
    try {
      const d = dOwn >= 0 ? dOwn : heap.stage(dst);
      this.#ok(this.#divide(DTYPE_CODE[dtype], d, dst.length, divisor), "divide");
      if (dOwn < 0) heap.unstage(d, dst);
    } finally {
      heap.reset(mark);
    }
  }

  /**
   * Rounds float32 to float16 (nearest, ties to even; overflow to ±Inf; NaN stays a quiet NaN).
   *
   * @param src The float32 values.
   * @param dst The float16 bits, same length (a Uint16Array or a Float16Array).
   * @throws {TypeError} On a wrong array class. @throws {RangeError} On different lengths.
   *
   * @example
   * ```ts
   * import { kernels } from "@dcomm/dcomm/kernels";
   * import assert from "node:assert/strict";
   * const k = await kernels();
   * const h = new Uint16Array(3);
   * k.castF32ToF16(new Float32Array([1, 65520, -(2 ** -25)]), h);
   * assert.deepEqual(h, new Uint16Array([0x3c00, 0x7c00, 0x8000])); // 1, Inf, -0
   * ```
   */
  castF32ToF16(src: Float32Array, dst: Uint16Array | Float16Array): void {
    checkCast("float16", true, src, dst);
    this.#cast(this.#castF32F16, src, dst);
  }

  /**
   * Widens float16 to float32, exactly.
   *
   * @param src The float16 bits (a Uint16Array or a Float16Array).
   * @param dst The float32 values, same length.
   * @throws {TypeError} On a wrong array class. @throws {RangeError} On different lengths.
   *
   * @example
   * ```ts
   * import { kernels } from "@dcomm/dcomm/kernels";
   * import assert from "node:assert/strict";
   * const k = await kernels();
   * const f = new Float32Array(2);
   * k.castF16ToF32(new Uint16Array([0x3555, 0x0001]), f);
   * assert.deepEqual(f, new Float32Array([0.333251953125, 2 ** -24]));
   * ```
   */
  castF16ToF32(src: Uint16Array | Float16Array, dst: Float32Array): void {
    checkCast("float16", false, src, dst);
    this.#cast(this.#castF16F32, src, dst);
  }

  /**
   * Rounds float32 to bfloat16 (nearest, ties to even; overflow to ±Inf; NaN stays a quiet NaN).
   *
   * @param src The float32 values.
   * @param dst The bfloat16 bits, same length.
   * @throws {TypeError} On a wrong array class. @throws {RangeError} On different lengths.
   *
   * @example
   * ```ts
   * import { kernels } from "@dcomm/dcomm/kernels";
   * import assert from "node:assert/strict";
   * const k = await kernels();
   * const b = new Uint16Array(2);
   * k.castF32ToBf16(new Float32Array([1, 1 + 2 ** -8]), b); // the second is a tie: to even
   * assert.deepEqual(b, new Uint16Array([0x3f80, 0x3f80]));
   * ```
   */
  castF32ToBf16(src: Float32Array, dst: Uint16Array): void {
    checkCast("bfloat16", true, src, dst);
    this.#cast(this.#castF32Bf16, src, dst);
  }

  /**
   * Widens bfloat16 to float32, exactly.
   *
   * @param src The bfloat16 bits.
   * @param dst The float32 values, same length.
   * @throws {TypeError} On a wrong array class. @throws {RangeError} On different lengths.
   *
   * @example
   * ```ts
   * import { kernels } from "@dcomm/dcomm/kernels";
   * import assert from "node:assert/strict";
   * const k = await kernels();
   * const f = new Float32Array(1);
   * k.castBf16ToF32(new Uint16Array([0xc040]), f);
   * assert.deepEqual(f, new Float32Array([-3]));
   * ```
   */
  castBf16ToF32(src: Uint16Array, dst: Float32Array): void {
    checkCast("bfloat16", false, src, dst);
    this.#cast(this.#castBf16F32, src, dst);
  }

  /**
   * `x = alpha * x`.
   *
   * @param x The values, scaled in place.
   * @param alpha The factor, rounded to float32 for a Float32Array.
   * @throws {TypeError} If x is not a Float32Array or Float64Array, or alpha is not a number.
   *
   * @example
   * ```ts
   * import { kernels } from "@dcomm/dcomm/kernels";
   * import assert from "node:assert/strict";
   * const k = await kernels();
   * const x = new Float32Array([1, -2]);
   * k.scale(x, 0.5);
   * assert.deepEqual(x, new Float32Array([0.5, -1]));
   * ```
   */
  scale(x: Float32Array | Float64Array, alpha: number): void {
    const dtype = checkScale(x, alpha);
    if (x.length === 0) return;
    const heap = this.#heap, xOwn = inPlace(heap, x), mark = heap.top;
    try {
      const p = xOwn >= 0 ? xOwn : heap.stage(x);
      this.#ok(this.#scale(DTYPE_CODE[dtype], p, x.length, alpha), "scale");
      if (xOwn < 0) heap.unstage(p, x);
    } finally {
      heap.reset(mark);
    }
  }

  /**
   * `y = y + alpha * x` (the product rounded, then the sum: no fused multiply-add).
   *
   * @param y The accumulator, updated in place.
   * @param x The addend: same dtype and length (it may be `y` itself).
   * @param options The factor alpha.
   * @throws {TypeError} On a wrong array class, mixed dtypes, or a non-number alpha.
   * @throws {RangeError} On different lengths.
   *
   * @example An SGD step
   * ```ts
   * import { kernels } from "@dcomm/dcomm/kernels";
   * import assert from "node:assert/strict";
   * const k = await kernels();
   * const w = new Float32Array([1, 1]);
   * k.axpy(w, new Float32Array([2, -2]), { alpha: -0.25 });
   * assert.deepEqual(w, new Float32Array([0.5, 1.5]));
   * ```
   */
  axpy(y: Float32Array | Float64Array, x: Float32Array | Float64Array, options: AxpyOptions = {}): void {
    const { dtype, alpha } = checkAxpy(y, x, options);
    const n = y.length, bytes = y.byteLength, heap = this.#heap;
    if (n === 0) return;
    const yOwn = inPlace(heap, y), xOwn = inPlace(heap, x), mark = heap.top;
    try {
      const yp = yOwn >= 0 ? yOwn : heap.stage(y);
      let xp = xOwn >= 0 ? xOwn : x === y ? yp : heap.stage(x);
      if (xp !== yp && overlaps(yp, bytes, xp, bytes)) xp = this.#copy(xp, bytes);
      this.#ok(this.#axpy(DTYPE_CODE[dtype], yp, xp, n, alpha), "axpy");
      if (yOwn < 0) heap.unstage(yp, y);
    } finally {
      heap.reset(mark);
    }
  }

  /**
   * `C = op(A) · op(B)`, or `C += op(A) · op(B)` with `accumulate`, in float32, row-major. Each element
   * adds its k products in order, each rounded (no fused multiply-add), so the result equals the
   * reference's bit for bit.
   *
   * @param a A: m x k, or k x m with `transA`.
   * @param b B: k x n, or n x k with `transB`.
   * @param options The output C (m x n), the shapes and the flags.
   * @throws {TypeError} If a, b or c is not a Float32Array.
   * @throws {RangeError} If a shape is not a non-negative integer or does not match an array's length.
   *
   * @example A 2 x 2 product
   * ```ts
   * import { kernels } from "@dcomm/dcomm/kernels";
   * import assert from "node:assert/strict";
   * const k = await kernels();
   * const c = new Float32Array(4);
   * k.matmul(new Float32Array([1, 2, 3, 4]), new Float32Array([5, 6, 7, 8]), { c, m: 2, k: 2, n: 2 });
   * assert.deepEqual(c, new Float32Array([19, 22, 43, 50]));
   * ```
   */
  matmul(a: Float32Array, b: Float32Array, options: MatmulOptions): void {
    const { m, k, n, flags } = checkMatmul(a, b, options);
    const c = options.c, heap = this.#heap;
    if (m === 0 || n === 0) return;
    const aOwn = inPlace(heap, a), bOwn = inPlace(heap, b), cOwn = inPlace(heap, c), mark = heap.top;
    try {
      const cp = cOwn >= 0 ? cOwn : flags & 4 ? heap.stage(c) : heap.alloc(c.byteLength);
      let ap = aOwn >= 0 ? aOwn : heap.stage(a);
      if (overlaps(cp, c.byteLength, ap, a.byteLength)) ap = this.#copy(ap, a.byteLength);
      let bp = bOwn >= 0 ? bOwn : heap.stage(b);
      if (overlaps(cp, c.byteLength, bp, b.byteLength)) bp = this.#copy(bp, b.byteLength);
      this.#ok(this.#matmul(ap, bp, cp, m, k, n, flags), "matmul");
      if (cOwn < 0) heap.unstage(cp, c);
    } finally {
      heap.reset(mark);
    }
  }

  /**
   * {@linkcode Kernels.reduce} on addresses in wasm memory: `n` elements at `dstPtr` and `srcPtr`. The hot
   * path of the CPU collectives: no staging and only cheap checks. The two ranges must be equal or
   * disjoint.
   *
   * @param dtype The dtype.
   * @param op The op (not `"avg"` or `"premulSum"`).
   * @param dstPtr The accumulator's address.
   * @param srcPtr The operand's address.
   * @param n The element count.
   * @throws {TypeError} On an unknown dtype or op, or an op that does not apply to the dtype.
   * @throws {RangeError} On op avg or premulSum, or a range outside memory.
   *
   * @example
   * ```ts
   * import { kernels } from "@dcomm/dcomm/kernels";
   * import assert from "node:assert/strict";
   * const k = await kernels();
   * const mark = k.heap.top;
   * const p = k.heap.alloc(8);
   * k.heap.view(Int32Array, p, 2).set([2 ** 31 - 1, 5]);
   * k.reducePtr("int32", "sum", p, p, 2); // dst and src may be the same range
   * assert.deepEqual(k.heap.view(Int32Array, p, 2), new Int32Array([-2, 10]));
   * k.heap.reset(mark);
   * ```
   */
  reducePtr(dtype: DType, op: ReduceOp, dstPtr: number, srcPtr: number, n: number): void {
    const code = dtypeCode(dtype), opc = opCode(op);
    if (opc === OP_CODE.avg) {
      throw new RangeError('Cannot reduce: op "avg" needs the number of contributions; use reduceManyPtr()');
    }
    if (opc === OP_CODE.premulSum) {
      throw new RangeError('Cannot reduce: op "premulSum" multiplies every source; use reduceManyPtr()');
    }
    checkPtrOp(dtype, op, undefined);
    this.#count(n);
    const bytes = n * dtypeSize(dtype);
    this.#inMemory(dstPtr, bytes, "dstPtr");
    this.#inMemory(srcPtr, bytes, "srcPtr");
    this.#ok(this.#reduce(code, opc, dstPtr, srcPtr, n), "reduce");
  }

  /**
   * {@linkcode Kernels.reduceMany} on addresses in wasm memory. `dstPtr` may equal a source's address;
   * other overlaps are not allowed.
   *
   * @param dtype The dtype.
   * @param op The op, avg and premulSum included.
   * @param dstPtr The result's address.
   * @param srcPtrs The sources' addresses (at least one).
   * @param n The element count.
   * @param factor premulSum's factor (required there, refused elsewhere).
   * @throws {TypeError} On an unknown dtype or op, an op that does not apply to the dtype, or premulSum
   *   without a factor.
   * @throws {RangeError} On no sources, a range outside memory, or a factor that is not finite.
   *
   * @example
   * ```ts
   * import { kernels } from "@dcomm/dcomm/kernels";
   * import assert from "node:assert/strict";
   * const k = await kernels();
   * const mark = k.heap.top;
   * const [a, b, out] = [k.heap.alloc(8), k.heap.alloc(8), k.heap.alloc(8)];
   * k.heap.view(Float64Array, a, 1).set([1]);
   * k.heap.view(Float64Array, b, 1).set([2]);
   * k.reduceManyPtr("float64", "avg", out, [a, b], 1);
   * assert.equal(k.heap.view(Float64Array, out, 1)[0], 1.5);
   * k.heap.reset(mark);
   * ```
   */
  reduceManyPtr(
    dtype: DType,
    op: ReduceOp,
    dstPtr: number,
    srcPtrs: readonly number[],
    n: number,
    factor?: number,
  ): void {
    const code = dtypeCode(dtype), opc = opCode(op), k = srcPtrs.length;
    const f = checkPtrOp(dtype, op, factor);
    if (k === 0) throw new RangeError("Cannot reduce: expected at least one source in srcPtrs, found 0");
    this.#count(n);
    const bytes = n * dtypeSize(dtype);
    this.#inMemory(dstPtr, bytes, "dstPtr");
    // (The role's name is made only for the error: a template string per source per call is garbage.)
    for (let j = 0; j < k; j++) {
      if (!this.#fits(srcPtrs[j], bytes)) this.#inMemory(srcPtrs[j], bytes, `srcPtrs[${j}]`);
    }
    const heap = this.#heap, mark = heap.top;
    try {
      const list = heap.alloc(4 * k, 4);
      const words = this.#wordView();
      for (let j = 0; j < k; j++) words[(list >>> 2) + j] = srcPtrs[j];
      this.#ok(
        f === undefined
          ? this.#reduceN(code, opc, dstPtr, list, k, n)
          : this.#premulN(code, dstPtr, list, k, n, f),
        "reduce",
      );
    } finally {
      heap.reset(mark);
    }
  }

  /**
   * {@linkcode Kernels.divide} on an address in wasm memory.
   *
   * @param dtype The dtype.
   * @param dstPtr The values' address.
   * @param n The element count.
   * @param divisor A finite non-zero number; for integer dtypes an integer from 1 to 2^53.
   * @throws {TypeError} On an unknown dtype. @throws {RangeError} On a bad divisor or a range outside memory.
   *
   * @example
   * ```ts
   * import { kernels } from "@dcomm/dcomm/kernels";
   * import assert from "node:assert/strict";
   * const k = await kernels();
   * const mark = k.heap.top;
   * const p = k.heap.alloc(2);
   * k.heap.view(Int8Array, p, 2).set([-7, 7]);
   * k.dividePtr("int8", p, 2, 2);
   * assert.deepEqual(k.heap.view(Int8Array, p, 2), new Int8Array([-3, 3]));
   * k.heap.reset(mark);
   * ```
   */
  dividePtr(dtype: DType, dstPtr: number, n: number, divisor: number): void {
    const code = dtypeCode(dtype);
    checkDivisor(dtype, divisor);
    this.#count(n);
    this.#inMemory(dstPtr, n * dtypeSize(dtype), "dstPtr");
    this.#ok(this.#divide(code, dstPtr, n, divisor), "divide");
  }

  #cast(fn: KernelFn, src: TypedArray, dst: TypedArray): void {
    const n = src.length, heap = this.#heap;
    if (n === 0) return;
    const sOwn = inPlace(heap, src), dOwn = inPlace(heap, dst), mark = heap.top;
    try {
      const d = dOwn >= 0 ? dOwn : heap.alloc(dst.byteLength);
      let s = sOwn >= 0 ? sOwn : heap.stage(src);
      if (overlaps(s, src.byteLength, d, dst.byteLength)) s = this.#copy(s, src.byteLength);
      fn(s, d, n);
      if (dOwn < 0) heap.unstage(d, dst);
    } finally {
      heap.reset(mark);
    }
  }

  /** A fresh copy of `bytes` bytes at `ptr`, on the stack: for a source that partly overlaps an output. */
  #copy(ptr: number, bytes: number): number {
    const p = this.#heap.alloc(bytes);
    this.#heap.bytes().copyWithin(p, ptr, ptr + bytes);
    return p;
  }

  /** Memory as 32-bit words, for lists of addresses; refreshed after memory grows. */
  #wordView(): Uint32Array {
    const buffer = this.#heap.memory.buffer;
    if (this.#words.buffer !== buffer) this.#words = new Uint32Array(buffer);
    return this.#words;
  }

  #count(n: number): void {
    if (!Number.isInteger(n) || n < 0) {
      throw new RangeError(`Cannot run the kernel: expected n to be an integer >= 0, found ${n}`);
    }
  }

  #fits(ptr: number, bytes: number): boolean {
    return Number.isInteger(ptr) && Number.isInteger(bytes) && ptr >= 0 && bytes >= 0 &&
      ptr + bytes <= this.#heap.memory.buffer.byteLength;
  }

  #inMemory(ptr: number, bytes: number, role: string): void {
    const size = this.#heap.memory.buffer.byteLength;
    if (
      !(Number.isInteger(ptr) && Number.isInteger(bytes) && ptr >= 0 && bytes >= 0 && ptr + bytes <= size)
    ) {
      throw new RangeError(
        `Cannot run the kernel: expected ${role} to address ${bytes} bytes inside wasm memory (0..${size}), ` +
          `found ${ptr}`,
      );
    }
  }

  #ok(rc: number, verb: string): void {
    // The checks above make these unreachable; they guard against a kernels.wasm out of step with them.
    if (rc === 0) return;
    if (rc === -1) throw new TypeError(`Cannot ${verb}: kernels.wasm rejected the dtype code`);
    if (rc === -2) throw new TypeError(`Cannot ${verb}: kernels.wasm rejected the op code`);
    throw new RangeError(`Cannot ${verb}: kernels.wasm rejected an argument (code ${rc})`);
  }
}

let loaded: Promise<Kernels> | undefined;

/**
 * The WASM kernels: instantiates `kernels.wasm` on the first call in this thread (no permission needed)
 * and returns the same {@linkcode Kernels} afterwards.
 *
 * @returns The kernels.
 * @throws {TypeError} If `kernels.wasm` is stale and lacks a kernel.
 *
 * @example
 * ```ts
 * import { kernels } from "@dcomm/dcomm/kernels";
 * import assert from "node:assert/strict";
 * assert.equal(await kernels(), await kernels());
 * ```
 */
export async function kernels(): Promise<Kernels> {
  loaded ??= loadKernelModule().then((module) => new Kernels(module));
  return await loaded;
}
