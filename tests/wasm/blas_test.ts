import assert from "node:assert/strict";
import { kernels } from "../../wasm/kernels.ts";
import * as reference from "../../wasm/reference.ts";
import { Rng } from "../_util/rng.ts";
import {
  assertSameBits,
  copyOf,
  fillRandom,
  type Placement,
  randomTensors,
  seedOf,
} from "../_util/tensors.ts";

const k = await kernels();
const LENGTHS = [0, 1, 3, 4, 15, 16, 17, 1_000_003];
const PLACEMENTS: readonly Placement[] = ["plain", "offset", "wasm"];
const ALPHAS = [0.1, -3, 0, -0, 1e-30, 2 ** 100, NaN, Infinity];

function scoped(fn: () => void): void {
  const mark = k.heap.top;
  try {
    fn();
  } finally {
    k.heap.reset(mark);
  }
}

for (const dtype of ["float32", "float64"] as const) {
  Deno.test(`Kernels.scale() scales ${dtype} like the reference at every length and placement`, () => {
    for (const n of LENGTHS) {
      for (const placement of n > 1000 ? ["wasm"] as const : PLACEMENTS) {
        for (const alpha of n > 1000 ? [0.1] : ALPHAS) {
          scoped(() => {
            const [x] = randomTensors(
              new Rng(seedOf("scale", dtype, n, placement)),
              dtype,
              n,
              1,
              placement,
              k.heap,
            );
            const want = copyOf(x) as Float32Array;
            reference.scale(want, alpha);
            k.scale(x as Float32Array, alpha);
            assertSameBits(x, want, dtype, `scale ${dtype} n=${n} ${placement} alpha=${alpha}`);
          });
        }
      }
    }
  });

  Deno.test(`Kernels.axpy() adds alpha * x to y for ${dtype} like the reference, x = y included`, () => {
    for (const n of LENGTHS) {
      for (const placement of n > 1000 ? ["offset"] as const : PLACEMENTS) {
        for (const alpha of n > 1000 ? [-0.01] : ALPHAS) {
          scoped(() => {
            const rng = new Rng(seedOf("axpy", dtype, n, placement));
            const [y, x] = randomTensors(rng, dtype, n, 2, placement, k.heap) as Float32Array[];
            const want = copyOf(y) as Float32Array;
            reference.axpy(want, copyOf(x) as Float32Array, { alpha });
            k.axpy(y, x, { alpha });
            assertSameBits(y, want, dtype, `axpy ${dtype} n=${n} ${placement} alpha=${alpha}`);
            const self = copyOf(x) as Float32Array;
            reference.axpy(self, self.slice(), { alpha });
            k.axpy(x, x, { alpha });
            assertSameBits(x, self, dtype, `axpy(x, x) ${dtype} n=${n} ${placement}`);
          });
        }
      }
    }
  });
}

Deno.test("Kernels.axpy() rounds the product before adding (no fused multiply-add)", () => {
  // a * x = 1 + 2^-11 + 2^-24 exactly; rounded to float32 it is 1 + 2^-11, so y + a*x is 0. A fused
  // multiply-add would give 2^-24.
  const a = 1 + 2 ** -12;
  const y = new Float32Array([-(1 + 2 ** -11)]);
  k.axpy(y, new Float32Array([a]), { alpha: a });
  assert.ok(Object.is(y[0], 0), `got ${y[0]}`);
  const y64 = new Float64Array([-(1 + 2 ** -26)]);
  k.axpy(y64, new Float64Array([1 + 2 ** -27]), { alpha: 1 + 2 ** -27 });
  assert.equal(y64[0], 0);
  const s = new Float32Array([3]);
  k.scale(s, 0.1); // alpha is rounded to float32 first
  assert.equal(s[0], Math.fround(3 * Math.fround(0.1)));
});

/** One matmul case against the reference. */
function checkMatmul(
  m: number,
  kk: number,
  n: number,
  flags: { transA: boolean; transB: boolean; accumulate: boolean },
  placement: Placement,
): void {
  scoped(() => {
    const rng = new Rng(seedOf("matmul", m, kk, n, flags.transA, flags.transB, flags.accumulate, placement));
    const sizes = [m * kk, kk * n, m * n];
    // Allocate all three before taking views: growing memory would detach the earlier ones.
    const ptrs = sizes.map((s) => placement === "wasm" ? k.heap.alloc(4 * s + 4) + 4 : -1);
    const [a, b, c] = sizes.map((s, i) =>
      placement === "wasm"
        ? k.heap.view(Float32Array, ptrs[i], s)
        : placement === "offset"
        ? new Float32Array(new ArrayBuffer(4 * s + 8), 4, s)
        : new Float32Array(s)
    );
    // Moderate values mostly, with NaN/Inf/subnormals mixed in by fillRandom.
    for (const t of [a, b, c]) fillRandom(rng, "float32", t);
    const want = c.slice();
    reference.matmul(a.slice(), b.slice(), { c: want, m, k: kk, n, ...flags });
    k.matmul(a, b, { c, m, k: kk, n, ...flags });
    assertSameBits(c, want, "float32", `matmul ${m}x${kk}x${n} ${JSON.stringify(flags)} ${placement}`);
  });
}

const SHAPES: readonly [number, number, number][] = [
  [0, 0, 0],
  [1, 1, 1],
  [2, 0, 3],
  [3, 5, 7],
  [4, 8, 8],
  [5, 17, 9],
  [9, 3, 33],
  [13, 300, 140], // crosses the kernel's k-block (256) and n-block (128)
];

for (const transA of [false, true]) {
  for (const transB of [false, true]) {
    Deno.test(`Kernels.matmul() with transA=${transA} transB=${transB} matches the reference bit for bit`, () => {
      for (const [m, kk, n] of SHAPES) {
        for (const accumulate of [false, true]) {
          for (const placement of PLACEMENTS) {
            checkMatmul(m, kk, n, { transA, transB, accumulate }, placement);
          }
        }
      }
    });
  }
}

Deno.test("Kernels.matmul() multiplies small matrices as the textbook does", () => {
  const a = new Float32Array([1, 2, 3, 4, 5, 6]); // 2 x 3
  const b = new Float32Array([7, 8, 9, 10, 11, 12]); // 3 x 2
  const c = new Float32Array(4);
  k.matmul(a, b, { c, m: 2, k: 3, n: 2 });
  assert.deepEqual(c, new Float32Array([58, 64, 139, 154]));
  k.matmul(a, b, { c, m: 2, k: 3, n: 2, accumulate: true });
  assert.deepEqual(c, new Float32Array([116, 128, 278, 308]));
  // A^T with A stored 3 x 2 (= b): (b^T) (a^T) = (a b)^T.
  const t = new Float32Array(4);
  k.matmul(b, a, { c: t, m: 2, k: 3, n: 2, transA: true, transB: true });
  assert.deepEqual(t, new Float32Array([58, 139, 64, 154]));
  const zero = new Float32Array([5, 5]);
  k.matmul(new Float32Array(0), new Float32Array(0), { c: zero, m: 1, k: 0, n: 2 });
  assert.deepEqual(zero, new Float32Array([0, 0]));
});

Deno.test("Kernels.matmul() reads an input that overlaps C in wasm memory as it was before the call", () => {
  scoped(() => {
    const p = k.heap.alloc(4 * 16);
    const all = k.heap.view(Float32Array, p, 16);
    for (let i = 0; i < 16; i++) all[i] = i - 5;
    const a = k.heap.view(Float32Array, p, 16), c = k.heap.view(Float32Array, p, 16);
    const b = new Float32Array(16).map((_, i) => (i % 5) - 2);
    const want = new Float32Array(16);
    reference.matmul(a.slice(), b, { c: want, m: 4, k: 4, n: 4 });
    k.matmul(a, b, { c, m: 4, k: 4, n: 4 });
    assertSameBits(c, want, "float32", "c = a b with c over a");
  });
});

function assertThrowsMatching(fn: () => unknown, type: ErrorConstructor, pattern: RegExp): void {
  assert.throws(fn, (e: unknown) => {
    assert.ok(e instanceof type, `expected a ${type.name}, got ${e}`);
    assert.match((e as Error).message, pattern);
    return true;
  });
}

Deno.test("Kernels.matmul() rejects shapes that do not match the arrays, naming both", () => {
  const f = (n: number) => new Float32Array(n);
  assertThrowsMatching(
    () => k.matmul(f(5), f(6), { c: f(4), m: 2, k: 3, n: 2 }),
    RangeError,
    /^Cannot matmul: a has 5 elements but m x k is 2 x 3 = 6$/,
  );
  assertThrowsMatching(
    () => k.matmul(f(6), f(5), { c: f(4), m: 2, k: 3, n: 2, transB: true }),
    RangeError,
    /^Cannot matmul: b has 5 elements but n x k \(transB\) is 2 x 3 = 6$/,
  );
  assertThrowsMatching(
    () => k.matmul(f(6), f(6), { c: f(3), m: 2, k: 3, n: 2 }),
    RangeError,
    /^Cannot matmul: c has 3 elements but m x n is 2 x 2 = 4$/,
  );
  assertThrowsMatching(
    () => k.matmul(f(6), f(6), { c: f(4), m: -2, k: 3, n: 2 }),
    RangeError,
    /expected m to be an integer from 0 to 2\^30, found -2/,
  );
  assertThrowsMatching(
    () => k.matmul(new Float64Array(6) as unknown as Float32Array, f(6), { c: f(4), m: 2, k: 3, n: 2 }),
    TypeError,
    /expected a to be a Float32Array, found Float64Array/,
  );
});

Deno.test("Kernels.scale() and axpy() reject other dtypes, mixed dtypes and lengths", () => {
  assertThrowsMatching(
    () => k.scale(new Int32Array(2) as unknown as Float32Array, 2),
    TypeError,
    /^Cannot scale: expected x to be a Float32Array or Float64Array, found Int32Array$/,
  );
  assertThrowsMatching(
    () => k.scale(new Float32Array(2), "2" as never),
    TypeError,
    /alpha to be a number, found string/,
  );
  assertThrowsMatching(
    () => k.axpy(new Float32Array(2), new Float32Array(3), { alpha: 1 }),
    RangeError,
    /^Cannot axpy: y has 2 elements but x has 3$/,
  );
  assertThrowsMatching(
    () => k.axpy(new Float32Array(2), new Float64Array(2), { alpha: 1 }),
    TypeError,
    /^Cannot axpy: y is float32 but x is float64$/,
  );
});
