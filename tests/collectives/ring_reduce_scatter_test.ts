import assert from "node:assert/strict";
import { ringReduceScatter } from "../../collectives/ring_reduce_scatter.ts";
import { checkReduceScatter, FEW_FLAVORS } from "./_cases.ts";
import { LARGE_COUNT, runWorld } from "./_harness.ts";

Deno.test("ringReduceScatter() gives rank r the reduction of block r on 1, 2, 3, 4, 5 and 8 ranks, input untouched", async () => {
  // The input is n blocks of `count`, so chunks scale with it to keep the message count alike.
  await checkReduceScatter("ringReduceScatter", ringReduceScatter, { chunkBytes: 256 });
});

Deno.test("ringReduceScatter() gives the same answer over buffered sends", async () => {
  await checkReduceScatter("ringReduceScatter", ringReduceScatter, {
    sizes: [3, 8],
    counts: [1024],
    flavors: FEW_FLAVORS,
    delivery: "eager",
  });
});

Deno.test(`ringReduceScatter() sums blocks of ${LARGE_COUNT} elements on 5 ranks`, async () => {
  await checkReduceScatter("ringReduceScatter", ringReduceScatter, {
    sizes: [5],
    counts: [LARGE_COUNT],
    flavors: [{ dtype: "float32", op: "sum" }],
    chunkBytes: 4096,
  });
});

Deno.test("ringReduceScatter() rejects an input that is not n output blocks", async () => {
  await assert.rejects(
    runWorld(
      { size: 3, dtype: "int32" },
      (ctx) => ringReduceScatter(ctx, new Uint8Array(20), new Uint8Array(8)),
    ),
    { name: "RangeError", message: /Cannot reduce-scatter: expected input of 3 × 8 = 24 bytes, found 20/ },
  );
});

Deno.test("ringReduceScatter() sends (n−1)/n of the input per rank", async () => {
  const n = 5;
  const { sent } = await runWorld(
    { size: n, dtype: "int32", chunkBytes: 64 },
    (ctx) => ringReduceScatter(ctx, new Uint8Array(n * 256), new Uint8Array(256)),
  );
  for (const s of sent) assert.deepEqual(s, { bytes: (n - 1) * 256, messages: (n - 1) * 4 });
});
