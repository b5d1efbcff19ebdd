/**
 * Each rank's part of the data: {@linkcode shard} for arrays and tensors indexed by sample (the indices of
 * this rank's samples), {@linkcode shardDataset} for a `tf.data.Dataset` (every size-th element). The
 * parts are disjoint, the same size on every rank (so every rank runs the same number of steps, as its
 * collectives must), and the same on every rank for a seed.
 *
 * Rank r takes elements r, r + size, r + 2·size, ... of the order: batch k of every rank together are
 * batch k of one rank with a batch size times larger, so data-parallel steps compute the same averages.
 *
 * @module
 */
import * as tf from "./_tf.ts";
import type { Dataset, TensorContainer } from "./_tf_types.ts";

/**
 * Options of {@linkcode shard}.
 *
 * @example A shuffle per epoch, the same on every rank
 * ```ts
 * import type { ShardOptions } from "@dcomm/dcomm/tfjs";
 * const epoch = 3;
 * const options: ShardOptions = { seed: 42 + epoch, dropRemainder: true };
 * console.log(options);
 * ```
 */
export interface ShardOptions {
  /** Shuffle the samples first with this seed (the same on every rank); unset keeps their order. @default none */
  seed?: number;
  /**
   * Drop the last `n % size` samples of the order so that every part has `floor(n / size)`; `false` gives
   * each `ceil(n / size)`, the parts that come short taking samples again from the start (as torch's
   * `DistributedSampler` pads).
   * @default true
   */
  dropRemainder?: boolean;
}

/**
 * The indices of this rank's samples out of `n`.
 *
 * @param n The number of samples.
 * @param pg Who this rank is: a process group, or `{ rank, size }`.
 * @param options A seed, and what to do with the samples that do not divide evenly.
 * @returns The indices, for `tf.gather(x, indices)` or indexing arrays.
 * @throws {RangeError} If `n` is not a whole number, or fewer than the ranks while dropping the remainder.
 *
 * @example Four ranks, ten samples: two each, the last two dropped
 * ```ts
 * import * as tf from "npm:@tensorflow/tfjs@4.22.0";
 * import { shard } from "@dcomm/dcomm/tfjs";
 * import assert from "node:assert/strict";
 * assert.deepEqual([...shard(10, { rank: 1, size: 4 })], [1, 5]);
 * const parts = [0, 1, 2, 3].map((rank) => [...shard(10, { rank, size: 4 }, { seed: 7 })]);
 * assert.equal(new Set(parts.flat()).size, 8); // disjoint
 * const x = tf.range(0, 10);
 * const mine = tf.gather(x, shard(10, { rank: 1, size: 4 })); // this rank's samples
 * assert.deepEqual([...mine.dataSync()], [1, 5]);
 * ```
 */
export function shard(
  n: number,
  pg: { readonly rank: number; readonly size: number },
  options: ShardOptions = {},
): Int32Array {
  const { rank, size } = pg;
  if (!Number.isInteger(n) || n < 0) {
    throw new RangeError(`Cannot shard ${String(n)} samples: expected a whole number`);
  }
  if (!Number.isInteger(size) || size < 1 || !Number.isInteger(rank) || rank < 0 || rank >= size) {
    throw new RangeError(`Cannot shard: expected a rank in 0..size-1, found rank ${rank} of ${size}`);
  }
  const drop = options.dropRemainder ?? true;
  const per = drop ? Math.floor(n / size) : Math.ceil(n / size);
  if (drop && per === 0 && n > 0) {
    throw new RangeError(`Cannot shard ${n} samples over ${size} ranks: fewer samples than ranks`);
  }
  const order = Int32Array.from({ length: n }, (_, i) => i);
  if (options.seed !== undefined) shuffle(order, options.seed);
  const mine = new Int32Array(per);
  for (let j = 0; j < per; j++) mine[j] = order[(rank + j * size) % n];
  return mine;
}

/**
 * This rank's part of a dataset: the elements `rank`, `rank + size`, ... of `dataset`, in order, ending at
 * the last complete round of `size` elements (so every rank yields as many). The elements of the other
 * ranks are read and disposed: batch after sharding (`shardDataset(ds, pg).batch(b)`), or shard a batched
 * dataset to hand out whole batches. Shuffle with a seed (`ds.shuffle(n, seed)`) so every rank sees the
 * same order.
 *
 * @param dataset The dataset, the same on every rank.
 * @param pg Who this rank is: a process group, or `{ rank, size }`.
 * @returns The rank's dataset.
 * @throws {RangeError} If the rank is not in 0..size-1.
 *
 * @example Rank 1 of 3 over seven elements
 * ```ts
 * import * as tf from "npm:@tensorflow/tfjs@4.22.0";
 * import { shardDataset } from "@dcomm/dcomm/tfjs";
 * import assert from "node:assert/strict";
 * const ds = shardDataset(tf.data.array([0, 1, 2, 3, 4, 5, 6]), { rank: 1, size: 3 });
 * assert.deepEqual(await ds.toArray(), [1, 4]); // 6 is in no complete round
 * ```
 */
export function shardDataset<T extends TensorContainer>(
  dataset: Dataset<T>,
  pg: { readonly rank: number; readonly size: number },
): Dataset<T> {
  const { rank, size } = pg;
  if (!Number.isInteger(size) || size < 1 || !Number.isInteger(rank) || rank < 0 || rank >= size) {
    throw new RangeError(
      `Cannot shard a dataset: expected a rank in 0..size-1, found rank ${rank} of ${size}`,
    );
  }
  return tf.data.generator(
    async function* (): AsyncGenerator<T, void, undefined> {
      const it = await dataset.iterator();
      let i = 0;
      let mine: T | undefined;
      for (;;) {
        const next = await it.next();
        if (next.done) break;
        if (i % size === rank) mine = next.value;
        else tf.dispose(next.value);
        i++;
        if (i % size === 0) {
          yield mine as T;
          mine = undefined;
        }
      }
      if (mine !== undefined) tf.dispose(mine);
    } as () => AsyncIterator<T>,
  );
}

/** Fisher–Yates with xorshift32 from `seed`: the same permutation on every rank. */
function shuffle(a: Int32Array, seed: number): void {
  let s = (Math.imul(seed | 0, 0x9e3779b1) ^ 0x85ebca6b) >>> 0 || 1;
  for (let i = a.length - 1; i > 0; i--) {
    s ^= s << 13;
    s >>>= 0;
    s ^= s >>> 17;
    s ^= s << 5;
    s >>>= 0;
    const j = s % (i + 1);
    const t = a[i];
    a[i] = a[j];
    a[j] = t;
  }
}
