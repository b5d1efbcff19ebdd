/**
 * {@linkcode ShardedOptimizer}: a `tf.Optimizer` that trains a TensorFlow.js model with ZeRO stage 1 or 2
 * (`@dcomm/dcomm/zero`'s {@linkcode ShardedDataParallel}): each rank's gradients are reduce-scattered, each
 * rank runs the optimizer (SGD, Adam or AdamW, in WASM) on its shard of every variable, keeping only that
 * shard's state (and, at stage 2, only that shard's gradient once it is reduced), and the updated
 * variables are all-gathered and assigned.
 *
 * - As {@linkcode DistributedOptimizer}, `applyGradients()` (and so `minimize()`, `model.fit()`) returns
 *   before the update is applied; `await synchronize()` waits for it, and under `model.fit()` dcomm's fit
 *   callback does so after every batch and builds the layout when training starts.
 * - Each variable is a layer of the sharded trainer (the unit of its reduce-scatter), unless `layers` says
 *   otherwise; ZeRO++'s int8 weights and gradients (`quantizeWeights`, `quantizeGradients`), `hierarchical`
 *   and `compression` apply as in `ShardedDataParallel`.
 * - Stage 3 is refused: a tfjs model holds every variable whole all the time, so sharding its weights would
 *   save nothing.
 *
 * @module
 */
import * as tf from "./_tf.ts";
import type { ProcessGroup } from "../backend/process_group.ts";
import { DistError } from "../core/errors.ts";
import { ShardedDataParallel, type ZeroOptions, type ZeroState, type ZeroStepReport } from "../zero/mod.ts";
import {
  checkGradient,
  FIT_SYNCED,
  gradientsOf,
  registerFitSync,
  variablesOf,
  type VariableSource,
} from "./distributed_optimizer.ts";
import { type ConfigDict, type NamedTensor, type NamedTensorMap, Optimizer } from "./_tf_types.ts";

/**
 * Options of {@linkcode ShardedOptimizer}: those of `ShardedDataParallel.create`, at stage 1 or 2, with
 * `layers` optional.
 *
 * @example Stage 2 with AdamW and int8 gradients
 * ```ts
 * import type { ShardedOptimizerOptions } from "@dcomm/dcomm/tfjs";
 * const options: ShardedOptimizerOptions = {
 *   stage: 2,
 *   optimizer: { type: "adamw", lr: 1e-3 },
 *   quantizeGradients: "int8",
 * };
 * ```
 */
export interface ShardedOptimizerOptions extends Omit<ZeroOptions, "stage"> {
  /** 1: optimizer state sharded; 2: and gradients. */
  stage: 1 | 2;
}

/**
 * A tf.Optimizer over ZeRO stage 1 or 2.
 *
 * @example Two steps on a world of one
 * ```ts
 * import * as tf from "npm:@tensorflow/tfjs@4.22.0";
 * import { init } from "@dcomm/dcomm";
 * import { ShardedOptimizer } from "@dcomm/dcomm/tfjs";
 * import assert from "node:assert/strict";
 * await tf.setBackend("cpu");
 * await using pg = await init({ rank: 0, worldSize: 1, env: {} });
 * const w = tf.variable(tf.tensor1d([1, 2]), true, "zero-doc/w");
 * await using opt = new ShardedOptimizer(pg, { stage: 2, optimizer: { type: "sgd", lr: 0.5 } });
 * await opt.build([w]);
 * for (let i = 0; i < 2; i++) {
 *   opt.applyGradients({ [w.name]: tf.tensor1d([1, 1]) });
 *   await opt.synchronize();
 * }
 * assert.deepEqual([...w.dataSync()], [0, 1]);
 * ```
 */
export class ShardedOptimizer extends Optimizer implements AsyncDisposable {
  /** The class name tfjs's serialization knows this class by. */
  static get className(): string {
    return "ShardedOptimizer";
  }

  /** The process group. */
  readonly pg: ProcessGroup;
  /** The options, as given. */
  readonly options: ShardedOptimizerOptions;
  /** Marks it for the fit callback. */
  readonly [FIT_SYNCED] = true;
  #sdp: ShardedDataParallel | undefined;
  #variables: tf.Variable[] = [];
  /** Each variable's layer and place in it. */
  #where = new Map<string, { layer: number; slot: number; index: number }>();
  #building: Promise<void> | undefined;
  #pending: Promise<ZeroStepReport> | undefined;
  #last: ZeroStepReport | undefined;
  #failure: unknown = undefined;
  #closed = false;

  /**
   * An optimizer over `pg`; every rank makes one alike and trains the same variables.
   *
   * @param pg The process group.
   * @param options The stage, the optimizer and the rest (see `ZeroOptions`).
   * @throws {TypeError} If `pg` is not a ProcessGroup, or the stage is not 1 or 2.
   */
  constructor(pg: ProcessGroup, options: ShardedOptimizerOptions) {
    super();
    if (typeof pg !== "object" || pg === null || typeof pg.reduceScatter !== "function") {
      throw new TypeError(`Cannot create a ShardedOptimizer: expected a ProcessGroup, found ${String(pg)}`);
    }
    const stage = options?.stage as number;
    if (stage !== 1 && stage !== 2) {
      throw new TypeError(
        `Cannot create a ShardedOptimizer: expected stage 1 or 2, found ${String(stage)}${
          stage === 3 ? " (a tfjs model holds every variable whole: stage 3 would save nothing)" : ""
        }`,
      );
    }
    this.pg = pg;
    this.options = options;
    registerFitSync();
  }

  /** Whether the layout exists. */
  get built(): boolean {
    return this.#sdp !== undefined;
  }

  /** The sharded trainer under it, once built. */
  get trainer(): ShardedDataParallel | undefined {
    return this.#sdp;
  }

  /** The last step's report. */
  get lastStep(): ZeroStepReport | undefined {
    return this.#last;
  }

  /**
   * Shards these variables (a model's trainable weights, or a list): every rank must pass the same ones,
   * with the same values (`broadcastFrom` to start from one rank's). `model.fit()` calls it when training
   * starts. A second call does nothing.
   *
   * @param source A tf.layers model or its variables.
   * @throws {TypeError} On a variable that is not a trainable float32 `tf.Variable`.
   * @throws {DistError} From the sharded trainer (parameters that differ across ranks, bad options).
   */
  async build(source: VariableSource): Promise<void> {
    if (this.#closed) throw new DistError("Cannot build: the optimizer is closed");
    await (this.#building ??= this.#build(variablesOf(source)));
  }

  async #build(variables: tf.Variable[]): Promise<void> {
    const params = variables.map((v) => (v.dataSync() as Float32Array).slice());
    const layers = this.options.layers ?? variables.map((_, i) => [i]);
    const sdp = await ShardedDataParallel.create(this.pg, params, { ...this.options, layers });
    sdp.layers.forEach((l, layer) =>
      l.params.forEach((index, slot) => {
        this.#where.set(variables[index].name, { layer, slot, index });
      })
    );
    this.#variables = variables;
    this.#sdp = sdp;
    if (this.options.broadcastFrom !== undefined && this.options.broadcastFrom !== false) this.#assign();
  }

  /**
   * Copies this rank's gradients into the trainer's and starts the step: the reduce-scatters, each rank's
   * optimizer on its shard, the all-gathers; the variables are assigned when it ends
   * ({@linkcode ShardedOptimizer.synchronize}).
   *
   * @param variableGradients The gradients by variable name; `null` or missing ones count as zeros.
   * @throws {DistError} If not built, if the previous step is still in flight, or it failed (its error).
   * @throws {TypeError} On a gradient for a variable outside the layout, or not float32 of its size.
   */
  override applyGradients(variableGradients: NamedTensorMap | NamedTensor[]): void {
    if (this.#closed) throw new DistError("Cannot apply gradients: the optimizer is closed");
    if (this.#failure !== undefined) throw this.#failure;
    const sdp = this.#sdp;
    if (sdp === undefined) {
      throw new DistError(
        "Cannot apply gradients: the ShardedOptimizer is not built; await build(model) first (model.fit() does)",
      );
    }
    if (this.#pending !== undefined) {
      throw new DistError(
        "Cannot apply gradients: the last step is still in flight; await synchronize() first",
      );
    }
    const given = gradientsOf(variableGradients);
    for (const [name, g] of given) {
      const at = this.#where.get(name);
      if (at === undefined) {
        throw new TypeError(`Cannot apply the gradient of ${name}: it is not a variable of the layout`);
      }
      if (g === null) continue;
      const values = checkGradient(name, g), into = sdp.grads(at.layer)[at.slot];
      if (values.length !== into.length) {
        throw new TypeError(
          `Cannot apply the gradient of ${name}: expected ${into.length} elements like the variable, found ${values.length}`,
        );
      }
      into.set(values);
    }
    for (let layer = sdp.layers.length - 1; layer >= 0; layer--) sdp.gradReady(layer);
    this.#pending = sdp.step().then((report) => {
      this.#assign();
      this.#last = report;
      return report;
    });
    this.#pending.catch((e) => (this.#failure ??= e));
  }

  /** The trainer's whole weights into the variables. */
  #assign(): void {
    const sdp = this.#sdp as ShardedDataParallel;
    for (const v of this.#variables) {
      const at = this.#where.get(v.name) as { layer: number; slot: number };
      tf.tidy(() => v.assign(tf.tensor(sdp.params(at.layer)[at.slot], v.shape, "float32")));
    }
  }

  /**
   * Waits until the last step's update is assigned to the variables.
   *
   * @returns The step's report, or undefined if none was in flight.
   * @throws {DistError} What the step failed with.
   */
  async synchronize(): Promise<ZeroStepReport | undefined> {
    if (this.#failure !== undefined) throw this.#failure;
    if (this.#pending === undefined) return undefined;
    const report = await this.#pending;
    this.#pending = undefined;
    return report;
  }

  /**
   * This rank's checkpoint (see `ShardedDataParallel.state()`).
   *
   * @returns The state.
   * @throws {DistError} If not built.
   */
  state(): ZeroState {
    if (this.#sdp === undefined) {
      throw new DistError("Cannot save the state: the ShardedOptimizer is not built");
    }
    return this.#sdp.state();
  }

  /**
   * Loads a checkpoint (see `ShardedDataParallel.load()`) and assigns the variables.
   *
   * @param states The state, or every saving rank's.
   * @throws {DistError} If not built, or from the trainer.
   */
  async load(states: ZeroState | readonly ZeroState[]): Promise<void> {
    if (this.#sdp === undefined) {
      throw new DistError("Cannot load a state: the ShardedOptimizer is not built");
    }
    await this.synchronize();
    await this.#sdp.load(states);
    this.#assign();
  }

  /**
   * tfjs's config: the options.
   *
   * @returns The options, as a config.
   */
  override getConfig(): ConfigDict {
    return { stage: this.options.stage, optimizer: this.options.optimizer.type };
  }

  /**
   * The class name.
   *
   * @returns `"ShardedOptimizer"`.
   */
  override getClassName(): string {
    return "ShardedOptimizer";
  }

  /** Waits for the step in flight and closes the trainer. */
  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    await this.#pending?.catch(() => {});
    await this.#sdp?.close();
  }

  /** {@linkcode ShardedOptimizer.close}. */
  async [Symbol.asyncDispose](): Promise<void> {
    await this.close();
  }
}
