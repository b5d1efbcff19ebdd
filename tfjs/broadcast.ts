/**
 * {@linkcode broadcastVariables}: the root's weights (of a model, of variables, or an optimizer's state) on
 * every rank, so that every rank starts from the same point (Horovod's `broadcast_variables`).
 *
 * Every rank first tells the others what it holds (each variable's dtype and shape, by `allGatherObject`),
 * so ranks whose models differ all fail, naming what each rank has, before any weight moves; then one
 * broadcast per dtype carries the values, packed.
 *
 * @module
 */
import * as tf from "./_tf.ts";
import type { ProcessGroup } from "../backend/process_group.ts";
import { MismatchError } from "../core/errors.ts";
import type { Optimizer, Tensor, Variable } from "./_tf_types.ts";

/**
 * Options of {@linkcode broadcastVariables}.
 *
 * @example Rank 0's weights
 * ```ts
 * import type { BroadcastVariablesOptions } from "@dcomm/dcomm/tfjs";
 * const options: BroadcastVariablesOptions = { root: 0 };
 * console.log(options.root);
 * ```
 */
export interface BroadcastVariablesOptions {
  /** The rank whose values every rank gets. @default 0 */
  root?: number;
}

/**
 * What {@linkcode broadcastVariables} takes: a tf.layers model (every weight, trainable or not), variables
 * (`tf.Variable`s or layer weights), or an optimizer (its state, by `getWeights()`/`setWeights()`).
 *
 * @example The three kinds
 * ```ts
 * import * as tf from "npm:@tensorflow/tfjs@4.22.0";
 * import type { BroadcastSource } from "@dcomm/dcomm/tfjs";
 * const model = tf.sequential({ layers: [tf.layers.dense({ units: 2, inputShape: [3] })] });
 * const sources: BroadcastSource[] = [model, model.weights, [tf.variable(tf.zeros([2]))], tf.train.adam()];
 * console.log(sources.length);
 * ```
 */
export type BroadcastSource =
  | { readonly weights: readonly WritableWeight[] }
  | readonly (Variable | WritableWeight)[]
  | Optimizer;

/**
 * A layer weight: read and written as a tensor (tfjs's `LayerVariable`).
 * @internal
 */
export interface WritableWeight {
  /** The current value. */
  read(): Tensor;
  /** Sets the value. */
  write(value: Tensor): unknown;
}

/** What one rank holds: each entry's dtype and shape. */
type Signature = readonly string[];

/** The dtypes that travel, and the arrays they travel in. */
const ARRAYS = {
  float32: Float32Array,
  int32: Int32Array,
  bool: Uint8Array,
} as const;

/**
 * Copies the root's values of `source` into every rank's. Every rank of `pg` calls it with the same kind of
 * source; a model's or variables' shapes and dtypes must match the root's, an optimizer takes the root's
 * state whatever it held.
 *
 * @param pg The process group.
 * @param source A model, variables, or an optimizer.
 * @param options The root.
 * @returns When every value is in place.
 * @throws {MismatchError} On every rank, if the ranks' models or variables differ (naming each rank's).
 * @throws {TypeError} On a source of another kind, or a dtype other than float32, int32 and bool.
 *
 * @example A model's weights from rank 0 (on a world of one they stay as they are)
 * ```ts
 * import * as tf from "npm:@tensorflow/tfjs@4.22.0";
 * import { init } from "@dcomm/dcomm";
 * import { broadcastVariables } from "@dcomm/dcomm/tfjs";
 * import assert from "node:assert/strict";
 * await using pg = await init({ rank: 0, worldSize: 1, env: {} });
 * const model = tf.sequential({ layers: [tf.layers.dense({ units: 4, inputShape: [8] })] });
 * const before = model.getWeights()[0].dataSync().slice();
 * await broadcastVariables(pg, model, { root: 0 });
 * assert.deepEqual(model.getWeights()[0].dataSync(), before);
 * ```
 */
export async function broadcastVariables(
  pg: ProcessGroup,
  source: BroadcastSource,
  options: BroadcastVariablesOptions = {},
): Promise<void> {
  const root = options.root ?? 0;
  if (!Number.isInteger(root) || root < 0 || root >= pg.size) {
    throw new RangeError(`Invalid root: expected a rank in 0..${pg.size - 1}, found ${String(root)}`);
  }
  if (source instanceof tf.Optimizer) return await broadcastOptimizer(pg, source, root);
  const entries = entriesOf(source);
  const mine = entries.map((e) => `${e.read().dtype}[${e.read().shape.join(",")}]`);
  const all = await pg.allGatherObject<Signature>(mine);
  const differ = all.flatMap((s, r) => (same(s, all[root]) ? [] : [r]));
  if (differ.length > 0) {
    throw new MismatchError(
      `Cannot broadcast variables from rank ${root}: the ranks hold different variables: ${
        [root, ...differ].map((r) => `rank ${r} has ${describeSignature(all[r])}`).join("; ")
      }`,
    );
  }
  const values = await broadcastValues(pg, entries.map((e) => e.read()), root);
  if (pg.rank !== root) {
    entries.forEach((e, i) => {
      const t = values[i];
      e.write(t);
      t.dispose();
    });
  } else values.forEach((t) => t.dispose());
}

/** The root's optimizer state on every rank (the others take its names and shapes as they are). */
async function broadcastOptimizer(pg: ProcessGroup, optimizer: tf.Optimizer, root: number): Promise<void> {
  const weights = pg.rank === root ? await optimizer.getWeights() : [];
  const layout = await pg.broadcastObject(
    pg.rank === root
      ? weights.map((w) => ({ name: w.name, dtype: w.tensor.dtype, shape: w.tensor.shape }))
      : null,
    { root },
  );
  const tensors = pg.rank === root
    ? weights.map((w) => w.tensor)
    : layout.map((l) => tf.zeros(l.shape, l.dtype as tf.DataType));
  const values = await broadcastValues(pg, tensors, root);
  if (pg.rank !== root) {
    tf.dispose(tensors);
    await optimizer.setWeights(layout.map((l, i) => ({ name: l.name, tensor: values[i] })));
  }
  tf.dispose(values);
}

/**
 * One broadcast per dtype of every tensor's values, packed; returns tensors of the results (the root's over
 * its own packed copy), in order.
 */
async function broadcastValues(
  pg: ProcessGroup,
  tensors: readonly tf.Tensor[],
  root: number,
): Promise<tf.Tensor[]> {
  const groups = new Map<keyof typeof ARRAYS, number[]>();
  tensors.forEach((t, i) => {
    if (!(t.dtype in ARRAYS)) {
      throw new TypeError(`Cannot broadcast a ${t.dtype} tensor: expected float32, int32 or bool`);
    }
    const dtype = t.dtype as keyof typeof ARRAYS;
    groups.set(dtype, [...(groups.get(dtype) ?? []), i]);
  });
  const out: tf.Tensor[] = new Array(tensors.length);
  await Promise.all([...groups].map(async ([dtype, members]) => {
    const total = members.reduce((n, i) => n + tensors[i].size, 0);
    const packed = new ARRAYS[dtype](total);
    if (pg.rank === root) {
      let at = 0;
      for (const i of members) {
        packed.set(tensors[i].dataSync() as InstanceType<typeof ARRAYS[typeof dtype]>, at);
        at += tensors[i].size;
      }
    }
    await pg.broadcast(packed, { root });
    let at = 0;
    for (const i of members) {
      // A view of the packed values: the cpu backend keeps it as the tensor's storage (nothing else uses it).
      out[i] = tf.tensor(packed.subarray(at, at + tensors[i].size), tensors[i].shape, dtype);
      at += tensors[i].size;
    }
  }));
  return out;
}

function entriesOf(source: BroadcastSource): WritableWeight[] {
  const list = Array.isArray(source)
    ? source as readonly (tf.Variable | WritableWeight)[]
    : (source as { weights?: readonly WritableWeight[] }).weights;
  if (!Array.isArray(list)) {
    throw new TypeError(
      `Cannot broadcast: expected a tf.layers model, a list of variables or an optimizer, found ${
        String(source)
      }`,
    );
  }
  return list.map((v, i): WritableWeight => {
    if (v instanceof tf.Variable) return { read: () => v, write: (t) => v.assign(t) };
    if (
      typeof (v as WritableWeight)?.read === "function" && typeof (v as WritableWeight).write === "function"
    ) {
      return v as WritableWeight;
    }
    throw new TypeError(`Cannot broadcast: entry ${i} is neither a tf.Variable nor a layer weight`);
  });
}

function same(a: Signature, b: Signature): boolean {
  return a.length === b.length && a.every((s, i) => s === b[i]);
}

function describeSignature(s: Signature): string {
  const shown = s.length > 8 ? [...s.slice(0, 8), `... (${s.length - 8} more)`] : s;
  return `${s.length} variable${s.length === 1 ? "" : "s"} (${shown.join(" ")})`;
}
