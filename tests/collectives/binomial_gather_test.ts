import assert from "node:assert/strict";
import { binomialGather } from "../../collectives/binomial_gather.ts";
import { checkGather, type Flavor } from "./_cases.ts";
import { LARGE_COUNT, runWorld } from "./_harness.ts";

const FLAVORS: Flavor[] = [{ dtype: "int32", op: "sum" }, { dtype: "float64", op: "sum" }];

Deno.test("binomialGather() gathers from every root on 1, 2, 3, 4, 5 and 8 ranks", async () => {
  await checkGather("binomialGather", binomialGather, { flavors: FLAVORS });
});

Deno.test("binomialGather() gathers the same over buffered sends", async () => {
  await checkGather("binomialGather", binomialGather, {
    sizes: [3, 8],
    counts: [1024],
    flavors: FLAVORS,
    delivery: "eager",
  });
});

Deno.test(`binomialGather() gathers ${LARGE_COUNT} elements per rank on 5 ranks`, async () => {
  await checkGather("binomialGather", binomialGather, {
    sizes: [5],
    counts: [LARGE_COUNT],
    flavors: [{ dtype: "float32", op: "sum" }],
    chunkBytes: 4096,
  });
});

Deno.test("binomialGather() rejects a root outside the group and a root without its n blocks", async () => {
  await assert.rejects(
    runWorld(
      { size: 3, dtype: "int32" },
      (ctx) => binomialGather(ctx, new Uint8Array(8), new Uint8Array(8), 3),
    ),
    { name: "RangeError", message: /Cannot gather: expected a root in 0\.\.2, found 3/ },
  );
  await assert.rejects(
    runWorld(
      { size: 2, dtype: "int32" },
      (ctx) => binomialGather(ctx, new Uint8Array(8), new Uint8Array(8), 0),
    ),
    { name: "RangeError", message: /Cannot gather: expected (output|input) of 2 × 8 = 16 bytes, found 8/ },
  );
});

Deno.test("binomialGather() sends each rank's subtree once: n−1 messages, ⌈log2 n⌉ into the root", async () => {
  const n = 8;
  const inputs = Array.from({ length: n }, () => new Uint8Array(64));
  const out = new Uint8Array(64 * n);
  const { sent } = await runWorld(
    { size: n, dtype: "int32", chunkBytes: 1 << 20 },
    (ctx) => binomialGather(ctx, inputs[ctx.comm.rank], ctx.comm.rank === 3 ? out : undefined, 3),
  );
  assert.equal(sent.reduce((s, r) => s + r.messages, 0), n - 1);
  assert.equal(sent[3].messages, 0);
});
