/**
 * ShardedDataParallel on real ranks (threads over the in-process transport): every stage against a 1-rank
 * reference over several steps, bit for bit (the gradients' averages are exact, and the optimizer is
 * element-wise); uneven shards; the hierarchy (hpZ); the lossy codecs within derived bounds; bytes on the
 * wire; memory held against the ZeRO formulas; checkpoints resharded from 2 ranks to 1 and 4; sub-groups;
 * and misuse.
 */
import assert from "node:assert/strict";
import { spawnThreads } from "../../backend/threads.ts";
import { evenCounts, layoutLayer, topologyOf } from "../../zero/_layout.ts";
import type { ZeroState } from "../../zero/mod.ts";
import { LAYERS, LENGTHS, type Scenario } from "./_fixtures/zero_rank.ts";

const FIXTURE = new URL("./_fixtures/zero_rank.ts", import.meta.url);
// deno-lint-ignore no-explicit-any
type Result = Record<string, any>;
const run = (worldSize: number, args: Scenario): Promise<Result[]> =>
  spawnThreads(FIXTURE, { worldSize, args, timeoutMs: 60_000 }) as Promise<Result[]>;

const ADAM = { type: "adam", lr: 0.01 } as const;
const ADAMW = { type: "adamw", lr: 0.01, weightDecay: 0.1 } as const;
const SGD = { type: "sgd", lr: 0.05, momentum: 0.9, nesterov: true, weightDecay: 1e-3 } as const;
const PSI = LENGTHS.reduce((a, b) => a + b, 0);

Deno.test("layouts: even cuts, the first parts longer; hosts × local blocks and pieces", () => {
  assert.deepEqual(evenCounts(10, 4), [3, 3, 2, 2]);
  assert.deepEqual(evenCounts(1, 4), [1, 0, 0, 0]);
  const flat = topologyOf(2, 4, undefined);
  const layer = layoutLayer(0, [0, 1], [6, 5], flat);
  assert.deepEqual([layer.count, layer.offsets, layer.pieces, layer.shard], [11, [0, 6], [[3, 3, 3, 2]], {
    start: 6,
    count: 3,
  }]);
  // 2 hosts × 2: rank 3 is host 1, local 1: block 1 (elements 6..10), its piece 1 (elements 9, 10).
  const hier = topologyOf(3, 4, [0, 0, 1, 1]);
  assert.deepEqual([hier.hosts, hier.local, hier.host, hier.localRank], [2, 2, 1, 1]);
  const h = layoutLayer(0, [0, 1], [6, 5], hier);
  assert.deepEqual([h.blocks, h.pieces, h.block, h.shard], [
    [6, 5],
    [[3, 3], [3, 2]],
    { start: 6, count: 5 },
    {
      start: 9,
      count: 2,
    },
  ]);
  // Hosts need not be contiguous ranks; they must be of one size.
  assert.deepEqual(topologyOf(1, 4, [5, 7, 5, 7]).of, [
    { host: 0, localRank: 0 },
    { host: 1, localRank: 0 },
    { host: 0, localRank: 1 },
    { host: 1, localRank: 1 },
  ]);
  assert.throws(
    () => topologyOf(0, 3, [0, 0, 1]),
    /same number of ranks on every host, found host 0: 2, host 1: 1/,
  );
});

for (const stage of [1, 2, 3] as const) {
  for (
    const [name, optimizer, sizes] of [["Adam", ADAM, [2, 4]], ["AdamW", ADAMW, [4]], ["SGD", SGD, [
      4,
    ]]] as const
  ) {
    Deno.test(`stage ${stage} with ${name} equals the 1-rank reference bit for bit on ${sizes.join(" and ")} ranks`, async () => {
      for (const size of sizes) {
        const results = await run(size, { scenario: "exact", options: { stage, optimizer }, steps: 3 });
        for (const [rank, r] of results.entries()) {
          assert.deepEqual(r.diffs, [null, null, null], `${size} ranks, rank ${rank}`);
        }
        // Uneven shards: each layer cut as evenly as can be.
        assert.deepEqual(results.map((r) => r.layers[0].shardCount), evenCounts(1041, size));
      }
    });
  }
}

Deno.test("prefetching two layers ahead, default layers, and a tiny reduceBucketMb still equal the reference", async () => {
  for (
    const options of [
      { stage: 3, prefetch: 2 },
      { stage: 3, layers: undefined, bucketMb: 0.001 },
      // Every gather of the backward pass waits for the reduce-scatter before it.
      { stage: 2, reduceBucketMb: 0.0001 },
      { stage: 3, reduceBucketMb: 0.0001 },
    ] as const
  ) {
    const results = await run(2, { scenario: "exact", options, steps: 2 });
    for (const r of results) assert.deepEqual(r.diffs, [null, null], JSON.stringify(options));
  }
});

Deno.test("hpZ: 2 hosts × 2 ranks, every stage equals the reference bit for bit", async () => {
  for (const stage of [1, 2, 3] as const) {
    const results = await run(4, {
      scenario: "exact",
      options: { stage, optimizer: ADAM, hierarchical: { hosts: [0, 0, 1, 1] } },
      steps: 3,
    });
    for (const r of results) assert.deepEqual(r.diffs, [null, null, null], `stage ${stage}`);
    // Stage 3 keeps the host's secondary shard: half of each layer on each rank, beside its quarter.
    if (stage === 3) {
      assert.equal(results[0].memory.params, 4 * (521 + 35003 + 259) + 4 * (261 + 17502 + 130));
    }
  }
});

Deno.test("memory held per rank follows ZeRO's formulas: 4Ψ+4Ψ+8Ψ/n, 4Ψ+12Ψ/n, 16Ψ/n (fp32 Adam)", async () => {
  const shard = 261 + 17502 + 130; // rank 0's shard of the three layers over 4 ranks
  const expected = {
    1: { params: 4 * PSI, grads: 4 * PSI, optimizer: 8 * shard },
    2: { params: 4 * PSI, grads: 4 * shard, optimizer: 8 * shard },
    3: { params: 4 * shard, grads: 4 * shard, optimizer: 8 * shard },
  };
  for (const stage of [1, 2, 3] as const) {
    const [r0] = await run(4, { scenario: "exact", options: { stage, optimizer: ADAM }, steps: 1 });
    const { params, grads, optimizer, buffers } = r0.memory;
    assert.deepEqual({ params, grads, optimizer }, expected[stage], `stage ${stage}`);
    // Stage 1 needs no reused buffers; 2 and 3 at most one of each layer's gradient and parameters.
    if (stage === 1) assert.equal(buffers, 0);
    else assert.ok(buffers <= 2 * 4 * PSI, `stage ${stage}: buffers ${buffers}`);
  }
});

Deno.test("bytes on the wire per step: stage 3 ≈ 1.5× stage 1-2; int8 weights and gradients cut them", async () => {
  const bytes = async (options: Scenario["options"]): Promise<number> =>
    (await run(4, { scenario: "bytes", options }))[0].bytesSent;
  const s1 = await bytes({ stage: 1 }), s2 = await bytes({ stage: 2 }), s3 = await bytes({ stage: 3 });
  const q = await bytes({ stage: 3, quantizeWeights: "int8", quantizeGradients: "int8" });
  assert.equal(s1, s2);
  // Stage 3 gathers every layer twice (forward, backward) and reduce-scatters once: 3 passes for 2.
  assert.ok(Math.abs(s3 / s1 - 1.5) < 0.05, `stage 3 / stage 1 = ${s3 / s1}`);
  // int8 with one float32 scale per 256: about a quarter of the bytes.
  assert.ok(q / s3 < 0.3, `qwZ + qgZ / stage 3 = ${q / s3}`);
});

Deno.test("lossy codecs: every rank the same parameters, within the derived bound of the reference", async () => {
  // SGD without momentum, lr 0.01: an error ε in a step's gradient moves a parameter by 0.01·ε.
  const sgd = { type: "sgd", lr: 0.01 } as const;
  // Weights in [-0.5, 0.5] move by < 0.2 in 3 steps: int8 with absmax/127 scales decodes within
  // absmax/254 < 0.7/254 of the master, which stays exact (the gradients do not depend on the weights).
  const qwz = await run(4, {
    scenario: "lossy",
    options: { stage: 3, optimizer: sgd, quantizeWeights: "int8" },
  });
  // Each rank's gradient (|g| < 8) decodes within 8/254 per element, so their average too: 3 steps of
  // lr 0.01 stay within 3 · 0.01 · 8/254 ≈ 9.4e-4.
  const qgz = await run(4, {
    scenario: "lossy",
    options: { stage: 2, optimizer: sgd, quantizeGradients: "int8" },
  });
  const both = await run(4, {
    scenario: "lossy",
    options: {
      stage: 3,
      optimizer: sgd,
      quantizeWeights: "int8",
      quantizeGradients: "int8",
      hierarchical: { hosts: [0, 0, 1, 1] },
    },
  });
  for (
    const [name, results, bound] of [
      ["qwZ", qwz, 0.7 / 254],
      ["qgZ", qgz, (3 * 0.01 * 8) / 254],
      ["qwZ + qgZ + hpZ", both, 0.7 / 254 + (3 * 0.01 * 8) / 254],
    ] as const
  ) {
    for (const r of results) {
      assert.ok(r.same, `${name}: the ranks disagree`);
      assert.ok(r.maxDiff > 0 && r.maxDiff <= bound, `${name}: max |p − ref| ${r.maxDiff}, bound ${bound}`);
    }
  }
});

Deno.test("1-bit and top-k gradients with error feedback: the parameters trail the reference by exactly what is owed", async () => {
  // A constant gradient g_r for T steps of SGD (lr 0.01, no momentum). With error feedback, rank r has sent
  // T·g_r − e_r(T) in all (e its residual), and the reduce-scatter decodes and averages exactly what was
  // sent, so p_T = ref_T + lr · mean_r e_r(T): the error is what the ranks still owe, nothing is lost. The
  // check allows the float32 rounding of T updates (each within half an ulp of |p| < 16: 2^-20).
  const sgd = { type: "sgd", lr: 0.01 } as const, steps = 12;
  for (
    const compression of [{ codec: "sign" } as const, { codec: "topk", ratio: 0.25 } as const]
  ) {
    for (const stage of [1, 3] as const) {
      const where = `${compression.codec}, stage ${stage}`;
      const results = await run(4, {
        scenario: "lossy",
        options: { stage, optimizer: sgd, compression },
        steps,
        constant: true,
      });
      let worst = 0, owed = 0;
      LAYERS.forEach((params, l) => {
        let at = 0;
        for (const i of params) {
          for (let j = 0; j < LENGTHS[i]; j++) {
            const mean = results.reduce((sum, r) => sum + r.residuals[l][at + j], 0) / results.length;
            worst = Math.max(worst, Math.abs(results[0].delta[i][j] - 0.01 * mean));
            owed = Math.max(owed, Math.abs(mean));
          }
          at += LENGTHS[i];
        }
      });
      for (const r of results) assert.ok(r.same, `${where}: the ranks disagree`);
      assert.ok(owed > 0.1, `${where}: nothing owed (${owed}): the codec lost nothing?`);
      assert.ok(worst <= steps * 2 ** -20, `${where}: p − ref − lr · mean e is ${worst}`);
    }
  }
});

Deno.test("checkpoints: 2 ranks' shards load into 1 and 4 ranks (and another stage), and the next step matches", async () => {
  const base = { optimizer: ADAM, layers: LAYERS };
  const saved = await run(2, { scenario: "save", options: { stage: 2, ...base }, steps: 3, constant: true });
  const shards: ZeroState[] = saved.map((r) => r.state);
  const consolidated: ZeroState = saved[0].consolidated;
  assert.equal(saved[1].consolidated, null);
  assert.deepEqual([consolidated.step, consolidated.pieces.length], [3, LENGTHS.length]);
  for (const [size, stage, states] of [[1, 1, shards], [4, 3, shards], [4, 2, [consolidated]]] as const) {
    const loaded = await run(size, {
      scenario: "load",
      options: { stage, ...base },
      states,
      steps: 3,
      constant: true,
      gradRanks: 2,
    });
    for (const r of loaded) {
      assert.deepEqual([r.loaded, r.next, r.step], [null, null, 4], `${size} ranks, stage ${stage}`);
    }
  }
  // A missing shard is an error naming the elements.
  const partial = await run(1, {
    scenario: "load",
    options: { stage: 1, ...base },
    states: [shards[0]],
    steps: 3,
    constant: true,
    gradRanks: 2,
  }).catch((e) => e);
  assert.match(String(partial), /elements \d+\.\.\d+ of parameter 0 are not all in it/);
});

Deno.test("two trainers on two sub-groups, each equal to the reference of its half", async () => {
  const results = await run(4, { scenario: "subgroups", options: { stage: 2, optimizer: SGD } });
  assert.deepEqual(results.map((r) => [r.diff, r.subRank, r.subSize]), [
    [null, 0, 2],
    [null, 1, 2],
    [null, 0, 2],
    [null, 1, 2],
  ]);
});

Deno.test("parameters that differ across ranks are refused naming the parameter; broadcastFrom mends them", async () => {
  const results = await run(2, { scenario: "differ" });
  for (const r of results) {
    assert.equal(r.errors.length, 1);
    assert.match(
      r.errors[0],
      /DistError: Cannot shard: parameter 3 differs across ranks .*pass broadcastFrom: 0/,
    );
    assert.ok(r.broadcastOk);
  }
});

Deno.test("stage-3 misuse: use or release without gather, release in use, twice ready, a step short of layers", async () => {
  const [r] = await run(2, { scenario: "misuse" });
  const expected = [
    /Cannot use the parameters of layer 1: it is not gathered \(stage 3 holds 1\/2 of it\); await sdp.gather\(1\) first/,
    /Cannot release layer 1: it is not gathered/,
    /Cannot use the parameters of layer 1: its gather has not finished/,
    /Cannot release layer 1: it is in use, its gather has not finished/,
    /Cannot release layer 1: it is in use, its gradient is open \(call gradReady\(1\) first\)/,
    /Cannot mark layer 1's gradient ready: it already is, this step/,
    /Cannot take the gradients of layer 1: gradReady\(1\) already handed them on this step/,
    /Cannot step: layers 0, 2 got no gradReady\(\) this step/,
  ];
  assert.equal(r.errors.length, expected.length, r.errors.join("\n"));
  r.errors.forEach((e: string, i: number) => assert.match(e, expected[i]));
});
