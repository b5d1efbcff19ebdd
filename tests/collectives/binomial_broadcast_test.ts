import assert from "node:assert/strict";
import { binomialBroadcast } from "../../collectives/binomial_broadcast.ts";
import { checkBroadcast, type Flavor } from "./_cases.ts";
import { LARGE_COUNT, runWorld } from "./_harness.ts";

const FLAVORS: Flavor[] = [{ dtype: "int32", op: "sum" }, { dtype: "float64", op: "sum" }];

Deno.test("binomialBroadcast() copies the root's buffer to every rank from every root on 1, 2, 3, 4, 5 and 8 ranks", async () => {
  await checkBroadcast("binomialBroadcast", binomialBroadcast, { flavors: FLAVORS });
});

Deno.test("binomialBroadcast() copies the same over buffered sends", async () => {
  await checkBroadcast("binomialBroadcast", binomialBroadcast, {
    sizes: [3, 8],
    counts: [1024],
    flavors: FLAVORS,
    delivery: "eager",
  });
});

Deno.test(`binomialBroadcast() copies ${LARGE_COUNT} elements on 5 ranks`, async () => {
  await checkBroadcast("binomialBroadcast", binomialBroadcast, {
    sizes: [5],
    counts: [LARGE_COUNT],
    flavors: [{ dtype: "float32", op: "sum" }],
    chunkBytes: 4096,
  });
});

Deno.test("binomialBroadcast() rejects a root outside the group", async () => {
  await assert.rejects(
    runWorld({ size: 3, dtype: "int32" }, (ctx) => binomialBroadcast(ctx, new Uint8Array(8), 3)),
    { name: "RangeError", message: /Cannot broadcast: expected a root in 0\.\.2, found 3/ },
  );
});

Deno.test("binomialBroadcast() has the root send to ⌈log2 n⌉ children and every other rank receive once", async () => {
  const n = 8;
  const bufs = Array.from({ length: n }, () => new Uint8Array(64));
  const { sent } = await runWorld(
    { size: n, dtype: "int32", chunkBytes: 1 << 20 },
    (ctx) => binomialBroadcast(ctx, bufs[ctx.comm.rank], 3),
  );
  assert.equal(sent[3].messages, 3);
  assert.equal(sent.reduce((s, r) => s + r.messages, 0), n - 1);
});
