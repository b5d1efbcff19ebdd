/**
 * torch's TCPStore protocol against the real torch: dcomm's {@linkcode TorchStore} as a client of torch's
 * `TCPStore(is_master=True)` (its libuv server), and torch's Python client against dcomm's
 * {@linkcode TorchStoreServer}, for every operation, concurrent waits, timeouts and large values; and each
 * protocol's client meeting the other protocol's server, named as such.
 *
 * @module
 */
import assert from "node:assert/strict";
import { StoreError, TimeoutError } from "../../core/errors.ts";
import { TorchStore } from "../../store/torch_store.ts";
import { TorchStoreServer } from "../../store/torch_store_server.ts";
import { TcpStore } from "../../store/tcp_store.ts";
import { TcpStoreServer } from "../../store/tcp_store_server.ts";
import { MAX_VALUE_BYTES } from "../../store/_torch_protocol.ts";
import { gatedTest } from "../_util/skip.ts";
import { hexOf, TorchPeer, whyNoTorch } from "../_util/torch.ts";

const gate = { missing: whyNoTorch() };
const text = (bytes: Uint8Array): string => new TextDecoder().decode(bytes);

gatedTest("TorchStore runs every operation against torch's own TCPStore server", gate, async () => {
  await using torch = await TorchPeer.start("server");
  await using store = await TorchStore.connect({ port: torch.port, timeoutMs: 10_000 });

  // set here, get in Python, and back: keys carry torch's "/" prefix on both sides.
  await store.set("from/deno", "hello");
  assert.deepEqual(await torch.call({ op: "get", key: "from/deno" }), { ok: hexOf("hello") });
  assert.deepEqual(await torch.call({ op: "set", key: "from/python", value: hexOf("bonjour") }), {
    ok: null,
  });
  assert.equal(text(await store.get("from/python")), "bonjour");

  assert.equal(await store.add("counter", 5), 5);
  assert.deepEqual(await torch.call({ op: "add", key: "counter", delta: 2 }), { ok: 7 });
  assert.equal(await store.add("counter", -10), -3);
  assert.equal(text(await store.get("counter")), "-3");

  // compare_set: a missing key is set when expected is empty, else left missing and expected returned.
  assert.equal(text(await store.compareSet("cas", "", "first")), "first");
  assert.equal(text(await store.compareSet("cas", "wrong", "second")), "first");
  assert.equal(text(await store.compareSet("cas", "first", "second")), "second");
  assert.equal(text(await store.compareSet("cas-missing", "x", "y")), "x");
  assert.equal(await store.check(["cas-missing"]), false);

  assert.equal(await store.check(["from/deno", "from/python"]), true);
  assert.equal(await store.check(["from/deno", "nope"]), false);
  assert.deepEqual(await torch.call({ op: "check", keys: ["cas", "counter"] }), { ok: true });

  await store.append("log", "a");
  await store.append("log", "bc");
  assert.deepEqual(await torch.call({ op: "get", key: "log" }), { ok: hexOf("abc") });

  await store.multiSet([["m/1", "one"], ["m/2", new Uint8Array([0, 255])]]);
  assert.deepEqual(await torch.call({ op: "multi_get", keys: ["m/1", "m/2"] }), {
    ok: [hexOf("one"), "00ff"],
  });
  await torch.call({ op: "multi_set", keys: ["p/1", "p/2"], values: [hexOf("x"), hexOf("")] });
  assert.deepEqual((await store.multiGet(["p/1", "p/2"])).map(text), ["x", ""]);

  const keys = await store.numKeys();
  assert.deepEqual(await torch.call({ op: "num_keys" }), { ok: keys });
  assert.equal(await store.delete("log"), true);
  assert.equal(await store.delete("log"), false);
  assert.equal(await store.numKeys(), keys - 1);
});

gatedTest("TorchStore waits concurrently, times out with CANCEL_WAIT, and keeps working", gate, async () => {
  await using torch = await TorchPeer.start("server");
  await using store = await TorchStore.connect({ port: torch.port, timeoutMs: 10_000 });

  // Several gets and a wait pending at once, each on its own connection; released by sets from both sides.
  const pending = [store.get("a"), store.get("b"), store.multiGet(["a", "b", "c"]), store.wait(["c"])];
  await store.set("a", "1"); // the same client: a parked wait never holds up a set
  await torch.call({ op: "set", key: "b", value: hexOf("2") });
  await store.set("c", "3");
  const [a, b, abc] = await Promise.all(pending);
  assert.equal(text(a as Uint8Array), "1");
  assert.equal(text(b as Uint8Array), "2");
  assert.deepEqual((abc as Uint8Array[]).map(text), ["1", "2", "3"]);

  // A timeout names the key and the store; the connection it used is cancelled and reused.
  await assert.rejects(
    store.get("never", { timeoutMs: 200 }),
    (e: unknown) =>
      e instanceof TimeoutError &&
      /Timed out after 200 ms waiting for key "never" in the store at 127\.0\.0\.1:/.test(e.message),
  );
  await assert.rejects(store.wait(["never", "a"], { timeoutMs: 100 }), TimeoutError);
  const controller = new AbortController();
  const aborted = store.get("never", { signal: controller.signal });
  controller.abort(new Error("stop"));
  await assert.rejects(aborted, /stop/);
  // The cancelled connections went back to the pool: a later wait is released as usual.
  const later = store.get("late");
  await torch.call({ op: "set", key: "late", value: hexOf("ok") });
  assert.equal(text(await later), "ok");

  // torch's client times out the same way on a key dcomm never sets.
  const reply = await torch.call({ op: "wait", keys: ["missing"], timeout_ms: 200 });
  assert.match(reply.error ?? "", /timeout/i);
});

gatedTest("TorchStore moves values up to torch's 8 MiB limit and refuses larger ones", gate, async () => {
  await using torch = await TorchPeer.start("server");
  await using store = await TorchStore.connect({ port: torch.port, timeoutMs: 30_000 });
  const big = new Uint8Array(MAX_VALUE_BYTES);
  for (let i = 0; i < big.length; i++) big[i] = (i * 7919) & 0xff;
  await store.set("big", big);
  const back = await store.get("big");
  assert.equal(back.length, big.length);
  assert.deepEqual(back.subarray(0, 4096), big.subarray(0, 4096));
  assert.deepEqual(back.subarray(big.length - 4096), big.subarray(big.length - 4096));
  const bigHex = (await torch.call({ op: "get", key: "big" })).ok as string;
  assert.equal(bigHex.length, 2 * MAX_VALUE_BYTES);
  await assert.rejects(
    store.set("bigger", new Uint8Array(MAX_VALUE_BYTES + 1)),
    /at most 8388608 bytes.*found 8388609/,
  );
  await assert.rejects(store.set("k".repeat(9000), "v"), /keys of at most 8192 bytes.*found 9001/);
  // Nothing was sent: the store is still usable.
  await store.set("after", "fine");
  assert.equal(text(await store.get("after")), "fine");
});

gatedTest("torch's Python client runs every operation against dcomm's TorchStoreServer", gate, async () => {
  const log: string[] = [];
  await using server = await TorchStoreServer.listen({ log: (l) => log.push(l) });
  await using torch = await TorchPeer.start("client", server.port);
  await using store = await TorchStore.connect({ port: server.port, timeoutMs: 10_000 });

  assert.deepEqual(await torch.call({ op: "set", key: "k", value: hexOf("v1") }), { ok: null });
  assert.deepEqual(await torch.call({ op: "get", key: "k" }), { ok: hexOf("v1") });
  assert.equal(text(await store.get("k")), "v1");
  assert.deepEqual(await torch.call({ op: "add", key: "n", delta: 3 }), { ok: 3 });
  assert.equal(await store.add("n", 4), 7);
  assert.deepEqual(
    await torch.call({ op: "compare_set", key: "k", expected: hexOf("v1"), desired: hexOf("v2") }),
    {
      ok: hexOf("v2"),
    },
  );
  assert.deepEqual(
    await torch.call({ op: "compare_set", key: "k", expected: hexOf("zz"), desired: hexOf("v3") }),
    {
      ok: hexOf("v2"),
    },
  );
  assert.deepEqual(
    await torch.call({ op: "compare_set", key: "gone", expected: hexOf("e"), desired: hexOf("d") }),
    {
      ok: hexOf("e"),
    },
  );
  assert.deepEqual(await torch.call({ op: "check", keys: ["k", "n"] }), { ok: true });
  assert.deepEqual(await torch.call({ op: "check", keys: ["k", "gone"] }), { ok: false });
  assert.deepEqual(await torch.call({ op: "append", key: "k", value: hexOf("++") }), { ok: null });
  assert.equal(text(await store.get("k")), "v2++");
  assert.deepEqual(
    await torch.call({ op: "multi_set", keys: ["x", "y"], values: [hexOf("1"), hexOf("2")] }),
    {
      ok: null,
    },
  );
  assert.deepEqual(await torch.call({ op: "multi_get", keys: ["x", "y", "k"] }), {
    ok: [hexOf("1"), hexOf("2"), hexOf("v2++")],
  });
  assert.deepEqual(await torch.call({ op: "num_keys" }), { ok: 4 });
  assert.deepEqual(await torch.call({ op: "delete", key: "x" }), { ok: true });
  assert.deepEqual(await torch.call({ op: "delete", key: "x" }), { ok: false });

  // A Python get parks until dcomm sets the key; a Python wait times out through CANCEL_WAIT.
  const parked = torch.call({ op: "get", key: "from/deno" });
  await new Promise((r) => setTimeout(r, 200));
  await store.set("from/deno", "here");
  assert.deepEqual(await parked, { ok: hexOf("here") });
  const timedOut = await torch.call({ op: "wait", keys: ["never"], timeout_ms: 300 });
  assert.match(timedOut.error ?? "", /timeout/i);
  assert.deepEqual(await torch.call({ op: "get", key: "n" }), { ok: hexOf("7") }, "usable after the timeout");
  assert.equal(server.waitedKeys, 0, "the cancelled wait was dropped");

  // 8 MiB values, torch's limit, from Python to Deno.
  const bigHex = "ab".repeat(MAX_VALUE_BYTES);
  assert.deepEqual(await torch.call({ op: "set", key: "big", value: bigHex }), { ok: null });
  const big = await store.get("big");
  assert.equal(big.length, MAX_VALUE_BYTES);
  assert.ok(big.every((b) => b === 0xab));
  assert.deepEqual(log, []);
});

gatedTest("each protocol's client meeting the other's server is told so", gate, async () => {
  // dcomm's TcpStore meets torch's server: it probes and names it, instead of waiting out its timeout.
  await using torch = await TorchPeer.start("server");
  const started = Date.now();
  await assert.rejects(
    TcpStore.connect({ port: torch.port, timeoutMs: 20_000, secret: "" }),
    (e: unknown) =>
      e instanceof StoreError && /is torch's TCPStore/.test(e.message) &&
      /DCOMM_STORE_PROTOCOL=torch/.test(e.message),
  );
  assert.ok(Date.now() - started < 15_000, "named well before the connect timeout");

  // dcomm's TorchStore meets dcomm's own server.
  const log: string[] = [];
  await using dcomm = await TcpStoreServer.listen({ log: (l) => log.push(l), secret: "" });
  await assert.rejects(
    TorchStore.connect({ port: dcomm.port, timeoutMs: 10_000 }),
    (e: unknown) => e instanceof StoreError && /is a dcomm store/.test(e.message),
  );

  // torch's Python client meets dcomm's own server: the server's log line names torch's protocol.
  const python = new Deno.Command("python3", {
    args: [
      "-c",
      "import torch.distributed as d, datetime as t\n" +
      `s = d.TCPStore('127.0.0.1', ${dcomm.port}, is_master=False, timeout=t.timedelta(seconds=3))\n` +
      "s.set('a', 'b')",
    ],
    stdout: "null",
    stderr: "null",
  }).output();
  assert.notEqual((await python).code, 0);
  assert.ok(log.some((l) => /torch's TCPStore validation query/.test(l)), log.join("\n"));
});

Deno.test("TorchStore names a peer that answers torch's PING wrongly, and TorchStoreServer a bad client", async () => {
  // Not torch: a server that speaks first with bytes of its own (nothing of the handshake matches).
  const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const serving = (async () => {
    for await (const conn of listener) {
      await conn.write(new Uint8Array([1, 2, 3, 4, 5, 6, 7, 8, 9]));
      await new Promise((r) => setTimeout(r, 500));
      conn.close();
    }
  })();
  await assert.rejects(
    TorchStore.connect({ port: listener.addr.port, timeoutMs: 5_000 }),
    (e: unknown) =>
      e instanceof StoreError && /not a torch TCPStore of a known protocol version/.test(e.message),
  );
  listener.close();
  await serving.catch(() => {});

  // A server that closes the connection after torch's validation query, as one of another protocol
  // version would: retried until the deadline, then named.
  const closing = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const closer = (async () => {
    for await (const conn of closing) {
      await conn.read(new Uint8Array(64));
      conn.close();
    }
  })();
  await assert.rejects(
    TorchStore.connect({ port: closing.addr.port, timeoutMs: 500 }),
    (e: unknown) =>
      e instanceof TimeoutError &&
      /closed the connection after torch's validation handshake \(a torch store of another protocol version/
        .test(
          e.message,
        ),
  );
  closing.close();
  await closer.catch(() => {});

  // A client that skips VALIDATE is closed with one log line naming what it sent.
  const log: string[] = [];
  await using server = await TorchStoreServer.listen({ log: (l) => log.push(l) });
  const conn = await Deno.connect({ port: server.port });
  await conn.write(new Uint8Array([1, 0, 0, 0, 0, 0, 0, 0, 1]));
  const buf = new Uint8Array(16);
  assert.equal(await conn.read(buf), null, "the server closes the connection");
  conn.close();
  await new Promise((r) => setTimeout(r, 50));
  assert.match(log.join("\n"), /expected torch's VALIDATE query \(0\) first, found byte 1/);
});
