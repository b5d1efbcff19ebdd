import assert from "node:assert/strict";
import { orderedAllReduce } from "../../collectives/ordered_allreduce.ts";
import { orderedReduce } from "../../collectives/ordered_reduce.ts";
import { orderedReduceScatter } from "../../collectives/ordered_reduce_scatter.ts";
import { blocksOf } from "../../collectives/_blocks.ts";
import { checkAllReduce, checkReduce, checkReduceScatter } from "./_cases.ts";
import { bytes, randomInputs, runWorld } from "./_harness.ts";
import { reduceMany } from "../../wasm/reference.ts";

Deno.test("orderedAllReduce() all-reduces on 1, 2, 3, 4, 5 and 8 ranks", async () => {
  await checkAllReduce("orderedAllReduce", orderedAllReduce);
});

Deno.test("orderedReduce() reduces to every root, leaving the others' tensors alone", async () => {
  await checkReduce("orderedReduce", orderedReduce);
});

Deno.test("orderedReduceScatter() reduce-scatters", async () => {
  await checkReduceScatter("orderedReduceScatter", orderedReduceScatter);
});

Deno.test("the ordered algorithms give the reference fold in rank order, bit for bit, at any chunk size and arrival order", async () => {
  for (const size of [2, 3, 5, 8]) {
    const n = 1001;
    const inputs = randomInputs({ dtype: "float32", count: n, size, seed: 40 + size }) as Float32Array[];
    const want = new Float32Array(n);
    reduceMany(want, inputs, { dtype: "float32", op: "sum" });
    for (const chunkBytes of [12, 4096, 1 << 20]) {
      for (const delivery of ["eager", undefined] as const) {
        const bufs = inputs.map((a) => a.slice());
        await runWorld(
          { size, dtype: "float32", chunkBytes, delivery },
          (ctx) => orderedAllReduce(ctx, bytes(bufs[ctx.comm.rank])),
        );
        for (const b of bufs) {
          assert.deepEqual(b, want, `${size} ranks, ${chunkBytes}-byte chunks, ${delivery}`);
        }
      }
    }
  }
});

Deno.test("orderedReduceScatter() takes uneven blocks", async () => {
  const size = 4, counts = [3, 0, 5, 1], total = 9;
  const inputs = randomInputs({ dtype: "float32", count: total, size, seed: 9 }) as Float32Array[];
  const outs = counts.map((c) => new Float32Array(c));
  await runWorld(
    { size, dtype: "float32", chunkBytes: 8 },
    (ctx) =>
      orderedReduceScatter(
        ctx,
        bytes(inputs[ctx.comm.rank]),
        bytes(outs[ctx.comm.rank]),
        blocksOf(counts, 4),
      ),
  );
  let at = 0;
  counts.forEach((c, r) => {
    const want = new Float32Array(c);
    reduceMany(want, inputs.map((a) => a.subarray(at, at + c)), { dtype: "float32", op: "sum" });
    assert.deepEqual(outs[r], want, `rank ${r}`);
    at += c;
  });
});
