/**
 * Argument checks shared by the compression wrappers (`compress.ts`) and their TypeScript reference
 * (`compress_reference.ts`), so both reject the same inputs with the same messages and allocate missing
 * outputs the same way.
 *
 * @module
 */
import { arrayKind, type TypedArray } from "../core/dtype.ts";
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

/** The classes of the arrays the compression kernels read and write. */
type ArrayClass =
  | Float32ArrayConstructor
  | Int8ArrayConstructor
  | Uint8ArrayConstructor
  | Uint32ArrayConstructor;

function show(value: unknown): string {
  return typeof value === "string" ? JSON.stringify(value) : String(value);
}

/** Throws unless `value` is an array of class `ctor` over a live (not detached) buffer. */
function checkArray<C extends ArrayClass>(
  verb: string,
  role: string,
  value: unknown,
  ctor: C,
): InstanceType<C> {
  if (!(value instanceof ctor)) {
    const article = ctor === Int8Array ? "an" : "a";
    throw new TypeError(`Cannot ${verb}: ${role} must be ${article} ${ctor.name}, found ${arrayKind(value)}`);
  }
  if ((value.buffer as ArrayBuffer).detached) {
    throw new TypeError(
      `Cannot ${verb}: ${role} is a view of a detached buffer (wasm memory grows by replacing its buffer); ` +
        `take the view again after the last allocation`,
    );
  }
  return value as InstanceType<C>;
}

/** Throws unless `array` has `expected` elements; `because` completes "but ...". */
function checkLength(verb: string, role: string, array: TypedArray, expected: number, because: string): void {
  if (array.length !== expected) {
    throw new RangeError(`Cannot ${verb}: ${role} has ${array.length} elements but ${because}`);
  }
}

/** The given output, checked, or a new zeroed one of `length` elements. */
function output<C extends ArrayClass>(
  verb: string,
  role: string,
  given: unknown,
  ctor: C,
  length: number,
  because: string,
): InstanceType<C> {
  if (given === undefined) return new ctor(length) as InstanceType<C>;
  const array = checkArray(verb, role, given, ctor);
  checkLength(verb, role, array, length, because);
  return array;
}

/** Throws unless `value` is an object; `what` names it and its fields, as "options { blockSize }". */
function checkObject(verb: string, value: unknown, what: string): void {
  if (typeof value !== "object" || value === null) {
    throw new TypeError(`Cannot ${verb}: expected ${what}, found ${show(value)}`);
  }
}

/**
 * Throws unless `blockSize` is an integer >= 1.
 *
 * @returns The block size.
 */
export function checkBlockSize(verb: string, blockSize: unknown): number {
  if (typeof blockSize !== "number") {
    throw new TypeError(`Cannot ${verb}: blockSize must be a number, found ${typeof blockSize}`);
  }
  if (!Number.isInteger(blockSize) || blockSize < 1) {
    throw new RangeError(`Cannot ${verb}: blockSize must be an integer >= 1, found ${blockSize}`);
  }
  return blockSize;
}

/**
 * Throws unless `n` is an integer >= 0.
 *
 * @returns The count.
 */
export function checkCount(verb: string, name: string, n: unknown): number {
  if (typeof n !== "number" || !Number.isInteger(n) || n < 0) {
    throw new RangeError(`Cannot ${verb}: ${name} must be an integer >= 0, found ${show(n)}`);
  }
  return n;
}

/** The number of blocks (and scales) of `n` elements in blocks of `blockSize`, the last maybe partial. */
export function blockCount(n: number, blockSize: number): number {
  return Math.ceil(n / blockSize);
}

/** "src needs 3 (10 elements in blocks of 4)": why a scales array must have its length. */
function scalesBecause(role: string, n: number, blockSize: number): string {
  return `${role} needs ${blockCount(n, blockSize)} (${n} elements in blocks of ${blockSize})`;
}

/** Throws a RangeError if two of the arrays share a byte of memory: the kernels do not read and write
 * the same bytes in one call. */
function checkDisjoint(verb: string, arrays: readonly (readonly [string, TypedArray])[]): void {
  for (let i = 0; i < arrays.length; i++) {
    for (let j = i + 1; j < arrays.length; j++) {
      const [ra, a] = arrays[i], [rb, b] = arrays[j];
      if (
        a.buffer === b.buffer && a.byteLength > 0 && b.byteLength > 0 &&
        a.byteOffset < b.byteOffset + b.byteLength && b.byteOffset < a.byteOffset + a.byteLength
      ) {
        throw new RangeError(`Cannot ${verb}: ${ra} and ${rb} share memory; pass separate arrays`);
      }
    }
  }
}

/** What a quantization writes, once its arguments are checked. */
export interface QuantizeInt8Plan extends Int8Packed {
  /** The block size. */
  blockSize: number;
}

/**
 * Checks the arguments of `quantizeInt8(src, options)` and supplies missing outputs.
 *
 * @throws {TypeError} On a wrong array class or missing options. @throws {RangeError} On a bad block
 *   size, outputs of the wrong length, or arrays that share memory.
 */
export function checkQuantizeInt8(src: Float32Array, options: QuantizeInt8Options): QuantizeInt8Plan {
  const verb = "quantize";
  checkArray(verb, "src", src, Float32Array);
  checkObject(verb, options, "options { blockSize, q?, scales? }");
  const blockSize = checkBlockSize(verb, options.blockSize);
  const n = src.length;
  const q = output(verb, "q", options.q, Int8Array, n, `src has ${n}`);
  const scales = output(
    verb,
    "scales",
    options.scales,
    Float32Array,
    blockCount(n, blockSize),
    scalesBecause("src", n, blockSize),
  );
  checkDisjoint(verb, [["src", src], ["q", q], ["scales", scales]]);
  return { blockSize, q, scales };
}

/** What a decompression reads and how it writes, once its arguments are checked. */
export interface DecompressPlan {
  /** The block size. */
  blockSize: number;
  /** Add into dst instead of overwriting it. */
  accumulate: boolean;
}

/**
 * Checks the arguments of `dequantizeInt8(packed, dst, options)`.
 *
 * @throws {TypeError} On a wrong array class or missing options. @throws {RangeError} On a bad block
 *   size, arrays of the wrong length, or arrays that share memory.
 */
export function checkDequantizeInt8(
  packed: Int8Packed,
  dst: Float32Array,
  options: DequantizeInt8Options,
): DecompressPlan {
  const verb = "dequantize";
  checkObject(verb, packed, "packed { q, scales }");
  checkArray(verb, "dst", dst, Float32Array);
  checkObject(verb, options, "options { blockSize, accumulate? }");
  const blockSize = checkBlockSize(verb, options.blockSize);
  const n = dst.length;
  const q = checkArray(verb, "q", packed.q, Int8Array);
  checkLength(verb, "q", q, n, `dst has ${n}`);
  const scales = checkArray(verb, "scales", packed.scales, Float32Array);
  checkLength(verb, "scales", scales, blockCount(n, blockSize), scalesBecause("dst", n, blockSize));
  checkDisjoint(verb, [["dst", dst], ["q", q], ["scales", scales]]);
  return { blockSize, accumulate: options.accumulate ?? false };
}

/** What a sign compression writes, once its arguments are checked. */
export interface SignCompressPlan extends SignPacked {
  /** The block size. */
  blockSize: number;
}

/**
 * Checks the arguments of `signCompress(src, residual, options)` and supplies missing outputs.
 *
 * @throws {TypeError} On a wrong array class or missing options. @throws {RangeError} On a bad block
 *   size, arrays of the wrong length, or arrays that share memory.
 */
export function checkSignCompress(
  src: Float32Array,
  residual: Float32Array,
  options: SignCompressOptions,
): SignCompressPlan {
  const verb = "sign-compress";
  checkArray(verb, "src", src, Float32Array);
  checkArray(verb, "residual", residual, Float32Array);
  checkObject(verb, options, "options { blockSize, bits?, scales? }");
  const blockSize = checkBlockSize(verb, options.blockSize);
  const n = src.length;
  checkLength(verb, "residual", residual, n, `src has ${n}`);
  const bits = output(
    verb,
    "bits",
    options.bits,
    Uint8Array,
    Math.ceil(n / 8),
    `src needs ${Math.ceil(n / 8)} (${n} bits)`,
  );
  const scales = output(
    verb,
    "scales",
    options.scales,
    Float32Array,
    blockCount(n, blockSize),
    scalesBecause("src", n, blockSize),
  );
  checkDisjoint(verb, [["src", src], ["residual", residual], ["bits", bits], ["scales", scales]]);
  return { blockSize, bits, scales };
}

/**
 * Checks the arguments of `signDecompress(packed, dst, options)`.
 *
 * @throws {TypeError} On a wrong array class or missing options. @throws {RangeError} On a bad block
 *   size, arrays of the wrong length, or arrays that share memory.
 */
export function checkSignDecompress(
  packed: SignPacked,
  dst: Float32Array,
  options: SignDecompressOptions,
): DecompressPlan {
  const verb = "sign-decompress";
  checkObject(verb, packed, "packed { bits, scales }");
  checkArray(verb, "dst", dst, Float32Array);
  checkObject(verb, options, "options { blockSize, accumulate? }");
  const blockSize = checkBlockSize(verb, options.blockSize);
  const n = dst.length;
  const bits = checkArray(verb, "bits", packed.bits, Uint8Array);
  checkLength(verb, "bits", bits, Math.ceil(n / 8), `dst needs ${Math.ceil(n / 8)} (${n} bits)`);
  const scales = checkArray(verb, "scales", packed.scales, Float32Array);
  checkLength(verb, "scales", scales, blockCount(n, blockSize), scalesBecause("dst", n, blockSize));
  checkDisjoint(verb, [["dst", dst], ["bits", bits], ["scales", scales]]);
  return { blockSize, accumulate: options.accumulate ?? false };
}

/**
 * Checks the arguments of `topK(src, k, options)` and supplies missing outputs.
 *
 * @throws {TypeError} On a wrong array class. @throws {RangeError} On k outside 0..src.length, outputs
 *   of the wrong length, or arrays that share memory.
 */
export function checkTopK(src: Float32Array, k: number, options: TopKOptions | undefined): SparseVector {
  const verb = "select top-k";
  checkArray(verb, "src", src, Float32Array);
  const n = src.length;
  if (typeof k !== "number" || !Number.isInteger(k) || k < 0 || k > n) {
    throw new RangeError(
      `Cannot ${verb}: k must be an integer from 0 to ${n} (the length of src), found ${show(k)}`,
    );
  }
  if (options !== undefined) checkObject(verb, options, "options { indices?, values? }");
  const indices = output(verb, "indices", options?.indices, Uint32Array, k, `k is ${k}`);
  const values = output(verb, "values", options?.values, Float32Array, k, `k is ${k}`);
  checkDisjoint(verb, [["src", src], ["indices", indices], ["values", values]]);
  return { indices, values };
}

/**
 * Checks the arguments of `scatterAdd(dst, sparse)`, all but the range of each index (see
 * {@linkcode indexOutOfRange}).
 *
 * @throws {TypeError} On a wrong array class. @throws {RangeError} On indices and values of different
 *   lengths, or arrays that share memory.
 */
export function checkScatterAdd(dst: Float32Array, sparse: SparseVector): void {
  const verb = "scatter-add";
  checkArray(verb, "dst", dst, Float32Array);
  checkObject(verb, sparse, "sparse { indices, values }");
  const indices = checkArray(verb, "indices", sparse.indices, Uint32Array);
  const values = checkArray(verb, "values", sparse.values, Float32Array);
  checkLength(verb, "values", values, indices.length, `indices has ${indices.length}`);
  checkDisjoint(verb, [["dst", dst], ["indices", indices], ["values", values]]);
}

/** The error of a scatter-add whose `indices[at]` is `index`, past the end of a dst of `n` elements. */
export function indexOutOfRange(at: number, index: number, n: number): RangeError {
  return new RangeError(
    `Cannot scatter-add: indices[${at}] is ${index} but dst has ${n} elements; nothing was written`,
  );
}
