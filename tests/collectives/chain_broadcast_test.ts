import assert from "node:assert/strict";
import { chainBroadcast } from "../../collectives/chain_broadcast.ts";
import { checkBroadcast, type Flavor } from "./_cases.ts";
import { LARGE_COUNT, runWorld } from "./_harness.ts";

const FLAVORS: Flavor[] = [{ dtype: "int32", op: "sum" }, { dtype: "float64", op: "sum" }];

Deno.test("chainBroadcast() copies the root's buffer to every rank from every root on 1, 2, 3, 4, 5 and 8 ranks", async () => {
  await checkBroadcast("chainBroadcast", chainBroadcast, { flavors: FLAVORS });
});

Deno.test("chainBroadcast() copies the same over buffered sends", async () => {
  await checkBroadcast("chainBroadcast", chainBroadcast, {
    sizes: [3, 8],
    counts: [1024],
    flavors: FLAVORS,
    delivery: "eager",
  });
});

Deno.test(`chainBroadcast() copies ${LARGE_COUNT} elements on 5 ranks`, async () => {
  await checkBroadcast("chainBroadcast", chainBroadcast, {
    sizes: [5],
    counts: [LARGE_COUNT],
    flavors: [{ dtype: "float32", op: "sum" }],
    chunkBytes: 4096,
  });
});

Deno.test("chainBroadcast() rejects a root outside the group", async () => {
  await assert.rejects(
    runWorld({ size: 3, dtype: "int32" }, (ctx) => chainBroadcast(ctx, new Uint8Array(8), 3)),
    { name: "RangeError", message: /Cannot broadcast: expected a root in 0\.\.2, found 3/ },
  );
});

Deno.test("chainBroadcast() has every rank but the last forward each chunk once", async () => {
  const n = 5;
  const bufs = Array.from({ length: n }, () => new Uint8Array(256));
  const { sent } = await runWorld(
    { size: n, dtype: "int32", chunkBytes: 64 },
    (ctx) => chainBroadcast(ctx, bufs[ctx.comm.rank], 2),
  );
  // Chain from root 2: 2 → 3 → 4 → 0 → 1; rank 1 ends it.
  assert.deepEqual(sent.map((s) => s.messages), [4, 0, 4, 4, 4]);
});
