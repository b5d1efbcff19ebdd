/**
 * Data-parallel training (`@dcomm/dcomm/ddp`): {@linkcode DistributedDataParallel}, gradient buckets
 * averaged while the backward pass goes on, and the communication hooks that average them.
 *
 * @example A training step on a world of one
 * ```ts
 * import { init } from "@dcomm/dcomm";
 * import { DistributedDataParallel } from "@dcomm/dcomm/ddp";
 * import assert from "node:assert/strict";
 * await using pg = await init({ rank: 0, worldSize: 1, env: {} });
 * const weights = new Float32Array(8).fill(1);
 * await using ddp = await DistributedDataParallel.create(pg, [weights]);
 * ddp.grads[0].fill(0.25); // backward
 * ddp.gradReady(0);
 * await ddp.synchronize();
 * for (let i = 0; i < weights.length; i++) weights[i] -= 0.1 * ddp.grads[0][i]; // optimizer step
 * assert.equal(weights[0], Math.fround(1 - Math.fround(0.1 * 0.25)));
 * ```
 *
 * @module
 */
export {
  type BucketInfo,
  type BucketReport,
  type DdpOptions,
  DistributedDataParallel,
  type StepReport,
} from "./ddp.ts";
export {
  allReduceHook,
  bf16CompressHook,
  type CommHook,
  type CompressionHookState,
  fp16CompressHook,
  type HookBucket,
  type HookReport,
  int8CompressHook,
  type Int8HookOptions,
  powerSgdHook,
  type PowerSgdHookOptions,
  signCompressHook,
  type SignHookOptions,
  topKHook,
  type TopKHookOptions,
} from "./hooks.ts";
