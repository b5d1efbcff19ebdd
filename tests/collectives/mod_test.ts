import assert from "node:assert/strict";
import {
  ALGORITHM_DESCRIPTORS,
  ALGORITHMS,
  ALL_GATHER_ALGORITHMS,
  ALL_REDUCE_ALGORITHMS,
  ALL_TO_ALL_ALGORITHMS,
  BARRIER_ALGORITHMS,
  BROADCAST_ALGORITHMS,
  chooseAlgorithm,
  type Collective,
  COST_FUNCTIONS,
  GATHER_ALGORITHMS,
  predict,
  REDUCE_ALGORITHMS,
  REDUCE_SCATTER_ALGORITHMS,
  SCATTER_ALGORITHMS,
  SEGMENT_PLANS,
} from "../../collectives/mod.ts";
import * as model from "../../sim/cost_model.ts";
import { assertReduced, bytes, copyBytes, randomInputs, runWorld } from "./_harness.ts";
import {
  checkAllGather,
  checkAllReduce,
  checkAllToAll,
  checkBroadcast,
  checkReduce,
  checkReduceScatter,
} from "./_cases.ts";

const { DEFAULT_CONSTANTS, DEFAULT_INPROC_CONSTANTS, DEFAULT_SHM_CONSTANTS, DEFAULT_TCP_CONSTANTS } = model;

const REGISTRIES: Record<Collective, Readonly<Record<string, unknown>>> = {
  allReduce: ALL_REDUCE_ALGORITHMS,
  allGather: ALL_GATHER_ALGORITHMS,
  reduceScatter: REDUCE_SCATTER_ALGORITHMS,
  broadcast: BROADCAST_ALGORITHMS,
  reduce: REDUCE_ALGORITHMS,
  allToAll: ALL_TO_ALL_ALGORITHMS,
  barrier: BARRIER_ALGORITHMS,
  gather: GATHER_ALGORITHMS,
  scatter: SCATTER_ALGORITHMS,
};
const COLLECTIVES = Object.keys(REGISTRIES) as Collective[];

Deno.test("ALGORITHM_DESCRIPTORS has one descriptor per (collective, name) and one segment plan per collective", () => {
  const keys = ALGORITHM_DESCRIPTORS.map((d) => `${d.collective}/${d.name}`);
  assert.deepEqual([...new Set(keys)], keys, "a (collective, name) listed twice");
  assert.deepEqual([...new Set(ALGORITHM_DESCRIPTORS.map((d) => d.collective))], COLLECTIVES);
  for (const c of COLLECTIVES) {
    const own = ALGORITHM_DESCRIPTORS.filter((d) => d.collective === c);
    // Grouped by collective: the preference order of a collective is the order of one contiguous run.
    const first = ALGORITHM_DESCRIPTORS.findIndex((d) => d.collective === c);
    assert.deepEqual(ALGORITHM_DESCRIPTORS.slice(first, first + own.length), own, c);
    const segments = own.filter((d) => d.kind === "segment");
    assert.deepEqual(segments.map((d) => d.name), ["segment"], c);
    assert.equal(own[0].kind, "segment", `${c}: the segment comes first`);
    for (const d of own) {
      assert.equal(d.kind === "segment", d.name === "segment", `${c}/${d.name}: kind ${d.kind}`);
      assert.equal(typeof (d.kind === "segment" ? d.plan : d.run), "function", `${c}/${d.name}`);
      assert.ok(d.summary.length > 0 && !d.summary.includes("\n"), `${c}/${d.name}: summary`);
    }
  }
  const bruck = ALGORITHM_DESCRIPTORS.find((d) =>
    d.collective === "allGather" && d.name === "recursive-doubling"
  );
  assert.match(bruck?.summary ?? "", /Bruck/);
});

Deno.test("ALGORITHMS, the registries, SEGMENT_PLANS and COST_FUNCTIONS are the descriptors' tables", () => {
  assert.deepEqual(Object.keys(ALGORITHMS), COLLECTIVES);
  assert.deepEqual(Object.keys(COST_FUNCTIONS), COLLECTIVES);
  assert.deepEqual(Object.keys(SEGMENT_PLANS), COLLECTIVES);
  for (const c of COLLECTIVES) {
    const own = ALGORITHM_DESCRIPTORS.filter((d) => d.collective === c);
    assert.deepEqual(ALGORITHMS[c], own.map((d) => d.name), c);
    assert.deepEqual(
      Object.entries(REGISTRIES[c]),
      own.flatMap((d) => d.kind === "messages" ? [[d.name, d.run]] : []),
      c,
    );
    assert.equal(SEGMENT_PLANS[c], own.find((d) => d.kind === "segment")?.plan, c);
    assert.deepEqual(Object.entries(COST_FUNCTIONS[c]), own.map((d) => [d.name, d.cost]), c);
  }
  // The preference order, as the README lists it.
  assert.deepEqual(ALGORITHMS, {
    allReduce: [
      "segment",
      "ring",
      "hierarchical",
      "halving-doubling",
      "double-tree",
      "tree",
      "direct",
      "ps",
      "ordered",
    ],
    allGather: ["segment", "ring", "recursive-doubling"],
    reduceScatter: ["segment", "ring", "halving", "ordered"],
    broadcast: ["segment", "binomial", "chain"],
    reduce: ["segment", "binomial", "ordered"],
    allToAll: ["segment", "pairwise"],
    barrier: ["segment", "dissemination"],
    gather: ["segment", "linear", "binomial"],
    scatter: ["segment", "linear", "binomial"],
  });
  for (
    const table of [
      ALGORITHM_DESCRIPTORS,
      ALGORITHMS,
      SEGMENT_PLANS,
      COST_FUNCTIONS,
      ...Object.values(REGISTRIES),
    ]
  ) {
    assert.ok(Object.isFrozen(table));
  }
});

Deno.test("every descriptor's cost function is one of sim/cost_model.ts's, prices a shape, and is 0 on one rank", () => {
  const costFunctions = Object.entries(model).filter(([name, v]) =>
    name.endsWith("Cost") && typeof v === "function"
  );
  const used = new Set(ALGORITHM_DESCRIPTORS.map((d) => d.cost));
  for (const [name, fn] of costFunctions) {
    assert.ok(used.has(fn as model.CostFunction), `${name} has no descriptor`);
  }
  for (const d of ALGORITHM_DESCRIPTORS) {
    const what = `${d.collective}/${d.name}`;
    assert.ok(costFunctions.some(([, fn]) => fn === d.cost), `${what}: not a cost function of the model`);
    for (const constants of Object.values(DEFAULT_CONSTANTS)) {
      const t = d.cost({ size: 5, bytes: 1 << 20, chunkBytes: 1 << 16 }, constants);
      assert.ok(Number.isFinite(t) && t > 0, `${what}: ${t}`);
      assert.equal(d.cost({ size: 1, bytes: 1 << 20 }, constants), 0, `${what} on one rank`);
    }
  }
});

Deno.test("predict() dispatches to the named cost function and rejects unknown names", () => {
  const constants = DEFAULT_SHM_CONSTANTS;
  for (const d of ALGORITHM_DESCRIPTORS) {
    const shape = { size: 6, bytes: 12345, chunkBytes: 1024 };
    // deno-lint-ignore no-explicit-any
    assert.equal(predict(d.collective, d.name as any, { ...shape, constants }), d.cost(shape, constants));
  }
  // deno-lint-ignore no-explicit-any
  assert.throws(() => predict("allReduce", "bogus" as any, { size: 2, bytes: 8, constants }), {
    name: "RangeError",
    message:
      /Unknown algorithm: expected one of segment, ring, hierarchical, halving-doubling, .* for allReduce, found bogus/,
  });
  assert.throws(() => predict("allReduce", "ring", { size: 0, bytes: 8, constants }), RangeError);
  assert.throws(() => predict("allReduce", "ps", { size: 4, bytes: 8, servers: 5, constants }), RangeError);
});

Deno.test("predict() prices the dissemination barrier at ⌈log2 n⌉ latencies", () => {
  const constants = { alpha: 1, beta: 1, gamma: 1 };
  for (const [n, rounds] of [[1, 0], [2, 1], [3, 2], [8, 3], [9, 4]]) {
    assert.equal(predict("barrier", "dissemination", { size: n, bytes: 0, constants }), rounds);
  }
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
  for (const c of COLLECTIVES) {
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
