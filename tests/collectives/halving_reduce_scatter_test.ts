import assert from "node:assert/strict";
import { halvingReduceScatter } from "../../collectives/halving_reduce_scatter.ts";
import { checkReduceScatter, FEW_FLAVORS } from "./_cases.ts";
import { LARGE_COUNT, runWorld } from "./_harness.ts";

Deno.test("halvingReduceScatter() gives rank r the reduction of block r on 1, 2, 3, 4, 5 and 8 ranks, input untouched", async () => {
  // The input is n blocks of `count`, so chunks scale with it to keep the message count alike.
  await checkReduceScatter("halvingReduceScatter", halvingReduceScatter, { chunkBytes: 256 });
});

Deno.test("halvingReduceScatter() gives the same answer over buffered sends", async () => {
  await checkReduceScatter("halvingReduceScatter", halvingReduceScatter, {
    sizes: [3, 8],
    counts: [1024],
    flavors: FEW_FLAVORS,
    delivery: "eager",
  });
});

Deno.test(`halvingReduceScatter() sums blocks of ${LARGE_COUNT} elements on 5 ranks`, async () => {
  await checkReduceScatter("halvingReduceScatter", halvingReduceScatter, {
    sizes: [5],
    counts: [LARGE_COUNT],
    flavors: [{ dtype: "float32", op: "sum" }],
    chunkBytes: 4096,
  });
});

Deno.test("halvingReduceScatter() rejects an input that is not n output blocks", async () => {
  await assert.rejects(
    runWorld(
      { size: 3, dtype: "int32" },
      (ctx) => halvingReduceScatter(ctx, new Uint8Array(20), new Uint8Array(8)),
    ),
    { name: "RangeError", message: /Cannot reduce-scatter: expected input of 3 × 8 = 24 bytes, found 20/ },
  );
});

Deno.test("halvingReduceScatter() sends (n−1)/n of the input per rank when n is a power of two", async () => {
  const n = 8;
  const { sent } = await runWorld(
    { size: n, dtype: "int32", chunkBytes: 1 << 20 },
    (ctx) => halvingReduceScatter(ctx, new Uint8Array(n * 256), new Uint8Array(256)),
  );
  for (const s of sent) assert.deepEqual(s, { bytes: (n - 1) * 256, messages: Math.log2(n) });
});
