/**
 * The compression kernels against their TypeScript reference, bit for bit, on seeded random data: every
 * length class (empty, shorter than a vector, around a vector, about a million), block sizes that do and do
 * not divide the length, arrays at odd offsets and in wasm memory, and the special values; plus the
 * properties the references cannot show by themselves (error feedback, tie-breaking, bad arguments).
 */
import assert from "node:assert/strict";
import { Rng } from "../_util/rng.ts";
import {
  compressionKernels,
  int8Sizes,
  type SignPacked,
  signSizes,
  type SparseVector,
} from "../../wasm/compress.ts";
import {
  dequantizeInt8Reference,
  quantizeInt8Reference,
  scatterAddReference,
  signCompressReference,
  signDecompressReference,
  topKReference,
} from "../../wasm/compress_reference.ts";

const k = await compressionKernels();
const heap = k.heap;
// Grow wasm memory once, so that no call below grows it while test views of it are live (growth detaches
// them); one test grows it on purpose.
{
  const mark = heap.top;
  heap.alloc(64 << 20);
  heap.reset(mark);
}

const LENGTHS = [0, 1, 3, 4, 15, 16, 17, 1000, 1_000_003];
const BLOCKS = [1, 7, 8, 256];
type Placement = "plain" | "offset" | "wasm";
const PLACEMENTS: readonly Placement[] = ["plain", "offset", "wasm"];

/** Special float32 values as bits: NaNs (quiet, negative, signaling), zeros, infinities, extremes. */
const SPECIAL_BITS = [
  0x7fc00000,
  0xffc00000,
  0x7f800001,
  0x00000000,
  0x80000000,
  0x7f800000,
  0xff800000,
  0x7f7fffff,
  0xff7fffff,
  0x00000001,
  0x80000001,
  0x007fffff,
  0x00800000,
  0x3f800000,
];

function f32(bits: number): number {
  return new Float32Array(new Uint32Array([bits]).buffer)[0];
}

/** Gradient-like values over many binades, with exact zeros and repeated magnitudes mixed in. */
function randomValues(rng: Rng, n: number, specials = false): Float32Array {
  const x = new Float32Array(n);
  for (let i = 0; i < n; i++) {
    const r = rng.u32() & 63;
    if (r === 0) x[i] = 0;
    else if (r === 1 && i > 0) x[i] = -x[i - 1];
    else x[i] = (rng.float() - 0.5) * 2 ** rng.int(-24, 8);
  }
  if (specials) {
    for (let i = 0; i < n; i += 1 + rng.int(0, 40)) x[i] = f32(rng.pick(SPECIAL_BITS));
  }
  return x;
}

/** An array of `length` elements in a placement; a view of wasm memory is valid until memory grows. */
function place<T extends Float32Array | Int8Array | Uint8Array | Uint32Array>(
  where: Placement,
  ctor: { new (buffer: ArrayBuffer, byteOffset: number, length: number): T; BYTES_PER_ELEMENT: number },
  length: number,
): T {
  const size = ctor.BYTES_PER_ELEMENT;
  if (where === "plain") return new ctor(new ArrayBuffer(length * size), 0, length);
  if (where === "offset") {
    // One element in, inside a buffer with room after: never 16-byte aligned, never at the buffer's end.
    const skew = size === 1 ? 3 : size;
    return new ctor(new ArrayBuffer(length * size + 8), skew, length);
  }
  return heap.view(ctor, heap.alloc(length * size, size), length);
}

/** A copy of `x` in a placement. For "wasm", take it after the call's last allocation, or again. */
function placed<T extends Float32Array | Int8Array | Uint8Array | Uint32Array>(where: Placement, x: T): T {
  const out = place(where, x.constructor as never, x.length) as T;
  out.set(x as never);
  return out;
}

/** Asserts two float32 arrays hold the same bits, except that any NaN equals any NaN. */
function assertSameF32(actual: Float32Array, expected: Float32Array, what: string): void {
  assert.equal(actual.length, expected.length, `${what}: length`);
  const a = new Uint32Array(actual.buffer, actual.byteOffset, actual.length);
  const e = new Uint32Array(expected.buffer, expected.byteOffset, expected.length);
  for (let i = 0; i < a.length; i++) {
    if (a[i] !== e[i] && !(Number.isNaN(actual[i]) && Number.isNaN(expected[i]))) {
      assert.fail(
        `${what}[${i}]: found ${actual[i]} (0x${a[i].toString(16)}), expected ${expected[i]} (0x${
          e[i].toString(16)
        })`,
      );
    }
  }
}

/** Asserts two integer arrays are equal, naming the first differing element. */
function assertSameInts(actual: ArrayLike<number>, expected: ArrayLike<number>, what: string): void {
  assert.equal(actual.length, expected.length, `${what}: length`);
  for (let i = 0; i < actual.length; i++) {
    if (actual[i] !== expected[i]) assert.fail(`${what}[${i}]: found ${actual[i]}, expected ${expected[i]}`);
  }
}

/** Runs `fn` with the wasm heap popped back afterwards. */
function scoped(fn: () => void): void {
  const mark = heap.top;
  try {
    fn();
  } finally {
    heap.reset(mark);
  }
}

function* cases(seed: number): Generator<{ n: number; blockSize: number; where: Placement; rng: Rng }> {
  for (const n of LENGTHS) {
    for (const blockSize of BLOCKS) {
      for (const where of PLACEMENTS) {
        yield { n, blockSize, where, rng: new Rng(seed + n * 31 + blockSize * 7 + where.length) };
      }
    }
  }
}

Deno.test("CompressionKernels.quantizeInt8() matches the reference bit for bit", () => {
  for (const { n, blockSize, where, rng } of cases(1)) {
    scoped(() => {
      const x = randomValues(rng, n, n % 2 === 1);
      const expected = quantizeInt8Reference(x, { blockSize });
      const src = placed(where, x);
      const sizes = int8Sizes(n, blockSize);
      const out = where === "plain" ? k.quantizeInt8(src, { blockSize }) : k.quantizeInt8(src, {
        blockSize,
        q: place(where, Int8Array, sizes.q),
        scales: place(where, Float32Array, sizes.scales),
      });
      const what = `n=${n} blockSize=${blockSize} ${where}`;
      assertSameInts(out.q, expected.q, `${what} q`);
      assertSameF32(out.scales, expected.scales, `${what} scales`);
    });
  }
});

Deno.test("CompressionKernels.dequantizeInt8() matches the reference, overwriting and accumulating", () => {
  for (const { n, blockSize, where, rng } of cases(2)) {
    scoped(() => {
      const packed = quantizeInt8Reference(randomValues(rng, n, n % 3 === 0), { blockSize });
      const base = randomValues(rng, n);
      for (const accumulate of [false, true]) {
        const expected = base.slice();
        dequantizeInt8Reference(packed, expected, { blockSize, accumulate });
        const q = placed(where, packed.q), scales = placed(where, packed.scales), dst = placed(where, base);
        k.dequantizeInt8({ q, scales }, dst, { blockSize, accumulate });
        assertSameF32(dst, expected, `n=${n} blockSize=${blockSize} ${where} accumulate=${accumulate}`);
      }
    });
  }
});

Deno.test("CompressionKernels.quantizeInt8() rounds half to even and clamps to ±127", () => {
  // absmax 127 makes the scale exactly 1, so q is the rounded value itself.
  const x = new Float32Array([127, 0.5, 1.5, 2.5, -0.5, -1.5, -126.5, 3.4999998, -127]);
  const { q, scales } = k.quantizeInt8(x, { blockSize: x.length });
  assert.deepEqual(scales, new Float32Array([1]));
  assert.deepEqual(q, new Int8Array([127, 0, 2, 2, 0, -2, -126, 3, -127]));
  // Subnormal scales are coarse: 150 * 2^-149 / 127 rounds to the smallest subnormal, and x / scale = 150
  // must clamp.
  const coarse = new Float32Array([f32(150), -f32(150), f32(100)]);
  const packed = k.quantizeInt8(coarse, { blockSize: 3 });
  assert.deepEqual(packed.scales, new Float32Array([f32(1)]));
  assert.deepEqual(packed.q, new Int8Array([127, -127, 100]));
});

Deno.test("CompressionKernels.quantizeInt8() keeps every finite value within half a step", () => {
  const rng = new Rng(3);
  const x = randomValues(rng, 4096);
  const { q, scales } = k.quantizeInt8(x, { blockSize: 64 });
  for (let i = 0; i < x.length; i++) {
    const scale = scales[i >> 6];
    assert.ok(Math.abs(x[i] - q[i] * scale) <= scale * 0.5 * (1 + 2 ** -20), `element ${i}`);
  }
});

Deno.test("CompressionKernels.quantizeInt8() gives NaN and Inf blocks a non-finite scale and q = 0", () => {
  const NaN32 = f32(0x7fc00000);
  const x = new Float32Array([
    1,
    NaN32,
    2,
    -3, // NaN block
    1,
    -Infinity,
    2,
    NaN32, // NaN wins over Inf
    1,
    Infinity,
    -2,
    0.5, // Inf block
    0,
    -0,
    0,
    0, // zero block
    f32(1),
    -f32(2),
    f32(0x007fffff),
    0, // subnormals: absmax 0x007fffff / 127 is a subnormal scale
    f32(0x7f7fffff),
    -1,
    f32(0xff7fffff),
    0, // max finite
  ]);
  const { q, scales } = k.quantizeInt8(x, { blockSize: 4 });
  const expected = quantizeInt8Reference(x, { blockSize: 4 });
  assertSameInts(q, expected.q, "q");
  assertSameF32(scales, expected.scales, "scales");
  assert.ok(Number.isNaN(scales[0]) && Number.isNaN(scales[1]));
  assert.equal(scales[2], Infinity);
  assert.equal(scales[3], 0);
  assert.deepEqual(q.subarray(0, 16), new Int8Array(16));
  assert.ok(scales[4] > 0 && scales[4] < 2 ** -126);
  assert.deepEqual(q.subarray(20), new Int8Array([127, 0, -127, 0]));
  // The non-finite blocks decode to NaN: the receiver sees the overflow.
  const back = new Float32Array(x.length);
  k.dequantizeInt8({ q, scales }, back, { blockSize: 4 });
  assert.ok(back.subarray(0, 12).every(Number.isNaN));
  assert.deepEqual(back.subarray(12, 16), new Float32Array(4));
});

Deno.test("CompressionKernels.quantizeInt8() gives a block whose absmax / 127 underflows scale 0 and q = 0", () => {
  const x = new Float32Array([f32(63), -f32(1), 0]); // 63 * 2^-149 / 127 rounds to 0
  const { q, scales } = k.quantizeInt8(x, { blockSize: 3 });
  assert.deepEqual(scales, new Float32Array([0]));
  assert.deepEqual(q, new Int8Array(3));
});

Deno.test("CompressionKernels.signCompress() matches the reference: bits, scales and residual", () => {
  for (const { n, blockSize, where, rng } of cases(4)) {
    scoped(() => {
      const g = randomValues(rng, n, n % 2 === 1), e0 = randomValues(rng, n);
      const eExpected = e0.slice();
      const expected = signCompressReference(g, eExpected, { blockSize });
      const sizes = signSizes(n, blockSize);
      const bits = where === "plain" ? undefined : place(where, Uint8Array, sizes.bits);
      if (bits) bits.fill(0xff); // stale bytes must be overwritten, padding bits included
      const scales = where === "plain" ? undefined : place(where, Float32Array, sizes.scales);
      const src = placed(where, g), residual = placed(where, e0);
      const out = k.signCompress(src, residual, { blockSize, bits, scales });
      const what = `n=${n} blockSize=${blockSize} ${where}`;
      assertSameInts(out.bits, expected.bits, `${what} bits`);
      assertSameF32(out.scales, expected.scales, `${what} scales`);
      assertSameF32(residual, eExpected, `${what} residual`);
    });
  }
});

Deno.test("CompressionKernels.signDecompress() matches the reference, overwriting and accumulating", () => {
  for (const { n, blockSize, where, rng } of cases(5)) {
    scoped(() => {
      const bits = new Uint8Array(Math.ceil(n / 8));
      rng.fillBits(bits);
      if (n % 8 !== 0) bits[bits.length - 1] &= (1 << n % 8) - 1;
      const scales = randomValues(rng, signSizes(n, blockSize).scales, true).map(Math.abs);
      const base = randomValues(rng, n);
      for (const accumulate of [false, true]) {
        const expected = base.slice();
        signDecompressReference({ bits, scales }, expected, { blockSize, accumulate });
        const packed = { bits: placed(where, bits), scales: placed(where, scales) };
        const dst = placed(where, base);
        k.signDecompress(packed, dst, { blockSize, accumulate });
        assertSameF32(dst, expected, `n=${n} blockSize=${blockSize} ${where} accumulate=${accumulate}`);
      }
    });
  }
});

Deno.test("CompressionKernels.signCompress() counts -0 as positive and NaN as negative", () => {
  const g = new Float32Array([-0, 0, 1, -1, f32(0x7fc00000), f32(0xffc00000), 2, -2, 5]);
  const residual = new Float32Array(g.length);
  const { bits, scales } = k.signCompress(g, residual, { blockSize: 4 });
  assert.deepEqual(bits, new Uint8Array([0b01000111, 0b1]));
  assert.deepEqual(Array.from(scales.subarray(0, 1)), [0.5]);
  assert.ok(Number.isNaN(scales[1])); // a NaN poisons its block's scale...
  assert.ok(residual.subarray(4, 8).every(Number.isNaN)); // ...and every residual of the block
  assert.deepEqual(residual.subarray(0, 4), new Float32Array([-0.5, -0.5, 0.5, -0.5]));
  assert.deepEqual(scales[2], 5);
  assert.equal(residual[8], 0);
});

Deno.test("CompressionKernels.signCompress() gives an Inf block a +Inf scale and non-finite residuals", () => {
  const g = new Float32Array([1, -Infinity, 2, 3, 1, 1]);
  const residual = new Float32Array(g.length);
  const expectedResidual = residual.slice();
  const expected = signCompressReference(g, expectedResidual, { blockSize: 4 });
  const { bits, scales } = k.signCompress(g, residual, { blockSize: 4 });
  assert.deepEqual(bits, expected.bits);
  assertSameF32(scales, expected.scales, "scales");
  assertSameF32(residual, expectedResidual, "residual");
  assert.equal(scales[0], Infinity);
  assert.ok(residual.subarray(0, 4).every((v) => !Number.isFinite(v)));
  assert.deepEqual(residual.subarray(4), new Float32Array(2));
});

Deno.test("CompressionKernels.signCompress() leaves exactly x - decompress(x) in the residual", () => {
  const rng = new Rng(6);
  for (const blockSize of [1, 7, 256]) {
    const n = 1001, g = randomValues(rng, n), e = randomValues(rng, n);
    const x = new Float32Array(n);
    for (let i = 0; i < n; i++) x[i] = g[i] + e[i];
    const packed = k.signCompress(g, e, { blockSize });
    const d = new Float32Array(n);
    k.signDecompress(packed, d, { blockSize });
    const expected = new Float32Array(n);
    for (let i = 0; i < n; i++) expected[i] = x[i] - d[i];
    assertSameF32(e, expected, `blockSize=${blockSize}`);
  }
});

Deno.test("CompressionKernels.signCompress() carries the lost magnitude in the residual", () => {
  // A constant gradient over many steps: what is sent, summed, tracks what was computed, summed, and the
  // difference is what the residual still holds (up to the float32 rounding of each step).
  const rng = new Rng(7);
  const n = 300, blockSize = 32, steps = 200;
  const g = randomValues(rng, n).map((v) => v * 1e3);
  const residual = new Float32Array(n), sent = new Float64Array(n), d = new Float32Array(n);
  const sizes = signSizes(n, blockSize);
  const packed: SignPacked = { bits: new Uint8Array(sizes.bits), scales: new Float32Array(sizes.scales) };
  const largest: number[] = [];
  for (let step = 1; step <= steps; step++) {
    k.signCompress(g, residual, { blockSize, ...packed });
    k.signDecompress(packed, d, { blockSize });
    for (let i = 0; i < n; i++) sent[i] += d[i];
    largest.push(residual.reduce((m, v) => Math.max(m, Math.abs(v)), 0));
  }
  for (let i = 0; i < n; i++) {
    const total = g[i] * steps;
    const slack = 1e-5 * steps * (Math.abs(g[i]) + packed.scales[Math.floor(i / blockSize)]);
    assert.ok(Math.abs(total - sent[i] - residual[i]) <= slack, `element ${i}: drift beyond rounding`);
    assert.ok(Math.abs(total - sent[i]) <= Math.abs(residual[i]) + slack, `element ${i}: not bounded`);
  }
  // The residual settles instead of growing with the number of steps.
  const early = Math.max(...largest.slice(0, steps / 2)), late = Math.max(...largest.slice(steps / 2));
  assert.ok(late <= 1.25 * early, `the residual grew from ${early} to ${late}`);
});

/** Top-k by sorting: the definition, for checking the reference and the kernel on small inputs. */
function topKBySort(x: Float32Array, k: number): SparseVector {
  const bits = new Uint32Array(x.buffer, x.byteOffset, x.length);
  const key = (i: number) => Math.min(bits[i] & 0x7fffffff, 0x7f800001);
  const order = Array.from(x, (_, i) => i).sort((a, b) => key(b) - key(a) || a - b).slice(0, k).sort((a, b) =>
    a - b
  );
  return { indices: Uint32Array.from(order), values: Float32Array.from(order, (i) => x[i]) };
}

Deno.test("CompressionKernels.topK() matches the reference and the sort-based definition", () => {
  for (const n of LENGTHS) {
    for (const where of PLACEMENTS) {
      const rng = new Rng(8 + n);
      const x = randomValues(rng, n, n % 2 === 1);
      for (
        const kk of new Set([0, Math.min(n, 1), Math.min(n, 3), Math.floor(n / 100), Math.floor(n / 2), n])
      ) {
        scoped(() => {
          const expected = topKReference(x, kk);
          if (n <= 1000) {
            const bySort = topKBySort(x, kk);
            assertSameInts(expected.indices, bySort.indices, `reference n=${n} k=${kk}`);
          }
          const src = placed(where, x);
          const out = where === "plain" ? k.topK(src, kk) : k.topK(src, kk, {
            indices: place(where, Uint32Array, kk),
            values: place(where, Float32Array, kk),
          });
          assertSameInts(out.indices, expected.indices, `n=${n} k=${kk} ${where} indices`);
          assertSameF32(out.values, expected.values, `n=${n} k=${kk} ${where} values`);
        });
      }
    }
  }
});

Deno.test("CompressionKernels.topK() stays exact when its sample misleads it", () => {
  // Large inputs first bracket the threshold from 65536 evenly spaced elements (index floor(j * n / 65536)).
  // Make those elements unrepresentative, both ways, so that the bracket misses and the kernel must fall
  // back to the exact selection; the reference does not sample.
  const n = 1_000_003, sample = 65536, rng = new Rng(12);
  const sampled = new Uint8Array(n);
  for (let j = 0; j < sample; j++) sampled[Math.floor((j * n) / sample)] = 1;
  for (const [inSample, elsewhere] of [[0, 1], [1e6, 1], [1, 0]]) {
    const x = new Float32Array(n);
    for (let i = 0; i < n; i++) x[i] = (sampled[i] ? inSample : elsewhere) * (1 + rng.float());
    for (const kk of [1, 10_000, 500_000]) {
      const expected = topKReference(x, kk), out = k.topK(x, kk);
      assertSameInts(out.indices, expected.indices, `sample ${inSample} elsewhere ${elsewhere} k=${kk}`);
      assertSameF32(out.values, expected.values, `sample ${inSample} elsewhere ${elsewhere} k=${kk}`);
    }
  }
});

Deno.test("CompressionKernels.topK() keeps the first NaNs when there are more NaNs than k", () => {
  const n = 300_001, x = randomValues(new Rng(14), n);
  for (let i = 0; i < n; i += 20) x[i] = i % 40 === 0 ? NaN : -NaN;
  for (const kk of [1, 3000, 15_001, 20_000]) {
    const out = k.topK(x, kk), expected = topKReference(x, kk);
    assertSameInts(out.indices, expected.indices, `k=${kk}`);
    assertSameF32(out.values, expected.values, `k=${kk}`);
  }
  assert.deepEqual(k.topK(x, 3).indices, new Uint32Array([0, 20, 40]));
});

Deno.test("CompressionKernels.topK() breaks ties by the smaller index and ranks NaN above Inf", () => {
  const x = new Float32Array([2, -2, 0, -0, 2, Infinity, f32(0xffc00000), -Infinity, 1, f32(0x7f800001)]);
  assert.deepEqual(k.topK(x, 1).indices, new Uint32Array([6]));
  assert.deepEqual(k.topK(x, 2).indices, new Uint32Array([6, 9]));
  assert.deepEqual(k.topK(x, 4).indices, new Uint32Array([5, 6, 7, 9]));
  assert.deepEqual(k.topK(x, 6).indices, new Uint32Array([0, 1, 5, 6, 7, 9]));
  assert.deepEqual(k.topK(x, 9).indices, new Uint32Array([0, 1, 2, 4, 5, 6, 7, 8, 9]));
  const same = new Float32Array(100).fill(-1.5);
  assert.deepEqual(k.topK(same, 3).indices, new Uint32Array([0, 1, 2]));
  assert.deepEqual(k.topK(same, 3).values, new Float32Array([-1.5, -1.5, -1.5]));
  // Magnitudes that differ only in the last mantissa bit, on either side of the radix digits.
  const close = new Float32Array([f32(0x3f800400), f32(0x3f8003ff), -f32(0x3f800400), f32(0x3f800401)]);
  assert.deepEqual(k.topK(close, 2).indices, new Uint32Array([0, 3]));
});

Deno.test("CompressionKernels.topK() returns empty outputs for k = 0 and everything for k = n", () => {
  const x = new Float32Array([3, -1, 2]);
  const none = k.topK(x, 0);
  assert.deepEqual([none.indices.length, none.values.length], [0, 0]);
  const all = k.topK(x, 3);
  assert.deepEqual(all.indices, new Uint32Array([0, 1, 2]));
  assert.deepEqual(all.values, x);
  assert.deepEqual(k.topK(new Float32Array(0), 0).indices, new Uint32Array(0));
});

Deno.test("CompressionKernels.topK() returns fresh views when its scratch grows wasm memory", () => {
  scoped(() => {
    const n = 1 << 16, x = randomValues(new Rng(9), n);
    const sp = heap.alloc(4 * n), ip = heap.alloc(4 * 10), vp = heap.alloc(4 * 10);
    const src = heap.view(Float32Array, sp, n);
    src.set(x);
    const given = { indices: heap.view(Uint32Array, ip, 10), values: heap.view(Float32Array, vp, 10) };
    // Leave less free memory than the scratch needs, so the call must grow it.
    const free = heap.memory.buffer.byteLength - heap.top;
    heap.alloc(Math.max(0, free - 1024));
    const out = k.topK(src, 10, given);
    const expected = topKReference(x, 10);
    assert.ok(given.indices.length === 0, "memory should have grown, detaching the given views");
    assertSameInts(out.indices, expected.indices, "indices");
    assertSameF32(out.values, expected.values, "values");
    assert.equal(out.indices.byteOffset, ip);
  });
});

Deno.test("CompressionKernels.scatterAdd() matches the reference and accumulates duplicates in order", () => {
  for (const n of [1, 3, 17, 1000, 1_000_003]) {
    for (const where of PLACEMENTS) {
      scoped(() => {
        const rng = new Rng(10 + n);
        const count = Math.min(3 * n, 5000);
        const indices = Uint32Array.from({ length: count }, () => rng.int(0, n - 1));
        const values = randomValues(rng, count, true);
        const base = randomValues(rng, n);
        const expected = base.slice();
        scatterAddReference(expected, { indices, values });
        const dst = placed(where, base);
        k.scatterAdd(dst, { indices: placed(where, indices), values: placed(where, values) });
        assertSameF32(dst, expected, `n=${n} ${where}`);
      });
    }
  }
  // Duplicates add left to right in float32: (1e8 + 1) + -1e8 is 0, while (1 + -1e8) + 1e8 would not be.
  const dst = new Float32Array(2);
  k.scatterAdd(dst, { indices: new Uint32Array([1, 1, 1]), values: new Float32Array([1e8, 1, -1e8]) });
  assert.deepEqual(dst, new Float32Array([0, 0]));
});

Deno.test("CompressionKernels.scatterAdd() rejects an index out of range before writing anything", () => {
  for (const where of PLACEMENTS) {
    scoped(() => {
      const dst = placed(where, new Float32Array([1, 2, 3]));
      const sparse = {
        indices: placed(where, new Uint32Array([0, 2, 3, 1])),
        values: placed(where, new Float32Array([5, 5, 5, 5])),
      };
      assert.throws(() => k.scatterAdd(dst, sparse), {
        name: "RangeError",
        message: "Cannot scatter-add: indices[2] is 3 but dst has 3 elements; nothing was written",
      });
      assert.throws(() => scatterAddReference(dst, sparse), { message: /indices\[2\] is 3/ });
      assert.deepEqual(dst, new Float32Array([1, 2, 3]));
    });
  }
});

Deno.test("CompressionKernels uses arrays in wasm memory in place and allocates nothing per call", () => {
  scoped(() => {
    const n = 4096, blockSize = 256;
    const x = randomValues(new Rng(11), n);
    const sp = heap.alloc(4 * n), rp = heap.alloc(4 * n), qp = heap.alloc(n), cp = heap.alloc(4 * 16);
    const bp = heap.alloc(n / 8), dp = heap.alloc(4 * n);
    const src = heap.view(Float32Array, sp, n), residual = heap.view(Float32Array, rp, n);
    src.set(x);
    const packed = { q: heap.view(Int8Array, qp, n), scales: heap.view(Float32Array, cp, 16) };
    const signs = { bits: heap.view(Uint8Array, bp, n / 8), scales: packed.scales };
    const dst = heap.view(Float32Array, dp, n);
    const top = heap.top, bytes = heap.memory.buffer.byteLength;
    for (let step = 0; step < 3; step++) {
      assert.equal(k.quantizeInt8(src, { blockSize, ...packed }).q, packed.q);
      k.dequantizeInt8(packed, dst, { blockSize, accumulate: true });
      assert.equal(k.signCompress(src, residual, { blockSize, ...signs }).bits, signs.bits);
      k.signDecompress(signs, dst, { blockSize, accumulate: true });
      assert.equal(heap.top, top);
      assert.equal(heap.memory.buffer.byteLength, bytes);
    }
    assertSameInts(packed.q, quantizeInt8Reference(x, { blockSize }).q, "q written in place");
  });
});

Deno.test("CompressionKernels mixes arrays in and outside wasm memory in one call", () => {
  // Every array of a call in its own placement, in every combination the seed picks: staging some arrays
  // while others are used in place must not disturb either.
  const rng = new Rng(13), n = 777, blockSize = 7;
  for (let round = 0; round < 40; round++) {
    scoped(() => {
      const pick = () => rng.pick(PLACEMENTS);
      const x = randomValues(rng, n, true), e0 = randomValues(rng, n);
      const wantQ = quantizeInt8Reference(x, { blockSize });
      const sizes = int8Sizes(n, blockSize);
      const q = k.quantizeInt8(placed(pick(), x), {
        blockSize,
        q: place(pick(), Int8Array, sizes.q),
        scales: place(pick(), Float32Array, sizes.scales),
      });
      assertSameInts(q.q, wantQ.q, `round ${round} q`);
      const dst = placed(pick(), e0), wantDst = e0.slice();
      dequantizeInt8Reference(wantQ, wantDst, { blockSize, accumulate: true });
      k.dequantizeInt8({ q: placed(pick(), wantQ.q), scales: placed(pick(), wantQ.scales) }, dst, {
        blockSize,
        accumulate: true,
      });
      assertSameF32(dst, wantDst, `round ${round} dequantized`);
      const residual = placed(pick(), e0), wantResidual = e0.slice();
      const wantSign = signCompressReference(x, wantResidual, { blockSize });
      const sign = k.signCompress(placed(pick(), x), residual, {
        blockSize,
        bits: place(pick(), Uint8Array, signSizes(n, blockSize).bits),
        scales: place(pick(), Float32Array, signSizes(n, blockSize).scales),
      });
      assertSameInts(sign.bits, wantSign.bits, `round ${round} bits`);
      assertSameF32(residual, wantResidual, `round ${round} residual`);
      const top = k.topK(placed(pick(), x), 50, {
        indices: place(pick(), Uint32Array, 50),
        values: place(pick(), Float32Array, 50),
      });
      assertSameInts(top.indices, topKReference(x, 50).indices, `round ${round} top-k`);
      const sum = placed(pick(), e0), wantSum = e0.slice();
      scatterAddReference(wantSum, top);
      k.scatterAdd(sum, { indices: placed(pick(), top.indices), values: placed(pick(), top.values) });
      assertSameF32(sum, wantSum, `round ${round} scatter-add`);
    });
  }
});

Deno.test("int8Sizes() and signSizes() give the output lengths", () => {
  assert.deepEqual(int8Sizes(0, 8), { q: 0, scales: 0 });
  assert.deepEqual(int8Sizes(17, 8), { q: 17, scales: 3 });
  assert.deepEqual(signSizes(17, 8), { bits: 3, scales: 3 });
  assert.deepEqual(signSizes(16, 100), { bits: 2, scales: 1 });
  assert.throws(() => int8Sizes(-1, 8), {
    name: "RangeError",
    message: /n must be an integer >= 0, found -1/,
  });
  assert.throws(() => signSizes(8, 0), {
    name: "RangeError",
    message: /blockSize must be an integer >= 1, found 0/,
  });
});

Deno.test("CompressionKernels rejects bad arguments with messages naming expected and found", () => {
  const x = new Float32Array(12);
  const cases: [() => unknown, string, RegExp][] = [
    [
      () => k.quantizeInt8(x, { blockSize: 0 }),
      "RangeError",
      /^Cannot quantize: blockSize must be an integer >= 1, found 0$/,
    ],
    [
      () => k.quantizeInt8(x, { blockSize: 2.5 }),
      "RangeError",
      /blockSize must be an integer >= 1, found 2.5/,
    ],
    [
      () => k.quantizeInt8(x, { blockSize: "8" as unknown as number }),
      "TypeError",
      /blockSize must be a number, found string/,
    ],
    [
      () => k.quantizeInt8(x, undefined as never),
      "TypeError",
      /^Cannot quantize: expected options \{ blockSize, q\?, scales\? \}, found undefined$/,
    ],
    [
      () => k.quantizeInt8(new Float64Array(3) as never, { blockSize: 4 }),
      "TypeError",
      /^Cannot quantize: src must be a Float32Array, found Float64Array$/,
    ],
    [
      () => k.quantizeInt8(x, { blockSize: 4, q: new Int8Array(11) }),
      "RangeError",
      /^Cannot quantize: q has 11 elements but src has 12$/,
    ],
    [
      () => k.quantizeInt8(x, { blockSize: 5, scales: new Float32Array(2) }),
      "RangeError",
      /^Cannot quantize: scales has 2 elements but src needs 3 \(12 elements in blocks of 5\)$/,
    ],
    [
      () => k.quantizeInt8(x, { blockSize: 4, q: new Uint8Array(12) as never }),
      "TypeError",
      /^Cannot quantize: q must be an Int8Array, found Uint8Array$/,
    ],
    [
      () => k.dequantizeInt8({ q: new Int8Array(12), scales: new Float32Array(2) }, x, { blockSize: 4 }),
      "RangeError",
      /^Cannot dequantize: scales has 2 elements but dst needs 3 \(12 elements in blocks of 4\)$/,
    ],
    [
      () => k.dequantizeInt8({ q: new Int8Array(10), scales: new Float32Array(3) }, x, { blockSize: 4 }),
      "RangeError",
      /^Cannot dequantize: q has 10 elements but dst has 12$/,
    ],
    [
      () => k.signCompress(x, new Float32Array(10), { blockSize: 4 }),
      "RangeError",
      /^Cannot sign-compress: residual has 10 elements but src has 12$/,
    ],
    [
      () => k.signCompress(x, new Float32Array(12), { blockSize: 4, bits: new Uint8Array(1) }),
      "RangeError",
      /^Cannot sign-compress: bits has 1 elements but src needs 2 \(12 bits\)$/,
    ],
    [
      () => k.signCompress(x, x, { blockSize: 4 }),
      "RangeError",
      /^Cannot sign-compress: src and residual share memory/,
    ],
    [
      () => k.signDecompress({ bits: new Uint8Array(2), scales: new Float32Array(1) }, x, { blockSize: 0 }),
      "RangeError",
      /^Cannot sign-decompress: blockSize must be an integer >= 1, found 0$/,
    ],
    [
      () => k.signDecompress({ bits: new Uint8Array(3), scales: new Float32Array(1) }, x, { blockSize: 12 }),
      "RangeError",
      /^Cannot sign-decompress: bits has 3 elements but dst needs 2 \(12 bits\)$/,
    ],
    [
      () => k.topK(x, 13),
      "RangeError",
      /^Cannot select top-k: k must be an integer from 0 to 12 \(the length of src\), found 13$/,
    ],
    [() => k.topK(x, -1), "RangeError", /found -1$/],
    [
      () => k.topK(x, 2, { indices: new Uint32Array(3) }),
      "RangeError",
      /^Cannot select top-k: indices has 3 elements but k is 2$/,
    ],
    [
      () => k.topK(x, 2, { values: new Float32Array(x.buffer, 0, 2) }),
      "RangeError",
      /src and values share memory/,
    ],
    [
      () => k.scatterAdd(x, { indices: new Uint32Array(2), values: new Float32Array(3) }),
      "RangeError",
      /^Cannot scatter-add: values has 3 elements but indices has 2$/,
    ],
    [
      () => k.scatterAdd(x, { indices: new Int32Array(2) as never, values: new Float32Array(2) }),
      "TypeError",
      /^Cannot scatter-add: indices must be a Uint32Array, found Int32Array$/,
    ],
  ];
  for (const [run, name, message] of cases) assert.throws(run, { name, message });
});

Deno.test("CompressionKernels rejects a view of wasm memory detached by growth", () => {
  scoped(() => {
    const stale = heap.view(Float32Array, heap.alloc(16), 4);
    heap.alloc(heap.memory.buffer.byteLength); // grows memory, detaching `stale`
    assert.throws(() => k.quantizeInt8(stale, { blockSize: 4 }), {
      name: "TypeError",
      message: /^Cannot quantize: src is a view of a detached buffer/,
    });
  });
});
