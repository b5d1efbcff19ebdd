import assert from "node:assert/strict";
import { checkGroupRanks } from "../../backend/_checks.ts";

Deno.test("checkGroupRanks() numbers a sub-group's members in the parent's order, as torch's new_group", () => {
  // torch.distributed.new_group sorts its ranks too (ranks = sorted(ranks)): rank 0 of [2, 1] is rank 1.
  assert.deepEqual(checkGroupRanks([2, 1], 4), [1, 2]);
  assert.deepEqual(checkGroupRanks([3, 0, 2], 4), [0, 2, 3]);
  assert.deepEqual(checkGroupRanks([0], 1), [0]);
  const ranks = [3, 1];
  checkGroupRanks(ranks, 4);
  assert.deepEqual(ranks, [3, 1], "the caller's array is left as it was");
});

Deno.test("checkGroupRanks() rejects empty lists, ranks out of range and duplicates with a RangeError", () => {
  assert.throws(
    () => checkGroupRanks([], 4),
    { name: "RangeError", message: "Cannot create a group: expected a non-empty array of ranks, found []" },
  );
  assert.throws(
    () => checkGroupRanks([0, 4], 4),
    { name: "RangeError", message: "Cannot create a group: ranks must be integers in 0..3, found 4" },
  );
  assert.throws(() => checkGroupRanks([1.5], 4), /ranks must be integers in 0\.\.3, found 1\.5/);
  assert.throws(() => checkGroupRanks([-1], 4), /found -1/);
  assert.throws(
    () => checkGroupRanks([2, 0, 2], 4),
    {
      name: "RangeError",
      message: "Cannot create a group: expected each rank once, found rank 2 twice in [2, 0, 2]",
    },
  );
});
