/**
 * DistributedOptimizer, the callbacks and broadcastVariables on real ranks (threads over the in-process
 * transport, each with its own tfjs): every optimizer kind against the same optimizer fed the exact
 * average, every hook against what it produced, `model.fit()` with every callback, and models that differ
 * across ranks.
 */
import assert from "node:assert/strict";
import { spawnThreads } from "../../backend/threads.ts";

const FIXTURE = new URL("./_fixtures/tfjs_rank.ts", import.meta.url);
const run = (worldSize: number, scenario: string): Promise<Record<string, unknown>[]> =>
  spawnThreads(FIXTURE, { worldSize, args: { scenario }, timeoutMs: 120_000 }) as Promise<
    Record<string, unknown>[]
  >;

interface OptimizerResult {
  difference?: string;
  state?: string;
  iterations: number;
  buckets: number[][];
  checksum: number;
  skipped: string[];
}

for (const ranks of [2, 4]) {
  Deno.test(`${ranks} ranks: every optimizer kind lands on the bits of the same optimizer fed the exact average (overlap or not, 1 or 2 passes, missing gradients as zeros or skipped)`, async () => {
    const results = await run(ranks, "optimizers") as Record<string, OptimizerResult>[];
    const configs = Object.keys(results[0]);
    assert.equal(configs.length, 9 * 2 * 2 * 2);
    for (const [rank, r] of results.entries()) {
      for (const [config, o] of Object.entries(r)) {
        assert.equal(o.difference, undefined, `rank ${rank}, ${config}: ${o.difference}`);
        assert.equal(o.state, undefined, `rank ${rank}, ${config}: the optimizer state differs: ${o.state}`);
        assert.equal(o.iterations, 3, config);
        assert.deepEqual(o.buckets, [[3, 2], [1, 0]], config);
        assert.equal(
          o.checksum,
          results[0][config].checksum,
          `rank ${rank}, ${config}: weights differ from rank 0's`,
        );
        // The last step had no gradient for v3 anywhere: "skip" left it alone, "zero" applied zeros.
        assert.deepEqual(
          o.skipped.map((n) => n.slice(n.indexOf("/") + 1)),
          config.endsWith("skip") ? ["v3"] : [],
        );
      }
    }
    // Overlap changes when updates land, not what they are.
    for (const config of configs.filter((c) => c.includes("overlap=true"))) {
      assert.equal(
        results[0][config].checksum,
        results[0][config.replace("overlap=true", "overlap=false")].checksum,
      );
    }
  });
}

interface HookResult {
  difference?: string;
  worst: number;
  codecs: string[];
  checksum: number;
  buckets: number;
}

for (const ranks of [2, 4]) {
  Deno.test(`${ranks} ranks: every hook through DistributedOptimizer: the optimizer applies exactly the hook's averages, the same on every rank`, async () => {
    const results = await run(ranks, "hooks") as Record<string, HookResult>[];
    // Bounds on |hook's average − exact average| for |g| ≤ 1: float32 rounding; half an ulp of the narrow
    // type per cast and addition; half an int8 step of each contribution and of the result.
    const bounds: Record<string, number> = {
      allreduce: 1e-6,
      fp16: ranks * 2 ** -11 + 2 ** -11,
      bf16: ranks * 2 ** -8 + 2 ** -8,
      int8: 2 / 127,
    };
    const codecs: Record<string, string[]> = {
      allreduce: [],
      fp16: [],
      bf16: [],
      int8: ["int8"],
      "1bit": ["sign"],
      topk: ["topk"],
      powersgd: ["powersgd"],
    };
    for (const [rank, r] of results.entries()) {
      assert.deepEqual(Object.keys(r), Object.keys(codecs));
      for (const [name, h] of Object.entries(r)) {
        assert.equal(h.difference, undefined, `rank ${rank}, ${name}: ${h.difference}`);
        assert.equal(
          h.checksum,
          results[0][name].checksum,
          `rank ${rank}, ${name}: weights differ from rank 0's`,
        );
        assert.deepEqual(h.codecs, codecs[name], name);
        assert.ok(h.buckets >= 2, `${name}: ${h.buckets} buckets`);
        if (name in bounds) {
          assert.ok(h.worst <= bounds[name], `${name}: off the exact average by ${h.worst}`);
        }
      }
    }
  });
}

interface FitResult {
  startChecksum: number;
  checksum: number;
  history: number[];
  local: number[];
  rates: number[];
  stepsPerEpoch: number;
  iterations: number;
}

for (const ranks of [2, 3, 4]) {
  Deno.test(`${ranks} ranks: model.fit() with broadcastWeights, learningRateWarmup and metricAverage: same weights, averaged logs, the warmup's rates`, async () => {
    const results = await run(ranks, "fit") as unknown as FitResult[];
    // Every rank started from its own weights and ended with rank 0's trajectory's.
    assert.equal(new Set(results.map((r) => r.startChecksum)).size, ranks);
    for (const r of results) assert.equal(r.checksum, results[0].checksum);
    for (const r of results) assert.equal(r.iterations, 3 * r.stepsPerEpoch);
    // The history is the mean over ranks of each rank's own epoch loss, the same on every rank.
    for (let e = 0; e < 3; e++) {
      const mean = results.reduce((s, r) => s + r.local[e], 0) / ranks;
      for (const r of results) {
        assert.equal(r.history[e], results[0].history[e]);
        assert.ok(
          Math.abs(r.history[e] - mean) <= 1e-6 * Math.abs(mean),
          `epoch ${e}: ${r.history[e]} vs ${mean}`,
        );
      }
    }
    assert.notEqual(
      results[0].local[0],
      results[1].local[0],
      "the ranks' own losses differ (their shards do)",
    );
    // η = 0.05 rises linearly over 2 epochs, batch by batch, to η × size, and stays there.
    const steps = results[0].stepsPerEpoch;
    const expected = Array.from({ length: 3 * steps }, (_, i) => {
      const at = i / steps;
      return at >= 2 ? 0.05 * ranks : 0.05 * (1 + (ranks - 1) * at / 2);
    });
    for (const r of results) {
      assert.equal(r.rates.length, expected.length);
      r.rates.forEach((v, i) =>
        assert.ok(Math.abs(v - expected[i]) < 1e-12, `batch ${i}: ${v} vs ${expected[i]}`)
      );
    }
  });
}

Deno.test("models that differ across ranks fail broadcastWeights on every rank, naming each rank's variables", async () => {
  const results = await run(3, "mismatch-broadcast") as { caught: string; mismatch?: boolean }[];
  for (const r of results) {
    assert.equal(r.mismatch, true, r.caught);
    assert.match(
      r.caught,
      /^MismatchError: Cannot broadcast variables from rank 0: the ranks hold different variables: rank 0 has 4 variables \(float32\[3,4\] float32\[4\] float32\[4,1\] float32\[1\]\); rank 1 has 4 variables \(float32\[3,6\] float32\[6\] float32\[6,1\] float32\[1\]\)$/,
    );
  }
});

Deno.test("models that differ across ranks, without broadcastWeights, fail the first bucket's all-reduce, naming both calls", async () => {
  const results = await run(3, "mismatch-buckets") as { caught: string; mismatch?: boolean }[];
  for (const r of results) assert.notEqual(r.caught, "no error");
  const detail = results.find((r) => r.mismatch);
  assert.ok(detail, results.map((r) => r.caught).join("\n"));
  // The layouts: 21 elements on ranks 0 and 2 (3·4 + 4 + 4 + 1), 31 on rank 1 (3·6 + 6 + 6 + 1).
  assert.match(
    detail.caught,
    /Mismatched calls: rank \d called allReduce\((21|31) × float32.* but rank \d called allReduce\((21|31) × float32/,
  );
  assert.match(detail.caught, /21 × float32/);
  assert.match(detail.caught, /31 × float32/);
});
