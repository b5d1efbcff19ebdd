/**
 * The behaviour every {@linkcode Store} shares, as one suite that each implementation's test file runs
 * against its own stores (as Gloo runs every algorithm over every transport).
 *
 * @module
 */
import assert from "node:assert/strict";
import { StoreError, TimeoutError } from "../../core/errors.ts";
import type { Store } from "../../store/store.ts";

/** Stores that share one key space, as ranks of a job do, and what to close afterwards. */
export interface StoreFixture extends AsyncDisposable {
  /** Clients of the same key space; tests use them as different ranks. */
  readonly clients: Store[];
}

/** Opens `clients` stores over one fresh key space with default timeout `timeoutMs`. */
export type OpenStores = (clients: number, timeoutMs?: number) => Promise<StoreFixture>;

const text = (bytes: Uint8Array): string => new TextDecoder().decode(bytes);

/** Whether `promise` is still pending after the event loop has had `ms` to settle it. */
export async function stillPending(promise: Promise<unknown>, ms = 20): Promise<boolean> {
  let settled = false;
  promise.then(() => settled = true, () => settled = true);
  await new Promise((resolve) => setTimeout(resolve, ms));
  return !settled;
}

/**
 * Registers the shared tests.
 *
 * @param name The class under test, as test names spell it (`"TcpStore"`).
 * @param open Opens stores over one fresh key space.
 */
export function storeContract(name: string, open: OpenStores): void {
  Deno.test(`${name}.set() and get() round-trip bytes and strings`, async () => {
    await using f = await open(2);
    const [a, b] = f.clients;
    await a.set("bytes", new Uint8Array([0, 1, 255]));
    await a.set("text", "héllo");
    await a.set("empty", new Uint8Array());
    assert.deepEqual(await b.get("bytes"), new Uint8Array([0, 1, 255]));
    assert.equal(text(await b.get("text")), "héllo");
    assert.equal((await b.get("empty")).length, 0);
    await b.set("text", "replaced");
    assert.equal(text(await a.get("text")), "replaced");
  });

  Deno.test(`${name}.set() and get() copy values: the caller's array and the store's stay apart`, async () => {
    await using f = await open(1);
    const [s] = f.clients;
    const value = new Uint8Array([1, 2, 3]);
    await s.set("k", value);
    value[0] = 99;
    const got = await s.get("k");
    assert.deepEqual(got, new Uint8Array([1, 2, 3]));
    got[1] = 99;
    assert.deepEqual(await s.get("k"), new Uint8Array([1, 2, 3]));
  });

  Deno.test(`${name}.get() waits until another client sets the key`, async () => {
    await using f = await open(2);
    const [a, b] = f.clients;
    const pending = b.get("late");
    assert.equal(await stillPending(pending), true);
    await a.set("late", "now");
    assert.equal(text(await pending), "now");
  });

  Deno.test(`${name}.get() throws a TimeoutError naming the key and the time`, async () => {
    await using f = await open(1);
    const start = performance.now();
    await assert.rejects(f.clients[0].get("never/set", { timeoutMs: 50 }), (error: Error) => {
      assert.ok(error instanceof TimeoutError, String(error));
      assert.match(error.message, /never\/set"/); // a PrefixStore names the full key
      assert.match(error.message, /50 ms/);
      return true;
    });
    assert.ok(performance.now() - start >= 45);
  });

  Deno.test(`${name}.get() uses the store's default timeout when the call gives none`, async () => {
    await using f = await open(1, 40);
    assert.equal(f.clients[0].timeoutMs, 40);
    await assert.rejects(f.clients[0].get("missing"), (error: Error) => {
      assert.ok(error instanceof TimeoutError);
      assert.match(error.message, /40 ms/);
      return true;
    });
  });

  Deno.test(`${name}.get() still finds a key set after an earlier get timed out`, async () => {
    await using f = await open(2);
    const [a, b] = f.clients;
    await assert.rejects(b.get("k", { timeoutMs: 10 }), TimeoutError);
    const again = b.get("k", { timeoutMs: 5_000 });
    await a.set("k", "v");
    assert.equal(text(await again), "v");
  });

  Deno.test(`${name}.get() rejects with the signal's reason when aborted`, async () => {
    await using f = await open(1);
    const controller = new AbortController();
    const pending = f.clients[0].get("k", { signal: controller.signal });
    const reason = new Error("rank 3 gave up");
    controller.abort(reason);
    await assert.rejects(pending, (error) => error === reason);
    await assert.rejects(
      f.clients[0].get("k", { signal: AbortSignal.abort(reason) }),
      (error) => error === reason,
    );
  });

  Deno.test(`${name}.wait() resolves once every key is set, in any order`, async () => {
    await using f = await open(2);
    const [a, b] = f.clients;
    await b.wait([]);
    const pending = b.wait(["x", "y", "z"]);
    await a.set("z", "1");
    await a.set("x", "1");
    assert.equal(await stillPending(pending), true);
    await a.set("y", "1");
    await pending;
    await b.wait(["x", "y", "z"], { timeoutMs: 0 });
  });

  Deno.test(`${name}.wait() throws a TimeoutError naming the keys`, async () => {
    await using f = await open(1);
    await f.clients[0].set("here", "1");
    await assert.rejects(f.clients[0].wait(["here", "absent"], { timeoutMs: 30 }), (error: Error) => {
      assert.ok(error instanceof TimeoutError);
      assert.match(error.message, /absent"/);
      assert.match(error.message, /30 ms/);
      return true;
    });
  });

  Deno.test(`${name}.wait() rejects with the signal's reason when aborted`, async () => {
    await using f = await open(1);
    const controller = new AbortController();
    const pending = f.clients[0].wait(["a", "b"], { signal: controller.signal });
    controller.abort();
    await assert.rejects(pending, (error: Error) => error.name === "AbortError");
  });

  Deno.test(`${name}.multiGet() waits for every key and returns the values in order`, async () => {
    await using f = await open(2);
    const [a, b] = f.clients;
    assert.deepEqual(await b.multiGet([]), []);
    const pending = b.multiGet(["m/2", "m/0", "m/1"]);
    await a.multiSet([["m/0", "zero"], ["m/1", new Uint8Array([1, 255])]]);
    assert.equal(await stillPending(pending), true);
    await a.set("m/2", "");
    const [two, zero, one] = await pending;
    assert.equal(text(zero), "zero");
    assert.deepEqual(one, new Uint8Array([1, 255]));
    assert.equal(two.length, 0);
    // Copies: changing what came back changes nothing stored.
    one[0] = 9;
    assert.deepEqual((await b.multiGet(["m/1"]))[0], new Uint8Array([1, 255]));
    // A multiSet releases a plain get, and replaces values as set does.
    const get = b.get("m/3");
    await a.multiSet([["m/3", "three"], ["m/0", "again"]]);
    assert.equal(text(await get), "three");
    assert.equal(text(await b.get("m/0")), "again");
    await a.multiSet([]);
  });

  Deno.test(`${name}.multiGet() throws a TimeoutError naming the missing keys; bad entries are refused`, async () => {
    await using f = await open(1);
    const [a] = f.clients;
    await a.set("here", "1");
    await assert.rejects(a.multiGet(["here", "absent"], { timeoutMs: 30 }), (error: Error) => {
      assert.ok(error instanceof TimeoutError, String(error));
      assert.match(error.message, /absent"/);
      return true;
    });
    await assert.rejects(async () => await a.multiSet([["", "v"]]), RangeError);
    await assert.rejects(async () => await a.multiSet([["k", 5 as unknown as string]]), TypeError);
    await assert.rejects(
      async () => await a.multiSet("k" as never),
      /expected an array of \[key, value\] pairs/,
    );
    await assert.rejects(async () => await a.multiGet([""]), RangeError);
  });

  Deno.test(`${name}.add() starts a missing key at 0 and stores the decimal string`, async () => {
    await using f = await open(1);
    const [s] = f.clients;
    assert.equal(await s.add("n", 5), 5);
    assert.equal(await s.add("n", -7), -2);
    assert.equal(await s.add("n", 0), -2);
    assert.equal(text(await s.get("n")), "-2");
    await s.set("m", "40");
    assert.equal(await s.add("m", 2), 42);
  });

  Deno.test(`${name}.add() from many concurrent clients reaches the exact total`, async () => {
    await using f = await open(8);
    const perClient = 50;
    await Promise.all(
      f.clients.map((client, i) =>
        Promise.all(Array.from({ length: perClient }, () => client.add("counter", i + 1)))
      ),
    );
    const total = perClient * (8 * 9) / 2;
    assert.equal(text(await f.clients[0].get("counter")), String(total));
    assert.equal(await f.clients[3].add("counter", 0), total);
  });

  Deno.test(`${name}.add() throws a StoreError when the key holds no integer`, async () => {
    await using f = await open(1);
    const [s] = f.clients;
    await s.set("word", "abc");
    await assert.rejects(s.add("word", 1), (error: Error) => {
      assert.ok(error instanceof StoreError, String(error));
      assert.match(error.message, /word".*decimal integer.*"abc"/);
      return true;
    });
    assert.equal(text(await s.get("word")), "abc");
    await assert.rejects(s.add("n", 1.5), RangeError);
    await assert.rejects(s.add("n", 2 ** 60), RangeError);
  });

  Deno.test(`${name}.compareSet() follows c10d's semantics`, async () => {
    await using f = await open(1);
    const [s] = f.clients;
    // Missing key, expected non-empty: nothing is set and the expected value comes back.
    assert.equal(text(await s.compareSet("k", "old", "new")), "old");
    assert.equal(await s.check(["k"]), false);
    // Missing key, expected empty: the key is set.
    assert.equal(text(await s.compareSet("k", "", "first")), "first");
    assert.equal(text(await s.get("k")), "first");
    // Present key, expected matches: swapped.
    assert.equal(text(await s.compareSet("k", "first", "second")), "second");
    // Present key, expected differs: unchanged, the current value comes back.
    assert.equal(text(await s.compareSet("k", "first", "third")), "second");
    assert.equal(text(await s.get("k")), "second");
  });

  Deno.test(`${name}.compareSet() releases a get waiting for the key`, async () => {
    await using f = await open(2);
    const pending = f.clients[1].get("leader");
    await f.clients[0].compareSet("leader", new Uint8Array(), "rank0");
    assert.equal(text(await pending), "rank0");
  });

  Deno.test(`${name}.delete(), numKeys() and check() track the keys`, async () => {
    await using f = await open(2);
    const [a, b] = f.clients;
    assert.equal(await a.numKeys(), 0);
    assert.equal(await a.check([]), true);
    await a.set("a", "1");
    await b.set("b", "2");
    assert.equal(await b.numKeys(), 2);
    assert.equal(await a.check(["a", "b"]), true);
    assert.equal(await a.check(["a", "c"]), false);
    assert.equal(await b.delete("a"), true);
    assert.equal(await b.delete("a"), false);
    assert.equal(await a.check(["a"]), false);
    assert.equal(await a.numKeys(), 1);
  });

  Deno.test(`${name} rejects invalid keys, values and timeouts with TypeError or RangeError`, async () => {
    await using f = await open(1);
    const [s] = f.clients;
    await assert.rejects(s.set("", "v"), (e: Error) => e instanceof RangeError && /found ""/.test(e.message));
    await assert.rejects(
      s.set(42 as unknown as string, "v"),
      (e: Error) => e instanceof TypeError && /42/.test(e.message),
    );
    await assert.rejects(s.set("k", 42 as unknown as string), TypeError);
    await assert.rejects(s.get(""), RangeError);
    await assert.rejects(s.wait("abc" as unknown as string[]), TypeError);
    await assert.rejects(s.wait(["ok", ""]), RangeError);
    await assert.rejects(s.check([null as unknown as string]), TypeError);
    await assert.rejects(s.get("k", { timeoutMs: -1 }), RangeError);
    await assert.rejects(s.delete(""), RangeError);
    assert.equal(await s.numKeys(), 0);
  });

  Deno.test(`${name}.close() rejects a pending get with a StoreError, and later calls too`, async () => {
    await using f = await open(1);
    const [s] = f.clients;
    const rejected = assert.rejects(s.get("never", { timeoutMs: 10_000 }), StoreError);
    await s.close();
    await rejected;
    await assert.rejects(s.set("k", "v"), StoreError);
    await assert.rejects(s.get("k"), StoreError);
    await s.close();
  });
}
