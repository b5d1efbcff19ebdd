/**
 * Communication hooks of {@linkcode DistributedDataParallel}, as torch's `register_comm_hook`: a hook
 * receives one bucket of gradients (a flat tensor, summed over the ranks' contributions) and must leave in
 * it the average over the ranks. The default, {@linkcode allReduceHook}, is one all-reduce with `op: "avg"`
 * in the bucket's own dtype: a float16 or bfloat16 bucket travels as 2 bytes per element, never upcast.
 *
 * A hook keeps whatever state it needs across steps (error feedback, a warm start) and hands it out with
 * `state()` and takes it back with `load()`, for checkpoints.
 *
 * @module
 */
import type { DType, TypedArray } from "../core/dtype.ts";
import type { ProcessGroup } from "../backend/process_group.ts";
import type { WorkReport } from "../backend/work.ts";

/** One bucket as a hook sees it. */
export interface HookBucket {
  /** The bucket's number in launch order (0 holds the last parameters registered). */
  readonly index: number;
  /** The bucket's gradients, flat: this rank's contribution on entry, the average over ranks on return. */
  readonly buffer: TypedArray;
  /** The element type of `buffer`. */
  readonly dtype: DType;
  /** The parameters whose gradients the bucket holds, by registration index. */
  readonly params: readonly number[];
}

/** What a hook reports of one bucket: the collectives it ran and the dtype on the wire. */
export interface HookReport {
  /** The reports of the collectives the hook ran, in order. */
  readonly works: readonly WorkReport[];
  /** The dtype the gradients travelled in. */
  readonly wireDtype: DType;
}

/** A communication hook: averages one bucket of gradients over the ranks of `pg`. */
export interface CommHook {
  /** The hook's name, for reports (`"allreduce"`, ...). */
  readonly name: string;
  /**
   * Averages `bucket.buffer` over the ranks, in place. Every rank runs the same hook on the same buckets in
   * the same order.
   *
   * @param pg The process group.
   * @param bucket The bucket.
   * @returns What the hook ran.
   */
  run(pg: ProcessGroup, bucket: HookBucket): Promise<HookReport>;
  /** The hook's state across steps (for a checkpoint); `undefined` for a stateless hook. */
  state(): unknown;
  /**
   * Restores a state from {@linkcode CommHook.state}.
   *
   * @param state The state.
   */
  load(state: unknown): void;
}

/**
 * The default hook: one all-reduce of the bucket with `op: "avg"`, in the bucket's own dtype (a float16 or
 * bfloat16 bucket sends 2 bytes per element).
 *
 * @returns The hook.
 *
 * @example Averaging a bucket on a world of one
 * ```ts
 * import { allReduceHook } from "./hooks.ts";
 * import { init } from "../backend/init.ts";
 * import assert from "node:assert/strict";
 * await using pg = await init({ rank: 0, worldSize: 1, env: {} });
 * const buffer = new Float32Array([1, 2, 3]);
 * const report = await allReduceHook().run(pg, { index: 0, buffer, dtype: "float32", params: [0] });
 * assert.equal(report.wireDtype, "float32");
 * assert.deepEqual([...buffer], [1, 2, 3]);
 * ```
 */
export function allReduceHook(): CommHook {
  return averagingHook("allreduce", undefined);
}

/**
 * Torch's `fp16_compress_hook`: a float32 bucket travels and is summed as float16, cast down and back on
 * the communication thread (`commDtype`), each rank's values divided by the group size first so that the
 * float16 sum cannot overflow where the average does not. Buckets of other dtypes are all-reduced in their
 * own dtype.
 *
 * @returns The hook.
 *
 * @example Half the bytes of a float32 bucket
 * ```ts
 * import { fp16CompressHook } from "./hooks.ts";
 * import { init } from "../backend/init.ts";
 * import assert from "node:assert/strict";
 * await using pg = await init({ rank: 0, worldSize: 1, env: {} });
 * const buffer = new Float32Array([0.5, 1.5, 3]);
 * const report = await fp16CompressHook().run(pg, { index: 0, buffer, dtype: "float32", params: [0] });
 * assert.equal(report.wireDtype, "float16");
 * assert.equal(report.works[0].bytes, 3 * 2);
 * assert.deepEqual([...buffer], [0.5, 1.5, 3]);
 * ```
 */
export function fp16CompressHook(): CommHook {
  return narrowHook("fp16", "float16");
}

/**
 * Torch's `bf16_compress_hook`: as {@linkcode fp16CompressHook}, in bfloat16 (float32's range, 8 bits of
 * precision).
 *
 * @returns The hook.
 *
 * @example
 * ```ts
 * import { bf16CompressHook } from "./hooks.ts";
 * import { init } from "../backend/init.ts";
 * import assert from "node:assert/strict";
 * await using pg = await init({ rank: 0, worldSize: 1, env: {} });
 * const buffer = new Float32Array([1e30, 2]);
 * const report = await bf16CompressHook().run(pg, { index: 0, buffer, dtype: "float32", params: [0] });
 * assert.equal(report.wireDtype, "bfloat16");
 * assert.equal(buffer[1], 2);
 * ```
 */
export function bf16CompressHook(): CommHook {
  return narrowHook("bf16", "bfloat16");
}

function narrowHook(name: string, commDtype: "float16" | "bfloat16"): CommHook {
  return averagingHook(name, commDtype);
}

/** A stateless hook of one all-reduce with `op: "avg"`, float32 buckets sent as `commDtype` if given. */
function averagingHook(name: string, commDtype: "float16" | "bfloat16" | undefined): CommHook {
  return {
    name,
    async run(pg: ProcessGroup, bucket: HookBucket): Promise<HookReport> {
      const wire = commDtype !== undefined && bucket.dtype === "float32" ? commDtype : bucket.dtype;
      const work = pg.allReduce(bucket.buffer, {
        op: "avg",
        dtype: bucket.dtype,
        commDtype: wire === bucket.dtype ? undefined : wire,
      });
      const report = await work.wait();
      return { works: report ? [report] : [], wireDtype: wire };
    },
    state(): undefined {
      return undefined;
    },
    load(): void {},
  };
}
