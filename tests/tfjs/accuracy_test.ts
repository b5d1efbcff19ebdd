/**
 * Data parallelism keeps accuracy: 4 ranks, each a batch of b digits, against 1 rank with a batch of 4b over
 * the same digits in the same order (rank r's batch k is its part of the reference's batch k), one epoch
 * from the same seeded weights; the ranks end with identical weights. The reference runs here, in the test's
 * thread, while the ranks run in theirs.
 *
 * The setting (4,800 digits, SGD with momentum 0.5): one epoch is far from convergence, where any change of
 * trajectory moves the test accuracy by a point or two, so the test trains long enough for the compressing
 * hooks' comparison to mean something. With momentum 0.9 the 1-bit hook (error feedback before the
 * momentum) fell 25 points behind in this epoch; that is the hook's known weakness, not dcomm's.
 */
import assert from "node:assert/strict";
import * as tf from "npm:@tensorflow/tfjs@4.22.0";
import { spawnThreads } from "../../backend/threads.ts";
import { accuracyOf, cnn, digits } from "./_fixtures/mnist_cnn.ts";
import { type AccuracyArgs, accuracyOptimizer } from "./_fixtures/tfjs_rank.ts";

tf.enableProdMode();

const ARGS: AccuracyArgs = {
  hooks: ["allreduce", "1bit", "powersgd"],
  train: 4800,
  batch: 4,
  lr: 0.1,
  momentum: 0.5,
};

Deno.test("4 ranks × batch b match 1 rank × 4b within 0.5 point (1-bit and PowerSGD within 1), with identical weights on every rank", async () => {
  const ranks = spawnThreads(new URL("./_fixtures/tfjs_rank.ts", import.meta.url), {
    worldSize: 4,
    args: { scenario: "accuracy", ...ARGS },
    timeoutMs: 240_000,
  }) as Promise<Record<string, { accuracy: number; checksum: number }>[]>;
  const reference = (async () => {
    await tf.setBackend("cpu");
    const data = digits(ARGS.train);
    const model = cnn();
    model.compile({ optimizer: accuracyOptimizer(ARGS), loss: "categoricalCrossentropy" });
    await model.fit(data.trainX, data.trainY, {
      epochs: 1,
      batchSize: 4 * ARGS.batch,
      shuffle: false,
      verbose: 0,
    });
    const accuracy = accuracyOf(model, data);
    tf.dispose([data.trainX, data.trainY, data.testX, data.testY]);
    model.dispose();
    return accuracy;
  })();
  const [results, expected] = await Promise.all([ranks, reference]);
  assert.ok(expected > 80, `the reference learned: ${expected}%`);
  for (const [hook, tolerance] of [["allreduce", 0.5], ["1bit", 1], ["powersgd", 1]] as const) {
    for (const r of results) {
      assert.equal(r[hook].checksum, results[0][hook].checksum, `${hook}: weights differ`);
    }
    const got = results[0][hook].accuracy;
    assert.ok(Math.abs(got - expected) <= tolerance, `${hook}: ${got}% vs the reference's ${expected}%`);
  }
});
