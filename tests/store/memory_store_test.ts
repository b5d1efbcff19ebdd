import assert from "node:assert/strict";
import { StoreError, TimeoutError } from "../../core/errors.ts";
import { MemoryStore } from "../../store/memory_store.ts";
import { storeContract } from "./_contract.ts";

storeContract("MemoryStore", (clients, timeoutMs) => {
  const store = new MemoryStore({ timeoutMs });
  return Promise.resolve({
    clients: Array.from({ length: clients }, () => store),
    [Symbol.asyncDispose]: () => store.close(),
  });
});

Deno.test("MemoryStore defaults to a 300000 ms timeout and validates its own", () => {
  assert.equal(new MemoryStore().timeoutMs, 300_000);
  assert.equal(new MemoryStore({ timeoutMs: Infinity }).timeoutMs, Infinity);
  assert.throws(() => new MemoryStore({ timeoutMs: -5 }), RangeError);
  assert.throws(() => new MemoryStore({ timeoutMs: Number.NaN }), RangeError);
});

Deno.test("MemoryStore.wait() names the keys still missing when it times out", async () => {
  await using store = new MemoryStore();
  await store.set("a", "1");
  await assert.rejects(store.wait(["a", "b", "c"], { timeoutMs: 10 }), (error: Error) => {
    assert.ok(error instanceof TimeoutError);
    assert.equal(
      error.message,
      'Timed out after 10 ms waiting for keys "a", "b", "c" in the in-memory store (still missing: keys "b", "c")',
    );
    return true;
  });
});

Deno.test("MemoryStore.get() with an infinite timeout waits without a timer", async () => {
  await using store = new MemoryStore({ timeoutMs: Infinity });
  const pending = store.get("k");
  await store.set("k", "v");
  assert.equal(new TextDecoder().decode(await pending), "v");
});

Deno.test("MemoryStore.close() names the key a pending get was waiting for", async () => {
  const store = new MemoryStore();
  const pending = store.get("rank0/address");
  await store.close();
  await assert.rejects(pending, (error: Error) => {
    assert.ok(error instanceof StoreError);
    assert.match(error.message, /key "rank0\/address" in the in-memory store: the store was closed/);
    return true;
  });
  assert.equal(store.closed, true);
});

Deno.test("MemoryStore releases many waiters on one key with one set", async () => {
  await using store = new MemoryStore();
  const waiters = Array.from({ length: 100 }, () => store.get("go"));
  await store.set("go", "1");
  const values = await Promise.all(waiters);
  assert.ok(values.every((v) => v[0] === 0x31));
});
