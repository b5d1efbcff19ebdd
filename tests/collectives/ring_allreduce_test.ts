import assert from "node:assert/strict";
import { ringAllReduce } from "../../collectives/ring_allreduce.ts";
import { checkAllReduce, FEW_FLAVORS } from "./_cases.ts";
import { bytes, LARGE_COUNT, runWorld } from "./_harness.ts";

Deno.test("ringAllReduce() reduces int32 exactly and floats within rounding on 1, 2, 3, 4, 5 and 8 ranks", async () => {
  await checkAllReduce("ringAllReduce", ringAllReduce);
});

Deno.test("ringAllReduce() gives the same answer over buffered sends", async () => {
  await checkAllReduce("ringAllReduce", ringAllReduce, {
    sizes: [3, 8],
    counts: [1024],
    flavors: FEW_FLAVORS,
    delivery: "eager",
  });
});

Deno.test(`ringAllReduce() sums ${LARGE_COUNT} elements on 5 and 8 ranks`, async () => {
  await checkAllReduce("ringAllReduce", ringAllReduce, {
    sizes: [5, 8],
    counts: [LARGE_COUNT],
    flavors: [{ dtype: "float32", op: "sum" }, { dtype: "int32", op: "sum" }],
    chunkBytes: 4096,
  });
});

Deno.test("ringAllReduce() sends 2(n−1)/n·m bytes per rank in chunks of chunkBytes", async () => {
  const n = 4;
  const bufs = Array.from({ length: n }, () => bytes(new Float32Array(1024)));
  const { sent } = await runWorld(
    { size: n, dtype: "float32", chunkBytes: 64 },
    (ctx) => ringAllReduce(ctx, bufs[ctx.comm.rank]),
  );
  for (const s of sent) {
    assert.deepEqual(s, { bytes: (2 * (n - 1) / n) * 4096, messages: 2 * (n - 1) * (1024 / 64) });
  }
});

Deno.test("ringAllReduce() rejects a buffer of partial elements", async () => {
  await assert.rejects(
    runWorld({ size: 2, dtype: "float32" }, (ctx) => ringAllReduce(ctx, new Uint8Array(6))),
    {
      name: "RangeError",
      message: /Cannot all-reduce: buffer of 6 bytes is not a multiple of the 4-byte element/,
    },
  );
});
