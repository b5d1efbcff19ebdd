import assert from "node:assert/strict";
import { binomialReduce } from "../../collectives/binomial_reduce.ts";
import { checkReduce, FEW_FLAVORS } from "./_cases.ts";
import { LARGE_COUNT, runWorld } from "./_harness.ts";

Deno.test("binomialReduce() reduces into every root and leaves other buffers unchanged on 1, 2, 3, 4, 5 and 8 ranks", async () => {
  await checkReduce("binomialReduce", binomialReduce);
});

Deno.test("binomialReduce() gives the same answer over buffered sends", async () => {
  await checkReduce("binomialReduce", binomialReduce, {
    sizes: [3, 8],
    counts: [1024],
    flavors: FEW_FLAVORS,
    delivery: "eager",
  });
});

Deno.test(`binomialReduce() sums ${LARGE_COUNT} elements on 5 ranks`, async () => {
  await checkReduce("binomialReduce", binomialReduce, {
    sizes: [5],
    counts: [LARGE_COUNT],
    flavors: [{ dtype: "float32", op: "sum" }],
    chunkBytes: 4096,
  });
});

Deno.test("binomialReduce() sends each buffer once, towards the root", async () => {
  const n = 8;
  const { sent } = await runWorld(
    { size: n, dtype: "int32", chunkBytes: 1 << 20 },
    (ctx) => binomialReduce(ctx, new Uint8Array(64), 5),
  );
  assert.deepEqual(sent.map((s) => s.messages), [1, 1, 1, 1, 1, 0, 1, 1]);
});

Deno.test("binomialReduce() rejects a root outside the group", async () => {
  await assert.rejects(
    runWorld({ size: 2, dtype: "int32" }, (ctx) => binomialReduce(ctx, new Uint8Array(8), -1)),
    { name: "RangeError", message: /Cannot reduce: expected a root in 0\.\.1, found -1/ },
  );
});
