/**
 * TensorFlow.js data-parallel training (`@dcomm/dcomm/tfjs`): Horovod's Keras API for tfjs models.
 *
 * - {@linkcode DistributedOptimizer} wraps any `tf.Optimizer` and is one: gradients are averaged over the
 *   ranks in DistributedDataParallel's buckets, through any of its communication hooks (fp16/bf16, int8,
 *   1-bit, top-k, PowerSGD), and each bucket's update is applied as its average arrives.
 * - {@linkcode broadcastVariables}: the root's weights (or optimizer state) on every rank.
 * - Callbacks for `model.fit()`: {@linkcode broadcastWeights}, {@linkcode metricAverage},
 *   {@linkcode learningRateWarmup}.
 * - {@linkcode shard} and {@linkcode shardDataset}: each rank's disjoint part of the data.
 *
 * Which tfjs: this module imports `npm:@tensorflow/tfjs@4.22.0`, the specifier a training script imports,
 * rather than taking the script's `tf` namespace as an argument. Deno resolves both imports to one module
 * instance, so there is one tfjs-core in the process (one engine, one kernel registry, one `tf.Optimizer`
 * class for `DistributedOptimizer` to extend and `model.compile()` to accept), and the API stays tfjs's own
 * (`new DistributedOptimizer(pg, tf.train.adam())`, callbacks that are `tf.Callback`s) with no namespace to
 * thread through. Import that version; `@dcomm/dcomm` itself never loads tfjs, only this entry point does.
 * Any backend the script sets works (`cpu`, `wasm`); on `cpu` the averaged gradients reach the optimizer
 * without a copy.
 *
 * @example Four ranks train one model (`deno run -A jsr:@dcomm/dcomm/launch --nproc-per-node 4 train.ts`)
 * ```ts
 * import * as tf from "npm:@tensorflow/tfjs@4.22.0";
 * import { init } from "@dcomm/dcomm";
 * import {
 *   broadcastWeights,
 *   DistributedOptimizer,
 *   learningRateWarmup,
 *   metricAverage,
 *   shard,
 * } from "@dcomm/dcomm/tfjs";
 * await using pg = await init({ rank: 0, worldSize: 1, env: {} }); // init() under a launcher
 * const x = tf.randomNormal([64, 8], 0, 1, "float32", 1);
 * const y = x.sum(1, true);
 * const mine = shard(64, pg); // this rank's samples
 * const model = tf.sequential({ layers: [tf.layers.dense({ units: 1, inputShape: [8] })] });
 * model.compile({ optimizer: new DistributedOptimizer(pg, tf.train.sgd(0.05)), loss: "meanSquaredError" });
 * const history = await model.fit(tf.gather(x, mine), tf.gather(y, mine), {
 *   epochs: 3,
 *   batchSize: 8,
 *   verbose: 0,
 *   callbacks: [broadcastWeights(pg), learningRateWarmup(pg, { warmupEpochs: 1 }), metricAverage(pg)],
 * });
 * console.log(history.history.loss); // the same numbers on every rank
 * ```
 *
 * @module
 */
export {
  DistributedOptimizer,
  type DistributedOptimizerOptions,
  type OptimizerStepReport,
  type VariableSource,
} from "./distributed_optimizer.ts";
export { type BroadcastSource, broadcastVariables, type BroadcastVariablesOptions } from "./broadcast.ts";
export {
  broadcastWeights,
  type BroadcastWeightsOptions,
  learningRateWarmup,
  type LearningRateWarmupOptions,
  metricAverage,
} from "./callbacks.ts";
export { shard, shardDataset, type ShardOptions } from "./shard.ts";
export { ShardedOptimizer, type ShardedOptimizerOptions } from "./sharded_optimizer.ts";
