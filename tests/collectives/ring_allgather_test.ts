import assert from "node:assert/strict";
import { ringAllGather } from "../../collectives/ring_allgather.ts";
import { checkAllGather, type Flavor } from "./_cases.ts";
import { bytes, LARGE_COUNT, runWorld } from "./_harness.ts";

// Copies only: one 4-byte and one 8-byte dtype cover every chunk and block boundary case.
const FLAVORS: Flavor[] = [{ dtype: "int32", op: "sum" }, { dtype: "float64", op: "sum" }];

Deno.test("ringAllGather() gathers every rank's block in rank order on 1, 2, 3, 4, 5 and 8 ranks", async () => {
  await checkAllGather("ringAllGather", ringAllGather, { flavors: FLAVORS });
});

Deno.test("ringAllGather() gathers the same over buffered sends", async () => {
  await checkAllGather("ringAllGather", ringAllGather, {
    sizes: [3, 8],
    counts: [1024],
    flavors: FLAVORS,
    delivery: "eager",
  });
});

Deno.test(`ringAllGather() gathers blocks of ${LARGE_COUNT} elements on 5 and 8 ranks`, async () => {
  await checkAllGather("ringAllGather", ringAllGather, {
    sizes: [5, 8],
    counts: [LARGE_COUNT],
    flavors: [{ dtype: "float32", op: "sum" }],
    chunkBytes: 4096,
  });
});

Deno.test("ringAllGather() sends (n−1) blocks per rank", async () => {
  for (const n of [5, 8]) {
    const outs = Array.from({ length: n }, () => new Uint8Array(n * 400));
    const { sent } = await runWorld(
      { size: n, dtype: "int32", chunkBytes: 1 << 20 },
      (ctx) => ringAllGather(ctx, bytes(new Int32Array(100)), outs[ctx.comm.rank]),
    );
    for (const s of sent) assert.equal(s.bytes, (n - 1) * 400);
  }
});

Deno.test("ringAllGather() rejects an output that is not n input blocks", async () => {
  await assert.rejects(
    runWorld({ size: 3, dtype: "int32" }, (ctx) => ringAllGather(ctx, new Uint8Array(8), new Uint8Array(20))),
    { name: "RangeError", message: /Cannot all-gather: expected output of 3 × 8 = 24 bytes, found 20/ },
  );
});
