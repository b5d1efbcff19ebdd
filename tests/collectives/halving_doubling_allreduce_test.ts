import assert from "node:assert/strict";
import { halvingDoublingAllReduce } from "../../collectives/halving_doubling_allreduce.ts";
import { checkAllReduce, FEW_FLAVORS } from "./_cases.ts";
import { bytes, LARGE_COUNT, runWorld } from "./_harness.ts";

Deno.test("halvingDoublingAllReduce() reduces int32 exactly and floats within rounding on 1, 2, 3, 4, 5 and 8 ranks", async () => {
  await checkAllReduce("halvingDoublingAllReduce", halvingDoublingAllReduce);
});

Deno.test("halvingDoublingAllReduce() gives the same answer over buffered sends", async () => {
  await checkAllReduce("halvingDoublingAllReduce", halvingDoublingAllReduce, {
    sizes: [3, 8],
    counts: [1024],
    flavors: FEW_FLAVORS,
    delivery: "eager",
  });
});

Deno.test(`halvingDoublingAllReduce() sums ${LARGE_COUNT} elements on 5 and 8 ranks`, async () => {
  await checkAllReduce("halvingDoublingAllReduce", halvingDoublingAllReduce, {
    sizes: [5, 8],
    counts: [LARGE_COUNT],
    flavors: [{ dtype: "float32", op: "sum" }, { dtype: "int32", op: "sum" }],
    chunkBytes: 4096,
  });
});

Deno.test("halvingDoublingAllReduce() sends 2(n−1)/n·m bytes per rank when n is a power of two", async () => {
  const n = 8;
  const bufs = Array.from({ length: n }, () => bytes(new Int32Array(1024)));
  const { sent } = await runWorld(
    { size: n, dtype: "int32", chunkBytes: 1 << 20 },
    (ctx) => halvingDoublingAllReduce(ctx, bufs[ctx.comm.rank]),
  );
  for (const s of sent) assert.deepEqual(s, { bytes: (2 * (n - 1) / n) * 4096, messages: 2 * Math.log2(n) });
});

Deno.test("halvingDoublingAllReduce() folds the two extra ranks of 6 into partners and back", async () => {
  const n = 6;
  const bufs = Array.from({ length: n }, () => bytes(new Int32Array(1024)));
  const { sent } = await runWorld(
    { size: n, dtype: "int32", chunkBytes: 1 << 20 },
    (ctx) => halvingDoublingAllReduce(ctx, bufs[ctx.comm.rank]),
  );
  // Ranks 0 and 2 hand over their buffer and wait; 1 and 3 do the p = 4 exchange plus the unfold.
  assert.deepEqual(sent.map((s) => s.bytes), [
    4096,
    3 * 4096 / 2 + 4096,
    4096,
    3 * 4096 / 2 + 4096,
    3 * 4096 / 2,
    3 * 4096 / 2,
  ]);
});
