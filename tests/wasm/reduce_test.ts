import assert from "node:assert/strict";
import { type DType, DTYPES, isFloat, REDUCE_OPS, reduceOpsFor, type TypedArray } from "../../core/dtype.ts";
import { kernels, type ReduceOptions } from "../../wasm/kernels.ts";
import * as reference from "../../wasm/reference.ts";
import { Rng } from "../_util/rng.ts";
import {
  assertSameBits,
  copyOf,
  f32FromBits,
  type Placement,
  randomTensors,
  seedOf,
  tensors,
} from "../_util/tensors.ts";

const k = await kernels();
// 255: reduce() walks both halves a block (64 bytes) at a time, then one block more and a scalar tail;
// at 255 elements of any size each of the three loops runs.
const SMALL = [0, 1, 3, 4, 15, 16, 17, 255];
const LARGE = 1_000_003; // odd: the vector loops leave a scalar tail
const PLACEMENTS: readonly Placement[] = ["plain", "offset", "wasm"];
const BINARY_OPS = ["sum", "prod", "min", "max", "band", "bor", "bxor"] as const;
/** premulSum's factors: exact, rounded differently by each float dtype, negative, tiny and huge. */
const FACTORS = [0.5, 0.1, -3.7, 1e-3, 3e4] as const;

/** Whether `op` applies to `dtype` (the others are refused, see the tests of errors). */
function applies(dtype: DType, op: string): boolean {
  return (reduceOpsFor(dtype) as readonly string[]).includes(op);
}

/** The options of a reduceMany of `op`: premulSum gets a factor. */
function manyOptions(op: (typeof REDUCE_OPS)[number], dtype: DType, factor = 0.1): ReduceOptions {
  return op === "premulSum" ? { op, dtype, factor } : { op, dtype };
}

/** Runs `fn` with the wasm heap popped back afterwards. */
function scoped(fn: () => void): void {
  const mark = k.heap.top;
  try {
    fn();
  } finally {
    k.heap.reset(mark);
  }
}

/** One reduce() case against the reference: dst and src of `dtype` at `n` elements. */
function checkReduce(dtype: DType, op: (typeof BINARY_OPS)[number], n: number, placement: Placement): void {
  scoped(() => {
    const rng = new Rng(seedOf("reduce", dtype, op, n, placement));
    const [dst, src] = randomTensors(rng, dtype, n, 2, placement, k.heap);
    const want = copyOf(dst), srcBefore = copyOf(src);
    reference.reduce(want, copyOf(src), { op, dtype });
    k.reduce(dst, src, { op, dtype });
    const context = `${op} ${dtype} n=${n} ${placement}`;
    assertSameBits(dst, want, dtype, context);
    assertSameBits(src, srcBefore, dtype, `${context} (src must not change)`);
  });
}

for (const dtype of DTYPES) {
  for (const op of BINARY_OPS.filter((o) => applies(dtype, o))) {
    Deno.test(`Kernels.reduce() computes ${op} of ${dtype} like the reference at every length and placement`, () => {
      for (const n of SMALL) for (const placement of PLACEMENTS) checkReduce(dtype, op, n, placement);
      checkReduce(dtype, op, LARGE, dtype.length % 2 === 0 ? "offset" : "wasm");
    });
  }
}

/** One reduceMany() case against the reference, with `count` sources. */
function checkReduceMany(
  dtype: DType,
  op: (typeof REDUCE_OPS)[number],
  count: number,
  n: number,
  placement: Placement,
  factor = 0.1,
): void {
  scoped(() => {
    const rng = new Rng(seedOf("reduceMany", dtype, op, count, n, placement, factor));
    const [dst, ...srcs] = randomTensors(rng, dtype, n, count + 1, placement, k.heap);
    const want = copyOf(dst);
    reference.reduceMany(want, srcs.map(copyOf), manyOptions(op, dtype, factor));
    k.reduceMany(dst, srcs, manyOptions(op, dtype, factor));
    assertSameBits(dst, want, dtype, `${op} ${dtype} k=${count} n=${n} ${placement} factor ${factor}`);
  });
}

for (const dtype of DTYPES) {
  for (const op of REDUCE_OPS.filter((o) => applies(dtype, o))) {
    Deno.test(`Kernels.reduceMany() computes ${op} of ${dtype} like the reference for 1 to 5 sources`, () => {
      for (const count of [1, 2, 3, 5]) {
        for (const n of SMALL) {
          for (const placement of PLACEMENTS) checkReduceMany(dtype, op, count, n, placement);
        }
      }
      // Longer than the kernel's 1024-element chunk, so chunk boundaries are crossed.
      checkReduceMany(dtype, op, 4, 2500, "offset");
      if (op === "sum" || op === "avg" || op === "premulSum") checkReduceMany(dtype, op, 3, LARGE, "wasm");
      if (op === "premulSum") {
        for (const factor of FACTORS) {
          for (const count of [1, 3]) checkReduceMany(dtype, op, count, 255, "plain", factor);
        }
      }
    });
  }
}

for (const dtype of DTYPES) {
  Deno.test(`Kernels.reduce() and reduceMany() allow dst to be a source for ${dtype}`, () => {
    for (const placement of ["plain", "wasm"] as const) {
      for (const op of BINARY_OPS.filter((o) => applies(dtype, o))) {
        scoped(() => {
          const rng = new Rng(seedOf("alias", dtype, op, placement));
          const [a] = randomTensors(rng, dtype, 2049, 1, placement, k.heap);
          const want = copyOf(a);
          reference.reduce(want, copyOf(a), { op, dtype });
          k.reduce(a, a, { op, dtype });
          assertSameBits(a, want, dtype, `reduce(a, a) ${op} ${placement}`);
        });
      }
      for (const op of REDUCE_OPS.filter((o) => applies(dtype, o))) {
        scoped(() => {
          const rng = new Rng(seedOf("alias-many", dtype, op, placement));
          const [a, b, c] = randomTensors(rng, dtype, 2049, 3, placement, k.heap);
          const want = copyOf(a);
          reference.reduceMany(want, [copyOf(b), copyOf(a), copyOf(c)], manyOptions(op, dtype));
          k.reduceMany(a, [b, a, c], manyOptions(op, dtype));
          assertSameBits(a, want, dtype, `reduceMany(a, [b, a, c]) ${op} ${placement}`);
        });
      }
    }
  });
}

Deno.test("Kernels.reduce() reads a partly overlapping source in wasm memory as it was before the call", () => {
  scoped(() => {
    const n = 1000, p = k.heap.alloc(4 * (n + 8));
    const all = k.heap.view(Float32Array, p, n + 8);
    for (let i = 0; i < all.length; i++) all[i] = i;
    const dst = k.heap.view(Float32Array, p, n), src = k.heap.view(Float32Array, p + 12, n);
    const want = copyOf(dst);
    reference.reduce(want, copyOf(src), { op: "sum" });
    k.reduce(dst, src, { op: "sum" });
    assertSameBits(dst, want, "float32", "overlap");
  });
});

Deno.test("Kernels.reduce() sums int8 with two's-complement wrap", () => {
  const a = new Int8Array([127, -128, 100, -1]);
  k.reduce(a, new Int8Array([1, -1, 100, 1]));
  assert.deepEqual(a, new Int8Array([-128, 127, -56, 0]));
  const p = new Int8Array([127, -128, 16]);
  k.reduce(p, new Int8Array([2, -1, 16]), { op: "prod" });
  assert.deepEqual(p, new Int8Array([-2, -128, 0]));
});

Deno.test("Kernels.reduce() wraps uint8, int32, uint32, int64 and uint64 on overflow", () => {
  const u8 = new Uint8Array([255, 200]);
  k.reduce(u8, new Uint8Array([1, 100]));
  assert.deepEqual(u8, new Uint8Array([0, 44]));
  const i32 = new Int32Array([2 ** 31 - 1, -(2 ** 31)]);
  k.reduce(i32, new Int32Array([1, -1]));
  assert.deepEqual(i32, new Int32Array([-(2 ** 31), 2 ** 31 - 1]));
  const m32 = new Int32Array([65536, -3]);
  k.reduce(m32, new Int32Array([65536, 2 ** 30]), { op: "prod" });
  assert.deepEqual(m32, new Int32Array([0, 2 ** 30]));
  const u32 = new Uint32Array([2 ** 32 - 1]);
  k.reduce(u32, new Uint32Array([2]));
  assert.deepEqual(u32, new Uint32Array([1]));
  const i64 = new BigInt64Array([2n ** 63n - 1n, -(2n ** 63n)]);
  k.reduce(i64, new BigInt64Array([1n, -1n]));
  assert.deepEqual(i64, new BigInt64Array([-(2n ** 63n), 2n ** 63n - 1n]));
  const u64 = new BigUint64Array([2n ** 64n - 1n, 2n ** 32n]);
  k.reduce(u64, new BigUint64Array([1n, 2n ** 32n]), { op: "prod" });
  assert.deepEqual(u64, new BigUint64Array([2n ** 64n - 1n, 0n]));
});

Deno.test("Kernels.reduce() orders signed and unsigned integers by their own type in min and max", () => {
  const i64 = new BigInt64Array([-1n, 5n]);
  k.reduce(i64, new BigInt64Array([1n, -5n]), { op: "min" });
  assert.deepEqual(i64, new BigInt64Array([-1n, -5n]));
  const u64 = new BigUint64Array([2n ** 64n - 1n, 5n]);
  k.reduce(u64, new BigUint64Array([1n, 2n ** 63n]), { op: "max" });
  assert.deepEqual(u64, new BigUint64Array([2n ** 64n - 1n, 2n ** 63n]));
  const u32 = new Uint32Array([2 ** 31, 1]);
  k.reduce(u32, new Uint32Array([1, 2 ** 32 - 1]), { op: "min" });
  assert.deepEqual(u32, new Uint32Array([1, 1]));
});

/** Float32 test vectors: min/max of (a, b) where NaN wins and -0 < +0. */
const MINMAX_A = [NaN, 1, -0, 0, -0, 0, Infinity, -Infinity, NaN, 2];
const MINMAX_B = [1, NaN, 0, -0, -0, 0, NaN, 5, NaN, -Infinity];
const MIN_WANT = [NaN, NaN, -0, -0, -0, 0, NaN, -Infinity, NaN, -Infinity];
const MAX_WANT = [NaN, NaN, 0, 0, -0, 0, NaN, 5, NaN, 2];

function assertSameFloats(actual: ArrayLike<number>, want: readonly number[], what: string): void {
  assert.equal(actual.length, want.length);
  for (let i = 0; i < want.length; i++) {
    assert.ok(Object.is(actual[i], want[i]), `${what}[${i}] is ${actual[i]}, expected ${want[i]}`);
  }
}

for (const [name, Ctor] of [["float32", Float32Array], ["float64", Float64Array]] as const) {
  Deno.test(`Kernels.reduce() min and max of ${name} propagate NaN and order -0 below +0`, () => {
    for (const [op, want] of [["min", MIN_WANT], ["max", MAX_WANT]] as const) {
      const a = new Ctor(MINMAX_A);
      k.reduce(a, new Ctor(MINMAX_B), { op });
      assertSameFloats(a, want, `${op}`);
      const many = new Ctor(MINMAX_A.length);
      k.reduceMany(many, [new Ctor(MINMAX_A), new Ctor(MINMAX_B)], { op });
      assertSameFloats(many, want, `reduceMany ${op}`);
    }
  });
}

for (const dtype of ["float16", "bfloat16"] as const) {
  Deno.test(`Kernels.reduce() min and max of ${dtype} propagate NaN and order -0 below +0`, () => {
    const bits = (values: readonly number[]): Uint16Array => {
      const f = new Float32Array(values), out = new Uint16Array(values.length);
      if (dtype === "float16") reference.castF32ToF16(f, out);
      else reference.castF32ToBf16(f, out);
      return out;
    };
    for (const [op, want] of [["min", MIN_WANT], ["max", MAX_WANT]] as const) {
      const a = bits(MINMAX_A);
      k.reduce(a, bits(MINMAX_B), { op, dtype });
      const back = new Float32Array(a.length);
      if (dtype === "float16") k.castF16ToF32(a, back);
      else k.castBf16ToF32(a, back);
      assertSameFloats(back, want, `${dtype} ${op}`);
    }
  });
}

Deno.test("Kernels.reduce() sums and multiplies float32 with NaN, infinities and signed zeros as IEEE does", () => {
  const a = new Float32Array([Infinity, -0, -0, 3.4028234663852886e38, f32FromBits(1), NaN]);
  k.reduce(a, new Float32Array([-Infinity, 0, -0, 3.4028234663852886e38, f32FromBits(1), 1]));
  assertSameFloats(a, [NaN, 0, -0, Infinity, f32FromBits(2), NaN], "sum");
  const p = new Float32Array([0, -0, 2 ** -100, -1]);
  k.reduce(p, new Float32Array([Infinity, 5, 2 ** -100, 0]), { op: "prod" });
  assertSameFloats(p, [NaN, -0, 0, -0], "prod");
});

Deno.test("Kernels.reduce() rounds float16 sums to nearest even and overflows to Inf at 65520", () => {
  // 2048 + 1 is a tie between 2048 and 2050: even wins. 2050 + 1 ties to 2052. 65504 + 16 = 65520 -> Inf.
  const a = new Float16Array([2048, 2050, 65504, 65504, -65504]);
  k.reduce(a, new Float16Array([1, 1, 15, 16, -16]));
  assert.deepEqual(Array.from(a), [2048, 2052, 65504, Infinity, -Infinity]);
});

Deno.test("Kernels.reduceMany() accumulates float16 and bfloat16 in float32 and rounds once", () => {
  // Step by step, 2048 + 1 + 1 rounds to 2048 twice; accumulated in float32 it is 2050, exact in float16.
  const out = new Float16Array(1);
  k.reduceMany(out, [new Float16Array([2048]), new Float16Array([1]), new Float16Array([1])]);
  assert.deepEqual(Array.from(out), [2050]);
  const stepwise = new Float16Array([2048]);
  k.reduce(stepwise, new Float16Array([1]));
  k.reduce(stepwise, new Float16Array([1]));
  assert.deepEqual(Array.from(stepwise), [2048]);
  // bfloat16 has 8 significant bits: 256 + 1 + 1 = 258 exactly once rounded.
  const b = new Uint16Array(1);
  k.reduceMany(b, [new Uint16Array([0x4380]), new Uint16Array([0x3f80]), new Uint16Array([0x3f80])], {
    dtype: "bfloat16",
  });
  assert.equal(b[0], 0x4381);
});

Deno.test("Kernels.reduceMany() averages floats as the sum times 1/k in the compute precision", () => {
  const x = [0.1, 0.7, 0.3].map(Math.fround);
  const out = new Float32Array(1);
  k.reduceMany(out, x.map((v) => new Float32Array([v])), { op: "avg" });
  const sum = Math.fround(Math.fround(x[0] + x[1]) + x[2]);
  assert.equal(out[0], Math.fround(sum * Math.fround(1 / 3)));
  const d = new Float64Array(1);
  k.reduceMany(d, [0.1, 0.7, 0.3].map((v) => new Float64Array([v])), { op: "avg" });
  assert.equal(d[0], (0.1 + 0.7 + 0.3) * (1 / 3));
});

Deno.test("Kernels.reduceMany() averages integers with truncation toward zero after a wrapping sum", () => {
  const out = new Int8Array(3);
  k.reduceMany(out, [new Int8Array([100, -7, 1]), new Int8Array([100, 0, 0]), new Int8Array([0, 0, 0])], {
    op: "avg",
  });
  // 100 + 100 wraps to -56; -56 / 3 = -18.67 -> -18; -7 / 3 -> -2; 1 / 3 -> 0.
  assert.deepEqual(out, new Int8Array([-18, -2, 0]));
  const u = new BigUint64Array(1);
  k.reduceMany(u, [new BigUint64Array([2n ** 64n - 1n]), new BigUint64Array([2n])], { op: "avg" });
  assert.deepEqual(u, new BigUint64Array([0n])); // the sum wrapped to 1
});

/** One divide() case against the reference. */
function checkDivide(dtype: DType, divisor: number, n: number, placement: Placement): void {
  scoped(() => {
    const rng = new Rng(seedOf("divide", dtype, divisor, n, placement));
    const [dst] = randomTensors(rng, dtype, n, 1, placement, k.heap);
    const want = copyOf(dst);
    reference.divide(want, divisor, { dtype });
    k.divide(dst, divisor, { dtype });
    assertSameBits(dst, want, dtype, `divide ${dtype} by ${divisor} n=${n} ${placement}`);
  });
}

for (const dtype of DTYPES.filter((d) => d !== "bool")) {
  Deno.test(`Kernels.divide() divides ${dtype} like the reference`, () => {
    const divisors = dtype.startsWith("float") ? [1, 3, 7, 0.3, -2.5, 1e30] : [1, 2, 3, 7, 1000, 2 ** 40];
    for (const divisor of divisors) {
      for (const n of SMALL) for (const placement of PLACEMENTS) checkDivide(dtype, divisor, n, placement);
    }
    checkDivide(dtype, 3, LARGE, "offset");
  });
}

Deno.test("Kernels.divide() truncates integers toward zero and scales floats by the float32 inverse", () => {
  const i = new Int32Array([-7, 7, -1, 2 ** 31 - 1, -(2 ** 31)]);
  k.divide(i, 2);
  assert.deepEqual(i, new Int32Array([-3, 3, 0, 2 ** 30 - 1, -(2 ** 30)]));
  const b = new Int8Array([-128, 127]);
  k.divide(b, 1000);
  assert.deepEqual(b, new Int8Array([0, 0]));
  const u = new BigUint64Array([2n ** 64n - 1n]);
  k.divide(u, 3);
  assert.deepEqual(u, new BigUint64Array([6148914691236517205n]));
  const f = new Float32Array([1]);
  k.divide(f, 3);
  assert.equal(f[0], Math.fround(1 / 3));
  const h = new Float16Array([3]);
  k.divide(h, 3); // 3 * fround(1/3) = 1.0000000298 in float32, 1 in float16
  assert.equal(h[0], 1);
});

Deno.test("Kernels.reducePtr(), reduceManyPtr() and dividePtr() match the array wrappers", () => {
  for (const dtype of DTYPES.filter((d) => d !== "bool")) {
    scoped(() => {
      const rng = new Rng(seedOf("ptr", dtype));
      const n = 1001;
      const [a, b, c, d] = randomTensors(rng, dtype, n, 4, "wasm", k.heap);
      const [pa, pb, pc, pd] = [a, b, c, d].map((t) => t.byteOffset);
      const wantSum = copyOf(a);
      reference.reduce(wantSum, copyOf(b), { dtype });
      k.reducePtr(dtype, "sum", pa, pb, n);
      assertSameBits(a, wantSum, dtype, `reducePtr ${dtype}`);
      const wantMax = copyOf(a);
      reference.reduceMany(wantMax, [copyOf(b), copyOf(c), copyOf(d)], { op: "max", dtype });
      k.reduceManyPtr(dtype, "max", pa, [pb, pc, pd], n);
      assertSameBits(a, wantMax, dtype, `reduceManyPtr ${dtype}`);
      const wantDiv = copyOf(a);
      reference.divide(wantDiv, 7, { dtype });
      k.dividePtr(dtype, pa, n, 7);
      assertSameBits(a, wantDiv, dtype, `dividePtr ${dtype}`);
    });
  }
});

/** Asserts that `fn` throws an error of class `type` whose message matches `pattern`. */
function assertThrowsMatching(fn: () => unknown, type: ErrorConstructor, pattern: RegExp): void {
  assert.throws(fn, (e: unknown) => {
    assert.ok(e instanceof type, `expected a ${type.name}, got ${e}`);
    assert.match((e as Error).message, pattern);
    return true;
  });
}

Deno.test("Kernels.reduce() rejects mismatched lengths and dtypes with what was expected and found", () => {
  assertThrowsMatching(
    () => k.reduce(new Float32Array(4), new Float32Array(3)),
    RangeError,
    /^Cannot reduce: dst has 4 elements but src has 3$/,
  );
  assertThrowsMatching(
    () => k.reduce(new Float32Array(4), new Int32Array(4)),
    TypeError,
    /^Cannot reduce: dst is float32 but src is int32$/,
  );
  assertThrowsMatching(
    () => k.reduce(new Uint16Array(4), new Uint16Array(4)),
    TypeError,
    /dst is a Uint16Array, which needs dtype "float16" or "bfloat16", found none/,
  );
  assertThrowsMatching(
    () => k.reduce(new Float16Array(4), new Float16Array(4), { dtype: "bfloat16" }),
    TypeError,
    /dst is a Float16Array \(float16\) but dtype is bfloat16/,
  );
  assertThrowsMatching(
    () => k.reduce(new Uint8ClampedArray(4) as unknown as TypedArray, new Uint8Array(4)),
    TypeError,
    /expected dst to be a TypedArray of a dcomm dtype, found Uint8ClampedArray/,
  );
  assertThrowsMatching(
    () => k.reduce([1, 2] as unknown as TypedArray, new Uint8Array(2)),
    TypeError,
    /expected dst to be a TypedArray, found Array/,
  );
});

Deno.test("Kernels.reduce() rejects unknown ops and dtypes, and avg, naming the way to average", () => {
  assertThrowsMatching(
    () => k.reduce(new Float32Array(1), new Float32Array(1), { op: "mean" as never }),
    TypeError,
    /^Cannot reduce: expected op one of sum, prod, min, max, avg, band, bor, bxor, premulSum, found "mean"$/,
  );
  assertThrowsMatching(
    () => k.reduce(new Float32Array(1), new Float32Array(1), { dtype: "float8" as never }),
    TypeError,
    /expected dtype one of int8, .*float64, bool, found "float8"/,
  );
  assertThrowsMatching(
    () => k.reduce(new Float32Array(1), new Float32Array(1), { op: "avg" }),
    RangeError,
    /reduceMany\(\).*divide\(\)/,
  );
  assertThrowsMatching(() => k.reducePtr("float32", "avg", 0, 0, 0), RangeError, /reduceManyPtr/);
  assertThrowsMatching(() => k.reducePtr("float8" as never, "sum", 0, 0, 0), TypeError, /found float8/);
  assertThrowsMatching(() => k.reducePtr("float32", "mean" as never, 0, 0, 0), TypeError, /found mean/);
});

Deno.test("Kernels.reduceMany() rejects no sources and a mismatched source by its index", () => {
  assertThrowsMatching(
    () => k.reduceMany(new Float32Array(2), []),
    RangeError,
    /^Cannot reduce: expected at least one source in srcs, found 0$/,
  );
  assertThrowsMatching(
    () => k.reduceMany(new Float32Array(2), [new Float32Array(2), new Float32Array(3)]),
    RangeError,
    /^Cannot reduce: dst has 2 elements but srcs\[1\] has 3$/,
  );
  assertThrowsMatching(
    () => k.reduceMany(new Float32Array(2), [new Float64Array(2)]),
    TypeError,
    /^Cannot reduce: dst is float32 but srcs\[0\] is float64$/,
  );
  assertThrowsMatching(() => k.reduceManyPtr("float32", "sum", 0, [], 1), RangeError, /found 0/);
});

Deno.test("Kernels.divide() rejects zero, non-finite and, for integers, fractional divisors", () => {
  assertThrowsMatching(
    () => k.divide(new Float32Array(1), 0),
    RangeError,
    /finite non-zero divisor, found 0/,
  );
  assertThrowsMatching(() => k.divide(new Float32Array(1), NaN), RangeError, /found NaN/);
  assertThrowsMatching(
    () => k.divide(new Int32Array(1), 2.5),
    RangeError,
    /^Cannot divide int32: expected an integer divisor from 1 to 2\^53, found 2.5$/,
  );
  assertThrowsMatching(() => k.divide(new Int32Array(1), -2), RangeError, /found -2/);
  assertThrowsMatching(() => k.dividePtr("int8", 0, 1, 0), RangeError, /found 0/);
  assertThrowsMatching(() => k.divide(new Int32Array(1), "2" as never), TypeError, /found string/);
});

Deno.test("Kernels.reducePtr() rejects ranges outside wasm memory", () => {
  const size = k.heap.memory.buffer.byteLength;
  assertThrowsMatching(
    () => k.reducePtr("float32", "sum", size - 4, 0, 2),
    RangeError,
    /dstPtr to address 8 bytes/,
  );
  assertThrowsMatching(() => k.reducePtr("float32", "sum", 0, -4, 1), RangeError, /srcPtr .* found -4/);
});

Deno.test("Kernels.reduce() infers the dtype of a Uint16Array source from a Float16Array dst", () => {
  const a = new Float16Array([1.5]);
  k.reduce(a, new Uint16Array([0x3c00])); // 1.0 as float16 bits
  assert.equal(a[0], 2.5);
  const empty = tensors("float32", 0, 2);
  k.reduce(empty[0], empty[1]);
  k.reduceMany(empty[0], [empty[1]], { op: "avg" });
});

Deno.test("Kernels.reducePtr() rejects an element count that is not a non-negative integer", () => {
  assertThrowsMatching(
    () => k.reducePtr("float32", "sum", 0, 0, -1),
    RangeError,
    /expected n to be an integer >= 0, found -1/,
  );
  assertThrowsMatching(() => k.dividePtr("float32", 0, 1.5, 2), RangeError, /found 1.5/);
});

Deno.test("Kernels.reduce() and reduceMany() compute band, bor and bxor of every integer dtype bit by bit", () => {
  const i8 = new Int8Array([-1, 0x55, -128]);
  k.reduce(i8, new Int8Array([0x0f, 0x0f, -1]), { op: "band" });
  assert.deepEqual(i8, new Int8Array([0x0f, 0x05, -128]));
  const u32 = new Uint32Array([0xf0f0_0000, 1]);
  k.reduce(u32, new Uint32Array([0x0f0f_0000, 2]), { op: "bor" });
  assert.deepEqual(u32, new Uint32Array([0xffff_0000, 3]));
  const u64 = new BigUint64Array(1);
  k.reduceMany(u64, [0xffn, 0x0fn, 0xf0n].map((v) => new BigUint64Array([v << 56n])), { op: "bxor" });
  assert.deepEqual(u64, new BigUint64Array([0n]));
  const i64 = new BigInt64Array(1);
  k.reduceMany(i64, [-1n, -2n, 4n].map((v) => new BigInt64Array([v])), { op: "band" });
  assert.deepEqual(i64, new BigInt64Array([4n]));
});

Deno.test("Kernels reduce bools as torch does: sum, max and bor or them, prod, min and band and them", () => {
  const a = [0, 0, 1, 1], b = [0, 1, 0, 1];
  const or = [0, 1, 1, 1], and = [0, 0, 0, 1], xor = [0, 1, 1, 0];
  const want: Record<string, number[]> = {
    sum: or,
    max: or,
    bor: or,
    prod: and,
    min: and,
    band: and,
    bxor: xor,
  };
  for (const [op, expected] of Object.entries(want)) {
    const dst = new Uint8Array(a);
    k.reduce(dst, new Uint8Array(b), { op: op as never, dtype: "bool" });
    assert.deepEqual(Array.from(dst), expected, `reduce ${op}`);
    const many = new Uint8Array(4);
    k.reduceMany(many, [new Uint8Array(a), new Uint8Array(b)], { op: op as never, dtype: "bool" });
    assert.deepEqual(Array.from(many), expected, `reduceMany ${op}`);
    const ref = new Uint8Array(a);
    reference.reduce(ref, new Uint8Array(b), { op: op as never, dtype: "bool" });
    assert.deepEqual(Array.from(ref), expected, `reference ${op}`);
  }
  // Three ranks' flags: any, all, odd parity.
  const flags = [[1, 0, 0], [0, 0, 1], [1, 0, 1]].map((f) => new Uint8Array(f));
  const out = new Uint8Array(3);
  k.reduceMany(out, flags, { op: "sum", dtype: "bool" });
  assert.deepEqual(Array.from(out), [1, 0, 1]);
  k.reduceMany(out, flags, { op: "prod", dtype: "bool" });
  assert.deepEqual(Array.from(out), [0, 0, 0]);
  k.reduceMany(out, flags, { op: "bxor", dtype: "bool" });
  assert.deepEqual(Array.from(out), [0, 0, 0]);
  const p = k.heap.top;
  scoped(() => {
    const [d, s] = [k.heap.alloc(2), k.heap.alloc(2)];
    k.heap.view(Uint8Array, d, 2).set([1, 0]);
    k.heap.view(Uint8Array, s, 2).set([0, 0]);
    k.reducePtr("bool", "sum", d, s, 2);
    assert.deepEqual(Array.from(k.heap.view(Uint8Array, d, 2)), [1, 0]);
  });
  assert.equal(k.heap.top, p);
});

Deno.test("Kernels.reduceMany() premulSum rounds the factor and every product to the dtype, then sums", () => {
  // float32: fround(0.1) times each source, each product rounded, summed in order.
  const x = [0.7, 1.3, -2.9].map(Math.fround), f = Math.fround(0.1);
  const out = new Float32Array(1);
  k.reduceMany(out, x.map((v) => new Float32Array([v])), { op: "premulSum", factor: 0.1 });
  const p = x.map((v) => Math.fround(v * f));
  assert.equal(out[0], Math.fround(Math.fround(p[0] + p[1]) + p[2]));
  // float16: the factor 0.1 is 0.0999755859375 in float16, and 3 × it rounds to float16 before the sum.
  const h = new Float16Array(1);
  k.reduceMany(h, [new Float16Array([3]), new Float16Array([3])], { op: "premulSum", factor: 0.1 });
  const ph = Math.f16round(3 * Math.f16round(0.1));
  assert.equal(h[0], Math.f16round(ph + ph));
  // float64: exact factor 0.5 over one source is a scale.
  const d = new Float64Array([3, -5]);
  k.reduceMany(d, [d], { op: "premulSum", factor: 0.5 });
  assert.deepEqual(d, new Float64Array([1.5, -2.5]));
  // bfloat16 0.5 of 3 (0x4040) is 1.5 (0x3fc0).
  const b = new Uint16Array([0x4040]);
  k.reduceMany(b, [b], { op: "premulSum", factor: 0.5, dtype: "bfloat16" });
  assert.equal(b[0], 0x3fc0);
  scoped(() => {
    const [a, c] = [k.heap.alloc(8), k.heap.alloc(8)];
    k.heap.view(Float32Array, a, 2).set([1, 2]);
    k.heap.view(Float32Array, c, 2).set([3, 4]);
    k.reduceManyPtr("float32", "premulSum", a, [a, c], 2, 0.25);
    assert.deepEqual(k.heap.view(Float32Array, a, 2), new Float32Array([1, 1.5]));
  });
});

Deno.test("Kernels refuse ops that do not apply to the dtype, and premulSum without a finite factor", () => {
  const f = new Float32Array(2), i = new Int32Array(2);
  assertThrowsMatching(
    () => k.reduce(f, f.slice(), { op: "band" }),
    TypeError,
    /^Cannot reduce: op "band" takes integer or bool tensors \(int8, uint8, int32, uint32, int64, uint64, bool\), found float32$/,
  );
  assertThrowsMatching(
    () => k.reduceMany(i, [i], { op: "premulSum", factor: 2 }),
    TypeError,
    /^Cannot reduce: op "premulSum" takes float tensors \(float16, bfloat16, float32, float64\), found int32$/,
  );
  assertThrowsMatching(
    () => k.reduceMany(f, [f], { op: "premulSum" }),
    TypeError,
    /^Cannot reduce: op "premulSum" needs a factor: expected factor to be a finite number, found none$/,
  );
  assertThrowsMatching(
    () => k.reduceMany(f, [f], { op: "premulSum", factor: "2" as never }),
    TypeError,
    /expected factor to be a finite number, found string "2"$/,
  );
  for (const bad of [NaN, Infinity, -Infinity]) {
    assertThrowsMatching(
      () => k.reduceMany(f, [f], { op: "premulSum", factor: bad }),
      RangeError,
      new RegExp(
        `^Cannot reduce: op "premulSum" needs a finite factor: expected a finite number, found ${bad}$`,
      ),
    );
  }
  assertThrowsMatching(
    () => k.reduceMany(new Float16Array(1), [new Float16Array(1)], { op: "premulSum", factor: 1e5 }),
    RangeError,
    /^Cannot reduce: op "premulSum" needs a factor that float16 holds: expected a finite float16, found 100000 \(it rounds to Infinity\)$/,
  );
  assertThrowsMatching(
    () => k.reduceMany(f, [f], { op: "sum", factor: 2 }),
    TypeError,
    /^Cannot reduce: factor goes with op "premulSum" only, found op "sum" with factor 2$/,
  );
  assertThrowsMatching(
    () => k.reduce(f, f.slice(), { op: "premulSum", factor: 2 }),
    RangeError,
    /reduceMany\(\) with every source/,
  );
  const flags = new Uint8Array(2);
  assertThrowsMatching(
    () => k.reduceMany(flags, [flags], { op: "avg", dtype: "bool" }),
    TypeError,
    /^Cannot reduce: op "avg" does not apply to bool tensors: expected one of sum, prod, min, max, band, bor, bxor .*found avg$/,
  );
  assertThrowsMatching(() => k.divide(flags, 2, { dtype: "bool" }), TypeError, /^Cannot divide bool/);
  assertThrowsMatching(() => k.reducePtr("float64", "bxor", 0, 0, 0), TypeError, /found float64/);
  assertThrowsMatching(() => k.reducePtr("float32", "premulSum", 0, 0, 0), RangeError, /reduceManyPtr/);
  assertThrowsMatching(() => k.reduceManyPtr("float32", "premulSum", 0, [0], 0), TypeError, /found none/);
  assertThrowsMatching(() => k.reduceManyPtr("int8", "premulSum", 0, [0], 0, 1), TypeError, /found int8/);
  // A Uint8Array is uint8 unless told, and "bool" fits no other array class.
  assertThrowsMatching(
    () => k.reduce(new Int8Array(1), new Int8Array(1), { dtype: "bool" }),
    TypeError,
    /dst is a Int8Array \(int8\) but dtype is bool/,
  );
  assert.ok(isFloat("float16") && !isFloat("bool"));
});
