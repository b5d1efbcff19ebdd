import assert from "node:assert/strict";
import { linearGather } from "../../collectives/linear_gather.ts";
import { checkGather, type Flavor } from "./_cases.ts";
import { LARGE_COUNT, runWorld } from "./_harness.ts";

const FLAVORS: Flavor[] = [{ dtype: "int32", op: "sum" }, { dtype: "float64", op: "sum" }];

Deno.test("linearGather() gathers from every root on 1, 2, 3, 4, 5 and 8 ranks", async () => {
  await checkGather("linearGather", linearGather, { flavors: FLAVORS });
});

Deno.test("linearGather() gathers the same over buffered sends", async () => {
  await checkGather("linearGather", linearGather, {
    sizes: [3, 8],
    counts: [1024],
    flavors: FLAVORS,
    delivery: "eager",
  });
});

Deno.test(`linearGather() gathers ${LARGE_COUNT} elements per rank on 5 ranks`, async () => {
  await checkGather("linearGather", linearGather, {
    sizes: [5],
    counts: [LARGE_COUNT],
    flavors: [{ dtype: "float32", op: "sum" }],
    chunkBytes: 4096,
  });
});

Deno.test("linearGather() rejects a root outside the group and a root without its n blocks", async () => {
  await assert.rejects(
    runWorld(
      { size: 3, dtype: "int32" },
      (ctx) => linearGather(ctx, new Uint8Array(8), new Uint8Array(8), 3),
    ),
    { name: "RangeError", message: /Cannot gather: expected a root in 0\.\.2, found 3/ },
  );
  await assert.rejects(
    runWorld(
      { size: 2, dtype: "int32" },
      (ctx) => linearGather(ctx, new Uint8Array(8), new Uint8Array(8), 0),
    ),
    { name: "RangeError", message: /Cannot gather: expected (output|input) of 2 × 8 = 16 bytes, found 8/ },
  );
});
