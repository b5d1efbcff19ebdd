/**
 * The tfjs types dcomm's public signatures name, as local aliases: `deno doc --lint` (Deno 2.9) reports a
 * type of another package named in a public signature as a private type (denoland/deno#27364), and
 * `@internal` on an alias is how it is told that the type is documented elsewhere (by tfjs).
 *
 * @module
 */
import * as tf from "npm:@tensorflow/tfjs@4.22.0";

/**
 * tfjs's `tf.Optimizer` class.
 * @internal
 */
export const Optimizer: typeof tf.Optimizer = tf.Optimizer;
/**
 * A tfjs optimizer (`tf.Optimizer`).
 * @internal
 */
export type Optimizer = tf.Optimizer;
/**
 * tfjs's `tf.Callback` class (a callback of `model.fit()` that is given the model).
 * @internal
 */
export const Callback: typeof tf.Callback = tf.Callback;
/**
 * A tfjs callback (`tf.Callback`).
 * @internal
 */
export type Callback = tf.Callback;
/**
 * A tfjs tensor (`tf.Tensor`).
 * @internal
 */
export type Tensor = tf.Tensor;
/**
 * A tfjs variable (`tf.Variable`).
 * @internal
 */
export type Variable = tf.Variable;
/**
 * Tensors by name (`tf.NamedTensorMap`).
 * @internal
 */
export type NamedTensorMap = tf.NamedTensorMap;
/**
 * A serializable config (`tf.serialization.ConfigDict`).
 * @internal
 */
export type ConfigDict = tf.serialization.ConfigDict;
/**
 * A tfjs dataset (`tf.data.Dataset`).
 * @internal
 */
export type Dataset<T extends tf.TensorContainer> = tf.data.Dataset<T>;
/**
 * What a dataset's elements may be (`tf.TensorContainer`).
 * @internal
 */
export type TensorContainer = tf.TensorContainer;

/**
 * A tensor and its variable's name (tfjs's `NamedTensor`, which tfjs does not export).
 * @internal
 */
export interface NamedTensor {
  /** The variable's name. */
  name: string;
  /** The tensor. */
  tensor: tf.Tensor;
}
