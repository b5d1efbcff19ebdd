import assert from "node:assert/strict";
import type { CollectiveContext } from "../../collectives/comm.ts";
import { Plan } from "../../collectives/_schedule.ts";
import { ringAllReduce } from "../../collectives/ring_allreduce.ts";
import { bytes, runWorld } from "./_harness.ts";

const tick = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

Deno.test("Plan.recvReduce() combines in the declared order, not the arrival order", async () => {
  const order: number[] = [];
  await runWorld({ size: 3, dtype: "int32", delivery: "eager" }, async (ctx) => {
    const { rank } = ctx.comm;
    if (rank === 0) {
      const logged: CollectiveContext = {
        ...ctx,
        reduce: (dst, src) => {
          order.push(new Int32Array(src.slice().buffer)[0]);
          ctx.reduce(dst, src);
        },
      };
      const logPlan = new Plan(logged);
      const dst = bytes(new Int32Array([100]));
      const first = logPlan.recvReduce(1, dst);
      logPlan.recvReduce(2, dst, { after: [first] });
      await logPlan.run();
      assert.deepEqual([...new Int32Array(dst.buffer)], [103]);
      return;
    }
    // Rank 1's contribution arrives last.
    if (rank === 1) await tick(20);
    const plan = new Plan(ctx);
    plan.send(0, bytes(new Int32Array([rank])));
    await plan.run();
  });
  assert.deepEqual(order, [1, 2]);
});

Deno.test("Plan.recvReduceMany() reduces every source in the order given", async () => {
  await runWorld({ size: 3, dtype: "float64", delivery: "eager" }, async (ctx) => {
    const { rank } = ctx.comm;
    if (rank === 1) {
      const seen: number[][] = [];
      const logged: CollectiveContext = {
        ...ctx,
        reduceMany: (dst, srcs) => {
          seen.push(srcs.map((s) => new Float64Array(s.slice().buffer)[0]));
          ctx.reduceMany(dst, srcs);
        },
      };
      const logPlan = new Plan(logged);
      const dst = new Uint8Array(8);
      logPlan.recvReduceMany(dst, [0, bytes(new Float64Array([10])), 2]);
      await logPlan.run();
      assert.deepEqual(seen, [[0.5, 10, 2.5]]);
      return;
    }
    if (rank === 0) await tick(10);
    const plan = new Plan(ctx);
    plan.send(1, bytes(new Float64Array([rank + 0.5])));
    await plan.run();
  });
});

Deno.test("Plan.run() rejects when a peer's message has another length", async () => {
  await assert.rejects(
    runWorld({ size: 2, dtype: "int32" }, async (ctx) => {
      const plan = new Plan(ctx);
      if (ctx.comm.rank === 0) plan.send(1, new Uint8Array(8));
      else plan.recvReduce(0, new Uint8Array(4));
      await plan.run();
    }),
    /Rank 1 expected 4 bytes from rank 0, found 8/,
  );
});

Deno.test("Plan.run() rejects with the communicator's error", async () => {
  const boom = new Error("peer died");
  await assert.rejects(
    runWorld({ size: 2, dtype: "int32" }, async (ctx) => {
      if (ctx.comm.rank === 1) return;
      const plan = new Plan({ ...ctx, comm: { ...ctx.comm, send: () => Promise.reject(boom) } });
      plan.send(1, new Uint8Array(4));
      await plan.run();
    }),
    (e) => e === boom,
  );
});

Deno.test("Plan refuses a message to itself or outside the group", async () => {
  await runWorld({ size: 2, dtype: "int32" }, (ctx) => {
    const plan = new Plan(ctx);
    assert.throws(() => plan.send(ctx.comm.rank, new Uint8Array(4)), RangeError);
    assert.throws(() => plan.recv(2, new Uint8Array(4)), RangeError);
    return Promise.resolve();
  });
});

Deno.test("ringAllReduce() asks for scratch once: two chunk-sized receive slots", async () => {
  const asked: number[][] = [[], [], []];
  const bufs = Array.from({ length: 3 }, () => bytes(new Int32Array(999)));
  await runWorld({ size: 3, dtype: "int32", chunkBytes: 100 }, (ctx) => {
    const counted: CollectiveContext = {
      ...ctx,
      scratch: (n) => {
        asked[ctx.comm.rank].push(n);
        return ctx.scratch(n);
      },
    };
    return ringAllReduce(counted, bufs[ctx.comm.rank]);
  });
  // 100 bytes round down to 25 int32 = 100 bytes per chunk.
  assert.deepEqual(asked, [[200], [200], [200]]);
});
