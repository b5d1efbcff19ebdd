/**
 * The rows of `deno task bench:kernels` for the reduction, cast and BLAS kernels. Each row allocates its
 * arrays in wasm memory once and builds one closure over them, `run(k)`, that it calls with two bindings
 * of the same wrapper class `Kernels`: one over the WASM module (the WASM column) and one over the native
 * module of `_native_kernels.ts` (the native column), whose C functions work on the very same wasm-memory
 * arrays (in place, no staging). The TypeScript reference runs on plain JS arrays holding the same data.
 * Every input array holds 64 MiB.
 *
 * @module
 */
import { type DType, DTYPE_ARRAY, dtypeSize, type TypedArray } from "../core/dtype.ts";
import { Kernels } from "../wasm/kernels.ts";
import type { KernelModule, WasmHeap } from "../wasm/loader.ts";
import * as reference from "../wasm/reference.ts";
import { bindNative, type KernelCase, type KernelRuns } from "./_kernel_case.ts";

/** Bytes in each input array. */
export const INPUT_BYTES = 64 << 20;

/**
 * `count` arrays of `n` elements in wasm memory, zeroed (not what an earlier row left there); the views are
 * taken after the last allocation.
 */
function wasmArrays(heap: WasmHeap, dtype: DType, n: number, count: number): TypedArray[] {
  const ptrs = Array.from({ length: count }, () => heap.alloc(n * dtypeSize(dtype)));
  for (const p of ptrs) heap.bytes().fill(0, p, p + n * dtypeSize(dtype));
  return ptrs.map((p) => new DTYPE_ARRAY[dtype](heap.memory.buffer as ArrayBuffer, p, n));
}

/** A plain JS copy (the TypeScript loop's input). */
function jsCopy(a: TypedArray): TypedArray {
  return a.slice();
}

/** Deterministic data: floats uniform in [-1, 1), integers uniform bits, 16-bit floats rounded from those. */
function fill(a: TypedArray, dtype: DType, seed: number): void {
  let s = seed >>> 0 || 1;
  const next = (): number => {
    s ^= s << 13;
    s ^= s >>> 17;
    s ^= s << 5;
    return s >>> 0;
  };
  const n = a.length;
  if (dtype === "float32" || dtype === "float64") {
    const f = a as Float64Array;
    for (let i = 0; i < n; i++) f[i] = next() / 2 ** 31 - 1;
  } else if (dtype === "float16" || dtype === "bfloat16") {
    const chunk = new Float32Array(1 << 16);
    for (let off = 0; off < n; off += chunk.length) {
      const len = Math.min(chunk.length, n - off);
      for (let i = 0; i < len; i++) chunk[i] = next() / 2 ** 31 - 1;
      const out = (a as Uint16Array).subarray(off, off + len), src = chunk.subarray(0, len);
      if (dtype === "float16") reference.castF32ToF16(src, out);
      else reference.castF32ToBf16(src, out);
    }
  } else {
    const bytes = new Uint8Array(a.buffer, a.byteOffset, a.byteLength);
    for (let i = 0; i < bytes.length; i++) bytes[i] = next();
  }
}

/** Throws unless the two arrays hold the same bits (any NaN equal to any NaN). */
function sameBits(what: string, dtype: DType, got: TypedArray, want: TypedArray): void {
  const size = dtypeSize(dtype);
  const g = new Uint8Array(got.buffer, got.byteOffset, got.byteLength);
  const w = new Uint8Array(want.buffer, want.byteOffset, want.byteLength);
  let wrong = 0, first = -1;
  for (let b = 0; b < g.length; b++) {
    if (g[b] === w[b]) continue;
    const i = Math.floor(b / size);
    b = (i + 1) * size - 1;
    const x = got[i], y = want[i];
    if (dtype === "float16" && ((x as number) & 0x7fff) > 0x7c00 && ((y as number) & 0x7fff) > 0x7c00) {
      continue;
    }
    if (dtype === "bfloat16" && ((x as number) & 0x7fff) > 0x7f80 && ((y as number) & 0x7fff) > 0x7f80) {
      continue;
    }
    if (Number.isNaN(x) && Number.isNaN(y)) continue;
    if (wrong++ === 0) first = i;
  }
  if (wrong > 0) {
    throw new Error(`${what}: ${wrong} wrong elements; the first, ${first}: ${got[first]} vs ${want[first]}`);
  }
}

/** What a row's setup returns. */
interface RowRuns {
  /** One call of the kernel through `k` (the WASM or the native binding) on the wasm-memory arrays. */
  run(k: Kernels): void;
  /** One call of the TypeScript loop on the JS arrays. */
  ts(): void;
  /** Every wasm-memory array the kernel writes, with its dtype and the JS array the TypeScript loop writes. */
  pairs: [DType, TypedArray, TypedArray][];
}

/**
 * A row: `setup` fills the arrays; the written ones (`pairs`) are copied then, so that `reset` can put them
 * back before a checked call.
 */
function row(name: string, dtype: DType, bytes: number, setup: (heap: WasmHeap) => RowRuns): KernelCase {
  return {
    name,
    dtype,
    bytes,
    setup(module: KernelModule, native?: KernelModule): KernelRuns {
      const wasmK = new Kernels(module), nativeK = bindNative(native, (m) => new Kernels(m));
      const { run, ts, pairs } = setup(module.heap);
      const bytesOf = (a: TypedArray) => new Uint8Array(a.buffer, a.byteOffset, a.byteLength);
      const first = pairs.map(([, got]) => bytesOf(got).slice());
      return {
        wasm: () => run(wasmK),
        native: nativeK === undefined ? undefined : () => run(nativeK),
        ts,
        reset(): void {
          pairs.forEach(([, got], i) => bytesOf(got).set(first[i]));
        },
        check(): void {
          for (const [dt, got, want] of pairs) sameBits(`${name} ${dtype}`, dt, got, want);
        },
      };
    },
  };
}

/** `dst = op(dst, src)` on 64 MiB arrays: reads 2 x 64 MiB, writes 64 MiB. */
function reduceRow(dtype: DType, op: "sum" | "max"): KernelCase {
  const n = INPUT_BYTES / dtypeSize(dtype);
  return row(`reduce.${op}`, dtype, 3 * INPUT_BYTES, (heap) => {
    const [dst, src] = wasmArrays(heap, dtype, n, 2);
    fill(dst, dtype, 1);
    fill(src, dtype, 2);
    const [tDst, tSrc] = [jsCopy(dst), jsCopy(src)];
    return {
      run: (k) => k.reduce(dst, src, { op, dtype }),
      ts: () => reference.reduce(tDst, tSrc, { op, dtype }),
      pairs: [[dtype, dst, tDst]],
    };
  });
}

/** `dst = src0 + src1 + src2 + src3`: reads 4 x 64 MiB, writes 64 MiB. */
function sum4Row(dtype: DType): KernelCase {
  const n = INPUT_BYTES / dtypeSize(dtype);
  return row("reduceMany.sum4", dtype, 5 * INPUT_BYTES, (heap) => {
    const [dst, ...srcs] = wasmArrays(heap, dtype, n, 5);
    srcs.forEach((s, i) => fill(s, dtype, 10 + i));
    const tDst = jsCopy(dst), tSrcs = srcs.map(jsCopy);
    return {
      run: (k) => k.reduceMany(dst, srcs, { op: "sum", dtype }),
      ts: () => reference.reduceMany(tDst, tSrcs, { op: "sum", dtype }),
      pairs: [[dtype, dst, tDst]],
    };
  });
}

/** `dst = dst / 3`: reads and writes 64 MiB. */
function divideRow(dtype: DType): KernelCase {
  const n = INPUT_BYTES / dtypeSize(dtype);
  return row("divide", dtype, 2 * INPUT_BYTES, (heap) => {
    const [dst] = wasmArrays(heap, dtype, n, 1);
    fill(dst, dtype, 3);
    const tDst = jsCopy(dst);
    return {
      run: (k) => k.divide(dst, 3, { dtype }),
      ts: () => reference.divide(tDst, 3, { dtype }),
      pairs: [[dtype, dst, tDst]],
    };
  });
}

type CastName = "castF32ToF16" | "castF16ToF32" | "castF32ToBf16" | "castBf16ToF32";

/** A cast of 64 MiB of input (the 16-bit side holds twice as many elements as the float32 side would). */
function castRow(name: CastName): KernelCase {
  const half: DType = name.includes("Bf16") ? "bfloat16" : "float16";
  const toHalf = name.startsWith("castF32");
  const n = INPUT_BYTES / (toHalf ? 4 : 2);
  return row(name, half, n * 6, (heap) => {
    const fp = heap.alloc(4 * n), hp = heap.alloc(2 * n); // both before any view: growth detaches views
    heap.bytes().fill(0, fp, hp + 2 * n);
    const f = new Float32Array(heap.memory.buffer, fp, n), h = new Uint16Array(heap.memory.buffer, hp, n);
    if (toHalf) fill(f, "float32", 4);
    else fill(h, half, 5);
    const [tf, th] = [jsCopy(f) as Float32Array, jsCopy(h) as Uint16Array];
    const cast = (kk: Pick<Kernels, CastName>, fa: Float32Array, ha: Uint16Array) =>
      toHalf ? kk[name as "castF32ToF16"](fa, ha) : kk[name as "castF16ToF32"](ha, fa);
    return {
      run: (k) => cast(k, f, h),
      ts: () => cast(reference, tf, th),
      pairs: toHalf ? [[half, h, th]] : [["float32", f, tf]],
    };
  });
}

/** `y = y + alpha * x`: reads 2 x 64 MiB, writes 64 MiB. */
function axpyRow(): KernelCase {
  const n = INPUT_BYTES / 4;
  return row("axpy", "float32", 3 * INPUT_BYTES, (heap) => {
    const [y, x] = wasmArrays(heap, "float32", n, 2) as Float32Array[];
    fill(y, "float32", 6);
    fill(x, "float32", 7);
    const [ty, tx] = [y.slice(), x.slice()];
    return {
      run: (k) => k.axpy(y, x, { alpha: -0.01 }),
      ts: () => reference.axpy(ty, tx, { alpha: -0.01 }),
      pairs: [["float32", y, ty]],
    };
  });
}

/** `x = alpha * x`: reads and writes 64 MiB. */
function scaleRow(): KernelCase {
  const n = INPUT_BYTES / 4;
  return row("scale", "float32", 2 * INPUT_BYTES, (heap) => {
    const [x] = wasmArrays(heap, "float32", n, 1) as Float32Array[];
    fill(x, "float32", 8);
    const tx = x.slice();
    return {
      run: (k) => k.scale(x, 0.999),
      ts: () => reference.scale(tx, 0.999),
      pairs: [["float32", x, tx]],
    };
  });
}

/** Every row of the reduction, cast and BLAS kernels, in table order. */
export const REDUCE_CASES: readonly KernelCase[] = [
  reduceRow("float32", "sum"),
  reduceRow("float16", "sum"),
  reduceRow("bfloat16", "sum"),
  reduceRow("float64", "sum"),
  reduceRow("int32", "sum"),
  reduceRow("int8", "sum"),
  reduceRow("float32", "max"),
  sum4Row("float32"),
  divideRow("float32"),
  castRow("castF32ToF16"),
  castRow("castF16ToF32"),
  castRow("castF32ToBf16"),
  castRow("castBf16ToF32"),
  axpyRow(),
  scaleRow(),
];

/** The matmul row: not a bandwidth kernel, so it is reported in GFLOP/s on its own. */
export interface MatmulCase {
  /** The row's name. */
  readonly name: string;
  /** m = k = n. */
  readonly size: number;
  /** Floating-point operations per call: 2 m k n. */
  readonly flops: number;
  /** Allocates and fills A, B, C in wasm memory and in JS (see {@linkcode KernelCase.setup}). */
  setup(module: KernelModule, native?: KernelModule): KernelRuns;
}

/** C = A B with m = k = n = 256. */
export const MATMUL_CASE: MatmulCase = {
  name: "matmul",
  size: 256,
  flops: 2 * 256 ** 3,
  setup(module: KernelModule, native?: KernelModule): KernelRuns {
    const n = 256, wasmK = new Kernels(module), nativeK = bindNative(native, (m) => new Kernels(m));
    const [a, b, c] = wasmArrays(module.heap, "float32", n * n, 3) as Float32Array[];
    fill(a, "float32", 20);
    fill(b, "float32", 21);
    const [ta, tb, tc] = [a.slice(), b.slice(), c.slice()];
    const run = (k: Kernels) => k.matmul(a, b, { c, m: n, k: n, n });
    return {
      wasm: () => run(wasmK),
      native: nativeK === undefined ? undefined : () => run(nativeK),
      ts: () => reference.matmul(ta, tb, { c: tc, m: n, k: n, n }),
      reset: () => c.fill(0),
      check: () => sameBits("matmul", "float32", c, tc),
    };
  },
};
