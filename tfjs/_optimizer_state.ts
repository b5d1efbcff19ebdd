/**
 * What `DistributedOptimizer` does to the optimizers it wraps, through their public API only: copies of one
 * (one per bucket, from its `getConfig()`), the learning rate of each, and their state (`getWeights()`)
 * merged into the order one optimizer over every variable would have, and split back.
 *
 * @module
 */
import * as tf from "./_tf.ts";

/** An optimizer's class as tfjs's serialization sees it: `fromConfig(cls, config)` makes one. */
type OptimizerClass = {
  fromConfig(cls: OptimizerClass, config: tf.serialization.ConfigDict): tf.Optimizer;
  new (...args: never[]): tf.Optimizer;
};

/** A name and a tensor, as `tf.Optimizer.getWeights()` returns them. */
export type { NamedTensor as NamedWeight } from "./_tf_types.ts";
import type { NamedTensor as NamedWeight } from "./_tf_types.ts";

/**
 * A fresh optimizer of the same class and config as `template` (`fromConfig(getConfig())`), or undefined if
 * the class cannot make one that reports the same class name and config (a custom optimizer without
 * `fromConfig`).
 */
export function cloneOptimizer(template: tf.Optimizer): tf.Optimizer | undefined {
  const cls = template.constructor as unknown as OptimizerClass;
  if (typeof cls?.fromConfig !== "function") return undefined;
  let clone: tf.Optimizer;
  try {
    clone = cls.fromConfig(cls, template.getConfig());
  } catch {
    return undefined;
  }
  const same = clone instanceof (template.constructor as typeof tf.Optimizer) &&
    clone.getClassName() === template.getClassName() &&
    JSON.stringify(clone.getConfig()) === JSON.stringify(template.getConfig());
  if (!same) {
    clone.dispose();
    return undefined;
  }
  return clone;
}

/** The learning rate in an optimizer's config, or undefined where it has none. */
export function learningRateOf(optimizer: tf.Optimizer): number | undefined {
  const lr = optimizer.getConfig().learningRate;
  return typeof lr === "number" ? lr : undefined;
}

/**
 * Sets an optimizer's learning rate: `setLearningRate()` where the class has it (SGD and momentum keep a
 * scalar made from it), else the `learningRate` field every built-in optimizer reads at each step.
 *
 * @throws {TypeError} If the optimizer has neither.
 */
export function setLearningRate(optimizer: tf.Optimizer, lr: number): void {
  const o = optimizer as unknown as { setLearningRate?: (lr: number) => void; learningRate?: unknown };
  if (typeof o.setLearningRate === "function") o.setLearningRate(lr);
  else if (typeof o.learningRate === "number") o.learningRate = lr;
  else {
    throw new TypeError(
      `Cannot set the learning rate of a ${optimizer.getClassName()} optimizer: it has neither ` +
        `setLearningRate() nor a learningRate field`,
    );
  }
}

/**
 * One optimizer's weights in the order of a single optimizer over every variable: the iteration count, then
 * each slot (`m`, `v`, ...) of every variable in registration order. Each part's `getWeights()` is the
 * count, then its slots one after another, each slot one entry per variable of the part in its order.
 *
 * @param parts Each part's `getWeights()` and the registration indices of its variables, in its order.
 * @param iterations The count to report.
 * @returns The merged weights (the count a new scalar tensor; the others the parts' tensors).
 * @throws {RangeError} If a part's weights are not a whole number of slots of its variables.
 */
export function mergeWeights(
  parts: readonly { weights: readonly NamedWeight[]; vars: readonly number[] }[],
  iterations: number,
): NamedWeight[] {
  const slots = slotCount(parts.map((p) => ({ entries: p.weights.length - 1, vars: p.vars.length })));
  const where = new Map<number, { part: number; at: number }>();
  parts.forEach((p, part) => p.vars.forEach((v, at) => where.set(v, { part, at })));
  const order = [...where.keys()].sort((a, b) => a - b);
  const merged: NamedWeight[] = [{ name: "iter", tensor: tf.scalar(iterations, "int32") }];
  for (let s = 0; s < slots; s++) {
    for (const v of order) {
      const { part, at } = where.get(v) as { part: number; at: number };
      merged.push(parts[part].weights[1 + s * parts[part].vars.length + at]);
    }
  }
  return merged;
}

/**
 * The inverse of {@linkcode mergeWeights}: each part's `setWeights()` argument.
 *
 * @param weights Weights in the merged order (count first).
 * @param parts The registration indices of each part's variables, in its order.
 * @returns One list per part: the count, then its slots.
 * @throws {RangeError} If the weights are not a whole number of slots of every variable.
 */
export function splitWeights(
  weights: readonly NamedWeight[],
  parts: readonly (readonly number[])[],
): NamedWeight[][] {
  const total = parts.reduce((n, p) => n + p.length, 0);
  const slots = slotCount([{ entries: weights.length - 1, vars: total }]);
  const order = parts.flat().sort((a, b) => a - b);
  const rank = new Map(order.map((v, i) => [v, i]));
  return parts.map((vars) => {
    const out: NamedWeight[] = [weights[0]];
    for (let s = 0; s < slots; s++) {
      for (const v of vars) out.push(weights[1 + s * total + (rank.get(v) as number)]);
    }
    return out;
  });
}

function slotCount(parts: readonly { entries: number; vars: number }[]): number {
  const slots = parts[0] === undefined || parts[0].vars === 0 ? 0 : parts[0].entries / parts[0].vars;
  for (const { entries, vars } of parts) {
    if (!Number.isInteger(slots) || entries !== slots * vars) {
      throw new RangeError(
        `Cannot map optimizer weights: expected the iteration count and ${slots} slot(s) of each of ${vars} ` +
          `variables, found ${entries + 1} weights`,
      );
    }
  }
  return slots;
}
