import assert from "node:assert/strict";
import { directAllReduce } from "../../collectives/direct_allreduce.ts";
import { checkAllReduce, FEW_FLAVORS } from "./_cases.ts";
import { bytes, LARGE_COUNT, runWorld } from "./_harness.ts";

Deno.test("directAllReduce() reduces int32 exactly and floats within rounding on 1, 2, 3, 4, 5 and 8 ranks", async () => {
  await checkAllReduce("directAllReduce", directAllReduce);
});

Deno.test("directAllReduce() gives the same answer over buffered sends", async () => {
  await checkAllReduce("directAllReduce", directAllReduce, {
    sizes: [3, 8],
    counts: [1024],
    flavors: FEW_FLAVORS,
    delivery: "eager",
  });
});

Deno.test(`directAllReduce() sums ${LARGE_COUNT} elements on 5 ranks`, async () => {
  await checkAllReduce("directAllReduce", directAllReduce, {
    sizes: [5],
    counts: [LARGE_COUNT],
    flavors: [{ dtype: "float32", op: "sum" }],
    chunkBytes: 4096,
  });
});

Deno.test("directAllReduce() sends the whole buffer to each of the n−1 others", async () => {
  const n = 5;
  const bufs = Array.from({ length: n }, () => bytes(new Float64Array(3)));
  const { sent } = await runWorld(
    { size: n, dtype: "float64", chunkBytes: 1 << 20 },
    (ctx) => directAllReduce(ctx, bufs[ctx.comm.rank]),
  );
  for (const s of sent) assert.deepEqual(s, { bytes: (n - 1) * 24, messages: n - 1 });
});
