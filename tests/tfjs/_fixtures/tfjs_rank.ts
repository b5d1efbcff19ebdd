/**
 * Rank bodies of the tfjs tests (run by `spawnThreads`; each rank a Worker with its own tfjs); `args.scenario`
 * names which. Gradients are seeded multiples of 1/64, so sums over 2 or 4 ranks and their averages are exact
 * in float32 and a reference optimizer applying the float64 average must land on the same bits.
 */
import * as tf from "npm:@tensorflow/tfjs@4.22.0";
import type { ProcessGroup } from "../../../backend/process_group.ts";
import { MismatchError } from "../../../core/errors.ts";
import {
  allReduceHook,
  bf16CompressHook,
  type CommHook,
  fp16CompressHook,
  type HookBucket,
  type HookReport,
  int8CompressHook,
  powerSgdHook,
  signCompressHook,
  topKHook,
} from "../../../ddp/mod.ts";
import {
  broadcastWeights,
  DistributedOptimizer,
  learningRateWarmup,
  metricAverage,
  shard,
} from "../../../tfjs/mod.ts";
import { accuracyOf, cnn, digits } from "./mnist_cnn.ts";

tf.enableProdMode();
await tf.setBackend("cpu");

/** The optimizers under test, each made fresh. */
export const OPTIMIZERS: Record<string, () => tf.Optimizer> = {
  sgd: () => tf.train.sgd(0.1),
  momentum: () => tf.train.momentum(0.05, 0.9),
  nesterov: () => tf.train.momentum(0.05, 0.9, true),
  adam: () => tf.train.adam(0.01),
  adamax: () => tf.train.adamax(0.01),
  adagrad: () => tf.train.adagrad(0.1),
  adadelta: () => tf.train.adadelta(1),
  rmsprop: () => tf.train.rmsprop(0.01, 0.9, 0.5),
  rmspropCentered: () => tf.train.rmsprop(0.01, 0.9, 0.5, 1e-7, true),
};

const SHAPES = [[6, 5], [5], [5, 3], [3]];

/** Rank r's gradient element j of variable i at step s, pass p: a multiple of 1/64 in [-4, 4). */
function grad(r: number, i: number, j: number, s: number, p: number): number {
  return (((r * 131 + i * 31 + j * 7 + s * 17 + p * 59) % 512) - 256) / 64;
}

function gradTensor(r: number, i: number, s: number, p: number): tf.Tensor {
  const n = SHAPES[i].reduce((a, b) => a * b, 1);
  return tf.tensor(Float32Array.from({ length: n }, (_, j) => grad(r, i, j, s, p)), SHAPES[i]);
}

/** Whether rank r has a gradient for variable i at step s: the rule the scenarios use. */
function has(mode: "zero" | "skip", r: number, i: number, s: number): boolean {
  if (i === 1 && s === 1 && r === 0) return false; // missing on one rank: zeros there
  if (mode === "skip" && i === 3 && s === 2) return false; // missing on every rank: left alone
  return true;
}

function initial(i: number): tf.Tensor {
  const n = SHAPES[i].reduce((a, b) => a * b, 1);
  return tf.tensor(Float32Array.from({ length: n }, (_, j) => ((j * 13 + i * 7) % 17 - 8) / 16), SHAPES[i]);
}

/** FNV-1a over the bytes of every tensor: the same bits give the same number. */
function checksum(tensors: readonly tf.Tensor[]): number {
  let h = 0x811c9dc5;
  for (const t of tensors) {
    const bytes = new Uint8Array((t.dataSync() as Float32Array).slice().buffer);
    for (const b of bytes) h = Math.imul(h ^ b, 0x01000193);
  }
  return h >>> 0;
}

function firstDifference(a: readonly tf.Tensor[], b: readonly tf.Tensor[]): string | undefined {
  for (let i = 0; i < a.length; i++) {
    const x = a[i].dataSync(), y = b[i].dataSync();
    for (let j = 0; j < x.length; j++) {
      if (!Object.is(x[j], y[j])) return `variable ${i}[${j}]: ${x[j]} vs reference ${y[j]}`;
    }
  }
  return undefined;
}

/** Runs the scenario on this rank. */
export async function main(pg: ProcessGroup, ctx: { args: unknown }): Promise<unknown> {
  const { scenario } = ctx.args as { scenario: string };
  if (scenario === "optimizers") return await optimizers(pg);
  if (scenario === "hooks") return await hooks(pg);
  if (scenario === "fit") return await fit(pg);
  if (scenario === "accuracy") return await accuracy(pg, ctx.args as AccuracyArgs);
  if (scenario === "mismatch-broadcast" || scenario === "mismatch-buckets") {
    return await mismatch(pg, scenario);
  }
  throw new Error(`unknown scenario ${scenario}`);
}

/**
 * Every optimizer kind, with and without overlap, one and two passes per step, missing gradients counted as
 * zeros or skipped: 3 steps through a DistributedOptimizer against the same kind of optimizer applied to the
 * exact average on this rank. Returns the first differing element (none expected) and a checksum.
 */
async function optimizers(pg: ProcessGroup): Promise<unknown> {
  const out: Record<string, unknown> = {};
  for (const [kind, make] of Object.entries(OPTIMIZERS)) {
    for (const overlap of [true, false]) {
      for (const passes of [1, 2]) {
        for (const mode of ["zero", "skip"] as const) {
          const key = `${kind} overlap=${overlap} passes=${passes} ${mode}`;
          const vars = SHAPES.map((_, i) =>
            tf.variable(initial(i), true, `${kind}${overlap}${passes}${mode}/v${i}`)
          );
          const refs = SHAPES.map((_, i) => tf.variable(initial(i), true, `ref/${key}/v${i}`));
          const reference = make();
          await using dopt = new DistributedOptimizer(pg, make(), {
            overlap,
            backwardPassesPerStep: passes,
            unusedGradients: mode,
            bucketMb: 0.0001, // ~100 bytes: [v3, v2], [v1, v0]
            firstBucketMb: 0.00005,
          });
          for (let s = 0; s < 3; s++) {
            for (let p = 0; p < passes; p++) {
              // A map with the gradients this rank has; the first call lists every variable (null where none).
              const grads = vars.map((v, i) => ({
                name: v.name,
                tensor: has(mode, pg.rank, i, s) ? gradTensor(pg.rank, i, s, p) : null,
              }));
              dopt.applyGradients(grads as { name: string; tensor: tf.Tensor }[]);
              tf.dispose(grads.map((g) => g.tensor).filter((t): t is tf.Tensor => t !== null));
            }
            await dopt.synchronize();
            const averages = SHAPES.map((_, i) => {
              const anyone = Array.from({ length: pg.size }, (_, r) => has(mode, r, i, s)).some(Boolean);
              if (mode === "skip" && !anyone) return null;
              const n = SHAPES[i].reduce((a, b) => a * b, 1);
              const avg = new Float64Array(n);
              for (let r = 0; r < pg.size; r++) {
                if (!has(mode, r, i, s)) continue;
                for (let p = 0; p < passes; p++) for (let j = 0; j < n; j++) avg[j] += grad(r, i, j, s, p);
              }
              return tf.tensor(Float32Array.from(avg, (v) => v / (pg.size * passes)), SHAPES[i]);
            });
            reference.applyGradients(refs.map((v, i) => ({ name: v.name, tensor: averages[i] })) as never);
            tf.dispose(averages.filter((t): t is tf.Tensor => t !== null));
          }
          let state: string | undefined;
          if (kind !== "adamax") {
            const [mine, theirs] = [await dopt.getWeights(), await reference.getWeights()];
            state = firstDifference(mine.map((w) => w.tensor), theirs.map((w) => w.tensor)) ??
              (mine.length === theirs.length
                ? undefined
                : `${mine.length} state tensors vs ${theirs.length}`);
          }
          out[key] = {
            difference: firstDifference(vars, refs),
            state,
            iterations: dopt.iterations,
            buckets: dopt.buckets.map((b) => b.params),
            checksum: checksum(vars),
            skipped: dopt.lastStep?.skipped,
          };
          tf.dispose([...vars, ...refs]);
          reference.dispose();
        }
      }
    }
  }
  return out;
}

/** A hook that records what the hook it wraps leaves in each bucket. */
function recording(hook: CommHook, seen: Map<number, Float32Array>): CommHook {
  return {
    name: hook.name,
    async run(pg, bucket: HookBucket): Promise<HookReport> {
      const report = await hook.run(pg, bucket);
      bucket.params.forEach((i, k) => {
        const n = SHAPES_H[i].reduce((a, b) => a * b, 1);
        seen.set(i, (bucket.buffer as Float32Array).slice(bucket.offsets[k], bucket.offsets[k] + n));
      });
      return report;
    },
    state: () => hook.state(),
    load: (s) => hook.load(s),
  };
}

const SHAPES_H = [[24, 16], [16], [16, 8], [8]];

/**
 * Every hook through a DistributedOptimizer (Adam): what the optimizer applied is what the hook produced, bit
 * for bit (a reference Adam fed the recorded averages lands on the same weights); the uncompressing and
 * quantising hooks' averages are within their bound of the exact average.
 */
async function hooks(pg: ProcessGroup): Promise<unknown> {
  const makers: Record<string, () => CommHook> = {
    allreduce: allReduceHook,
    fp16: fp16CompressHook,
    bf16: bf16CompressHook,
    int8: () => int8CompressHook({ blockSize: 64 }),
    "1bit": () => signCompressHook({ blockSize: 64 }),
    topk: () => topKHook({ ratio: 0.1 }),
    powersgd: () => powerSgdHook({ rank: 2, minCompressionRate: 1 }),
  };
  const out: Record<string, unknown> = {};
  for (const [name, make] of Object.entries(makers)) {
    const seen = new Map<number, Float32Array>();
    const vars = SHAPES_H.map((s, i) => tf.variable(tf.fill(s, 0.5), true, `${name}/h${i}`));
    const refs = SHAPES_H.map((s, i) => tf.variable(tf.fill(s, 0.5), true, `ref/${name}/h${i}`));
    const reference = tf.train.adam(0.01);
    await using dopt = new DistributedOptimizer(pg, tf.train.adam(0.01), {
      hook: recording(make(), seen),
      bucketMb: 0.001,
      firstBucketMb: 0.0005,
    });
    let worst = 0;
    const codecs = new Set<string>();
    for (let s = 0; s < 4; s++) {
      const grads: Record<string, tf.Tensor> = {};
      const exact = SHAPES_H.map((shape, i) => {
        const n = shape.reduce((a, b) => a * b, 1);
        const e = new Float64Array(n);
        for (let r = 0; r < pg.size; r++) {
          for (let j = 0; j < n; j++) e[j] += Math.sin(r + i * 3 + j * 0.1 + s) / pg.size;
        }
        grads[vars[i].name] = tf.tensor(
          Float32Array.from({ length: n }, (_, j) => Math.sin(pg.rank + i * 3 + j * 0.1 + s)),
          shape,
        );
        return e;
      });
      dopt.applyGradients(grads);
      tf.dispose(Object.values(grads));
      const step = await dopt.synchronize();
      for (const b of step?.communication.buckets ?? []) if (b.hook.codec) codecs.add(b.hook.codec);
      const averages = SHAPES_H.map((shape, i) => tf.tensor(seen.get(i) as Float32Array, shape));
      reference.applyGradients(refs.map((v, i) => ({ name: v.name, tensor: averages[i] })) as never);
      tf.dispose(averages);
      exact.forEach((e, i) => {
        const got = seen.get(i) as Float32Array;
        e.forEach((v, j) => (worst = Math.max(worst, Math.abs(got[j] - v))));
      });
    }
    out[name] = {
      difference: firstDifference(vars, refs),
      worst,
      codecs: [...codecs],
      checksum: checksum(vars),
      buckets: dopt.buckets.length,
    };
    tf.dispose([...vars, ...refs]);
    reference.dispose();
  }
  return out;
}

/**
 * `model.fit()` with every callback: each rank starts from its own random weights (broadcastWeights makes
 * them rank 0's), trains on its shard with a warmed-up learning rate, and records, per epoch, its own loss
 * (a callback before metricAverage) and the averaged one (the history), and the rate before every batch.
 */
async function fit(pg: ProcessGroup): Promise<unknown> {
  const n = 96, batch = 8, epochs = 3;
  const x = tf.randomNormal([n, 6], 0, 1, "float32", 11);
  const y = tf.tidy(() => x.matMul(tf.tensor2d([[1], [-2], [0.5], [0], [1.5], [-1]])).tanh());
  const model = tf.sequential({
    layers: [
      tf.layers.dense({
        units: 8,
        inputShape: [6],
        activation: "tanh",
        kernelInitializer: tf.initializers.glorotUniform({ seed: 100 + pg.rank }),
      }),
      tf.layers.dense({
        units: 1,
        kernelInitializer: tf.initializers.glorotUniform({ seed: 200 + pg.rank }),
      }),
    ],
  });
  const dopt = new DistributedOptimizer(pg, tf.train.sgd(0.05), { firstBucketMb: 0.0001 });
  model.compile({ optimizer: dopt, loss: "meanSquaredError" });
  const startChecksum = checksum(model.getWeights());
  const local: number[] = [];
  const rates: number[] = [];
  const mine = shard(n, pg, { seed: 5 });
  const history = await model.fit(tf.gather(x, mine), tf.gather(y, mine), {
    epochs,
    batchSize: batch,
    shuffle: false,
    verbose: 0,
    callbacks: [
      broadcastWeights(pg),
      new tf.CustomCallback({ onEpochEnd: (_e, logs) => void local.push(logs?.loss as number) }),
      learningRateWarmup(pg, { warmupEpochs: 2 }),
      new tf.CustomCallback({ onBatchBegin: () => void rates.push(dopt.learningRate) }),
      metricAverage(pg),
    ],
  });
  const weights = model.getWeights();
  const result = {
    startChecksum,
    checksum: checksum(weights),
    history: history.history.loss,
    local,
    rates,
    stepsPerEpoch: Math.ceil(mine.length / batch),
    iterations: dopt.iterations,
    numTensors: 0,
  };
  await dopt.close();
  return result;
}

/**
 * The accuracy of data parallelism: this rank's shard of the digits, batch `b`, one epoch, for each hook; the
 * 1-rank reference (batch size × b over every digit) runs in the test itself. Returns each hook's test
 * accuracy and weight checksum.
 */
async function accuracy(pg: ProcessGroup, args: AccuracyArgs): Promise<unknown> {
  const data = digits(args.train);
  const mine = shard(data.trainCount, pg);
  const x = tf.gather(data.trainX, mine), y = tf.gather(data.trainY, mine);
  const out: Record<string, unknown> = {};
  for (const name of args.hooks) {
    const hook = name.startsWith("1bit")
      ? signCompressHook({ blockSize: Number(name.split(":")[1] ?? 256) })
      : name === "powersgd"
      ? powerSgdHook({ rank: 4 })
      : allReduceHook();
    const model = cnn();
    const dopt = new DistributedOptimizer(pg, accuracyOptimizer(args), { hook });
    model.compile({ optimizer: dopt, loss: "categoricalCrossentropy" });
    await model.fit(x, y, { epochs: 1, batchSize: args.batch, shuffle: false, verbose: 0 });
    out[name] = { accuracy: accuracyOf(model, data), checksum: checksum(model.getWeights()) };
    await dopt.close();
    model.dispose();
  }
  return out;
}

/** The accuracy test's settings: the hooks, digits, per-rank batch (the reference's is size times larger) and optimizer. */
export interface AccuracyArgs {
  hooks: string[];
  train: number;
  batch: number;
  lr: number;
  momentum: number;
}

/** The optimizer of the accuracy test (the reference's too). */
export function accuracyOptimizer(args: AccuracyArgs): tf.Optimizer {
  return args.momentum > 0 ? tf.train.momentum(args.lr, args.momentum) : tf.train.sgd(args.lr);
}

/**
 * Rank 1's model has a wider hidden layer: with broadcastWeights every rank fails naming each rank's
 * variables; without, the first bucket's all-reduce differs and dcomm names both calls.
 */
async function mismatch(pg: ProcessGroup, scenario: string): Promise<unknown> {
  const model = tf.sequential({
    layers: [
      tf.layers.dense({ units: pg.rank === 1 ? 6 : 4, inputShape: [3], activation: "relu" }),
      tf.layers.dense({ units: 1 }),
    ],
  });
  model.compile({ optimizer: new DistributedOptimizer(pg, tf.train.sgd(0.1)), loss: "meanSquaredError" });
  try {
    await model.fit(tf.ones([8, 3]), tf.ones([8, 1]), {
      batchSize: 4,
      verbose: 0,
      callbacks: scenario === "mismatch-broadcast" ? [broadcastWeights(pg)] : [],
    });
    return { caught: "no error" };
  } catch (e) {
    return { caught: `${(e as Error).name}: ${(e as Error).message}`, mismatch: e instanceof MismatchError };
  }
}
