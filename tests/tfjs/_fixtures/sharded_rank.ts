/**
 * Rank bodies of the ShardedOptimizer tests (run by `spawnThreads`): `exact` applies seeded gradients
 * (multiples of 1/64, so their averages over 2 or 4 ranks are exact) to four variables for three steps and
 * compares with the optimizer kernel run on the exact averages; `fit` trains a small model with
 * `model.fit()` under a ShardedOptimizer and, from the same weights, under a DistributedOptimizer over
 * tfjs's SGD.
 */
import * as tf from "npm:@tensorflow/tfjs@4.22.0";
import type { ProcessGroup } from "../../../backend/process_group.ts";
import { optimizerKernels } from "../../../wasm/optim.ts";
import { DistributedOptimizer, ShardedOptimizer } from "../../../tfjs/mod.ts";
import type { ZeroOptimizer } from "../../../zero/mod.ts";

tf.enableProdMode();
await tf.setBackend("cpu");

const SHAPES = [[6, 5], [5], [5, 3], [3]];

function grad(r: number, i: number, j: number, s: number): number {
  return (((r * 131 + i * 31 + j * 7 + s * 17) % 512) - 256) / 64;
}

const sizeOf = (shape: number[]): number => shape.reduce((a, b) => a * b, 1);
const start = (i: number, j: number): number => Math.fround(Math.cos(i * 10 + j) / 2);

/** Runs the scenario on this rank. */
export async function main(pg: ProcessGroup, ctx: { args: unknown }): Promise<unknown> {
  const { scenario, stage, optimizer } = ctx.args as {
    scenario: string;
    stage: 1 | 2;
    optimizer: ZeroOptimizer;
  };
  if (scenario === "exact") {
    const vars = SHAPES.map((shape, i) =>
      tf.variable(
        tf.tensor(Float32Array.from({ length: sizeOf(shape) }, (_, j) => start(i, j)), shape),
        true,
        `v${i}`,
      )
    );
    await using opt = new ShardedOptimizer(pg, { stage, optimizer });
    await opt.build(vars);
    for (let s = 0; s < 3; s++) {
      opt.applyGradients(Object.fromEntries(vars.map((v, i) => [
        v.name,
        tf.tensor(
          Float32Array.from({ length: sizeOf(SHAPES[i]) }, (_, j) => grad(pg.rank, i, j, s)),
          SHAPES[i],
        ),
      ])));
      await opt.synchronize();
    }
    // The reference: the same kernel over whole arrays and exact averages.
    const k = await optimizerKernels();
    const diffs: string[] = [];
    SHAPES.forEach((shape, i) => {
      const n = sizeOf(shape), p = Float32Array.from({ length: n }, (_, j) => start(i, j));
      const m = new Float32Array(n), v = new Float32Array(n);
      for (let s = 0; s < 3; s++) {
        const g = Float32Array.from({ length: n }, (_, j) => {
          let sum = 0;
          for (let r = 0; r < pg.size; r++) sum += grad(r, i, j, s);
          return sum / pg.size;
        });
        if (optimizer.type === "sgd") k.sgd(p, g, { ...optimizer, buffer: m, first: s === 0 });
        else {k.adam(p, g, {
            m,
            v,
            step: s + 1,
            lr: optimizer.lr,
            decoupled: optimizer.type === "adamw",
            weightDecay: optimizer.weightDecay ?? (optimizer.type === "adamw" ? 0.01 : 0),
          });}
      }
      const got = vars[i].dataSync();
      const j = p.findIndex((x, j) => !Object.is(x, got[j]));
      if (j >= 0) diffs.push(`v${i}[${j}]: ${got[j]}, reference ${p[j]}`);
    });
    return { diffs, step: opt.lastStep?.step };
  }
  if (scenario === "fit") {
    const make = (): tf.Sequential =>
      tf.sequential({
        layers: [
          tf.layers.dense({
            units: 16,
            inputShape: [8],
            activation: "relu",
            kernelInitializer: tf.initializers.glorotUniform({ seed: 1 }),
          }),
          tf.layers.dense({ units: 1, kernelInitializer: tf.initializers.glorotUniform({ seed: 2 }) }),
        ],
      });
    const x = tf.randomNormal([64, 8], 0, 1, "float32", 10 + pg.rank),
      y = tf.randomNormal([64, 1], 0, 1, "float32", 20 + pg.rank);
    const sharded = make(), plain = make();
    const sopt = new ShardedOptimizer(pg, { stage, optimizer: { type: "sgd", lr: 0.05 } });
    sharded.compile({ optimizer: sopt, loss: "meanSquaredError" });
    plain.compile({ optimizer: new DistributedOptimizer(pg, tf.train.sgd(0.05)), loss: "meanSquaredError" });
    await sharded.fit(x, y, { epochs: 3, batchSize: 16, verbose: 0, shuffle: false });
    await plain.fit(x, y, { epochs: 3, batchSize: 16, verbose: 0, shuffle: false });
    const a = sharded.getWeights().flatMap((w) => [...w.dataSync()]);
    const b = plain.getWeights().flatMap((w) => [...w.dataSync()]);
    const memory = sopt.trainer?.memory();
    await sopt.close();
    return {
      maxDiff: Math.max(...a.map((v, i) => Math.abs(v - b[i]))),
      weights: a,
      memory,
      steps: sopt.lastStep?.step,
    };
  }
  throw new Error(`unknown scenario ${scenario}`);
}
