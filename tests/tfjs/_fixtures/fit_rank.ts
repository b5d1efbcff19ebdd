/**
 * A rank of the tfjs fault test, started directly (not by the launcher, which would stop the others
 * itself): `model.fit()` with a DistributedOptimizer and the callbacks, for far longer than the test waits,
 * printing `STARTED` after the first batch; the test kills one rank. Every other rank prints
 * `FAILED <name> <ms> <message>` when its fit fails, or `DONE`.
 */
import * as tf from "npm:@tensorflow/tfjs@4.22.0";
import { init } from "../../../backend/init.ts";
import { broadcastWeights, DistributedOptimizer, metricAverage } from "../../../tfjs/mod.ts";

tf.enableProdMode();
await tf.setBackend("cpu");
const pg = await init({ timeoutMs: 60_000 });
const model = tf.sequential({
  layers: [
    tf.layers.dense({ units: 64, inputShape: [32], activation: "relu" }),
    tf.layers.dense({ units: 1 }),
  ],
});
model.compile({ optimizer: new DistributedOptimizer(pg, tf.train.adam(1e-3)), loss: "meanSquaredError" });
let started = false;
let t0 = 0;
try {
  await model.fit(
    tf.randomNormal([256, 32], 0, 1, "float32", 1),
    tf.randomNormal([256, 1], 0, 1, "float32", 2),
    {
      epochs: 100_000,
      batchSize: 16,
      verbose: 0,
      callbacks: [
        broadcastWeights(pg),
        metricAverage(pg),
        new tf.CustomCallback({
          onBatchEnd: () => {
            if (!started) console.log("STARTED");
            started = true;
            t0 = performance.now();
          },
        }),
      ],
    },
  );
  console.log("DONE");
} catch (e) {
  console.log(`FAILED ${(e as Error).name} ${Math.round(performance.now() - t0)} ${(e as Error).message}`);
}
Deno.exit(0);
