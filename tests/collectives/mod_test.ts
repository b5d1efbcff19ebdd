import assert from "node:assert/strict";
import {
  ALGORITHMS,
  ALL_GATHER_ALGORITHMS,
  ALL_REDUCE_ALGORITHMS,
  ALL_TO_ALL_ALGORITHMS,
  BARRIER_ALGORITHMS,
  BROADCAST_ALGORITHMS,
  chooseAlgorithm,
  type Collective,
  REDUCE_ALGORITHMS,
  REDUCE_SCATTER_ALGORITHMS,
  SEGMENT_PLANS,
} from "../../collectives/mod.ts";
import {
  COST_FUNCTIONS,
  DEFAULT_CONSTANTS,
  DEFAULT_INPROC_CONSTANTS,
  DEFAULT_TCP_CONSTANTS,
  predict,
} from "../../sim/cost_model.ts";
import { assertReduced, bytes, copyBytes, randomInputs, runWorld } from "./_harness.ts";
import {
  checkAllGather,
  checkAllReduce,
  checkAllToAll,
  checkBroadcast,
  checkReduce,
  checkReduceScatter,
} from "./_cases.ts";

const REGISTRIES: Record<Collective, Readonly<Record<string, unknown>>> = {
  allReduce: ALL_REDUCE_ALGORITHMS,
  allGather: ALL_GATHER_ALGORITHMS,
  reduceScatter: REDUCE_SCATTER_ALGORITHMS,
  broadcast: BROADCAST_ALGORITHMS,
  reduce: REDUCE_ALGORITHMS,
  allToAll: ALL_TO_ALL_ALGORITHMS,
  barrier: BARRIER_ALGORITHMS,
};

Deno.test("ALGORITHMS, the registries and the cost model name the same algorithms", () => {
  for (const c of Object.keys(REGISTRIES) as Collective[]) {
    const names = [...ALGORITHMS[c]].sort();
    // Every collective has a segment plan besides its message algorithms.
    assert.equal(typeof SEGMENT_PLANS[c], "function", c);
    assert.deepEqual([...Object.keys(REGISTRIES[c]), "segment"].sort(), names, c);
    assert.deepEqual(Object.keys(COST_FUNCTIONS[c]).sort(), names, c);
  }
  assert.deepEqual(Object.keys(COST_FUNCTIONS).sort(), Object.keys(REGISTRIES).sort());
});

Deno.test("ALL_REDUCE_ALGORITHMS entries all compute the same sum, ps with its servers option", async () => {
  const n = 5;
  const inputs = randomInputs({ dtype: "int32", count: 37, size: n, seed: 7 });
  for (const [name, fn] of Object.entries(ALL_REDUCE_ALGORITHMS)) {
    const bufs = inputs.map(copyBytes);
    await runWorld(
      { size: n, dtype: "int32", chunkBytes: 16 },
      (ctx) => fn(ctx, bufs[ctx.comm.rank], { servers: 2 }),
    );
    for (const buf of bufs) assertReduced(buf, inputs, { dtype: "int32", op: "sum", what: name });
  }
});

Deno.test("every registered algorithm is right on 6, 7, 9 and 16 ranks", async () => {
  const matrix = {
    sizes: [6, 7, 9, 16],
    counts: [13],
    smallChunkBytes: 8,
    flavors: [{ dtype: "int32", op: "sum" }] as const,
  };
  for (const [name, fn] of Object.entries(ALL_REDUCE_ALGORITHMS)) await checkAllReduce(name, fn, matrix);
  for (const [name, fn] of Object.entries(ALL_GATHER_ALGORITHMS)) await checkAllGather(name, fn, matrix);
  for (const [name, fn] of Object.entries(REDUCE_SCATTER_ALGORITHMS)) {
    await checkReduceScatter(name, fn, matrix);
  }
  for (const [name, fn] of Object.entries(BROADCAST_ALGORITHMS)) await checkBroadcast(name, fn, matrix);
  for (const [name, fn] of Object.entries(REDUCE_ALGORITHMS)) await checkReduce(name, fn, matrix);
  for (const [name, fn] of Object.entries(ALL_TO_ALL_ALGORITHMS)) await checkAllToAll(name, fn, matrix);
});

Deno.test("chooseAlgorithm() avoids the ring for tiny all-reduces on many ranks", () => {
  for (const constants of Object.values(DEFAULT_CONSTANTS)) {
    for (const size of [16, 64, 96, 1024]) {
      const name = chooseAlgorithm("allReduce", { bytes: 8, size, constants });
      assert.ok(
        ["direct", "tree", "double-tree", "halving-doubling"].includes(name),
        `${size} ranks: ${name}`,
      );
    }
  }
});

Deno.test("chooseAlgorithm() picks direct for a tiny all-reduce on 3 ranks", () => {
  assert.equal(
    chooseAlgorithm("allReduce", { bytes: 4, size: 3, constants: DEFAULT_TCP_CONSTANTS }),
    "direct",
  );
});

Deno.test("chooseAlgorithm() picks the ring for large all-reduces on many ranks", () => {
  for (const constants of Object.values(DEFAULT_CONSTANTS)) {
    for (const size of [12, 96]) {
      assert.equal(
        chooseAlgorithm("allReduce", { bytes: 1 << 30, size, constants }),
        "ring",
        `${size} ranks`,
      );
    }
    // At a power of two halving-doubling moves the same bytes as the ring, and on a thousand ranks the
    // ring's 2(n−1) latencies per chunk let the double tree catch up: any bandwidth-optimal choice is fine.
    for (const size of [64, 1000]) {
      const name = chooseAlgorithm("allReduce", { bytes: 1 << 30, size, constants });
      assert.ok(["ring", "halving-doubling", "double-tree"].includes(name), `${size} ranks: ${name}`);
    }
  }
});

Deno.test("chooseAlgorithm() returns the cheapest prediction, preferring the earlier name on ties", () => {
  const constants = DEFAULT_INPROC_CONSTANTS;
  for (const c of Object.keys(REGISTRIES) as Collective[]) {
    for (const size of [1, 2, 3, 8, 33]) {
      for (const b of [0, 64, 1 << 16, 1 << 26]) {
        const name = chooseAlgorithm(c, { bytes: b, size, constants });
        assert.notEqual(name, "segment", "the segment is chosen only where the ranks share one");
        assert.equal(chooseAlgorithm(c, { bytes: b, size, constants, segment: true }), "segment");
        const cost = predict(c, name, { size, bytes: b, constants });
        for (const other of ALGORITHMS[c].filter((a) => a !== "segment")) {
          const otherCost = predict(c, other, { size, bytes: b, constants });
          assert.ok(
            cost <= otherCost * (1 + 1e-9),
            `${c} n=${size} m=${b}: ${name} ${cost} > ${other} ${otherCost}`,
          );
        }
      }
    }
  }
  // Nothing to move: every algorithm costs 0 and the first listed wins.
  assert.equal(chooseAlgorithm("allReduce", { bytes: 0, size: 8, constants }), "ring");
});

Deno.test("chooseAlgorithm() takes the context's chunk size into account", () => {
  // With 1-byte chunks every algorithm pays a latency per byte; with whole-message chunks the tree
  // (one message per hop) beats the ring for a mid-size buffer.
  const constants = DEFAULT_TCP_CONSTANTS;
  const shape = { bytes: 4096, size: 64, constants };
  assert.notEqual(chooseAlgorithm("allReduce", { ...shape, chunkBytes: 1 << 20 }), "ring");
  assert.equal(typeof chooseAlgorithm("allReduce", { ...shape, chunkBytes: 1 }), "string");
});

Deno.test("BROADCAST_ALGORITHMS entries each broadcast from a non-zero root", async () => {
  for (const fn of Object.values(BROADCAST_ALGORITHMS)) {
    const bufs = Array.from({ length: 4 }, (_, r) => bytes(new Int32Array([r, r, r])));
    await runWorld({ size: 4, dtype: "int32" }, (ctx) => fn(ctx, bufs[ctx.comm.rank], 2));
    for (const buf of bufs) assert.deepEqual([...new Int32Array(buf.buffer)], [2, 2, 2]);
  }
});
