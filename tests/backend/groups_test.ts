/**
 * `EngineGroups`: the engine's groups, with the sub-groups a compressed all-reduce between hosts makes
 * (ids every rank derives alike), and `ScratchPool`, the scratch its calls take and give back.
 */
import assert from "node:assert/strict";
import { DistError } from "../../core/errors.ts";
import { EngineGroups } from "../../backend/cpu/_groups.ts";
import { ScratchPool } from "../../backend/cpu/_scratch.ts";

Deno.test("EngineGroups.add() places this rank, the hosts in group order and the segment's use", () => {
  const groups = new EngineGroups(2, [0, 0, 1, 1], true);
  const g = groups.add(3, [3, 2]);
  assert.equal(g.index, 1);
  assert.deepEqual(g.hosts, [1, 1]);
  assert.equal(g.segment, true);
  assert.equal(groups.add(40, [2]).segment, false, "group ids from 32 have no block in the segment");
  assert.equal(new EngineGroups(0, undefined, false).add(0, [0, 1]).segment, false);
});

Deno.test("EngineGroups.get() names a group this rank never registered", () => {
  assert.throws(() => new EngineGroups(0, undefined, false).get(7), {
    name: DistError.name,
    message: "Unknown group 7: newGroup() was not called on this rank",
  });
});

Deno.test("EngineGroups.within() derives sub-group ids from the parent and the key, once", () => {
  const groups = new EngineGroups(1, [0, 0, 1], true);
  const world = groups.add(0, [0, 1, 2]);
  const host = groups.within(world, 0, [0, 1]);
  assert.equal(host.id, 0x40000000);
  assert.equal(host.segment, false, "sub-groups run over messages");
  assert.equal(groups.within(world, 0, [0, 1]), host, "registered on first use only");
  const child = groups.add(5, [1, 2]);
  assert.equal(groups.within(child, 255, [1]).id, 0x40000000 + 5 * 256 + 255);
  assert.throws(() => groups.within(world, 256, [1]), RangeError);
});

Deno.test("ScratchPool.take() hands the same buffers out again after reset(), grown when asked for more", () => {
  const pool = new ScratchPool();
  const a = pool.take(100), b = pool.take(10);
  assert.notEqual(a.buffer, b.buffer);
  pool.reset();
  assert.equal(pool.take(50).buffer, a.buffer);
  const grown = pool.take(1000);
  assert.notEqual(grown.buffer, b.buffer);
  assert.ok(grown.buffer.byteLength >= 1000);
  assert.ok(!(grown.buffer instanceof SharedArrayBuffer));
});

Deno.test("ScratchPool.take() of a shared, zeroed pool is zeroed shared memory every time", () => {
  const pool = new ScratchPool({ shared: true, zeroed: true });
  const a = pool.take(64);
  assert.ok(a.buffer instanceof SharedArrayBuffer);
  a.fill(7);
  pool.reset();
  assert.deepEqual([...pool.take(64)], new Array(64).fill(0));
});
