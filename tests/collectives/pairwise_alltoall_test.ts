import assert from "node:assert/strict";
import { pairwiseAllToAll } from "../../collectives/pairwise_alltoall.ts";
import { checkAllToAll, type Flavor } from "./_cases.ts";
import { LARGE_COUNT, runWorld } from "./_harness.ts";

const FLAVORS: Flavor[] = [{ dtype: "int32", op: "sum" }, { dtype: "float64", op: "sum" }];

Deno.test("pairwiseAllToAll() delivers block j of rank i to block i of rank j on 1, 2, 3, 4, 5 and 8 ranks", async () => {
  await checkAllToAll("pairwiseAllToAll", pairwiseAllToAll, { flavors: FLAVORS });
});

Deno.test("pairwiseAllToAll() delivers the same over buffered sends", async () => {
  await checkAllToAll("pairwiseAllToAll", pairwiseAllToAll, {
    sizes: [3, 8],
    counts: [1024],
    flavors: FLAVORS,
    delivery: "eager",
  });
});

Deno.test(`pairwiseAllToAll() moves blocks of ${LARGE_COUNT} elements on 5 ranks`, async () => {
  await checkAllToAll("pairwiseAllToAll", pairwiseAllToAll, {
    sizes: [5],
    counts: [LARGE_COUNT],
    flavors: [{ dtype: "float32", op: "sum" }],
    chunkBytes: 4096,
  });
});

Deno.test("pairwiseAllToAll() sends one block to each other rank", async () => {
  const n = 6;
  const { sent } = await runWorld(
    { size: n, dtype: "int32", chunkBytes: 1 << 20 },
    (ctx) => pairwiseAllToAll(ctx, new Uint8Array(n * 8), new Uint8Array(n * 8)),
  );
  for (const s of sent) assert.deepEqual(s, { bytes: (n - 1) * 8, messages: n - 1 });
});

Deno.test("pairwiseAllToAll() rejects buffers that do not split into n blocks", async () => {
  await assert.rejects(
    runWorld(
      { size: 3, dtype: "int32" },
      (ctx) => pairwiseAllToAll(ctx, new Uint8Array(16), new Uint8Array(16)),
    ),
    {
      name: "RangeError",
      message: /Cannot all-to-all: expected input and output of equal length divisible by 3/,
    },
  );
});
