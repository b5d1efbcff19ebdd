/**
 * Every request of the networked stores has a deadline: a server that accepted the connection and then
 * stopped answering (its host stopped, a network partition) makes each call fail with a `TimeoutError`
 * naming the request, the key and the server, within the store's `timeoutMs`; and closing such a store
 * returns at once.
 *
 * @module
 */
import assert from "node:assert/strict";
import { StoreError, TimeoutError } from "../../core/errors.ts";
import { TcpStore } from "../../store/tcp_store.ts";
import { TcpStoreServer } from "../../store/tcp_store_server.ts";
import { TorchStoreServer } from "../../store/torch_store_server.ts";
import { TorchStore } from "../../store/torch_store.ts";
import { TorchOp, WaitReply } from "../../store/_torch_protocol.ts";
import {
  drain,
  fakeDcommServer,
  type FakeServer,
  fakeServer,
  readBytes,
  rejectsWithin,
  settleWithin,
} from "./_raw.ts";
import { startServerProcess } from "./_server_process.ts";

const TIMEOUT_MS = 300;
/** How long past its deadline a call may take to fail on a busy two-core machine. */
const SLACK_MS = 1_500;

/**
 * Every request of the Store interface, named as the error should name it. torch's SET has no reply (its
 * client does not wait for one either), so against a torch store only its write could time out: it is left
 * out there.
 */
function everyRequest(store: TcpStore | TorchStore): [string, RegExp, () => Promise<unknown>][] {
  const set: [string, RegExp, () => Promise<unknown>][] = store instanceof TcpStore
    ? [["set", /set key "k-set"/, () => store.set("k-set", "v")]]
    : [];
  return [
    ...set,
    ["add", /add to key "k-add"/, () => store.add("k-add", 1)],
    ["delete", /delete key "k-delete"/, () => store.delete("k-delete")],
    ["compareSet", /compare-and-set key "k-cas"/, () => store.compareSet("k-cas", "", "v")],
    ["numKeys", /count the keys/, () => store.numKeys()],
    ["check", /check key "k-check"/, () => store.check(["k-check"])],
    ["get", /key "k-get"/, () => store.get("k-get")],
    ["wait", /key "k-wait"/, () => store.wait(["k-wait"])],
  ];
}

async function expectEachTimesOut(store: TcpStore | TorchStore, address: string): Promise<void> {
  const start = performance.now();
  const requests = everyRequest(store);
  const outcomes = await Promise.all(
    requests.map(([_, __, call]) => settleWithin(call(), TIMEOUT_MS + SLACK_MS)),
  );
  const failures: string[] = [];
  requests.forEach(([name, names], i): void => {
    const outcome = outcomes[i];
    if (!outcome.settled) {
      return void failures.push(`${name}: still pending after ${TIMEOUT_MS + SLACK_MS} ms`);
    }
    if (outcome.ok) return void failures.push(`${name}: resolved`);
    const error = outcome.error;
    if (!(error instanceof TimeoutError)) return void failures.push(`${name}: ${error}`);
    if (!names.test(error.message)) return void failures.push(`${name} is not named: ${error.message}`);
    if (!error.message.includes(address)) {
      return void failures.push(`${name}: the server is not named: ${error.message}`);
    }
    if (outcome.ms < TIMEOUT_MS - 20) failures.push(`${name} gave up early, after ${outcome.ms} ms`);
  });
  assert.deepEqual(failures, [], `after ${Math.round(performance.now() - start)} ms`);
}

Deno.test("TcpStore: every request fails with a TimeoutError when the server stops answering after AUTH", async () => {
  await using server = fakeDcommServer();
  const store = await TcpStore.connect({ port: server.port, secret: "", timeoutMs: TIMEOUT_MS });
  await expectEachTimesOut(store, `127.0.0.1:${server.port}`);
  // Sequential calls each get their own deadline too (a timed-out call does not poison the next).
  const error = await rejectsWithin(store.set("again", "v"), TIMEOUT_MS + SLACK_MS, "set again");
  assert.ok(error instanceof TimeoutError, String(error));
  assert.match(
    error.message,
    new RegExp(
      `^Timed out after ${TIMEOUT_MS} ms waiting for the store at 127\\.0\\.0\\.1:\\d+ to answer set key "again"`,
    ),
  );
  const start = performance.now();
  await store.close();
  assert.ok(performance.now() - start < 500, "close() returns at once");
});

Deno.test("TcpStore.close() is bounded when the server stopped reading with a large write under way", async () => {
  await using server = fakeDcommServer({ then: "stop" });
  const store = await TcpStore.connect({ port: server.port, secret: "", timeoutMs: TIMEOUT_MS });
  // 32 MiB cannot all fit in the socket buffers of a peer that reads nothing: the write blocks.
  const big = store.set("big", new Uint8Array(32 * 1024 * 1024));
  const error = await rejectsWithin(big, TIMEOUT_MS + SLACK_MS, "the large set");
  assert.ok(error instanceof TimeoutError, String(error));
  const start = performance.now();
  const closed = await rejectsWithin(
    store.close().then(() => Promise.reject(new Error("closed"))),
    3_000,
    "close()",
  );
  assert.equal(closed.message, "closed");
  assert.ok(performance.now() - start < 2_500);
  await assert.rejects(store.numKeys(), StoreError);
});

Deno.test("TcpStore: requests to a SIGSTOPped server process time out, and close() does not hang", async () => {
  await using server = await startServerProcess();
  const { child, port } = server;
  const store = await TcpStore.connect({ port, secret: "", timeoutMs: TIMEOUT_MS });
  await store.set("alive", "1");
  child.kill("SIGSTOP");
  for (const [name, names, call] of everyRequest(store)) {
    const error = await rejectsWithin(call(), TIMEOUT_MS + SLACK_MS, name);
    assert.ok(error instanceof TimeoutError, `${name}: ${error}`);
    assert.match(error.message, names);
    assert.ok(error.message.includes(`127.0.0.1:${port}`));
  }
  const start = performance.now();
  await store.close();
  assert.ok(performance.now() - start < 1_000, "close() returns at once");
});

/**
 * A fake torch store: it completes torch's validation (VALIDATE, then the PING it echoes) and then answers
 * nothing, except, with `releaseWaits`, the first query of every connection after the first (the WAIT of
 * a blocking call), which it answers STOP_WAITING before falling silent.
 */
function fakeTorchServer(options: { releaseWaits?: boolean } = {}): FakeServer {
  let n = 0;
  return fakeServer(async (conn) => {
    const index = n++;
    const head = await readBytes(conn, 10); // VALIDATE magic:u32, PING nonce:u32
    assert.equal(head[0], TorchOp.VALIDATE);
    assert.equal(head[5], TorchOp.PING);
    await conn.write(head.subarray(6, 10));
    if (options.releaseWaits && index > 0) {
      const query = await readBytes(conn, 1);
      if (query[0] === TorchOp.WAIT) await conn.write(new Uint8Array([WaitReply.STOP_WAITING]));
    }
    await drain(conn);
  });
}

Deno.test("TorchStore: every request fails with a TimeoutError when torch's server stops answering", async () => {
  await using server = fakeTorchServer();
  const store = await TorchStore.connect({ port: server.port, timeoutMs: TIMEOUT_MS });
  await expectEachTimesOut(store, `127.0.0.1:${server.port}`);
  // torch's protocol has no request ids: a timed-out call leaves its connection unusable, so the next call
  // opens another one, and times out in its turn (rather than failing at once for a connection it lost).
  const error = await rejectsWithin(store.add("again", 1), TIMEOUT_MS + SLACK_MS, "add again");
  assert.ok(error instanceof TimeoutError, String(error));
  assert.match(error.message, /add to key "again"/);
  const start = performance.now();
  await store.close();
  assert.ok(performance.now() - start < 500);
});

Deno.test("TorchStore.get() times out when the server releases the WAIT and then never sends the value", async () => {
  await using server = fakeTorchServer({ releaseWaits: true });
  await using store = await TorchStore.connect({ port: server.port, timeoutMs: TIMEOUT_MS });
  const error = await rejectsWithin(store.get("k"), TIMEOUT_MS + SLACK_MS, "get");
  assert.ok(error instanceof TimeoutError, String(error));
  assert.match(error.message, /get key "k"/);
  assert.ok(error.message.includes(`127.0.0.1:${server.port}`));
});

Deno.test("a timeoutMs of Infinity still means no deadline, for every call of both stores", async () => {
  await using tcpServer = await TcpStoreServer.listen({ secret: "", log: () => {} });
  await using torchServer = await TorchStoreServer.listen({ log: () => {} });
  await using tcp = await TcpStore.connect({ port: tcpServer.port, secret: "", timeoutMs: Infinity });
  await using torch = await TorchStore.connect({ port: torchServer.port, timeoutMs: Infinity });
  for (const store of [tcp, torch]) {
    const value = store.get("later");
    const waited = store.wait(["later"]);
    setTimeout(() => store.set("later", "v"), 50);
    assert.equal(new TextDecoder().decode(await value), "v");
    await waited;
    assert.equal(await store.add("n", 1), 1);
    assert.equal(await store.check(["later"]), true);
  }
});

Deno.test("TorchStore with timeoutMs Infinity waits for a value the server sends late", async () => {
  // Connections after the first (a blocking call's): WAIT released at once, the GET's value 50 ms later.
  let n = 0;
  await using server = fakeServer(async (conn) => {
    const index = n++;
    const head = await readBytes(conn, 10);
    await conn.write(head.subarray(6, 10));
    if (index === 0) return await drain(conn);
    await readBytes(conn, 1 + 8 + 8 + "/late".length); // WAIT, one key
    await conn.write(new Uint8Array([WaitReply.STOP_WAITING]));
    await readBytes(conn, 1 + 8 + "/late".length); // GET
    await new Promise((resolve) => setTimeout(resolve, 50));
    const reply = new Uint8Array(8 + 1);
    reply[0] = 1;
    reply[8] = 0x76; // "v"
    await conn.write(reply);
    await drain(conn);
  });
  await using store = await TorchStore.connect({ port: server.port, timeoutMs: Infinity });
  const outcome = await settleWithin(store.get("late"), 3_000);
  assert.ok(
    outcome.settled && outcome.ok,
    `the get failed: ${outcome.settled && !outcome.ok && outcome.error}`,
  );
  assert.equal(new TextDecoder().decode(outcome.value), "v");
});
