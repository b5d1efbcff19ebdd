/**
 * The native column of `deno task bench:kernels`: the C kernels (`kernels/*.c`) built by gcc as a shared
 * library, opened with `Deno.dlopen` and dressed as a {@linkcode KernelModule}, so that `new Kernels(m)`
 * and `new CompressionKernels(m)` run the very same wrapper code on the native functions.
 *
 * The module shares the WASM module's heap and memory: every pointer argument a wrapper passes (a wasm32
 * offset) becomes `base + offset`, where `base` is the address of the wasm memory's ArrayBuffer, read
 * again whenever `memory.buffer` changes (growth may move it). So a native call reads and writes the same
 * bytes, on the same pages, as the WASM call it is compared with.
 *
 * @module
 */
import type { KernelExports, KernelFn, KernelModule } from "../wasm/loader.ts";

/** A C parameter: a pointer into wasm memory, a `size_t`, an `int` or a `double`. */
type Param = "ptr" | "size" | "int" | "double";
/** A C result. */
type Result = "int" | "size" | "void";

/**
 * Every C function the wrappers of `wasm/kernels.ts` and `wasm/compress.ts` call, by wasm export name (the C
 * name is `dc_` + it), with its C signature. Keep in step with `grep -n -A3 "^DC_EXPORT(" kernels/*.c`.
 * `heap_base` is wasm-only (kernels/heap.c is not built natively): the heap is the WASM module's.
 */
const SIGNATURES: Readonly<Record<string, readonly [readonly Param[], Result]>> = {
  // reduce.c
  /** int dc_reduce(int dtype, int op, void *dst, const void *src, size_t n) */
  reduce: [["int", "int", "ptr", "ptr", "size"], "int"],
  /**
   * int dc_reduce_n(int dtype, int op, void *dst, const void *const *srcs, size_t k, size_t n): `srcs` is
   * translated apart (a list of k addresses; see {@linkcode reduceN}).
   */
  reduce_n: [["int", "int", "ptr", "ptr", "size", "size"], "int"],
  /** int dc_divide(int dtype, void *dst, size_t n, double divisor) */
  divide: [["int", "ptr", "size", "double"], "int"],
  // convert.c: void dc_cast_*(const T *src, U *dst, size_t n)
  cast_f32_f16: [["ptr", "ptr", "size"], "void"],
  cast_f16_f32: [["ptr", "ptr", "size"], "void"],
  cast_f32_bf16: [["ptr", "ptr", "size"], "void"],
  cast_bf16_f32: [["ptr", "ptr", "size"], "void"],
  // blas.c
  /** int dc_scale(int dtype, void *x, size_t n, double alpha) */
  scale: [["int", "ptr", "size", "double"], "int"],
  /** int dc_axpy(int dtype, void *y, const void *x, size_t n, double alpha) */
  axpy: [["int", "ptr", "ptr", "size", "double"], "int"],
  /** int dc_matmul(const float *a, const float *b, float *c, size_t m, size_t k, size_t n, int flags) */
  matmul: [["ptr", "ptr", "ptr", "size", "size", "size", "int"], "int"],
  // compress.c
  /** void dc_quantize_int8_f32(const float *src, size_t n, size_t block, int8_t *q, float *scales) */
  quantize_int8_f32: [["ptr", "size", "size", "ptr", "ptr"], "void"],
  /** void dc_dequantize_int8_f32(const int8_t *q, const float *scales, size_t n, size_t block, float *dst) */
  dequantize_int8_f32: [["ptr", "ptr", "size", "size", "ptr"], "void"],
  /** void dc_dequantize_int8_acc_f32(const int8_t *q, const float *scales, size_t n, size_t block, float *dst) */
  dequantize_int8_acc_f32: [["ptr", "ptr", "size", "size", "ptr"], "void"],
  /**
   * void dc_sign_compress_f32(const float *grad, float *residual, size_t n, size_t block, uint8_t *bits,
   * float *scales)
   */
  sign_compress_f32: [["ptr", "ptr", "size", "size", "ptr", "ptr"], "void"],
  /** void dc_sign_decompress_f32(const uint8_t *bits, const float *scales, size_t n, size_t block, float *dst) */
  sign_decompress_f32: [["ptr", "ptr", "size", "size", "ptr"], "void"],
  /**
   * void dc_sign_decompress_acc_f32(const uint8_t *bits, const float *scales, size_t n, size_t block,
   * float *dst)
   */
  sign_decompress_acc_f32: [["ptr", "ptr", "size", "size", "ptr"], "void"],
  /** size_t dc_topk_scratch_bytes(size_t n) */
  topk_scratch_bytes: [["size"], "size"],
  /**
   * void dc_topk_f32(const float *src, size_t n, size_t k, uint32_t *indices, float *values,
   * uint32_t *scratch)
   */
  topk_f32: [["ptr", "size", "size", "ptr", "ptr", "ptr"], "void"],
  /** int32_t dc_scatter_add_f32(float *dst, size_t n, const uint32_t *indices, const float *values, size_t k) */
  scatter_add_f32: [["ptr", "size", "ptr", "ptr", "size"], "int"],
};

const FFI_PARAM: Readonly<Record<Param, Deno.NativeType>> = {
  ptr: "usize",
  size: "usize",
  int: "i32",
  double: "f64",
};
const FFI_RESULT: Readonly<Record<Result, Deno.NativeResultType>> = {
  int: "i32",
  size: "usize",
  void: "void",
};

/** A foreign function as `Deno.dlopen` returns it, loosely typed (the table above is built at run time). */
type Foreign = (...args: (number | bigint)[]) => number | bigint | void;

/** The native kernels over the WASM module's memory, and what the library lacks. */
export interface NativeKernelModule {
  /** A {@linkcode KernelModule} with the WASM module's heap and memory and native `exports`. */
  readonly module: KernelModule;
  /** Exports whose `dc_` symbol the library lacks (a kernel file that did not compile natively). */
  readonly missing: readonly string[];
  /** Closes the library. */
  close(): void;
}

/** The address of the bytes of `buffer`, as a number (user-space addresses fit in 2^53). */
function addressOf(buffer: ArrayBufferLike | ArrayBufferView): number {
  const view = ArrayBuffer.isView(buffer) ? buffer : new Uint8Array(buffer);
  return Number(Deno.UnsafePointer.value(Deno.UnsafePointer.of(view as Uint8Array<ArrayBuffer>)));
}

/**
 * Opens the shared library at `path` and binds its kernels to the memory of `wasm`.
 *
 * @param path The library, as built by gcc from `kernels/*.c`.
 * @param wasm The loaded WASM module whose heap and memory the native kernels use.
 * @returns The native module.
 * @throws {Error} If the library does not open.
 */
export function openNativeKernels(path: string, wasm: KernelModule): NativeKernelModule {
  const symbols: Record<string, Deno.ForeignFunction> = {};
  for (const [name, [params, result]] of Object.entries(SIGNATURES)) {
    symbols[`dc_${name}`] = {
      parameters: params.map((p) => FFI_PARAM[p]),
      result: FFI_RESULT[result],
      optional: true,
    };
  }
  const lib = Deno.dlopen(path, symbols);
  const foreign = lib.symbols as unknown as Record<string, Foreign | null>;
  const memory = wasm.heap.memory;

  // The base address of wasm memory, and its 32-bit words (reduce_n's list of sources), per buffer.
  let buffer: ArrayBuffer | undefined, base = 0, words = new Uint32Array(0);
  const baseAddress = (): number => {
    const current = memory.buffer as ArrayBuffer;
    if (current !== buffer) {
      buffer = current;
      base = addressOf(current);
      words = new Uint32Array(current);
    }
    return base;
  };

  const exports: Record<string, KernelFn | WebAssembly.Memory> = { memory };
  const missing: string[] = [];
  for (const [name, [params, result]] of Object.entries(SIGNATURES)) {
    const fn = foreign[`dc_${name}`];
    if (fn === null || fn === undefined) {
      missing.push(name);
      continue;
    }
    exports[name] = name === "reduce_n"
      ? reduceN(fn, baseAddress, () => words)
      : translate(name, fn, params, result, baseAddress);
  }
  const frozen = exports as unknown as KernelExports;
  return {
    module: {
      exports: frozen,
      heap: wasm.heap,
      fn(name: string): KernelFn {
        const f = exports[name];
        if (typeof f !== "function") {
          throw new TypeError(
            `The native kernels lack dc_${name} (see the notes: a kernel file did not build)`,
          );
        }
        return f;
      },
    },
    missing,
    close: () => lib.close(),
  };
}

/** A wasm-style export over `fn`: pointer arguments are wasm offsets, turned into native addresses. */
function translate(
  name: string,
  fn: Foreign,
  params: readonly Param[],
  result: Result,
  baseAddress: () => number,
): KernelFn {
  const pointers = params.flatMap((p, i) => (p === "ptr" ? [i] : []));
  return (...args: number[]): number => {
    if (args.length !== params.length) {
      throw new TypeError(`dc_${name} takes ${params.length} arguments, found ${args.length}`);
    }
    const base = baseAddress();
    for (const i of pointers) args[i] += base;
    const r = fn(...args);
    return result === "void" ? 0 : Number(r);
  };
}

/**
 * `reduce_n(dtype, op, dst, srcs, k, n)`: in wasm memory `srcs` is the offset of k uint32 offsets; the C
 * function wants k 64-bit addresses. They are written into one reused off-heap list (grown if k exceeds
 * it), so a call allocates nothing.
 */
function reduceN(fn: Foreign, baseAddress: () => number, wasmWords: () => Uint32Array): KernelFn {
  // An explicit ArrayBuffer is never on V8's heap, so its address does not move.
  let list = new BigUint64Array(new ArrayBuffer(8 * 64));
  let halves = new Uint32Array(list.buffer), listAddress = addressOf(list);
  return (dtype: number, op: number, dst: number, srcs: number, k: number, n: number): number => {
    const base = baseAddress(), words = wasmWords();
    if (k > list.length) {
      list = new BigUint64Array(new ArrayBuffer(8 * k));
      halves = new Uint32Array(list.buffer);
      listAddress = addressOf(list);
    }
    const at = srcs >>> 2;
    for (let j = 0; j < k; j++) {
      // Little-endian (x86-64, arm64): the low word first. No BigInt, so nothing is allocated.
      const address = base + words[at + j];
      halves[2 * j] = address % 2 ** 32;
      halves[2 * j + 1] = Math.floor(address / 2 ** 32);
    }
    return Number(fn(dtype, op, base + dst, listAddress, k, n));
  };
}
