import assert from "node:assert/strict";
import * as model from "../../sim/cost_model.ts";
import {
  type CostConstants,
  type CostFunction,
  DEFAULT_CONSTANTS,
  DEFAULT_INPROC_CONSTANTS,
  DEFAULT_SHM_CONSTANTS,
  DEFAULT_TCP_CONSTANTS,
  disseminationBarrierCost,
  doubleTreeAllReduceCost,
  fitConstants,
  halvingDoublingAllReduceCost,
  psAllReduceCost,
  ringAllReduceCost,
  treeAllReduceCost,
} from "../../sim/cost_model.ts";
import { Rng } from "../collectives/_harness.ts";

const UNIT: CostConstants = { alpha: 1, beta: 1, gamma: 1 };
const SIZES = [1, 2, 3, 4, 5, 8, 16, 33, 64, 1000];
const BYTES = [0, 1, 7, 64, 1000, 4096, 65536, 1e6, 1 << 24, 1 << 30];
const CHUNKS = [64, 65536, Infinity];

function* everyModel(): Generator<
  [string, (b: number, n: number, chunk: number, k: CostConstants) => number]
> {
  // Every cost function the module exports (the model names no algorithms; collectives/ maps names to these).
  for (const [name, fn] of Object.entries(model)) {
    if (!name.endsWith("Cost") || typeof fn !== "function") continue;
    const cost = fn as CostFunction;
    yield [name, (bytes, size, chunkBytes, k) => cost({ bytes, size, chunkBytes }, k)];
  }
}

Deno.test("every cost function is non-decreasing in bytes", () => {
  for (const [name, cost] of everyModel()) {
    for (const k of [UNIT, ...Object.values(DEFAULT_CONSTANTS)]) {
      for (const n of SIZES) {
        for (const chunk of CHUNKS) {
          let prev = -Infinity;
          for (const b of BYTES) {
            const t = cost(b, n, chunk, k);
            assert.ok(Number.isFinite(t) && t >= 0, `${name} n=${n} m=${b}: ${t}`);
            assert.ok(t >= prev, `${name} n=${n} chunk=${chunk}: ${t} at ${b} bytes < ${prev} before`);
            prev = t;
          }
        }
      }
    }
  }
});

Deno.test("every cost function is 0 on one rank, and every data collective is 0 for 0 bytes", () => {
  for (const [name, cost] of everyModel()) {
    for (const b of BYTES) assert.equal(cost(b, 1, 64, UNIT), 0, name);
    if (!name.endsWith("BarrierCost")) { for (const n of SIZES) assert.equal(cost(0, n, 64, UNIT), 0, name); }
  }
});

Deno.test("ringAllReduceCost() is 2(n−1)kα + 2(n−1)/n·mβ + (n−1)/n·mγ", () => {
  const k = { alpha: 1e-5, beta: 1e-9, gamma: 1e-10 };
  // m = 8 MiB on 8 ranks: 1 MiB segments, 4 chunks of 256 KiB each.
  const m = 8 << 20;
  const want = 2 * 7 * 4 * 1e-5 + 2 * (7 / 8) * m * 1e-9 + (7 / 8) * m * 1e-10;
  assert.ok(Math.abs(ringAllReduceCost({ size: 8, bytes: m, chunkBytes: 256 << 10 }, k) - want) < 1e-15);
});

Deno.test("psAllReduceCost() with n servers equals the ring, with fewer it costs more", () => {
  for (const n of [2, 5, 8]) {
    for (const m of [1000, 1 << 20]) {
      const ring = ringAllReduceCost({ size: n, bytes: m }, DEFAULT_TCP_CONSTANTS);
      const ps = psAllReduceCost({ size: n, bytes: m }, DEFAULT_TCP_CONSTANTS);
      assert.ok(Math.abs(ps - ring) <= 1e-12 * ring, `n=${n} m=${m}`);
      assert.ok(psAllReduceCost({ size: n, bytes: m, servers: 1 }, DEFAULT_TCP_CONSTANTS) > ring);
    }
  }
});

Deno.test("halvingDoublingAllReduceCost() charges the fold only when n is not a power of two", () => {
  const m = 1 << 20;
  const p8 = halvingDoublingAllReduceCost({ size: 8, bytes: m, chunkBytes: Infinity }, UNIT);
  assert.equal(p8, 2 * 3 + 2 * (7 / 8) * m + (7 / 8) * m);
  const p9 = halvingDoublingAllReduceCost({ size: 9, bytes: m, chunkBytes: Infinity }, UNIT);
  assert.equal(p9, p8 + 2 + 2 * m + m);
});

Deno.test("doubleTreeAllReduceCost() approaches half the tree's bandwidth term for large buffers", () => {
  const k = { alpha: 0, beta: 1, gamma: 0 };
  const m = 1 << 30;
  const tree = treeAllReduceCost({ size: 64, bytes: m, chunkBytes: 1 << 16 }, k);
  const dtree = doubleTreeAllReduceCost({ size: 64, bytes: m, chunkBytes: 1 << 16 }, k);
  assert.ok(Math.abs(tree / m - 3) < 0.01 && Math.abs(dtree / m - 2) < 0.01, `${tree / m} ${dtree / m}`);
});

Deno.test("tree costs: one chunk climbs and comes back at 2 per level where a parent has two children", () => {
  const k = { alpha: 0, beta: 1, gamma: 0 };
  const m = 1 << 20;
  const one = (size: number): number => treeAllReduceCost({ size, bytes: m, chunkBytes: Infinity }, k) / m;
  // n = 2: up 1, down 1; n = 3: rank 2 has one child (1 + 1 each way); n = 4: rank 2 takes ranks 1 and 3,
  // then the root's one child (2 + 1); n = 8: 2 + 2 + 1.
  assert.deepEqual([one(2), one(3), one(4), one(8)], [2, 4, 6, 10]);
  // The double tree's halves climb at once on different links: half the bytes, the same levels.
  const two = doubleTreeAllReduceCost({ size: 4, bytes: m, chunkBytes: Infinity }, k) / m;
  assert.equal(two, 3);
});

Deno.test("disseminationBarrierCost() is ⌈log2 n⌉ latencies", () => {
  for (const [n, rounds] of [[1, 0], [2, 1], [3, 2], [8, 3], [9, 4]]) {
    assert.equal(disseminationBarrierCost({ size: n, bytes: 0 }, UNIT), rounds);
  }
});

Deno.test("fitConstants() recovers α and β from noisy synthetic ping-pongs", () => {
  const rng = new Rng(42);
  for (const truth of [DEFAULT_TCP_CONSTANTS, DEFAULT_SHM_CONSTANTS, DEFAULT_INPROC_CONSTANTS]) {
    const samples = [];
    for (let bytes = 1; bytes <= 1 << 24; bytes *= 4) {
      for (let rep = 0; rep < 5; rep++) {
        const exact = truth.alpha + truth.beta * bytes;
        samples.push({ bytes, seconds: exact * (1 + (rng.next() - 0.5) * 1e-3) });
      }
    }
    const { alpha, beta } = fitConstants(samples);
    assert.ok(Math.abs(beta - truth.beta) / truth.beta < 1e-3, `beta ${beta} vs ${truth.beta}`);
    assert.ok(Math.abs(alpha - truth.alpha) / truth.alpha < 0.05, `alpha ${alpha} vs ${truth.alpha}`);
  }
});

Deno.test("fitConstants() is exact on exact samples and clamps a negative intercept to 0", () => {
  const exact = fitConstants([0, 100, 1000].map((bytes) => ({ bytes, seconds: 3e-6 + 2e-9 * bytes })));
  assert.ok(Math.abs(exact.alpha - 3e-6) < 1e-15 && Math.abs(exact.beta - 2e-9) < 1e-18);
  const clamped = fitConstants([{ bytes: 100, seconds: 0.5e-6 }, { bytes: 200, seconds: 2e-6 }]);
  assert.equal(clamped.alpha, 0);
  assert.ok(clamped.beta > 0);
});

Deno.test("fitConstants() rejects samples of fewer than two sizes", () => {
  assert.throws(() => fitConstants([]), RangeError);
  assert.throws(() => fitConstants([{ bytes: 8, seconds: 1 }, { bytes: 8, seconds: 2 }]), {
    name: "RangeError",
    message: /expected samples of at least two sizes/,
  });
});

Deno.test("fitConstants() keeps a latency of microseconds beside samples of milliseconds, the rate from the large ones", () => {
  // A shaped link's ping-pongs (bench/network.ts at 1 Gb/s): plain least squares put α below 0 here.
  const samples = [[0, 58.5e-6], [1024, 58.3e-6], [16384, 120.6e-6], [65536, 536.5e-6], [262144, 2244.7e-6], [
    1048576,
    9144.5e-6,
  ], [4194304, 36857.3e-6]].map(([bytes, seconds]) => ({ bytes, seconds }));
  const { alpha, beta } = fitConstants(samples);
  assert.ok(alpha > 30e-6 && alpha < 80e-6, `alpha ${alpha}`);
  assert.ok(1 / beta > 100e6 && 1 / beta < 150e6, `bandwidth ${1 / beta}`);
  for (const s of samples.slice(3)) { // from 64 KiB: below, the token bucket lets a message out faster than the rate
    const predicted = alpha + beta * s.bytes;
    assert.ok(Math.abs(predicted - s.seconds) / s.seconds < 0.2, `${s.bytes}: ${predicted} vs ${s.seconds}`);
  }
});

Deno.test("the flat algorithms' costs share a host's link among its ranks: halving-doubling, co-located ps, direct", () => {
  const k = { alpha: 50e-6, beta: 8e-8, gamma: 3e-10 };
  const intra = { alpha: 5e-6, beta: 1e-10, gamma: 3e-10 };
  const flat = { size: 8, bytes: 4 << 20 };
  const hosts = [0, 0, 1, 1, 2, 2, 3, 3];
  for (
    const [name, fn] of [
      ["halving-doubling", model.halvingDoublingAllReduceCost],
      ["ps", model.psAllReduceCost],
      ["direct", model.directAllReduceCost],
    ] as const
  ) {
    const alone = fn(flat, k), shared = fn({ ...flat, hosts, intra }, k);
    assert.ok(shared > 1.4 * alone, `${name}: ${shared} vs ${alone}`);
    // One rank per host: nothing shared.
    assert.equal(fn({ ...flat, hosts: [0, 1, 2, 3, 4, 5, 6, 7], intra }, k), alone, name);
  }
  // The ring crosses each host's link once: unchanged by hosts.
  assert.equal(model.ringAllReduceCost({ ...flat, hosts, intra }, k), model.ringAllReduceCost(flat, k));
  // Halving-doubling on hosts of 2: the mask-1 rounds stay within the host (shm), the others cross with 2
  // ranks on each link.
  const hd = model.halvingDoublingAllReduceCost({ ...flat, hosts, intra }, k);
  const m = 4 << 20;
  const expected = [m / 2, m / 4].reduce(
    (t, b) => t + 2 * k.alpha * Math.ceil(b / (256 * 1024)) + 2 * b * k.beta * 2 + b * k.gamma,
    0,
  ) +
    (2 * intra.alpha * Math.ceil((m / 8) / (256 * 1024)) + 2 * (m / 8) * intra.beta + (m / 8) * intra.gamma);
  assert.ok(Math.abs(hd - expected) / expected < 1e-12, `${hd} vs ${expected}`);
});
