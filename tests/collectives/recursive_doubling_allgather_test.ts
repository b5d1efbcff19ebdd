import assert from "node:assert/strict";
import { recursiveDoublingAllGather } from "../../collectives/recursive_doubling_allgather.ts";
import { checkAllGather, type Flavor } from "./_cases.ts";
import { bytes, LARGE_COUNT, runWorld } from "./_harness.ts";

// Copies only: one 4-byte and one 8-byte dtype cover every chunk and block boundary case.
const FLAVORS: Flavor[] = [{ dtype: "int32", op: "sum" }, { dtype: "float64", op: "sum" }];

Deno.test("recursiveDoublingAllGather() gathers every rank's block in rank order on 1, 2, 3, 4, 5 and 8 ranks", async () => {
  await checkAllGather("recursiveDoublingAllGather", recursiveDoublingAllGather, { flavors: FLAVORS });
});

Deno.test("recursiveDoublingAllGather() gathers the same over buffered sends", async () => {
  await checkAllGather("recursiveDoublingAllGather", recursiveDoublingAllGather, {
    sizes: [3, 8],
    counts: [1024],
    flavors: FLAVORS,
    delivery: "eager",
  });
});

Deno.test(`recursiveDoublingAllGather() gathers blocks of ${LARGE_COUNT} elements on 5 and 8 ranks`, async () => {
  await checkAllGather("recursiveDoublingAllGather", recursiveDoublingAllGather, {
    sizes: [5, 8],
    counts: [LARGE_COUNT],
    flavors: [{ dtype: "float32", op: "sum" }],
    chunkBytes: 4096,
  });
});

Deno.test("recursiveDoublingAllGather() sends (n−1) blocks per rank", async () => {
  for (const n of [5, 8]) {
    const outs = Array.from({ length: n }, () => new Uint8Array(n * 400));
    const { sent } = await runWorld(
      { size: n, dtype: "int32", chunkBytes: 1 << 20 },
      (ctx) => recursiveDoublingAllGather(ctx, bytes(new Int32Array(100)), outs[ctx.comm.rank]),
    );
    for (const s of sent) assert.equal(s.bytes, (n - 1) * 400);
  }
});

Deno.test("recursiveDoublingAllGather() rejects an output that is not n input blocks", async () => {
  await assert.rejects(
    runWorld(
      { size: 3, dtype: "int32" },
      (ctx) => recursiveDoublingAllGather(ctx, new Uint8Array(8), new Uint8Array(20)),
    ),
    { name: "RangeError", message: /Cannot all-gather: expected output of 3 × 8 = 24 bytes, found 20/ },
  );
});

Deno.test("recursiveDoublingAllGather() takes ⌈log2 n⌉ rounds", async () => {
  for (const [n, rounds] of [[4, 2], [5, 3], [8, 3], [6, 3]]) {
    const outs = Array.from({ length: n }, () => new Uint8Array(n * 4));
    const { sent } = await runWorld(
      { size: n, dtype: "int32", chunkBytes: 1 << 20 },
      (ctx) => recursiveDoublingAllGather(ctx, new Uint8Array(4), outs[ctx.comm.rank]),
    );
    // One message per round, plus one where a Bruck range wraps past block n−1.
    for (const s of sent) {
      assert.ok(s.messages >= rounds && s.messages <= 2 * rounds, `n=${n}: ${s.messages}`);
    }
  }
});
