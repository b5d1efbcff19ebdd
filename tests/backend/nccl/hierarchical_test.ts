/**
 * The nccl backend's hierarchical all-reduce: the split into hosts and indices across them (on CPU), the
 * refusal of uneven hosts, and on a GPU a one-rank world through the whole path (ncclCommSplit, the
 * in-place reduce-scatter and all-gather, the shard's all-reduce, the tail through the world).
 */
import assert from "node:assert/strict";
import { hierarchyPlan, NcclHierarchy } from "../../../backend/nccl/hierarchical.ts";
import { UnsupportedError } from "../../../core/errors.ts";
import { DeviceBuffer } from "../../../gpu/device_buffer.ts";
import { gatedTest } from "../../_util/skip.ts";
import { NCCL_GPU, oneRank } from "../../gpu/_gpu.ts";

Deno.test("hierarchyPlan() splits ranks into hosts and, per local index, across hosts", () => {
  assert.deepEqual(hierarchyPlan([0, 0, 0, 1, 1, 1]), {
    hosts: [[0, 1, 2], [3, 4, 5]],
    across: [[0, 3], [1, 4], [2, 5]],
  });
  assert.deepEqual(hierarchyPlan([1, 0, 1, 0]), { hosts: [[0, 2], [1, 3]], across: [[0, 1], [2, 3]] });
  assert.deepEqual(hierarchyPlan([0]), { hosts: [[0]], across: [[0]] });
});

Deno.test("hierarchyPlan() refuses hosts of different sizes, naming them", () => {
  assert.throws(
    () => hierarchyPlan([0, 0, 0, 1]),
    (e: unknown) =>
      e instanceof UnsupportedError && /same number of ranks on every host, found 3, 1/.test(e.message),
  );
});

gatedTest(
  "NcclHierarchy on a one-rank world: the average of an odd-length buffer comes back",
  NCCL_GPU,
  async () => {
    await using pg = await oneRank();
    await using h = await NcclHierarchy.create(pg, [0]);
    const input = Float32Array.from({ length: 4099 }, (_, i) => i % 97);
    using buf = DeviceBuffer.from(input);
    await h.allReduce(buf, { op: "avg" });
    assert.deepEqual(buf.toArray(), input);
  },
);
