import assert from "node:assert/strict";
import { linearScatter } from "../../collectives/linear_scatter.ts";
import { checkScatter, type Flavor } from "./_cases.ts";
import { LARGE_COUNT, runWorld } from "./_harness.ts";

const FLAVORS: Flavor[] = [{ dtype: "int32", op: "sum" }, { dtype: "float64", op: "sum" }];

Deno.test("linearScatter() scatters from every root on 1, 2, 3, 4, 5 and 8 ranks", async () => {
  await checkScatter("linearScatter", linearScatter, { flavors: FLAVORS });
});

Deno.test("linearScatter() scatters the same over buffered sends", async () => {
  await checkScatter("linearScatter", linearScatter, {
    sizes: [3, 8],
    counts: [1024],
    flavors: FLAVORS,
    delivery: "eager",
  });
});

Deno.test(`linearScatter() scatters ${LARGE_COUNT} elements per rank on 5 ranks`, async () => {
  await checkScatter("linearScatter", linearScatter, {
    sizes: [5],
    counts: [LARGE_COUNT],
    flavors: [{ dtype: "float32", op: "sum" }],
    chunkBytes: 4096,
  });
});

Deno.test("linearScatter() rejects a root outside the group and a root without its n blocks", async () => {
  await assert.rejects(
    runWorld(
      { size: 3, dtype: "int32" },
      (ctx) => linearScatter(ctx, new Uint8Array(8), new Uint8Array(8), 3),
    ),
    { name: "RangeError", message: /Cannot scatter: expected a root in 0\.\.2, found 3/ },
  );
  await assert.rejects(
    runWorld(
      { size: 2, dtype: "int32" },
      (ctx) => linearScatter(ctx, new Uint8Array(8), new Uint8Array(8), 0),
    ),
    { name: "RangeError", message: /Cannot scatter: expected (output|input) of 2 × 8 = 16 bytes, found 8/ },
  );
});

Deno.test("linearScatter() has the root send one message to every other rank", async () => {
  const n = 5;
  const outputs = Array.from({ length: n }, () => new Uint8Array(16));
  const { sent } = await runWorld(
    { size: n, dtype: "int32", chunkBytes: 1 << 20 },
    (ctx) =>
      linearScatter(ctx, ctx.comm.rank === 1 ? new Uint8Array(16 * n) : undefined, outputs[ctx.comm.rank], 1),
  );
  assert.equal(sent[1].messages, n - 1);
  assert.equal(sent.reduce((s, r) => s + r.messages, 0), n - 1);
});
