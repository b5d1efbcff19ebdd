import assert from "node:assert/strict";
import { disseminationBarrier } from "../../collectives/dissemination_barrier.ts";
import { runWorld, SIZES } from "./_harness.ts";

Deno.test("disseminationBarrier() sends ⌈log2 n⌉ empty messages per rank on 1, 2, 3, 4, 5, 8 and 16 ranks", async () => {
  for (const n of [...SIZES, 16]) {
    const { sent } = await runWorld({ size: n, dtype: "int32" }, (ctx) => disseminationBarrier(ctx));
    for (const s of sent) assert.deepEqual(s, { messages: Math.ceil(Math.log2(n)), bytes: 0 });
  }
});

Deno.test("disseminationBarrier() lets no rank leave before the last one enters", async () => {
  for (const n of [2, 3, 5, 8]) {
    for (let late = 0; late < n; late++) {
      let entered = 0;
      const left: number[] = [];
      let release = (): void => {};
      const gate = new Promise<void>((resolve) => release = resolve);
      const run = runWorld({ size: n, dtype: "int32", delivery: "eager" }, async (ctx) => {
        if (ctx.comm.rank === late) await gate;
        entered++;
        await disseminationBarrier(ctx);
        left.push(entered);
      });
      // Give every other rank time to run as far as it can.
      for (let i = 0; i < 20; i++) await Promise.resolve();
      await new Promise((resolve) => setTimeout(resolve, 0));
      assert.equal(left.length, 0, `n=${n}: a rank left while rank ${late} was outside`);
      release();
      await run;
      assert.deepEqual(left, Array(n).fill(n));
    }
  }
});
