/**
 * {@linkcode DistributedOptimizer}: a `tf.Optimizer` that averages the gradients over the ranks of a process
 * group, in DistributedDataParallel's buckets and through its communication hooks, before the optimizer it
 * wraps applies them (Horovod's `hvd.DistributedOptimizer`, for TensorFlow.js).
 *
 * - `applyGradients()` (and so `minimize()`, `model.fit()`) copies each gradient into its bucket and hands
 *   each bucket to the hook as soon as it is full, in bucket order on every rank; it returns before the
 *   averages arrive. tfjs's optimizer API is synchronous and communication is not, so the update lands
 *   asynchronously: each bucket's share of it is applied as that bucket's average arrives, while the next
 *   buckets are still on the wire (`overlap`, the default), and `await synchronize()` waits for the whole
 *   update. Under `model.fit()`/`fitDataset()` a callback dcomm registers with tfjs (`tf.registerCallbackConstructor`)
 *   does that after every batch, so nothing is to be added (one caveat from tfjs's loop: `validationData`
 *   of `fit()` is evaluated inside the epoch's last batch, before that batch's `onBatchEnd`, so it sees the
 *   weights without the last batch's update, maybe partly applied; evaluate in an `onEpochEnd` callback, as
 *   `examples/train_tfjs.ts` does, for the weights the epoch ended with); with `minimize()` or `trainOnBatch()` in a loop
 *   of your own, await `synchronize()` before the next step (the next `applyGradients()` throws if the last
 *   update is still in flight, rather than compute on weights half updated).
 * - With overlap each bucket's update is applied by its own copy of the wrapped optimizer (made from its
 *   `getConfig()`), so an optimizer that counts its calls (Adam's β powers, the iteration count) advances
 *   once per step whatever the number of buckets; {@linkcode DistributedOptimizer.getWeights} merges their
 *   state into the order one optimizer over every variable would have, and the optimizer passed in is only
 *   the template. With `overlap: false`, or an optimizer tfjs cannot copy that way (a custom class whose
 *   `fromConfig` fails), the optimizer passed in is used itself, once per step, after every bucket has
 *   arrived (Horovod's way).
 * - The bucket layout is made from the model's trainable variables when `model.fit()` starts, or from the
 *   first `applyGradients()` call (then every rank must pass the same variables: give `minimize()` its
 *   `varList`, or call {@linkcode DistributedOptimizer.build} first). A gradient missing on a rank (`null`,
 *   or absent from the map) counts as zeros in the average, so every rank runs the same collectives; with
 *   `unusedGradients: "skip"` one more all-reduce per step (one byte per variable) finds the variables no
 *   rank had a gradient for, and those are left alone, as tfjs leaves a `null` gradient.
 * - `backwardPassesPerStep: k` accumulates k calls locally and averages their mean over the ranks on the
 *   k-th (a batch k times larger); the weights change every k-th call.
 *
 * Copies per step: each gradient is copied once, out of the tensor tfjs computed it in into its bucket
 * (`dataSync()` is read, never written: tfjs gives no way to compute a gradient into memory of the
 * caller's). The averages go back without a copy on the cpu backend: `tf.tensor()` over the bucket's view
 * keeps that array as the tensor's storage (a copy on backends that keep their own memory, wasm and webgl);
 * the tensors are disposed before the next step writes the buckets, and a wrapped optimizer that kept one
 * (which would see it change) is caught and reported. The first step before a layout exists copies the
 * gradients once more, while the buckets are made.
 *
 * @module
 */
import * as tf from "./_tf.ts";
import type { ProcessGroup } from "../backend/process_group.ts";
import type { Work } from "../backend/work.ts";
import { DistError } from "../core/errors.ts";
import {
  allReduceHook,
  type CommHook,
  DistributedDataParallel,
  type HookBucket,
  type HookReport,
  type StepReport,
} from "../ddp/mod.ts";
import {
  cloneOptimizer,
  learningRateOf,
  mergeWeights,
  setLearningRate,
  splitWeights,
} from "./_optimizer_state.ts";
import {
  type ConfigDict,
  type NamedTensor as NamedWeight,
  type NamedTensorMap,
  Optimizer,
  type Tensor,
  type Variable,
} from "./_tf_types.ts";

/** What the fit callback asks of one of dcomm's optimizers (marked by {@linkcode FIT_SYNCED}). */
export interface FitSynced {
  /** Whether its layout exists. */
  readonly built: boolean;
  /** Makes its layout from the model. */
  build(model: tf.LayersModel): Promise<void>;
  /** Waits for the last step's update. */
  synchronize(): Promise<unknown>;
}

/** The key that marks an optimizer the fit callback builds and synchronizes. */
export const FIT_SYNCED: unique symbol = Symbol("dcomm: fit-synced optimizer");

/**
 * Options of {@linkcode DistributedOptimizer}.
 *
 * @example 1-bit gradients, small buckets, two backward passes per step
 * ```ts
 * import * as tf from "npm:@tensorflow/tfjs@4.22.0";
 * import { init } from "@dcomm/dcomm";
 * import { signCompressHook } from "@dcomm/dcomm/ddp";
 * import { DistributedOptimizer, type DistributedOptimizerOptions } from "@dcomm/dcomm/tfjs";
 * import assert from "node:assert/strict";
 * await using pg = await init({ rank: 0, worldSize: 1, env: {} });
 * const options: DistributedOptimizerOptions = {
 *   hook: signCompressHook(),
 *   bucketMb: 4,
 *   firstBucketMb: 0.25,
 *   backwardPassesPerStep: 2,
 *   overlap: true,
 *   unusedGradients: "skip",
 * };
 * await using dopt = new DistributedOptimizer(pg, tf.train.adam(1e-3), options);
 * assert.equal(dopt.hook.name, "1bit");
 * assert.equal(dopt.backwardPassesPerStep, 2);
 * ```
 */
export interface DistributedOptimizerOptions {
  /** The communication hook that averages each bucket (see `@dcomm/dcomm/ddp`). @default allReduceHook() */
  hook?: CommHook;
  /** Bucket capacity in MiB. @default 25 */
  bucketMb?: number;
  /** Capacity of the first bucket (the last variables, whose gradients a backward pass has first) in MiB. @default 1 */
  firstBucketMb?: number;
  /** Calls of `applyGradients()` accumulated locally per step; their mean is averaged over the ranks. @default 1 */
  backwardPassesPerStep?: number;
  /**
   * Apply each bucket's update as its average arrives, while later buckets are still communicating (by
   * copies of the optimizer, one per bucket); `false` has the optimizer given apply them all once every
   * bucket has arrived (Horovod's way). @default true
   */
  overlap?: boolean;
  /**
   * A missing gradient (`null`, or absent from the map): `"zero"` counts it as zeros in the average and
   * updates the variable like any other; `"skip"` all-reduces one byte per variable each step to find those
   * no rank had a gradient for, and leaves them alone. Every rank must pass the same. @default "zero"
   */
  unusedGradients?: "zero" | "skip";
}

/**
 * What one step of a {@linkcode DistributedOptimizer} did: the communication (DDP's report of its buckets)
 * and the time spent moving gradients between tfjs and the buckets.
 *
 * @example The report of a step on a world of one
 * ```ts
 * import * as tf from "npm:@tensorflow/tfjs@4.22.0";
 * import { init } from "@dcomm/dcomm";
 * import { DistributedOptimizer, type OptimizerStepReport } from "@dcomm/dcomm/tfjs";
 * import assert from "node:assert/strict";
 * await using pg = await init({ rank: 0, worldSize: 1, env: {} });
 * const w = tf.variable(tf.ones([4, 2]));
 * await using dopt = new DistributedOptimizer(pg, tf.train.sgd(0.1));
 * dopt.minimize(() => w.square().sum() as tf.Scalar, false, [w]);
 * const step: OptimizerStepReport | undefined = await dopt.synchronize();
 * assert.equal(step?.step, 1);
 * assert.equal(step?.communication.buckets.length, 1);
 * assert.ok(step !== undefined && step.copyInMs >= 0 && step.wrapMs >= 0 && step.applyMs >= 0);
 * assert.deepEqual(w.dataSync()[0], Math.fround(1 - Math.fround(0.1 * 2)));
 * ```
 */
export interface OptimizerStepReport {
  /** The optimizer's iteration count after the step. */
  readonly step: number;
  /** The buckets' communication: DDP's report of the step. */
  readonly communication: StepReport;
  /** Milliseconds copying gradients out of tfjs into the buckets (every pass of the step). */
  readonly copyInMs: number;
  /**
   * Milliseconds handing full buckets to the hook: communication, not glue (on the cpu backend a bucket's
   * all-reduce may run on the calling thread, waiting a few milliseconds for the peers).
   */
  readonly launchMs: number;
  /** Milliseconds making (and disposing) the tensors over the averaged buckets. */
  readonly wrapMs: number;
  /** Milliseconds in the wrapped optimizers' `applyGradients()`. */
  readonly applyMs: number;
  /** Whether the update was applied bucket by bucket as the averages arrived. */
  readonly overlapped: boolean;
  /** Milliseconds from the start of the step's last `applyGradients()` to the whole update applied. */
  readonly stepMs: number;
  /** The variables left alone (`unusedGradients: "skip"`: no rank had a gradient for them). */
  readonly skipped: readonly string[];
}

/**
 * What {@linkcode DistributedOptimizer.build} takes: a tf.layers model (its trainable weights), or variables
 * (`tf.Variable`s, or layer weights with `read()`), in the forward pass's order.
 *
 * @example Both kinds
 * ```ts
 * import * as tf from "npm:@tensorflow/tfjs@4.22.0";
 * import type { VariableSource } from "@dcomm/dcomm/tfjs";
 * const model = tf.sequential({ layers: [tf.layers.dense({ units: 2, inputShape: [3] })] });
 * const fromModel: VariableSource = model;
 * const fromVariables: VariableSource = [tf.variable(tf.zeros([3]))];
 * console.log(fromModel, fromVariables.length);
 * ```
 */
export type VariableSource =
  | { readonly trainableWeights: readonly { read(): Tensor }[] }
  | readonly (Variable | { read(): Tensor })[];

/** The buckets and the optimizers that apply them, once the variables are known. */
interface Layout {
  readonly ddp: DistributedDataParallel<Float32Array>;
  readonly names: readonly string[];
  readonly index: ReadonlyMap<string, number>;
  readonly shapes: readonly number[][];
  /** Who applies what: one optimizer per bucket (its parameters in bucket order), or one for all. */
  readonly parts: readonly { readonly optimizer: tf.Optimizer; readonly vars: readonly number[] }[];
  /** Per variable: whether a gradient came this step (this rank's, then any rank's with "skip"). */
  readonly present: Uint8Array;
}

/** A step's timings as it goes. */
interface StepTimes {
  copyInMs: number;
  launchMs: number;
  wrapMs: number;
  applyMs: number;
  startedAt: number;
}

const MIB = 1 << 20;

/**
 * A `tf.Optimizer` that averages gradients over a process group before the optimizer it wraps applies
 * them: compile a model with it, or call `minimize()`/`applyGradients()` and then `await synchronize()`.
 *
 * @example Data-parallel `minimize()` on a world of one (start more ranks with dcomm's launcher)
 * ```ts
 * import * as tf from "npm:@tensorflow/tfjs@4.22.0";
 * import { init } from "@dcomm/dcomm";
 * import { DistributedOptimizer } from "@dcomm/dcomm/tfjs";
 * import assert from "node:assert/strict";
 * await using pg = await init({ rank: 0, worldSize: 1, env: {} });
 * const w = tf.variable(tf.tensor1d([1, -2, 3]));
 * await using dopt = new DistributedOptimizer(pg, tf.train.momentum(0.1, 0.9));
 * for (let step = 0; step < 3; step++) {
 *   dopt.minimize(() => w.square().sum() as tf.Scalar, false, [w]); // sends this rank's gradients
 *   await dopt.synchronize(); // the averaged update is applied
 * }
 * assert.equal(dopt.iterations, 3);
 * assert.ok(Math.abs(w.dataSync()[2]) < 3);
 * ```
 *
 * @example With `model.fit()`: nothing else to add
 * ```ts
 * import * as tf from "npm:@tensorflow/tfjs@4.22.0";
 * import { init } from "@dcomm/dcomm";
 * import { DistributedOptimizer } from "@dcomm/dcomm/tfjs";
 * await using pg = await init({ rank: 0, worldSize: 1, env: {} });
 * const model = tf.sequential({ layers: [tf.layers.dense({ units: 1, inputShape: [2] })] });
 * model.compile({ optimizer: new DistributedOptimizer(pg, tf.train.adam(0.01)), loss: "meanSquaredError" });
 * await model.fit(tf.randomNormal([16, 2]), tf.randomNormal([16, 1]), { epochs: 2, batchSize: 4, verbose: 0 });
 * ```
 */
export class DistributedOptimizer extends Optimizer {
  /** The class name tfjs's serialization knows this class by. */
  static get className(): string {
    return "DistributedOptimizer";
  }

  /**
   * Whether `value` is a DistributedOptimizer (tfjs tells optimizers by their methods, which every
   * optimizer has; this class by its own fields).
   *
   * @param value Anything.
   * @returns `true` for a DistributedOptimizer.
   */
  static override [Symbol.hasInstance](value: unknown): boolean {
    return typeof value === "object" && value !== null && #closed in value;
  }
  /** The process group the gradients are averaged over. */
  readonly pg: ProcessGroup;
  /** The wrapped optimizer, as given: the template of the copies that apply the updates (with overlap), or the one that does. */
  readonly optimizer: Optimizer;
  /** The communication hook. */
  readonly hook: CommHook;
  /** Calls of `applyGradients()` per step. */
  readonly backwardPassesPerStep: number;
  #bucketMb: number;
  #firstBucketMb: number;
  #overlap: boolean;
  #skip: boolean;
  /** A copy of the template made up front (the first part), or undefined if none can be made. */
  #spare: tf.Optimizer | undefined;
  #layout: Layout | undefined;
  #building: Promise<void> | undefined;
  /** The passes of the step waiting for the layout (the first step's), as copies. */
  #stash: Map<string, Float32Array>[] = [];
  #pass = 0;
  #times: StepTimes = { copyInMs: 0, launchMs: 0, wrapMs: 0, applyMs: 0, startedAt: 0 };
  #presence: Promise<unknown> | undefined;
  #pending: Promise<void> | undefined;
  #settled = true;
  #failure: unknown = undefined;
  #last: OptimizerStepReport | undefined;
  #learningRate: number | undefined;
  #closed = false;
  /** Marks it for the fit callback. */
  readonly [FIT_SYNCED] = true;

  /**
   * Wraps `optimizer`. Every rank of `pg` makes one alike (same hook, bucket sizes and passes per step) and
   * trains the same variables.
   *
   * @param pg The process group.
   * @param optimizer Any `tf.Optimizer` (`tf.train.sgd`, `momentum`, `adam`, `adamax`, `adagrad`, `adadelta`,
   *   `rmsprop`, or your own).
   * @param options Hook, bucket sizes, passes per step, overlap, missing gradients.
   * @throws {TypeError} If `optimizer` is not a `tf.Optimizer`, is a DistributedOptimizer, or an option is
   *   of the wrong kind.
   * @throws {RangeError} On bad bucket sizes or passes per step.
   */
  constructor(pg: ProcessGroup, optimizer: Optimizer, options: DistributedOptimizerOptions = {}) {
    super();
    if (typeof pg !== "object" || pg === null || typeof pg.allReduce !== "function") {
      throw new TypeError(
        `Cannot create a DistributedOptimizer: expected a ProcessGroup, found ${String(pg)}`,
      );
    }
    if (!(optimizer instanceof tf.Optimizer) || typeof optimizer.getConfig !== "function") {
      throw new TypeError(
        `Cannot create a DistributedOptimizer: expected a tf.Optimizer (tf.train.sgd(...), ...), found ${
          describe(optimizer)
        }`,
      );
    }
    if (optimizer instanceof DistributedOptimizer) {
      throw new TypeError(
        "Cannot create a DistributedOptimizer of a DistributedOptimizer: wrap the optimizer once",
      );
    }
    const passes = options.backwardPassesPerStep ?? 1;
    if (!Number.isInteger(passes) || passes < 1) {
      throw new RangeError(
        `Invalid backwardPassesPerStep: expected an integer >= 1, found ${String(passes)}`,
      );
    }
    const unused = options.unusedGradients ?? "zero";
    if (unused !== "zero" && unused !== "skip") {
      throw new TypeError(`Invalid unusedGradients: expected "zero" or "skip", found ${String(unused)}`);
    }
    this.#bucketMb = checkMb("bucketMb", options.bucketMb ?? 25);
    this.#firstBucketMb = checkMb("firstBucketMb", options.firstBucketMb ?? 1);
    this.pg = pg;
    this.optimizer = optimizer;
    this.hook = options.hook ?? allReduceHook();
    this.backwardPassesPerStep = passes;
    this.#skip = unused === "skip";
    this.#spare = (options.overlap ?? true) ? cloneOptimizer(optimizer) : undefined;
    this.#overlap = this.#spare !== undefined;
    this.#learningRate = learningRateOf(optimizer);
    registerFitSync();
  }

  /**
   * Whether updates are applied bucket by bucket as the averages arrive (`overlap`, and an optimizer tfjs
   * can copy).
   */
  get overlapping(): boolean {
    return this.#overlap;
  }

  /** Whether the bucket layout exists (after {@linkcode DistributedOptimizer.build} or the first step). */
  get built(): boolean {
    return this.#layout !== undefined;
  }

  /** The variables in registration order (empty before the layout exists). */
  get variableNames(): readonly string[] {
    return this.#layout?.names ?? [];
  }

  /** The buckets' layout: which variables (by registration index) each bucket holds, in launch order. */
  get buckets(): readonly { readonly params: readonly number[]; readonly bytes: number }[] {
    return this.#layout?.ddp.buckets ?? [];
  }

  /** The report of the last step that finished, if any. */
  get lastStep(): OptimizerStepReport | undefined {
    return this.#last;
  }

  /** The learning rate (set it to change every copy's; the learning-rate callbacks do). */
  get learningRate(): number {
    return this.#learningRate ?? Number.NaN;
  }

  set learningRate(lr: number) {
    if (typeof lr !== "number" || !Number.isFinite(lr)) {
      throw new RangeError(`Invalid learning rate: expected a finite number, found ${String(lr)}`);
    }
    setLearningRate(this.optimizer, lr);
    if (this.#spare) setLearningRate(this.#spare, lr);
    for (const p of this.#layout?.parts ?? []) {
      if (p.optimizer !== this.optimizer) setLearningRate(p.optimizer, lr);
    }
    this.#learningRate = lr;
  }

  /**
   * Lays out the buckets for these variables, in the forward pass's order (the last ones go in the first
   * bucket). `model.fit()` calls it with the model when training starts; call it yourself to fix the layout
   * before custom training, or to restore optimizer state with `setWeights()` before the first step. A
   * second call does nothing.
   *
   * @param source A tf.layers model or its variables.
   * @returns When the buckets exist.
   * @throws {TypeError} On a variable that is not a trainable float32 `tf.Variable`.
   */
  async build(source: VariableSource): Promise<void> {
    this.#open("build");
    await (this.#building ??= this.#build(variablesOf(source)));
  }

  /**
   * Sends this rank's gradients: each is copied into its bucket, and each full bucket goes to the hook at
   * once. Returns before the averages arrive; the update is applied as they do (see the module doc), and
   * {@linkcode DistributedOptimizer.synchronize} waits for it. With `backwardPassesPerStep` > 1 only every
   * k-th call communicates.
   *
   * @param variableGradients The gradients by variable name (a `tf.NamedTensorMap`, or `{ name, tensor }`
   *   entries as `minimize()` passes them); `null` or missing entries count as zeros.
   * @throws {DistError} If the previous step's update is still in flight, or it failed (its error).
   * @throws {TypeError} On a gradient for a variable outside the layout, or not float32 of its size.
   */
  override applyGradients(variableGradients: NamedTensorMap | NamedWeight[]): void {
    this.#open("apply gradients");
    this.#checkIdle();
    const t0 = performance.now();
    if (this.#pass === 0) this.#times = { copyInMs: 0, launchMs: 0, wrapMs: 0, applyMs: 0, startedAt: t0 };
    const given = gradientsOf(variableGradients);
    const last = this.#pass + 1 === this.backwardPassesPerStep;
    if (this.#layout === undefined) {
      // The first step: the layout is made from the variables named here while the gradients wait in copies.
      this.#building ??= this.#build(namedVariables(given));
      const copies = new Map<string, Float32Array>();
      for (const [name, g] of given) if (g !== null) copies.set(name, checkGradient(name, g).slice());
      this.#stash.push(copies);
      this.#times.copyInMs += performance.now() - t0;
      if (!last) {
        this.#pass++;
        return;
      }
      this.#pass = 0;
      const stash = this.#stash;
      this.#stash = [];
      this.#track((this.#building as Promise<void>).then(() => {
        this.#times.startedAt = performance.now();
        stash.forEach((pass, p) => this.#copyPass(pass, p, p === stash.length - 1));
        return this.#finish();
      }));
      return;
    }
    const arrays = new Map<string, Float32Array>();
    for (const [name, g] of given) if (g !== null) arrays.set(name, checkGradient(name, g));
    if (!last) {
      this.#copyPass(arrays, this.#pass++, false);
      return;
    }
    const pass = this.#pass;
    this.#pass = 0;
    this.#times.startedAt = t0;
    this.#copyPass(arrays, pass, true);
    this.#track(this.#finish());
  }

  /**
   * Waits until the last step's update is applied on this rank.
   *
   * @returns The step's report, or undefined if no step was in flight.
   * @throws {DistError} What the step's communication or update failed with.
   */
  async synchronize(): Promise<OptimizerStepReport | undefined> {
    if (this.#failure !== undefined) throw this.#failure;
    if (this.#pending === undefined) return undefined;
    await this.#pending;
    this.#pending = undefined;
    return this.#last;
  }

  /** The wrapped optimizer's config (with the current learning rate): a saved model restores that optimizer. */
  override getConfig(): ConfigDict {
    return this.optimizer.getConfig();
  }

  /** The wrapped optimizer's class name, for `model.save()`. */
  override getClassName(): string {
    return this.optimizer.getClassName();
  }

  /**
   * The optimizer's state (iteration count, then each slot of every variable in registration order), as
   * one wrapped optimizer over every variable would have it.
   *
   * @returns The weights (read them before the next step changes them).
   */
  override async getWeights(): Promise<NamedWeight[]> {
    const layout = this.#layout;
    if (layout === undefined) return [{ name: "iter", tensor: tf.scalar(this.iterations, "int32") }];
    const parts = await Promise.all(
      layout.parts.map(async (p) => ({
        weights: await p.optimizer.getWeights() as NamedWeight[],
        vars: p.vars,
      })),
    );
    const merged = mergeWeights(parts, this.iterations);
    // Each copy's count is a scalar its getWeights() made for the call (saveIterations()).
    parts.forEach((p, i) => {
      if (layout.parts[i].optimizer !== this.optimizer) p.weights[0]?.tensor.dispose();
    });
    return merged;
  }

  /**
   * Restores a state from {@linkcode DistributedOptimizer.getWeights} (or a wrapped optimizer's over the same
   * variables in the same order). The layout must exist: after `build()` or a step.
   *
   * @param weightValues The weights.
   * @throws {DistError} Before the layout exists.
   */
  override async setWeights(weightValues: NamedWeight[]): Promise<void> {
    const layout = this.#layout;
    if (layout === undefined) {
      throw new DistError(
        "Cannot set the optimizer's weights before its layout exists: call build(model) first",
      );
    }
    const split = splitWeights(weightValues, layout.parts.map((p) => p.vars));
    await Promise.all(layout.parts.map((p, i) => p.optimizer.setWeights(split[i])));
    this.iterations_ = (await weightValues[0].tensor.data())[0];
  }

  /** Releases the copies' state and the buckets (see {@linkcode DistributedOptimizer.close}). */
  override dispose(): void {
    void this.close();
  }

  /** Waits for the step in flight, then releases the buckets and the copies' state. Idempotent. */
  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    await this.#pending?.catch(() => {});
    await this.#building?.catch(() => {});
    const layout = this.#layout;
    await layout?.ddp.close();
    for (const p of layout?.parts ?? []) if (p.optimizer !== this.optimizer) p.optimizer.dispose();
    if (this.#spare && !layout?.parts.some((p) => p.optimizer === this.#spare)) this.#spare.dispose();
  }

  /** Closes the optimizer, as {@linkcode DistributedOptimizer.close}. */
  [Symbol.asyncDispose](): Promise<void> {
    return this.close();
  }

  #open(what: string): void {
    if (this.#closed) throw new DistError(`Cannot ${what}: this DistributedOptimizer is closed`);
  }

  #checkIdle(): void {
    if (this.#failure !== undefined) throw this.#failure;
    if (!this.#settled) {
      throw new DistError(
        "Cannot apply gradients: the previous step's update is still being applied; await " +
          "optimizer.synchronize() between steps (model.fit() does)",
      );
    }
  }

  /** Keeps the step in flight: its failure is kept for the next call, never unhandled. */
  #track(step: Promise<void>): void {
    this.#settled = false;
    this.#pending = step.then(
      () => {
        this.#settled = true;
      },
      (e) => {
        this.#settled = true;
        this.#failure = e;
        throw e;
      },
    );
    this.#pending.catch(() => {});
  }

  async #build(variables: tf.Variable[]): Promise<void> {
    if (variables.length === 0) {
      throw new TypeError("Cannot lay out the DistributedOptimizer's buckets: no trainable variables given");
    }
    const names = variables.map((v) => v.name);
    const index = new Map(names.map((n, i) => [n, i]));
    if (index.size !== names.length) {
      throw new TypeError(`Cannot lay out the buckets: a variable is listed twice in ${names.join(", ")}`);
    }
    const shapes = variables.map((v) => [...v.shape]);
    const sizes = shapes.map((s) => s.reduce((a, b) => a * b, 1));
    // DDP reads only each parameter's length and class here (no broadcast): one scratch array stands for all.
    const scratch = new Float32Array(Math.max(...sizes));
    const ddp = await DistributedDataParallel.create(this.pg, sizes.map((n) => scratch.subarray(0, n)), {
      hook: this.#bucketHook(),
      bucketMb: this.#bucketMb,
      firstBucketMb: this.#firstBucketMb,
      broadcastFrom: false,
      // A kernel [..., out] is the matrix fan-in × fan-out for PowerSGD; vectors travel uncompressed.
      shapes: shapes.map((
        s,
        i,
      ) => (s.length >= 2 ? [sizes[i] / s[s.length - 1], s[s.length - 1]] : undefined)),
    });
    const parts = this.#spare === undefined
      ? [{ optimizer: this.optimizer, vars: names.map((_, i) => i) }]
      : ddp.buckets.map((b, i) => ({
        optimizer: i === 0 ? this.#spare as tf.Optimizer : cloneOptimizer(this.optimizer) as tf.Optimizer,
        vars: b.params,
      }));
    if (this.#learningRate !== undefined) {
      for (const p of parts) setLearningRate(p.optimizer, this.#learningRate);
    }
    this.#layout = { ddp, names, index, shapes, parts, present: new Uint8Array(names.length) };
  }

  /**
   * Copies one pass's gradients into the buckets (the first pass sets, later ones add, the last scales by
   * 1/k) and, on the last, marks each ready: a bucket goes to the hook as soon as all of its are.
   */
  #copyPass(gradients: ReadonlyMap<string, Float32Array>, pass: number, last: boolean): void {
    const t0 = performance.now();
    const layout = this.#layout as Layout;
    for (const name of gradients.keys()) {
      if (!layout.index.has(name)) {
        throw new TypeError(
          `Cannot apply a gradient for ${name}: it is not among the ${layout.names.length} variables this ` +
            `optimizer was laid out for (${layout.names.join(", ")})`,
        );
      }
    }
    if (pass === 0) layout.present.fill(0);
    for (const [name] of gradients) layout.present[layout.index.get(name) as number] = 1;
    let launchMs = 0;
    if (last && this.#skip) {
      // Issued before the buckets, so it completes before the first of them (a rank's calls run in order).
      const t = performance.now();
      const work: Work = this.pg.allReduce(layout.present, { op: "max" });
      this.#presence = work.wait();
      this.#presence.catch(() => {});
      launchMs += performance.now() - t;
    }
    const k = this.backwardPassesPerStep;
    const scale = 1 / k;
    const ddp = layout.ddp;
    for (const bucket of ddp.buckets) {
      for (const i of bucket.params) {
        const view = ddp.grads[i];
        const g = gradients.get(layout.names[i]);
        if (g === undefined) {
          if (pass === 0) view.fill(0);
        } else if (g.length !== view.length) {
          throw new TypeError(
            `Cannot apply the gradient of ${layout.names[i]}: expected ${view.length} elements ` +
              `(shape [${layout.shapes[i]}]), found ${g.length}`,
          );
        } else if (pass === 0) view.set(g);
        else for (let j = 0; j < view.length; j++) view[j] += g[j];
        if (last) {
          if (k > 1) { for (let j = 0; j < view.length; j++) view[j] *= scale; }
          const t = performance.now();
          ddp.gradReady(i);
          launchMs += performance.now() - t;
        }
      }
    }
    this.#times.launchMs += launchMs;
    this.#times.copyInMs += performance.now() - t0 - launchMs;
  }

  /** Waits for every bucket (applying them, without overlap, once all are in) and records the step. */
  async #finish(): Promise<void> {
    const layout = this.#layout as Layout;
    const communication = await layout.ddp.synchronize();
    if (!this.#overlap) {
      await this.#presence;
      for (let b = 0; b < layout.parts.length; b++) this.#applyPart(b);
    }
    this.incrementIterations();
    const skipped = this.#skip ? layout.names.filter((_, i) => layout.present[i] === 0) : [];
    this.#presence = undefined;
    this.#last = {
      step: this.iterations,
      communication,
      copyInMs: this.#times.copyInMs,
      launchMs: this.#times.launchMs,
      wrapMs: this.#times.wrapMs,
      applyMs: this.#times.applyMs,
      overlapped: this.#overlap,
      stepMs: performance.now() - this.#times.startedAt,
      skipped,
    };
  }

  /** The hook DDP runs: the user's, then (with overlap) this bucket's update at once. */
  #bucketHook(): CommHook {
    const hook = this.hook;
    return {
      name: hook.name,
      run: async (pg: ProcessGroup, bucket: HookBucket): Promise<HookReport> => {
        const report = await hook.run(pg, bucket);
        if (this.#overlap) {
          await this.#presence;
          this.#applyPart(bucket.index);
        }
        return report;
      },
      state: () => hook.state(),
      load: (state: unknown) => hook.load(state),
    };
  }

  /** Applies part `p`'s averaged gradients with its optimizer, from tensors over the bucket views. */
  #applyPart(p: number): void {
    const layout = this.#layout as Layout;
    const part = layout.parts[p];
    const t0 = performance.now();
    const grads = part.vars.map((i) => ({
      name: layout.names[i],
      tensor: this.#skip && layout.present[i] === 0
        ? null
        : tf.tensor(layout.ddp.grads[i], layout.shapes[i], "float32"),
    }));
    const t1 = performance.now();
    part.optimizer.applyGradients(grads as NamedWeight[]);
    const t2 = performance.now();
    // On the cpu backend the tensors are the bucket views: one kept beyond this call would change next step.
    const aliased = tf.getBackend() === "cpu";
    for (const g of grads) {
      if (g.tensor === null) continue;
      g.tensor.dispose();
      if (aliased && tf.engine().backend.refCount(g.tensor.dataId) > 0) {
        throw new DistError(
          `The ${part.optimizer.getClassName()} optimizer kept the gradient tensor of ${g.name} after ` +
            `applyGradients(); DistributedOptimizer reuses that memory every step, so it cannot wrap an optimizer ` +
            `that keeps its gradients`,
        );
      }
    }
    this.#times.wrapMs += t1 - t0 + (performance.now() - t2);
    this.#times.applyMs += t2 - t1;
  }
}

/**
 * The callback `model.fit()` and `fitDataset()` make for every fit once dcomm registered it with tfjs: it
 * lays out a DistributedOptimizer's buckets from the model when training starts, and waits for each step's
 * update after every batch (tfjs awaits callbacks between batches), so the next batch sees it. It also
 * records the model being fit, for dcomm's callbacks when tfjs wrapped them (see callbacks.ts).
 */
class FitSync extends tf.Callback {
  #optimizer(): FitSynced | undefined {
    const o = (this.model as { optimizer?: unknown } | undefined)?.optimizer;
    return typeof o === "object" && o !== null && FIT_SYNCED in o ? o as unknown as FitSynced : undefined;
  }

  override setModel(model: tf.LayersModel): void {
    super.setModel(model);
    fitting = model;
  }

  override async onTrainBegin(): Promise<void> {
    const o = this.#optimizer();
    if (o !== undefined && !o.built) await o.build(this.model);
  }

  override async onBatchEnd(): Promise<void> {
    await this.#optimizer()?.synchronize();
  }

  override async onTrainEnd(): Promise<void> {
    if (fitting === this.model) fitting = undefined;
    await this.#optimizer()?.synchronize();
  }
}

let registered = false;
let fitting: tf.LayersModel | undefined;

/**
 * Registers the fit callback with tfjs, once, at verbosity 0 (so every fit makes one).
 */
export function registerFitSync(): void {
  if (registered) return;
  registered = true;
  tf.registerCallbackConstructor(0, FitSync);
}

/**
 * The model whose `fit()` is running, as the fit callback saw it (undefined outside a fit).
 *
 * @returns The model.
 */
export function fittingModel(): tf.LayersModel | undefined {
  return fitting;
}

function checkMb(name: string, value: number): number {
  if (typeof value !== "number" || !(value > 0) || !Number.isFinite(value)) {
    throw new RangeError(`Invalid ${name}: expected a number of MiB > 0, found ${String(value)}`);
  }
  return Math.max(1 / MIB, value);
}

function describe(v: unknown): string {
  if (v === null || typeof v !== "object") return String(v);
  return `a ${(v as { constructor?: { name?: string } }).constructor?.name ?? "object"}`;
}

/** The gradients of a call, by name, `null` where missing. */
/** (Shared with `sharded_optimizer.ts`.) */
export function gradientsOf(g: tf.NamedTensorMap | NamedWeight[]): Map<string, tf.Tensor | null> {
  const map = new Map<string, tf.Tensor | null>();
  if (Array.isArray(g)) { for (const { name, tensor } of g) map.set(name, tensor ?? null); }
  else if (typeof g === "object" && g !== null) {
    for (const name of Object.keys(g)) map.set(name, g[name] ?? null);
  } else {throw new TypeError(
      `Cannot apply gradients: expected a map or list of named tensors, found ${String(g)}`,
    );}
  return map;
}

/** The float32 values of a gradient (the tensor's own data on the cpu backend: read, never written). */
/** (Shared with `sharded_optimizer.ts`.) */
export function checkGradient(name: string, g: tf.Tensor): Float32Array {
  if (!(g instanceof tf.Tensor) || g.dtype !== "float32") {
    throw new TypeError(
      `Cannot apply the gradient of ${name}: expected a float32 tf.Tensor, found ${describe(g)}`,
    );
  }
  return g.dataSync() as Float32Array;
}

/** The trainable variables named by a first call (those with a gradient, or listed with `null`). */
function namedVariables(given: ReadonlyMap<string, tf.Tensor | null>): tf.Variable[] {
  const registered = tf.engine().registeredVariables;
  const out: tf.Variable[] = [];
  for (const [name, g] of given) {
    const v = registered[name];
    if (v === undefined) {
      throw new TypeError(`Cannot apply a gradient for ${name}: no variable has that name`);
    }
    if (g !== null || (v.trainable && v.dtype === "float32")) out.push(v);
  }
  return out;
}

/** (Shared with `sharded_optimizer.ts`.) */
export function variablesOf(source: VariableSource): tf.Variable[] {
  const list = Array.isArray(source)
    ? source as readonly (tf.Variable | { read(): tf.Tensor })[]
    : (source as { trainableWeights?: readonly { read(): tf.Tensor }[] }).trainableWeights;
  if (!Array.isArray(list)) {
    throw new TypeError(
      `Cannot build: expected a tf.layers model or a list of variables, found ${describe(source)}`,
    );
  }
  return list.map((v, i) => {
    const variable = v instanceof tf.Variable
      ? v
      : typeof (v as { read?: unknown }).read === "function"
      ? (v as { read(): tf.Tensor }).read()
      : undefined;
    if (!(variable instanceof tf.Variable) || variable.dtype !== "float32" || !variable.trainable) {
      throw new TypeError(
        `Cannot build: variable ${i} must be a trainable float32 tf.Variable, found ${
          describe(variable ?? v)
        }`,
      );
    }
    return variable;
  });
}
