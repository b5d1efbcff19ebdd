/**
 * Callbacks of `model.fit()` for data-parallel training (Horovod's Keras callbacks):
 * {@linkcode broadcastWeights} (every rank starts from the root's weights),
 * {@linkcode metricAverage} (the epoch's logs averaged over the ranks, so every rank prints, checkpoints
 * and early-stops on the same numbers) and {@linkcode learningRateWarmup} (Goyal et al.'s gradual warmup
 * to the learning rate scaled by the number of ranks).
 *
 * Each is a `tf.Callback` whose handlers are its own functions, so it works in either place tfjs puts a
 * callback: used as it is when the list starts with callback objects, or wrapped in a `tf.CustomCallback`
 * when the list starts with a plain `{ onEpochEnd }` object (then tfjs does not hand it the model, and it
 * takes the model being fit from dcomm's fit callback).
 *
 * @module
 */
import type * as tf from "./_tf.ts";
import type { ProcessGroup } from "../backend/process_group.ts";
import { DistError } from "../core/errors.ts";
import { broadcastVariables } from "./broadcast.ts";
import { DistributedOptimizer, fittingModel, registerFitSync } from "./distributed_optimizer.ts";
import { learningRateOf, setLearningRate } from "./_optimizer_state.ts";
import { Callback } from "./_tf_types.ts";

/** A callback of dcomm's: the handlers are set per instance. */
class DcommCallback extends Callback {}

/** The handlers a callback may have, as `tf.CustomCallback` calls them. */
interface Handlers {
  onTrainBegin?: (logs?: tf.Logs) => Promise<void>;
  onEpochBegin?: (epoch: number, logs?: tf.Logs) => Promise<void>;
  onBatchBegin?: (batch: number, logs?: tf.Logs) => Promise<void>;
  onEpochEnd?: (epoch: number, logs?: tf.Logs) => Promise<void>;
}

/** A callback with these handlers as its own properties; `model()` is the model being fit. */
function callback(
  name: string,
  make: (model: () => tf.LayersModel, params: () => Record<string, unknown>) => Handlers,
): Callback {
  registerFitSync();
  const cb = new DcommCallback();
  const model = (): tf.LayersModel => {
    const m = (cb.model as tf.LayersModel | undefined) ?? fittingModel();
    if (m === undefined) throw new DistError(`The ${name} callback runs only in model.fit() or fitDataset()`);
    return m;
  };
  const params = (): Record<string, unknown> => (cb.params ?? {}) as Record<string, unknown>;
  return Object.assign(cb, make(model, params));
}

/**
 * Options of {@linkcode broadcastWeights}.
 *
 * @example Rank 1's weights, the optimizer's state left alone
 * ```ts
 * import type { BroadcastWeightsOptions } from "@dcomm/dcomm/tfjs";
 * const options: BroadcastWeightsOptions = { root: 1, optimizer: false };
 * console.log(options);
 * ```
 */
export interface BroadcastWeightsOptions {
  /** The rank whose weights every rank starts from. @default 0 */
  root?: number;
  /** Broadcast the optimizer's state too (for a resumed run, restored on the root). @default true */
  optimizer?: boolean;
}

/**
 * A callback that broadcasts the root's weights (every weight of the model, then the optimizer's state) to
 * every rank when training starts (Horovod's `BroadcastGlobalVariablesCallback`).
 *
 * @param pg The process group.
 * @param options The root, and whether the optimizer's state goes too.
 * @returns The callback, for `model.fit({ callbacks })`.
 *
 * @example Every rank starts from rank 0's weights
 * ```ts
 * import * as tf from "npm:@tensorflow/tfjs@4.22.0";
 * import { init } from "@dcomm/dcomm";
 * import { broadcastWeights, DistributedOptimizer } from "@dcomm/dcomm/tfjs";
 * await using pg = await init({ rank: 0, worldSize: 1, env: {} });
 * const model = tf.sequential({ layers: [tf.layers.dense({ units: 1, inputShape: [3] })] });
 * model.compile({ optimizer: new DistributedOptimizer(pg, tf.train.sgd(0.1)), loss: "meanSquaredError" });
 * await model.fit(tf.ones([8, 3]), tf.ones([8, 1]), { callbacks: [broadcastWeights(pg)], verbose: 0 });
 * ```
 */
export function broadcastWeights(pg: ProcessGroup, options: BroadcastWeightsOptions = {}): Callback {
  const root = options.root ?? 0;
  const withOptimizer = options.optimizer ?? true;
  return callback("broadcastWeights", (model) => ({
    onTrainBegin: async () => {
      const m = model();
      await broadcastVariables(pg, m, { root });
      const optimizer = m.optimizer;
      if (withOptimizer && optimizer !== undefined) await broadcastVariables(pg, optimizer, { root });
    },
  }));
}

/**
 * A callback that replaces each number of the epoch's logs (loss, metrics, validation) with its average
 * over the ranks, before the callbacks after it and the history see them (Horovod's
 * `MetricAverageCallback`). Every rank's logs must have the same keys.
 *
 * @param pg The process group.
 * @returns The callback; list it before the callbacks that read the logs (early stopping, printing).
 *
 * @example The epoch's loss, averaged (over one rank: as it was)
 * ```ts
 * import * as tf from "npm:@tensorflow/tfjs@4.22.0";
 * import { init } from "@dcomm/dcomm";
 * import { metricAverage } from "@dcomm/dcomm/tfjs";
 * await using pg = await init({ rank: 0, worldSize: 1, env: {} });
 * const model = tf.sequential({ layers: [tf.layers.dense({ units: 1, inputShape: [3] })] });
 * model.compile({ optimizer: "sgd", loss: "meanSquaredError" });
 * const history = await model.fit(tf.ones([8, 3]), tf.ones([8, 1]), {
 *   epochs: 2,
 *   verbose: 0,
 *   callbacks: [metricAverage(pg), new tf.CustomCallback({ onEpochEnd: (e, logs) => console.log(e, logs) })],
 * });
 * console.log(history.history.loss);
 * ```
 */
export function metricAverage(pg: ProcessGroup): Callback {
  return callback("metricAverage", () => ({
    onEpochEnd: async (_epoch: number, logs?: tf.Logs) => {
      if (logs === undefined) return;
      await resolveScalars(logs);
      const keys = Object.keys(logs).sort();
      const values = new Float64Array(keys.map((k) => logs[k]));
      await pg.allReduce(values, { op: "avg" });
      keys.forEach((k, i) => (logs[k] = values[i]));
    },
  }));
}

/**
 * Options of {@linkcode learningRateWarmup}.
 *
 * @example Three epochs from 0.01 to 0.01 × size
 * ```ts
 * import type { LearningRateWarmupOptions } from "@dcomm/dcomm/tfjs";
 * const options: LearningRateWarmupOptions = { warmupEpochs: 3, initialLr: 0.01, verbose: true };
 * console.log(options);
 * ```
 */
export interface LearningRateWarmupOptions {
  /** Epochs over which the rate rises. @default 5 */
  warmupEpochs?: number;
  /** One rank's learning rate η: the rate starts there and ends at η × size. @default the optimizer's at train begin */
  initialLr?: number;
  /** Print on rank 0 when warmup ends. @default false */
  verbose?: boolean;
}

/**
 * A callback that warms the learning rate up linearly, batch by batch, from η (one rank's rate) to
 * η × size over `warmupEpochs` epochs, and keeps it there (Goyal et al. 2017, "Accurate, Large Minibatch
 * SGD"; Horovod's `LearningRateWarmupCallback`): size ranks make a batch size times larger, whose rate the
 * linear scaling rule scales by size, and the warmup keeps the first steps from diverging. The rate is set
 * on the model's optimizer (a {@linkcode DistributedOptimizer}, or any tfjs optimizer with a learning rate)
 * before each batch; without a known number of batches per epoch (`fitDataset()` without `batchesPerEpoch`)
 * it changes once per epoch. No momentum correction is applied.
 *
 * @param pg The process group (its size is the scale).
 * @param options The epochs of warmup and η.
 * @returns The callback.
 * @throws {RangeError} If `warmupEpochs` is not a number > 0 or `initialLr` not a finite number > 0.
 *
 * @example After warmup the rate is η × size (over one rank: η)
 * ```ts
 * import * as tf from "npm:@tensorflow/tfjs@4.22.0";
 * import { init } from "@dcomm/dcomm";
 * import { DistributedOptimizer, learningRateWarmup } from "@dcomm/dcomm/tfjs";
 * import assert from "node:assert/strict";
 * await using pg = await init({ rank: 0, worldSize: 1, env: {} });
 * const dopt = new DistributedOptimizer(pg, tf.train.sgd(0.05));
 * const model = tf.sequential({ layers: [tf.layers.dense({ units: 1, inputShape: [3] })] });
 * model.compile({ optimizer: dopt, loss: "meanSquaredError" });
 * const warmup = learningRateWarmup(pg, { warmupEpochs: 1, initialLr: 0.05 });
 * await model.fit(tf.ones([8, 3]), tf.ones([8, 1]), { epochs: 2, batchSize: 4, callbacks: [warmup], verbose: 0 });
 * assert.equal(dopt.learningRate, 0.05 * pg.size);
 * ```
 */
export function learningRateWarmup(pg: ProcessGroup, options: LearningRateWarmupOptions = {}): Callback {
  const warmupEpochs = options.warmupEpochs ?? 5;
  if (typeof warmupEpochs !== "number" || !(warmupEpochs > 0)) {
    throw new RangeError(`Invalid warmupEpochs: expected a number > 0, found ${String(warmupEpochs)}`);
  }
  if (options.initialLr !== undefined && !(options.initialLr > 0 && Number.isFinite(options.initialLr))) {
    throw new RangeError(
      `Invalid initialLr: expected a finite number > 0, found ${String(options.initialLr)}`,
    );
  }
  let base = 0;
  let epoch = 0;
  let done = false;
  return callback("learningRateWarmup", (model, params) => {
    const set = (at: number): void => {
      const optimizer = model().optimizer;
      const lr = at >= warmupEpochs ? base * pg.size : base * (1 + (pg.size - 1) * at / warmupEpochs);
      if (optimizer instanceof DistributedOptimizer) optimizer.learningRate = lr;
      else setLearningRate(optimizer, lr);
      if (at >= warmupEpochs && !done) {
        done = true;
        if (options.verbose && pg.rank === 0) {
          console.log(`Epoch ${epoch + 1}: finished gradual learning rate warmup to ${lr}`);
        }
      }
    };
    const stepsPerEpoch = (): number | undefined => {
      const p = params() as { samples?: number; batchSize?: number; steps?: number };
      if (typeof p.steps === "number" && p.steps > 0) return p.steps;
      if (typeof p.samples === "number" && typeof p.batchSize === "number") {
        return Math.ceil(p.samples / p.batchSize);
      }
      return undefined;
    };
    return {
      onTrainBegin: async () => {
        const optimizer = model().optimizer;
        const lr = options.initialLr ??
          (optimizer instanceof DistributedOptimizer ? optimizer.learningRate : learningRateOf(optimizer));
        if (lr === undefined || !(lr > 0)) {
          throw new DistError(
            `Cannot warm up the learning rate: the ${optimizer.getClassName()} optimizer has none; pass initialLr`,
          );
        }
        base = lr;
        done = false;
        await Promise.resolve();
      },
      onEpochBegin: async (e: number) => {
        epoch = e;
        if (stepsPerEpoch() === undefined) set(e);
        await Promise.resolve();
      },
      onBatchBegin: async (batch: number) => {
        const steps = stepsPerEpoch();
        if (steps !== undefined && !done) set(epoch + batch / steps);
        await Promise.resolve();
      },
    };
  });
}

/** Numbers for the tensors of `logs` (tfjs hands callbacks scalars it has not read), which it disposes. */
async function resolveScalars(logs: tf.Logs): Promise<void> {
  const entries = logs as Record<string, number | tf.Tensor>;
  const tensors = Object.entries(entries).filter((e): e is [string, tf.Tensor] => typeof e[1] !== "number");
  const values = await Promise.all(tensors.map(([, t]) => t.data()));
  tensors.forEach(([k, t], i) => {
    entries[k] = values[i][0];
    t.dispose();
  });
}
