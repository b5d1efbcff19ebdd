import assert from "node:assert/strict";
import type { TypedArray } from "../../core/dtype.ts";
import { kernels } from "../../wasm/kernels.ts";
import * as reference from "../../wasm/reference.ts";
import { Rng } from "../_util/rng.ts";
import { bitsOfF32, f32FromBits, type Placement, seedOf, tensorsOf } from "../_util/tensors.ts";

const k = await kernels();
const LENGTHS = [0, 1, 3, 4, 15, 16, 17, 1_000_003];
const PLACEMENTS: readonly Placement[] = ["plain", "offset", "wasm"];

function scoped(fn: () => void): void {
  const mark = k.heap.top;
  try {
    fn();
  } finally {
    k.heap.reset(mark);
  }
}

/** Asserts equal bits, NaN payloads included (casts keep them). */
function assertSameWords(
  actual: Uint16Array | Uint32Array,
  expected: Uint16Array | Uint32Array,
  what: string,
): void {
  assert.equal(actual.length, expected.length, what);
  for (let i = 0; i < actual.length; i++) {
    if (actual[i] !== expected[i]) {
      assert.fail(
        `${what}: element ${i} is 0x${actual[i].toString(16)}, expected 0x${expected[i].toString(16)}`,
      );
    }
  }
}

function u32(a: Float32Array): Uint32Array {
  return new Uint32Array(a.buffer, a.byteOffset, a.length);
}

/** Every 16-bit pattern, in order. */
const ALL16 = Uint16Array.from({ length: 65536 }, (_, i) => i);

Deno.test("Kernels.castF16ToF32() widens all 65536 float16 patterns exactly and quiets NaNs", () => {
  const got = new Float32Array(65536), want = new Float32Array(65536);
  k.castF16ToF32(ALL16, got);
  reference.castF16ToF32(ALL16, want);
  assertSameWords(u32(got), u32(want), "f16 -> f32");
  const f16 = new Float16Array(ALL16.buffer);
  for (let h = 0; h < 65536; h++) {
    const nan = (h & 0x7fff) > 0x7c00;
    if (!nan) assert.ok(Object.is(got[h], f16[h]), `0x${h.toString(16)}: ${got[h]} != ${f16[h]}`);
    else assert.equal(u32(got)[h], (((h & 0x8000) << 16) | 0x7fc00000 | ((h & 0x3ff) << 13)) >>> 0);
  }
});

Deno.test("Kernels.castF32ToF16() round-trips every float16 pattern through float32", () => {
  const wide = new Float32Array(65536), back = new Uint16Array(65536);
  k.castF16ToF32(ALL16, wide);
  k.castF32ToF16(wide, back);
  for (let h = 0; h < 65536; h++) {
    const want = (h & 0x7fff) > 0x7c00 ? h | 0x0200 : h; // a signaling NaN comes back quiet
    assert.equal(back[h], want, `0x${h.toString(16)} came back as 0x${back[h].toString(16)}`);
  }
});

Deno.test("Kernels.castBf16ToF32() widens all 65536 bfloat16 patterns exactly and quiets NaNs", () => {
  const got = new Float32Array(65536), want = new Float32Array(65536);
  k.castBf16ToF32(ALL16, got);
  reference.castBf16ToF32(ALL16, want);
  assertSameWords(u32(got), u32(want), "bf16 -> f32");
  for (let h = 0; h < 65536; h++) {
    const nan = (h & 0x7fff) > 0x7f80;
    assert.equal(u32(got)[h], ((h << 16) | (nan ? 0x400000 : 0)) >>> 0, `0x${h.toString(16)}`);
  }
});

Deno.test("Kernels.castF32ToBf16() round-trips every bfloat16 pattern through float32", () => {
  const wide = new Float32Array(65536), back = new Uint16Array(65536);
  k.castBf16ToF32(ALL16, wide);
  k.castF32ToBf16(wide, back);
  for (let h = 0; h < 65536; h++) {
    const want = (h & 0x7fff) > 0x7f80 ? h | 0x0040 : h;
    assert.equal(back[h], want, `0x${h.toString(16)} came back as 0x${back[h].toString(16)}`);
  }
});

/**
 * float32 values where rounding is delicate: for every float16 and bfloat16 value, the exact midpoints to
 * its neighbours and one float32 ulp either side of them; the overflow and subnormal boundaries; every
 * NaN class; and float32 subnormals.
 */
function edgeCases(): Float32Array {
  const out: number[] = [];
  const f32 = new Float32Array(1);
  const around = (x: number) => {
    f32[0] = x;
    const b = bitsOfF32(f32[0]);
    for (const d of [-2, -1, 0, 1, 2]) out.push(f32FromBits((b + d) >>> 0));
  };
  const f16 = new Float16Array(ALL16.buffer);
  for (let h = 0; h < 0x7c00; h++) {
    around(f16[h]);
    if (h < 0x7bff) around((f16[h] + f16[h + 1]) / 2); // exact in float32: one more bit than float16
    around(-f16[h]);
  }
  for (let h = 0; h < 0x7f80; h += 1) {
    const lo = f32FromBits(h << 16), hi = f32FromBits(((h + 1) << 16) >>> 0);
    around((lo + hi) / 2);
    around(-(lo + hi) / 2);
  }
  for (
    const x of [
      65504,
      65519,
      65520,
      65535,
      65536,
      1e10,
      3.4028234663852886e38,
      2 ** -24,
      2 ** -25,
      3 * 2 ** -26,
    ]
  ) {
    around(x);
    around(-x);
  }
  for (
    const bits of [
      0x7f800000,
      0xff800000,
      0x7f800001,
      0x7fbfffff,
      0x7fc00000,
      0x7fffffff,
      0xffc00001,
      0x7f802000,
    ]
  ) {
    out.push(f32FromBits(bits));
  }
  for (let b = 0; b < 0x800000; b += 997) out.push(f32FromBits(b), f32FromBits((b | 0x80000000) >>> 0));
  return new Float32Array(out);
}

const EDGES = edgeCases();

/** Uniform float32 bit patterns: every exponent, NaNs included. */
function randomF32(seed: number, n: number): Float32Array {
  const out = new Float32Array(n);
  new Rng(seed).fillBits(out);
  return out;
}

/** A second oracle for bfloat16: pick the nearer neighbour by exact arithmetic, ties to the even one. */
function bf16ByDistance(x: number, bits: number): number {
  if (x !== x) return ((bits >>> 16) | 0x40) >>> 0;
  const lo = bits >>> 16, hi = lo + 1;
  if ((lo & 0x7fff) === 0x7f80) return lo; // an infinity
  // Rounding works as if the exponent were unbounded: past the largest finite value comes 2^128 (Inf).
  const vlo = f32FromBits(lo << 16);
  const vhi = (hi & 0x7fff) === 0x7f80 ? Math.sign(vlo || x) * 2 ** 128 : f32FromBits((hi << 16) >>> 0);
  const dlo = Math.abs(x - vlo), dhi = Math.abs(vhi - x);
  if (dlo < dhi) return lo;
  if (dhi < dlo) return hi;
  return lo % 2 === 0 ? lo : hi;
}

Deno.test("Kernels.castF32ToF16() rounds like Float16Array at ties, overflow and subnormal boundaries", () => {
  for (const [name, src] of [["edge cases", EDGES], ["random patterns", randomF32(7, 1 << 20)]] as const) {
    const got = new Uint16Array(src.length), want = new Uint16Array(src.length);
    k.castF32ToF16(src, got);
    reference.castF32ToF16(src, want);
    assertSameWords(got, want, `f32 -> f16 ${name}`);
  }
  // A few by hand: ties to even at 1, 2048 and the smallest subnormal; overflow at 65520.
  const src = new Float32Array([
    1 + 2 ** -11,
    1 + 3 * 2 ** -11,
    2049,
    65519.99,
    65520,
    2 ** -25,
    3 * 2 ** -25,
    -1e-30,
  ]);
  const h = new Uint16Array(src.length);
  k.castF32ToF16(src, h);
  assert.deepEqual(Array.from(h), [0x3c00, 0x3c02, 0x6800, 0x7bff, 0x7c00, 0x0000, 0x0002, 0x8000]);
});

Deno.test("Kernels.castF32ToBf16() rounds to nearest even at ties and overflows to Inf", () => {
  for (const [name, src] of [["edge cases", EDGES], ["random patterns", randomF32(8, 1 << 20)]] as const) {
    const got = new Uint16Array(src.length), want = new Uint16Array(src.length);
    k.castF32ToBf16(src, got);
    reference.castF32ToBf16(src, want);
    assertSameWords(got, want, `f32 -> bf16 ${name}`);
    const bits = u32(src);
    for (let i = 0; i < src.length; i++) {
      const oracle = bf16ByDistance(src[i], bits[i]);
      if (got[i] !== oracle) {
        assert.fail(
          `${src[i]} (0x${bits[i].toString(16)}) -> 0x${got[i].toString(16)}, not 0x${oracle.toString(16)}`,
        );
      }
    }
  }
  const src = new Float32Array([
    1 + 2 ** -8,
    1 + 3 * 2 ** -8,
    f32FromBits(0x7f7f8000),
    f32FromBits(0x7f7f7fff),
  ]);
  const b = new Uint16Array(src.length);
  k.castF32ToBf16(src, b);
  assert.deepEqual(Array.from(b), [0x3f80, 0x3f82, 0x7f80, 0x7f7f]);
});

/** Runs all four casts on `n` elements in `placement`, against the reference. */
function checkCasts(n: number, placement: Placement): void {
  scoped(() => {
    const rng = new Rng(seedOf("casts", n, placement));
    const [f32a, f32b, h16, b16] = tensorsOf(
      ["float32", "float32", "float16", "bfloat16"],
      n,
      placement,
      k.heap,
    ) as [
      Float32Array,
      Float32Array,
      Uint16Array,
      Uint16Array,
    ];
    rng.fillBits(f32a);
    const want16 = new Uint16Array(n), want32 = new Float32Array(n);
    reference.castF32ToF16(f32a.slice(), want16);
    k.castF32ToF16(f32a, h16);
    assertSameWords(h16, want16, `f32 -> f16 n=${n} ${placement}`);
    reference.castF16ToF32(h16.slice(), want32);
    k.castF16ToF32(h16, f32b);
    assertSameWords(u32(f32b), u32(want32), `f16 -> f32 n=${n} ${placement}`);
    reference.castF32ToBf16(f32a.slice(), want16);
    k.castF32ToBf16(f32a, b16);
    assertSameWords(b16, want16, `f32 -> bf16 n=${n} ${placement}`);
    reference.castBf16ToF32(b16.slice(), want32);
    k.castBf16ToF32(b16, f32b);
    assertSameWords(u32(f32b), u32(want32), `bf16 -> f32 n=${n} ${placement}`);
  });
}

Deno.test("Kernels casts match the reference at every length, at byte offsets and in wasm memory", () => {
  for (const n of LENGTHS) for (const placement of PLACEMENTS) checkCasts(n, placement);
});

Deno.test("Kernels.castF32ToF16() accepts a Float16Array destination and an overlapping one in wasm memory", () => {
  const src = new Float32Array([0.1, -2, 70000]);
  const h = new Float16Array(3);
  k.castF32ToF16(src, h);
  assert.deepEqual(Array.from(h), [Math.f16round(0.1), -2, Infinity]);
  scoped(() => {
    // dst is the first half of src's own bytes: the kernel must read src as it was.
    const n = 4096, p = k.heap.alloc(4 * n);
    const f = k.heap.view(Float32Array, p, n);
    for (let i = 0; i < n; i++) f[i] = i / 7;
    const want = new Uint16Array(n);
    reference.castF32ToF16(f.slice(), want);
    k.castF32ToF16(f, k.heap.view(Uint16Array, p, n));
    assertSameWords(k.heap.view(Uint16Array, p, n), want, "in place");
  });
});

function assertThrowsMatching(fn: () => unknown, type: ErrorConstructor, pattern: RegExp): void {
  assert.throws(fn, (e: unknown) => {
    assert.ok(e instanceof type, `expected a ${type.name}, got ${e}`);
    assert.match((e as Error).message, pattern);
    return true;
  });
}

Deno.test("Kernels casts reject wrong array classes and lengths with what was expected and found", () => {
  assertThrowsMatching(
    () => k.castF32ToF16(new Float32Array(4), new Uint16Array(3)),
    RangeError,
    /^Cannot cast float32 to float16: src has 4 elements but dst has 3$/,
  );
  assertThrowsMatching(
    () => k.castF32ToF16(new Float64Array(4) as unknown as Float32Array, new Uint16Array(4)),
    TypeError,
    /^Cannot cast float32 to float16: src is a Float64Array \(float64\) but dtype is float32$/,
  );
  assertThrowsMatching(
    () => k.castF16ToF32(new Int16Array(4) as unknown as Uint16Array, new Float32Array(4)),
    TypeError,
    /expected src to be a Uint16Array or Float16Array, found Int16Array/,
  );
  assertThrowsMatching(
    () => k.castF32ToBf16(new Float32Array(4), new Float16Array(4) as unknown as Uint16Array),
    TypeError,
    /expected dst to be a Uint16Array \(bfloat16 bits\), found Float16Array/,
  );
  assertThrowsMatching(
    () => k.castBf16ToF32(new Uint16Array(2), new Float32Array(1)),
    RangeError,
    /^Cannot cast bfloat16 to float32: src has 2 elements but dst has 1$/,
  );
  const empty: TypedArray[] = [new Float32Array(0), new Uint16Array(0)];
  k.castF32ToF16(empty[0] as Float32Array, empty[1] as Uint16Array);
});
