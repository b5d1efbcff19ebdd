/**
 * The optimizer kernels against their TypeScript reference, bit for bit, over random values (specials
 * included) at lengths around the SIMD widths and placements in and out of wasm memory; the step of a
 * shard against the same elements of the whole step; torch's values for a few steps; bad arguments.
 */
import assert from "node:assert/strict";
import { optimizerKernels } from "../../wasm/kernels.ts";
import * as reference from "../../wasm/optim_reference.ts";
import type { AdamOptions, SgdOptions } from "../../wasm/optim.ts";
import { Rng } from "../_util/rng.ts";
import { assertSameBits, fillRandom, type Placement, seedOf, tensors } from "../_util/tensors.ts";

const k = await optimizerKernels();
const LENGTHS = [0, 1, 3, 4, 15, 16, 17, 100_003];
const PLACEMENTS: readonly Placement[] = ["plain", "offset", "wasm"];

function scoped(fn: () => void): void {
  const mark = k.heap.top;
  try {
    fn();
  } finally {
    k.heap.reset(mark);
  }
}

/** Random float32 arrays; `positive` ones (Adam's v) take |x|. */
function arrays(
  label: string,
  n: number,
  count: number,
  placement: Placement,
  positive: number[] = [],
): Float32Array[] {
  const rng = new Rng(seedOf(label, n, placement));
  const out = tensors("float32", n, count, placement, k.heap) as Float32Array[];
  out.forEach((a, i) => {
    fillRandom(rng, "float32", a);
    if (positive.includes(i)) { for (let j = 0; j < n; j++) a[j] = Math.abs(a[j]); }
  });
  return out;
}

const SGD_CASES: readonly Omit<SgdOptions, "buffer">[] = [
  { lr: 0.1 },
  { lr: 0.01, weightDecay: 1e-4 },
  { lr: 0.05, momentum: 0.9, first: true },
  { lr: 0.05, momentum: 0.9, dampening: 0.1, weightDecay: 0.01 },
  { lr: 0.05, momentum: 0.9, nesterov: true, weightDecay: 0.01 },
];

const ADAM_CASES: readonly Omit<AdamOptions, "m" | "v">[] = [
  { step: 1 },
  { step: 7, lr: 0.01, beta1: 0.8, beta2: 0.99, eps: 1e-6 },
  { step: 3, lr: 0.001, weightDecay: 0.01 },
  { step: 1000, lr: 0.001, weightDecay: 0.1, decoupled: true },
];

Deno.test("OptimizerKernels.sgd() equals the reference bit for bit at every length and placement", () => {
  for (const n of LENGTHS) {
    for (const placement of n > 1000 ? ["wasm", "plain"] as const : PLACEMENTS) {
      for (const [c, options] of SGD_CASES.entries()) {
        scoped(() => {
          const [p, g, m] = arrays(`sgd${c}`, n, 3, placement);
          const [p2, m2] = [p.slice(), m.slice()];
          k.sgd(p, g, { ...options, buffer: m });
          reference.sgd(p2, g, { ...options, buffer: m2 });
          const where = `sgd case ${c}, n ${n}, ${placement}`;
          assertSameBits(p, p2, "float32", where);
          assertSameBits(m, m2, "float32", `${where}, buffer`);
        });
      }
    }
  }
});

Deno.test("OptimizerKernels.adam() equals the reference bit for bit at every length and placement", () => {
  for (const n of LENGTHS) {
    for (const placement of n > 1000 ? ["wasm", "plain"] as const : PLACEMENTS) {
      for (const [c, options] of ADAM_CASES.entries()) {
        scoped(() => {
          const [p, g, m, v] = arrays(`adam${c}`, n, 4, placement, [3]);
          const [p2, m2, v2] = [p.slice(), m.slice(), v.slice()];
          k.adam(p, g, { ...options, m, v });
          reference.adam(p2, g, { ...options, m: m2, v: v2 });
          const where = `adam case ${c}, n ${n}, ${placement}`;
          assertSameBits(p, p2, "float32", where);
          assertSameBits(m, m2, "float32", `${where}, m`);
          assertSameBits(v, v2, "float32", `${where}, v`);
        });
      }
    }
  }
});

Deno.test("the step of any shard is the same elements of the step of the whole parameter", () => {
  const n = 1001;
  const [p, g] = arrays("shard", n, 2, "plain");
  const whole = { p: p.slice(), m: new Float32Array(n), v: new Float32Array(n) };
  const cuts = [0, 1, 333, 334, 1000, 1001];
  const shards = cuts.slice(1).map((end, i) => ({
    start: cuts[i],
    p: p.slice(cuts[i], end),
    m: new Float32Array(end - cuts[i]),
    v: new Float32Array(end - cuts[i]),
  }));
  for (let step = 1; step <= 3; step++) {
    k.adam(whole.p, g, { m: whole.m, v: whole.v, step, lr: 0.01, weightDecay: 0.1, decoupled: true });
    for (const s of shards) {
      k.adam(s.p, g.subarray(s.start, s.start + s.p.length), {
        m: s.m,
        v: s.v,
        step,
        lr: 0.01,
        weightDecay: 0.1,
        decoupled: true,
      });
    }
  }
  for (const s of shards) {
    assertSameBits(s.p, whole.p.subarray(s.start, s.start + s.p.length), "float32", `shard at ${s.start}`);
  }
});

Deno.test("three steps match torch.optim's values (Adam, AdamW, SGD with Nesterov momentum)", () => {
  // torch 2.13 (CPU, float32, foreach=False), p = [1, -2, 0.5], g_t = [0.1, -0.2, 0.3] · t for t = 1, 2, 3:
  // torch.optim.Adam(lr=0.1, weight_decay=0.01), AdamW(lr=0.1, weight_decay=0.1),
  // SGD(lr=0.1, momentum=0.9, nesterov=True, weight_decay=0.01); the values are torch's float32 results
  // printed as Python floats, checked here to 1e-6 (the bits are the reference's, checked above).
  const torch = {
    adam: [0.7066100835800171, -1.7066588401794434, 0.20747359097003937],
    adamw: [0.6809358596801758, -1.6512348651885986, 0.19578635692596436],
    sgd: [0.8465499877929688, -1.6930999755859375, 0.05973779037594795],
  };
  const run = (kind: "adam" | "adamw" | "sgd"): Float32Array => {
    const p = new Float32Array([1, -2, 0.5]);
    const m = new Float32Array(3), v = new Float32Array(3);
    for (let t = 1; t <= 3; t++) {
      const g = new Float32Array([0.1 * t, -0.2 * t, 0.3 * t]);
      if (kind === "sgd") {
        k.sgd(p, g, { lr: 0.1, momentum: 0.9, nesterov: true, weightDecay: 0.01, buffer: m, first: t === 1 });
      } else {
        k.adam(
          p,
          g,
          kind === "adam"
            ? { m, v, step: t, lr: 0.1, weightDecay: 0.01 }
            : { m, v, step: t, lr: 0.1, weightDecay: 0.1, decoupled: true },
        );
      }
    }
    return p;
  };
  for (const kind of ["adam", "adamw", "sgd"] as const) {
    const p = run(kind);
    torch[kind].forEach((x, i) => assert.ok(Math.abs(p[i] - x) < 1e-6, `${kind}[${i}]: ${p[i]}, torch ${x}`));
  }
});

Deno.test("bad optimizer arguments are refused naming what was expected", () => {
  const p = new Float32Array(4);
  assert.throws(
    () => k.sgd(p, new Float32Array(3), { lr: 0.1 }),
    /grad must have 4 elements like the parameter, found 3/,
  );
  assert.throws(
    () => k.sgd(p, new Float64Array(4) as never, { lr: 0.1 }),
    /grad must be a Float32Array, found Float64Array/,
  );
  assert.throws(
    () => k.sgd(p, p.slice(), { lr: -1 }),
    /lr must be a finite number in 0\.\.Infinity, found -1/,
  );
  assert.throws(
    () => k.sgd(p, p.slice(), { lr: 0.1, momentum: 0.9 }),
    /buffer must be a Float32Array, found none/,
  );
  assert.throws(() => k.sgd(p, p.slice(), { lr: 0.1, nesterov: true }), /nesterov needs momentum > 0/);
  assert.throws(() => k.sgd(p, p, { lr: 0.1 }), /param and grad share memory/);
  const m = new Float32Array(4), v = new Float32Array(4);
  assert.throws(() => k.adam(p, p.slice(), { m, v, step: 0 }), /step must be an integer >= 1, found 0/);
  assert.throws(
    () => k.adam(p, p.slice(), { m, v, step: 1, beta2: 1 }),
    /beta2 must be a finite number in 0\.\.1 \(exclusive\), found 1/,
  );
  assert.throws(() => k.adam(p, p.slice(), { m, v: m, step: 1 }), /m and v share memory/);
  assert.throws(() => k.adam(p, p.slice(), { m, v: new Float32Array(2), step: 1 }), /v must have 4 elements/);
});
