/**
 * The compression rows of `deno task bench:kernels`. Each row allocates its arrays in wasm memory once and
 * builds one closure over them, `run(k)`, that it calls with two bindings of the same wrapper class
 * `CompressionKernels`: one over the WASM module (the WASM column) and one over the native module of
 * `_native_kernels.ts` (the native column), whose C functions work on the very same wasm-memory arrays (in
 * place, no staging). The TypeScript reference runs on plain JS arrays holding the same data, a
 * gradient-like 64 MiB float32 input.
 *
 * | row | input | bytes counted (read + written) |
 * |---|---|---|
 * | quantizeInt8 | n floats, blocks of 256 | 4n + n + 4n/256 |
 * | dequantizeInt8 | n int8 + n/256 scales | n + 4n/256 + 4n |
 * | signCompress | n floats + n residuals, blocks of 2048 | 4n + 4n + 4n (residual back) + n/8 + 4n/2048 |
 * | signDecompress | n bits + n/2048 scales | n/8 + 4n/2048 + 4n |
 * | topK | n floats, k = n/100 | 4n + 8k (the kernel reads the input twice: counted once) |
 * | scatterAdd | k = n/100 sparse pairs (ascending indices) into n floats | 16k (indices, values, dst read and written) |
 *
 * @module
 */
import { CompressionKernels } from "../wasm/compress.ts";
import * as reference from "../wasm/compress_reference.ts";
import type { KernelModule, TypedArrayConstructor, WasmHeap } from "../wasm/loader.ts";
import { bindNative, type KernelCase, type KernelRuns } from "./_kernel_case.ts";

/** Bytes of the float32 input of every row. */
export const INPUT_BYTES = 64 << 20;
/** Elements of the input. */
const N = INPUT_BYTES / 4;
/** The int8 block size: one scale per 256 elements (a 1.6% overhead). */
export const INT8_BLOCK = 256;
/** The sign block size: one scale per 2048 elements (8 KiB of input, so both passes stay in L1). */
export const SIGN_BLOCK = 2048;
/** Top-k keeps 1% of the elements. */
export const TOPK_K = Math.floor(N / 100);

const INT8_SCALES = Math.ceil(N / INT8_BLOCK);
const SIGN_SCALES = Math.ceil(N / SIGN_BLOCK);

/**
 * A gradient-like input: the sum of four uniforms in [-0.5, 0.5) (roughly normal) times 1e-3, from a
 * xorshift32 stream.
 */
function fill(x: Float32Array, seed: number): void {
  let s = seed >>> 0;
  const uniform = (): number => {
    s ^= s << 13;
    s >>>= 0;
    s ^= s >>> 17;
    s ^= s << 5;
    s >>>= 0;
    return Math.fround((s >>> 8) * (1 / 16777216) - 0.5);
  };
  for (let i = 0; i < x.length; i++) {
    const a = uniform(), b = uniform(), c = uniform(), d = uniform();
    x[i] = Math.fround(Math.fround(Math.fround(a + b) + c) + d) * Math.fround(1e-3);
  }
}

/** Reserves arrays in wasm memory, zeroed (not what an earlier row left there); each getter returns a view
 * that is valid when it is called (memory growth, as the first top-k call's scratch causes, detaches
 * earlier views). */
class WasmArrays {
  #heap: WasmHeap;

  constructor(heap: WasmHeap) {
    this.#heap = heap;
  }

  /** Reserves `length` elements; returns the getter of their view. */
  add<T extends Float32Array | Int8Array | Uint8Array | Uint32Array>(
    ctor: TypedArrayConstructor<T>,
    length: number,
  ): () => T {
    const heap = this.#heap, bytes = length * ctor.BYTES_PER_ELEMENT, ptr = heap.alloc(bytes);
    heap.bytes().fill(0, ptr, ptr + bytes);
    let view: T | undefined;
    return () => {
      if (view === undefined || view.buffer !== heap.memory.buffer) view = heap.view(ctor, ptr, length);
      return view;
    };
  }
}

/** An array a compression kernel reads or writes. */
type Arr = Float32Array | Int8Array | Uint8Array | Uint32Array;

/** Throws unless two arrays hold the same bits (any NaN equal to any NaN). */
function same(what: string, got: Arr, want: Arr): void {
  if (got.length !== want.length) throw new Error(`${what}: ${got.length} elements, expected ${want.length}`);
  const g = new Uint8Array(got.buffer, got.byteOffset, got.byteLength);
  const w = new Uint8Array(want.buffer, want.byteOffset, want.byteLength);
  let wrong = 0, first = -1;
  for (let b = 0; b < g.length; b++) {
    if (g[b] === w[b]) continue;
    const i = Math.floor(b / got.BYTES_PER_ELEMENT);
    b = (i + 1) * got.BYTES_PER_ELEMENT - 1;
    if (got instanceof Float32Array && Number.isNaN(got[i]) && Number.isNaN(want[i])) continue;
    if (wrong++ === 0) first = i;
  }
  if (wrong > 0) {
    throw new Error(`${what}: ${wrong} wrong elements; the first, ${first}: ${got[first]} vs ${want[first]}`);
  }
}

/** What a row's setup returns. */
interface RowRuns {
  /** One call of the kernel through `k` (the WASM or the native binding) on the wasm-memory arrays. */
  run(k: CompressionKernels): void;
  /** One call of the TypeScript loop on the JS arrays. */
  ts(): void;
  /**
   * Every wasm-memory array the kernel writes: what it is, its getter, and the JS array the TypeScript loop
   * writes in its place.
   */
  outputs: [string, () => Arr, Arr][];
}

/** The bytes of an array. */
function bytesOf(a: Arr): Uint8Array {
  return new Uint8Array(a.buffer, a.byteOffset, a.byteLength);
}

/**
 * A row named after its method, on float32 input: `setup` fills the arrays; the written ones (`outputs`)
 * are copied then, so that `reset` can put them back before a checked call.
 */
function row(name: string, bytes: number, setup: (arrays: WasmArrays) => RowRuns): KernelCase {
  return {
    name,
    dtype: "float32",
    bytes,
    setup(module: KernelModule, native?: KernelModule): KernelRuns {
      const wasmK = new CompressionKernels(module);
      const nativeK = bindNative(native, (m) => new CompressionKernels(m));
      const { run, ts, outputs } = setup(new WasmArrays(module.heap));
      const first = outputs.map(([, got]) => bytesOf(got()).slice());
      return {
        wasm: () => run(wasmK),
        native: nativeK === undefined ? undefined : () => run(nativeK),
        ts,
        reset(): void {
          outputs.forEach(([, got], i) => bytesOf(got()).set(first[i]));
        },
        check(): void {
          for (const [what, got, want] of outputs) same(what, got(), want);
        },
      };
    },
  };
}

/** Quantizes the gradient to int8, one scale per 256 elements. */
function quantizeRow(): KernelCase {
  return row("quantizeInt8", 5 * N + 4 * INT8_SCALES, (arrays) => {
    const src = arrays.add(Float32Array, N), q = arrays.add(Int8Array, N);
    const scales = arrays.add(Float32Array, INT8_SCALES);
    fill(src(), 1);
    const tSrc = src().slice(), tQ = new Int8Array(N), tScales = new Float32Array(INT8_SCALES);
    return {
      run: (k) => void k.quantizeInt8(src(), { blockSize: INT8_BLOCK, q: q(), scales: scales() }),
      ts: () => void reference.quantizeInt8Reference(tSrc, { blockSize: INT8_BLOCK, q: tQ, scales: tScales }),
      outputs: [["quantizeInt8 q", q, tQ], ["quantizeInt8 scales", scales, tScales]],
    };
  });
}

/** Dequantizes the int8 gradient back to float32 (overwriting). */
function dequantizeRow(): KernelCase {
  return row("dequantizeInt8", 5 * N + 4 * INT8_SCALES, (arrays) => {
    const q = arrays.add(Int8Array, N), scales = arrays.add(Float32Array, INT8_SCALES);
    const dst = arrays.add(Float32Array, N);
    fill(dst(), 2);
    reference.quantizeInt8Reference(dst(), { blockSize: INT8_BLOCK, q: q(), scales: scales() });
    const packed = { q: q().slice(), scales: scales().slice() }, tDst = new Float32Array(N);
    return {
      run: (k) => k.dequantizeInt8({ q: q(), scales: scales() }, dst(), { blockSize: INT8_BLOCK }),
      ts: () => reference.dequantizeInt8Reference(packed, tDst, { blockSize: INT8_BLOCK }),
      outputs: [["dequantizeInt8", dst, tDst]],
    };
  });
}

/** One step of 1-bit compression with error feedback (each call feeds the residual of the last one). */
function signCompressRow(): KernelCase {
  return row("signCompress", 12 * N + N / 8 + 4 * SIGN_SCALES, (arrays) => {
    const g = arrays.add(Float32Array, N), e = arrays.add(Float32Array, N);
    const bits = arrays.add(Uint8Array, N / 8), scales = arrays.add(Float32Array, SIGN_SCALES);
    fill(g(), 3);
    fill(e(), 4);
    const tG = g().slice(), tE = e().slice(), tBits = new Uint8Array(N / 8);
    const tScales = new Float32Array(SIGN_SCALES);
    return {
      run: (k) => void k.signCompress(g(), e(), { blockSize: SIGN_BLOCK, bits: bits(), scales: scales() }),
      ts: () =>
        void reference.signCompressReference(tG, tE, { blockSize: SIGN_BLOCK, bits: tBits, scales: tScales }),
      outputs: [
        ["signCompress bits", bits, tBits],
        ["signCompress scales", scales, tScales],
        ["signCompress residual", e, tE],
      ],
    };
  });
}

/** Expands sign bits to ±scale (overwriting). */
function signDecompressRow(): KernelCase {
  return row("signDecompress", N / 8 + 4 * SIGN_SCALES + 4 * N, (arrays) => {
    const bits = arrays.add(Uint8Array, N / 8), scales = arrays.add(Float32Array, SIGN_SCALES);
    const dst = arrays.add(Float32Array, N);
    fill(dst(), 5);
    reference.signCompressReference(dst(), new Float32Array(N), {
      blockSize: SIGN_BLOCK,
      bits: bits(),
      scales: scales(),
    });
    const packed = { bits: bits().slice(), scales: scales().slice() }, tDst = new Float32Array(N);
    return {
      run: (k) => k.signDecompress({ bits: bits(), scales: scales() }, dst(), { blockSize: SIGN_BLOCK }),
      ts: () => reference.signDecompressReference(packed, tDst, { blockSize: SIGN_BLOCK }),
      outputs: [["signDecompress", dst, tDst]],
    };
  });
}

/** The 1% largest magnitudes. */
function topKRow(): KernelCase {
  return row("topK", 4 * N + 8 * TOPK_K, (arrays) => {
    const src = arrays.add(Float32Array, N);
    const indices = arrays.add(Uint32Array, TOPK_K), values = arrays.add(Float32Array, TOPK_K);
    fill(src(), 6);
    const tSrc = src().slice(), tIndices = new Uint32Array(TOPK_K), tValues = new Float32Array(TOPK_K);
    return {
      run: (k) => void k.topK(src(), TOPK_K, { indices: indices(), values: values() }),
      ts: () => void reference.topKReference(tSrc, TOPK_K, { indices: tIndices, values: tValues }),
      outputs: [["topK indices", indices, tIndices], ["topK values", values, tValues]],
    };
  });
}

/** Adds the top-k of a gradient (ascending indices) into a dense accumulator (each call adds again). */
function scatterAddRow(): KernelCase {
  return row("scatterAdd", 16 * TOPK_K, (arrays) => {
    const dst = arrays.add(Float32Array, N);
    const indices = arrays.add(Uint32Array, TOPK_K), values = arrays.add(Float32Array, TOPK_K);
    fill(dst(), 7);
    reference.topKReference(dst(), TOPK_K, { indices: indices(), values: values() });
    const sparse = { indices: indices().slice(), values: values().slice() }, tDst = dst().slice();
    return {
      run: (k) => k.scatterAdd(dst(), { indices: indices(), values: values() }),
      ts: () => reference.scatterAddReference(tDst, sparse),
      outputs: [["scatterAdd", dst, tDst]],
    };
  });
}

/** Every compression row, in table order. */
export const COMPRESS_CASES: KernelCase[] = [
  quantizeRow(),
  dequantizeRow(),
  signCompressRow(),
  signDecompressRow(),
  topKRow(),
  scatterAddRow(),
];
