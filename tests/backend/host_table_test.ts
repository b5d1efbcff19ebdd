/**
 * The one-table host exchange of `backend/cpu/_connect.ts`: O(N) store requests for the world, ranks
 * joining in any order and late, and a rank that never comes named on every rank.
 */
import assert from "node:assert/strict";
import { StoreError, TimeoutError } from "../../core/errors.ts";
import {
  decodeHostTable,
  encodeHostTable,
  HOST_TABLE_KEY,
  hostIdentity,
  hostTable,
} from "../../backend/cpu/_connect.ts";
import { MemoryStore } from "../../store/memory_store.ts";
import { countingStore } from "../_util/counting_store.ts";
import { Rng } from "../_util/rng.ts";

Deno.test("hostTable(): 64 ranks joining in random order and late agree, in 2N + 2 requests", async () => {
  await using store = new MemoryStore();
  const count = { n: 0 };
  const client = countingStore(store, count);
  const rng = new Rng(27);
  const delays = Array.from({ length: 64 }, () => rng.u32() % 40);
  const tables = await Promise.all(delays.map(async (ms, rank) => {
    await new Promise((r) => setTimeout(r, ms));
    return await hostTable(client, rank, 64, 10_000);
  }));
  const me = hostIdentity();
  for (const t of tables) assert.deepEqual(t, Array(64).fill(me));
  assert.equal(count.n, 2 * 64 + 2);
});

Deno.test("the host table keeps each identity once; a value that is no table is refused", () => {
  const names = ["a", "b", "a", "c", "b", "a"];
  const text = encodeHostTable(names);
  assert.deepEqual(JSON.parse(text), { ids: ["a", "b", "c"], of: [0, 1, 0, 2, 1, 0] });
  assert.deepEqual(decodeHostTable(new TextEncoder().encode(text), 6), names);
  for (
    const bad of ["", "[1]", '{"ids":["a"],"of":[0,1]}', '{"ids":["a"],"of":[0]}', '{"ids":[1],"of":[0,0]}']
  ) {
    assert.equal(decodeHostTable(new TextEncoder().encode(bad), 2), undefined, bad);
  }
});

Deno.test("hostTable(): a rank that never comes is named on every rank; so is a rank 0 that stops", async () => {
  await using store = new MemoryStore();
  const results = await Promise.allSettled([0, 1, 3].map((rank) => hostTable(store, rank, 4, 300)));
  for (const [i, r] of results.entries()) {
    assert.equal(r.status, "rejected");
    const e = (r as PromiseRejectedResult).reason;
    assert.ok(e instanceof TimeoutError, String(e));
    assert.match(
      e.message,
      new RegExp(`^Cannot connect rank ${[0, 1, 3][i]} of 4 within 300 ms: waiting for rank 2 `),
    );
  }
  // Every rank published its host, but rank 0 never made the table.
  await using other = new MemoryStore();
  await other.set("host/0", "x");
  const late = await Promise.allSettled([1, 2].map((rank) => hostTable(other, rank, 3, 300)));
  for (const r of late) {
    assert.match(
      String((r as PromiseRejectedResult).reason),
      /every rank published its host, but rank 0 did not publish the table of them \(store key "hosts"\)/,
    );
  }
  // Another world's value under the key.
  await using foreign = new MemoryStore();
  await foreign.set(HOST_TABLE_KEY, "[1, 2]");
  await foreign.set("host/0", "x");
  await assert.rejects(
    hostTable(foreign, 1, 2, 1000),
    (e: unknown) => e instanceof StoreError && /holds no table of 2 hosts/.test(e.message),
  );
});
