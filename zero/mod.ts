/**
 * Sharded data parallel training (`@dcomm/dcomm/zero`): {@linkcode ShardedDataParallel}, ZeRO stages 1,
 * 2 and 3 with ZeRO++'s quantized weights (qwZ), hierarchical secondary shards (hpZ) and quantized
 * gradients (qgZ), 1-bit or top-k gradients with error feedback on the sharded path, the optimizer in
 * WASM kernels on each rank's shard, and checkpoints that reshard.
 *
 * @example A stage-2 training step on a world of one
 * ```ts
 * import { init } from "@dcomm/dcomm";
 * import { ShardedDataParallel } from "@dcomm/dcomm/zero";
 * import assert from "node:assert/strict";
 * await using pg = await init({ rank: 0, worldSize: 1, env: {} });
 * await using sdp = await ShardedDataParallel.create(pg, [new Float32Array(8).fill(1)], {
 *   stage: 2,
 *   optimizer: { type: "sgd", lr: 0.1 },
 * });
 * sdp.grads(0)[0].fill(0.25); // backward
 * sdp.gradReady(0);
 * await sdp.step();
 * assert.equal(sdp.params(0)[0][0], Math.fround(1 - Math.fround(0.1 * 0.25)));
 * ```
 *
 * @module
 */
export {
  type LayerInfo,
  ShardedDataParallel,
  type ShardMemory,
  type ZeroOptimizer,
  type ZeroOptions,
  type ZeroPiece,
  type ZeroState,
  type ZeroStepReport,
} from "./sharded.ts";
