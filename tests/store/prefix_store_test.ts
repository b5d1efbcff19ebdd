import assert from "node:assert/strict";
import { StoreError, TimeoutError } from "../../core/errors.ts";
import { MemoryStore } from "../../store/memory_store.ts";
import { PrefixStore } from "../../store/prefix_store.ts";
import { storeContract } from "./_contract.ts";

storeContract("PrefixStore", (clients, timeoutMs) => {
  const base = new MemoryStore();
  const stores = Array.from({ length: clients }, () => new PrefixStore("group", base, { timeoutMs }));
  return Promise.resolve({
    clients: stores,
    [Symbol.asyncDispose]: async () => {
      for (const store of stores) await store.close();
      await base.close();
    },
  });
});

const text = (bytes: Uint8Array): string => new TextDecoder().decode(bytes);

Deno.test("PrefixStore puts keys under `${prefix}/` in the wrapped store", async () => {
  await using base = new MemoryStore();
  await using group = new PrefixStore("pg1", base);
  await group.set("rank0", "a");
  assert.equal(text(await base.get("pg1/rank0")), "a");
  await base.set("pg1/rank1", "b");
  assert.equal(text(await group.get("rank1")), "b");
  assert.equal(await group.check(["rank0", "rank1"]), true);
  assert.equal(await base.check(["rank0"]), false);
});

Deno.test("PrefixStore keeps sub-groups apart and nests", async () => {
  await using base = new MemoryStore();
  await using a = new PrefixStore("a", base);
  await using b = new PrefixStore("b", base);
  await using ab = new PrefixStore("b", a);
  await a.set("k", "in a");
  await b.set("k", "in b");
  await ab.set("k", "in a/b");
  assert.equal(text(await a.get("k")), "in a");
  assert.equal(text(await b.get("k")), "in b");
  assert.equal(text(await base.get("a/b/k")), "in a/b");
  assert.equal(await a.add("n", 1), 1);
  assert.equal(await b.add("n", 5), 5);
});

Deno.test("PrefixStore.numKeys() counts every key of the wrapped store, as c10d does", async () => {
  await using base = new MemoryStore();
  await using group = new PrefixStore("g", base);
  await base.set("outside", "1");
  await group.set("inside", "1");
  assert.equal(await group.numKeys(), 2);
});

Deno.test("PrefixStore timeouts name the full key and default to the wrapped store's", async () => {
  await using base = new MemoryStore({ timeoutMs: 30 });
  await using group = new PrefixStore("g", base);
  assert.equal(group.timeoutMs, 30);
  await assert.rejects(group.get("k"), (error: Error) => {
    assert.ok(error instanceof TimeoutError);
    assert.equal(error.message, 'Timed out after 30 ms waiting for key "g/k" in the in-memory store');
    return true;
  });
});

Deno.test("PrefixStore.close() leaves the wrapped store open", async () => {
  await using base = new MemoryStore();
  const group = new PrefixStore("g", base);
  const pending = group.get("k");
  await group.close();
  await assert.rejects(
    pending,
    (error: Error) => error instanceof StoreError && /"g" was closed/.test(error.message),
  );
  await base.set("g/k", "still works");
  assert.equal(text(await base.get("g/k")), "still works");
});

Deno.test("PrefixStore rejects an empty or non-string prefix", () => {
  const base = new MemoryStore();
  assert.throws(() => new PrefixStore("", base), RangeError);
  assert.throws(() => new PrefixStore(7 as unknown as string, base), TypeError);
  assert.throws(() => new PrefixStore("g", {} as MemoryStore), TypeError);
  assert.throws(() => new PrefixStore("g", base, { timeoutMs: -1 }), RangeError);
});
