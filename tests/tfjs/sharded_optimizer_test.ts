/**
 * ShardedOptimizer (ZeRO stages 1 and 2 under a tf.Optimizer) on real ranks: seeded gradients give the
 * optimizer kernel's result on exact averages, bit for bit; `model.fit()` trains like DistributedOptimizer
 * over tfjs's SGD; bad use is refused.
 */
import assert from "node:assert/strict";
import * as tf from "npm:@tensorflow/tfjs@4.22.0";
import { init } from "../../backend/init.ts";
import { spawnThreads } from "../../backend/threads.ts";
import { ShardedOptimizer } from "../../tfjs/mod.ts";

const FIXTURE = new URL("./_fixtures/sharded_rank.ts", import.meta.url);
// deno-lint-ignore no-explicit-any
const run = (worldSize: number, args: Record<string, unknown>): Promise<any[]> =>
  spawnThreads(FIXTURE, { worldSize, args, timeoutMs: 120_000 }) as Promise<unknown[]> as Promise<never>;

Deno.test("ShardedOptimizer: stages 1 and 2 with SGD and Adam equal the kernel on exact averages, bit for bit", async () => {
  for (
    const [stage, optimizer, size] of [
      [1, { type: "sgd", lr: 0.1, momentum: 0.9 }, 2],
      [2, { type: "adam", lr: 0.01 }, 4],
      [2, { type: "adamw", lr: 0.01 }, 2],
    ] as const
  ) {
    const results = await run(size, { scenario: "exact", stage, optimizer });
    for (const r of results) assert.deepEqual([r.diffs, r.step], [[], 3], `stage ${stage} ${optimizer.type}`);
  }
});

Deno.test("ShardedOptimizer under model.fit() trains as DistributedOptimizer over tfjs's SGD does", async () => {
  for (const stage of [1, 2] as const) {
    const results = await run(2, { scenario: "fit", stage });
    for (const r of results) {
      // Both average the same gradients; p − lr·g in float32 either way (tfjs's kernels or ours).
      assert.ok(r.maxDiff <= 1e-6, `stage ${stage}: max |sharded − ddp| ${r.maxDiff}`);
      assert.equal(r.steps, 12); // 3 epochs of 4 batches
    }
    assert.deepEqual(results[0].weights, results[1].weights);
    // Stage 2 keeps half of the gradients and of the momentum-free state per rank.
    if (stage === 2) assert.ok(results[0].memory.grads < 4 * (8 * 16 + 16 + 16 + 1));
  }
});

Deno.test("ShardedOptimizer refuses stage 3, a step before build, and a step in flight", async () => {
  await tf.setBackend("cpu");
  await using pg = await init({ rank: 0, worldSize: 1, env: {} });
  assert.throws(
    () => new ShardedOptimizer(pg, { stage: 3 as never, optimizer: { type: "sgd", lr: 0.1 } }),
    /expected stage 1 or 2, found 3 \(a tfjs model holds every variable whole: stage 3 would save nothing\)/,
  );
  await using opt = new ShardedOptimizer(pg, { stage: 1, optimizer: { type: "sgd", lr: 0.1 } });
  const w = tf.variable(tf.tensor1d([1, 2]), true, "sharded-refuse/w");
  assert.throws(
    () => opt.applyGradients({ [w.name]: tf.tensor1d([1, 1]) }),
    /not built; await build\(model\) first/,
  );
  await opt.build([w]);
  assert.throws(
    () => opt.applyGradients({ other: tf.tensor1d([1, 1]) }),
    /other: it is not a variable of the layout/,
  );
  opt.applyGradients({ [w.name]: tf.tensor1d([1, 1]) });
  assert.throws(
    () => opt.applyGradients({ [w.name]: tf.tensor1d([1, 1]) }),
    /still in flight; await synchronize\(\) first/,
  );
  await opt.synchronize();
  assert.deepEqual([...w.dataSync()], [0.9, 1.9].map(Math.fround));
});
