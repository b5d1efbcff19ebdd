/**
 * A rank of `bench/tfjs.ts` (under dcomm's launcher): the demo's CNN (`examples/train_tfjs.ts`) fit with a
 * DistributedOptimizer on `--steps` batches of `--batch` seeded random digits per rank, after a warm-up
 * fit of 3 batches, and what its steps did, averaged over the ranks: samples per second, the wall time per
 * batch, and from the optimizer's step reports the glue (gradients into the buckets, tensors over the
 * averages), the launch of the collectives, the wrapped optimizer's own update, the update's latency (from
 * `applyGradients()` to the whole update applied) and the communication thread's time for the buckets.
 * Rank 0 prints `RESULT {json}`.
 *
 * @module
 */
import { parseArgs } from "node:util";
import * as tf from "npm:@tensorflow/tfjs@4.22.0";
import { init } from "@dcomm/dcomm";
import { DistributedOptimizer } from "@dcomm/dcomm/tfjs";

const { values: flags } = parseArgs({
  args: Deno.args,
  options: {
    steps: { type: "string", default: "20" },
    batch: { type: "string", default: "32" },
    overlap: { type: "string", default: "true" },
    "bucket-mb": { type: "string", default: "25" },
    "first-bucket-mb": { type: "string", default: "0.01" },
  },
});
const STEPS = Number(flags.steps), BATCH = Number(flags.batch);

tf.enableProdMode();
await tf.setBackend("cpu");
await using pg = await init();
const model = tf.sequential({
  layers: [
    tf.layers.conv2d({ inputShape: [28, 28, 1], filters: 8, kernelSize: 4, strides: 4, activation: "relu" }),
    tf.layers.conv2d({ filters: 16, kernelSize: 3, activation: "relu" }),
    tf.layers.flatten(),
    tf.layers.dense({ units: 64, activation: "relu" }),
    tf.layers.dense({ units: 10, activation: "softmax" }),
  ],
});
const optimizer = new DistributedOptimizer(pg, tf.train.adam(1e-3), {
  overlap: flags.overlap === "true",
  bucketMb: Number(flags["bucket-mb"]),
  firstBucketMb: Number(flags["first-bucket-mb"]),
});
model.compile({ optimizer, loss: "categoricalCrossentropy" });
const n = STEPS * BATCH;
const x = tf.randomUniform([n, 28, 28, 1], 0, 1, "float32", 7 + pg.rank);
const y = tf.oneHot(tf.randomUniform([n], 0, 10, "int32", 11 + pg.rank), 10);
await model.fit(x.slice(0, 3 * BATCH), y.slice(0, 3 * BATCH), { batchSize: BATCH, verbose: 0 });

const sums = { glue: 0, copy: 0, wrap: 0, launch: 0, apply: 0, update: 0, thread: 0 };
const stats = new tf.CustomCallback({
  onBatchEnd: () => {
    const s = optimizer.lastStep;
    if (s === undefined) return;
    sums.copy += s.copyInMs;
    sums.wrap += s.wrapMs;
    sums.glue += s.copyInMs + s.wrapMs;
    sums.launch += s.launchMs;
    sums.apply += s.applyMs;
    sums.update += s.stepMs;
    sums.thread += s.communication.lastFinishedAt - s.communication.firstStartedAt;
  },
});
await pg.barrier();
const t0 = performance.now();
await model.fit(x, y, { batchSize: BATCH, shuffle: false, verbose: 0, callbacks: [stats] });
const wallMs = performance.now() - t0;
const values = new Float64Array([
  wallMs,
  sums.glue,
  sums.copy,
  sums.wrap,
  sums.launch,
  sums.apply,
  sums.update,
  sums.thread,
]);
await pg.allReduce(values, { op: "avg" });
const [wall, glue, copy, wrap, launch, apply, update, thread] = [...values].map((
  v,
  i,
) => (i === 0 ? v : v / STEPS));
// Waiting for the averages (and for peers still computing): the update's latency less what this rank did.
const wait = Math.max(0, update - glue - apply);
const stepMs = wall / STEPS;
if (pg.rank === 0) {
  console.log(`RESULT ${
    JSON.stringify({
      ranks: pg.size,
      overlap: optimizer.overlapping,
      parameters: model.countParams(),
      buckets: optimizer.buckets.map((b) => ({ params: b.params, bytes: b.bytes })),
      steps: STEPS,
      batchPerRank: BATCH,
      samplesPerSec: (pg.size * n) / (wall / 1000),
      stepMs,
      glueMs: glue,
      copyInMs: copy,
      wrapMs: wrap,
      launchMs: launch,
      applyMs: apply,
      updateMs: update,
      waitMs: wait,
      commThreadMs: thread,
      glueShare: glue / stepMs,
      commShare: wait / stepMs,
    })
  }`);
}
await optimizer.close();
