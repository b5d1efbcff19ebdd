/**
 * `_one_rank.ts`: the pieces of a one-rank PreMulSum that NCCL before 2.29.7 covers whole (its kernel is
 * modelled by `oldKernelCovers`, NCCL 2.28.9's `oneRankReduce` partition).
 */
import assert from "node:assert/strict";
import {
  oldKernelCovers,
  oneRankPremulDropsTail,
  oneRankPremulPieces,
} from "../../../backend/nccl/_one_rank.ts";
import { parseNcclVersion } from "../../../ffi/nccl/constants.ts";

Deno.test("the old one-rank kernel drops the tail where NCCL 2.28.9 did on a GPU", () => {
  assert.equal(oldKernelCovers(4099, 8), false); // float64, 3 blocks of 1366: element 4098 left
  assert.equal(oldKernelCovers(4099, 4), true); // float32, 2 blocks of 2052
  assert.equal(oldKernelCovers(4099, 2), true); // one block
  assert.deepEqual(oneRankPremulPieces(4099, 8), [[0, 4098], [4098, 1]]);
});

Deno.test("oneRankPremulPieces() covers [0, count) in pieces the old kernel covers, for every size", () => {
  for (const size of [1, 2, 4, 8]) {
    for (let count = 1; count < 300_000; count += count < 5000 ? 1 : 997) {
      const pieces = oneRankPremulPieces(count, size);
      assert.ok(pieces.length <= 2, `${count}×${size}: ${pieces.length} pieces`);
      let next = 0;
      for (const [first, n] of pieces) {
        assert.equal(first, next, `${count}×${size}: contiguous`);
        assert.ok(n > 0 && oldKernelCovers(n, size), `${count}×${size}: piece [${first}, ${n}] covered`);
        next = first + n;
      }
      assert.equal(next, count, `${count}×${size}: covers all`);
    }
  }
});

Deno.test("only releases before 2.29.7 take the workaround", () => {
  assert.equal(oneRankPremulDropsTail(parseNcclVersion(22809)), true);
  assert.equal(oneRankPremulDropsTail(parseNcclVersion(22903)), true);
  assert.equal(oneRankPremulDropsTail(parseNcclVersion(22907)), false);
  assert.equal(oneRankPremulDropsTail(parseNcclVersion(23007)), false);
});
