import assert from "node:assert/strict";
import { psAllReduce } from "../../collectives/ps_allreduce.ts";
import { checkAllReduce, FEW_FLAVORS } from "./_cases.ts";
import { bytes, LARGE_COUNT, runWorld, SIZES } from "./_harness.ts";

for (const servers of [1, 2, "size"] as const) {
  const label = { 1: "one server", 2: "two servers", size: "n co-located servers" }[servers];
  const sizes = servers === 2 ? SIZES.filter((n) => n >= 2) : SIZES;
  Deno.test(`psAllReduce() with ${label} reduces int32 exactly and floats within rounding on ${sizes.join(", ")} ranks`, async () => {
    await checkAllReduce(
      `psAllReduce servers=${servers}`,
      (ctx, buf) => psAllReduce(ctx, buf, { servers: servers === "size" ? ctx.comm.size : servers }),
      { sizes },
    );
  });
}

Deno.test("psAllReduce() gives the same answer over buffered sends", async () => {
  await checkAllReduce("psAllReduce", (ctx, buf) => psAllReduce(ctx, buf, { servers: 2 }), {
    sizes: [3, 8],
    counts: [1024],
    flavors: FEW_FLAVORS,
    delivery: "eager",
  });
});

Deno.test(`psAllReduce() sums ${LARGE_COUNT} elements on 5 ranks with 2 and 5 servers`, async () => {
  for (const servers of [2, 5]) {
    await checkAllReduce("psAllReduce", (ctx, buf) => psAllReduce(ctx, buf, { servers }), {
      sizes: [5],
      counts: [LARGE_COUNT],
      flavors: [{ dtype: "float32", op: "sum" }],
      chunkBytes: 4096,
    });
  }
});

Deno.test("psAllReduce() defaults to one server per rank", async () => {
  const n = 4;
  const bufs = Array.from({ length: n }, () => bytes(new Int32Array(1024)));
  const { sent } = await runWorld(
    { size: n, dtype: "int32", chunkBytes: 1 << 20 },
    (ctx) => psAllReduce(ctx, bufs[ctx.comm.rank]),
  );
  // Co-located: push (n−1) shards, pull (n−1) shards, like the ring.
  for (const s of sent) assert.deepEqual(s, { bytes: 2 * (n - 1) * 1024, messages: 2 * (n - 1) });
});

Deno.test("psAllReduce() with one server routes everything through rank 0", async () => {
  const n = 4;
  const bufs = Array.from({ length: n }, () => bytes(new Int32Array(1024)));
  const { sent } = await runWorld(
    { size: n, dtype: "int32", chunkBytes: 1 << 20 },
    (ctx) => psAllReduce(ctx, bufs[ctx.comm.rank], { servers: 1 }),
  );
  assert.deepEqual(sent.map((s) => s.bytes), [3 * 4096, 4096, 4096, 4096]);
});

Deno.test("psAllReduce() rejects a server count outside 1..n", async () => {
  for (const servers of [0, 5, 1.5]) {
    await assert.rejects(
      runWorld({ size: 4, dtype: "int32" }, (ctx) => psAllReduce(ctx, new Uint8Array(16), { servers })),
      { name: "RangeError", message: new RegExp(`expected servers in 1\\.\\.4, found ${servers}`) },
    );
  }
});
