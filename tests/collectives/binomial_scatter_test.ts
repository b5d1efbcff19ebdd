import assert from "node:assert/strict";
import { binomialScatter } from "../../collectives/binomial_scatter.ts";
import { checkScatter, type Flavor } from "./_cases.ts";
import { LARGE_COUNT, runWorld } from "./_harness.ts";

const FLAVORS: Flavor[] = [{ dtype: "int32", op: "sum" }, { dtype: "float64", op: "sum" }];

Deno.test("binomialScatter() scatters from every root on 1, 2, 3, 4, 5 and 8 ranks", async () => {
  await checkScatter("binomialScatter", binomialScatter, { flavors: FLAVORS });
});

Deno.test("binomialScatter() scatters the same over buffered sends", async () => {
  await checkScatter("binomialScatter", binomialScatter, {
    sizes: [3, 8],
    counts: [1024],
    flavors: FLAVORS,
    delivery: "eager",
  });
});

Deno.test(`binomialScatter() scatters ${LARGE_COUNT} elements per rank on 5 ranks`, async () => {
  await checkScatter("binomialScatter", binomialScatter, {
    sizes: [5],
    counts: [LARGE_COUNT],
    flavors: [{ dtype: "float32", op: "sum" }],
    chunkBytes: 4096,
  });
});

Deno.test("binomialScatter() rejects a root outside the group and a root without its n blocks", async () => {
  await assert.rejects(
    runWorld(
      { size: 3, dtype: "int32" },
      (ctx) => binomialScatter(ctx, new Uint8Array(8), new Uint8Array(8), 3),
    ),
    { name: "RangeError", message: /Cannot scatter: expected a root in 0\.\.2, found 3/ },
  );
  await assert.rejects(
    runWorld(
      { size: 2, dtype: "int32" },
      (ctx) => binomialScatter(ctx, new Uint8Array(8), new Uint8Array(8), 0),
    ),
    { name: "RangeError", message: /Cannot scatter: expected (output|input) of 2 × 8 = 16 bytes, found 8/ },
  );
});
