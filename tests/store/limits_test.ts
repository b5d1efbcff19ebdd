/**
 * Every resource a client can make a store server hold is bounded, and the client that hits a bound is
 * told which: connections, parked requests (per connection and in all), the frame buffer (it grows with
 * the bytes that arrive, not with the length a prefix announces), connections idle after AUTH, and the log
 * lines bad connections cost.
 *
 * @module
 */
import assert from "node:assert/strict";
import { StoreError } from "../../core/errors.ts";
import { encodeFrame, FrameReader, Op, Reply, str } from "../../store/_protocol.ts";
import { TcpStore } from "../../store/tcp_store.ts";
import { TcpStoreServer, type TcpStoreServerOptions } from "../../store/tcp_store_server.ts";
import { TorchStoreServer } from "../../store/torch_store_server.ts";
import {
  closedByPeer,
  rawAuthenticate,
  rawConnect,
  rawHello,
  readFrame,
  rejectsWithin,
  settleWithin,
} from "./_raw.ts";

const text = (bytes: Uint8Array): string => new TextDecoder().decode(bytes);
const delay = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

async function startServer(
  options: TcpStoreServerOptions = {},
): Promise<TcpStoreServer & { logs: string[] }> {
  const logs: string[] = [];
  const server = await TcpStoreServer.listen({ secret: "", log: (line) => logs.push(line), ...options });
  return Object.assign(server, { logs });
}

/** The log lines about connections (not the warning every server without a secret starts with). */
function connectionLines(logs: string[]): string[] {
  return logs.filter((line) => !line.includes("WARNING"));
}

async function until(condition: () => boolean, ms = 2_000): Promise<void> {
  const end = performance.now() + ms;
  while (!condition()) {
    if (performance.now() > end) throw new Error(`Condition not met within ${ms} ms`);
    await delay(5);
  }
}

// --- connections ----------------------------------------------------------------------------------------

Deno.test("TcpStoreServer caps its connections: the one over the cap is told so, then closed", async () => {
  await using server = await startServer({ maxConnections: 3 });
  const held = await Promise.all([0, 1, 2].map(() => rawHello(server.port)));
  const { conn, first } = await rawConnect(server.port);
  assert.equal(first.op, Reply.AUTH_REFUSED, "a refusal instead of HELLO");
  assert.equal(first.body[0], 4, "code 4: too many connections");
  assert.match(text(first.body), /has 3 connections open, its limit \(maxConnections\)/);
  assert.equal(await closedByPeer(conn), true);
  const error = await rejectsWithin(TcpStore.connect({ port: server.port, secret: "" }), 2_000, "connect");
  assert.ok(error instanceof StoreError, String(error));
  assert.match(
    error.message,
    /refused this client: the server has 3 connections open, its limit \(maxConnections\)/,
  );
  assert.ok(connectionLines(server.logs).some((l) => /refused 127\.0\.0\.1:\d+: 3 connections open/.test(l)));
  // Room again once one goes.
  held[0].close();
  await until(() => server.connections === 2);
  await using store = await TcpStore.connect({ port: server.port, secret: "" });
  assert.equal(await store.add("n", 1), 1);
  for (const c of held.slice(1)) c.close();
});

Deno.test("TcpStoreServer's default connection cap stays below this process's file descriptor limit", async () => {
  await using server = await startServer();
  const limits = Deno.readTextFileSync("/proc/self/limits");
  const soft = Number(/^Max open files\s+(\d+)/m.exec(limits)?.[1]);
  assert.ok(
    server.maxConnections >= 64 && server.maxConnections < soft,
    `${server.maxConnections} vs ${soft}`,
  );
});

Deno.test("TorchStoreServer caps its connections too", async () => {
  const logs: string[] = [];
  await using server = await TorchStoreServer.listen({ maxConnections: 2, log: (l) => logs.push(l) });
  const held = await Promise.all(
    [0, 1].map(() => Deno.connect({ hostname: "127.0.0.1", port: server.port })),
  );
  await until(() => server.connections === 2);
  const over = await Deno.connect({ hostname: "127.0.0.1", port: server.port });
  assert.equal(await closedByPeer(over), true);
  assert.ok(
    logs.some((l) => /refused 127\.0\.0\.1:\d+: 2 connections open, the limit/.test(l)),
    logs.join("\n"),
  );
  for (const c of held) c.close();
});

// --- parked requests --------------------------------------------------------------------------------------

Deno.test("TcpStoreServer caps the requests parked per connection, with an error to the one over the cap", async () => {
  await using server = await startServer({ maxWaitersPerConnection: 2 });
  await using store = await TcpStore.connect({ port: server.port, secret: "", timeoutMs: 10_000 });
  const parked = [store.get("a"), store.wait(["b"])];
  for (const p of parked) p.catch(() => {}); // (awaited below; a failed assertion must not leave them unhandled)
  const error = await rejectsWithin(store.get("c"), 2_000, "the third get");
  assert.ok(error instanceof StoreError, String(error));
  assert.match(error.message, /this connection has 2 requests parked, the limit \(maxWaitersPerConnection\)/);
  // The connection still works, and the parked ones are still answered.
  await store.set("a", "1");
  await store.set("b", "2");
  assert.equal(text(await parked[0] as Uint8Array), "1");
  await parked[1];
  assert.equal(text(await store.get("a")), "1", "room again");
});

Deno.test("TcpStoreServer caps the requests parked in all", async () => {
  await using server = await startServer({ maxWaiters: 3 });
  await using a = await TcpStore.connect({ port: server.port, secret: "", timeoutMs: 10_000 });
  await using b = await TcpStore.connect({ port: server.port, secret: "", timeoutMs: 10_000 });
  const parked = [a.get("x"), a.get("y"), b.get("z")];
  for (const p of parked) p.catch(() => {}); // (awaited below)
  await b.numKeys(); // b's get has reached the server
  await a.numKeys();
  const error = await rejectsWithin(b.wait(["w"]), 2_000, "the fourth wait");
  assert.ok(error instanceof StoreError, String(error));
  assert.match(error.message, /the server has 3 requests parked, its limit \(maxWaiters\)/);
  await a.set("x", "1");
  await a.set("y", "1");
  await a.set("z", "1");
  await Promise.all(parked);
  assert.equal(server.parked, 0);
});

// --- the frame buffer --------------------------------------------------------------------------------------

Deno.test("FrameReader grows with the bytes that arrive, not with the length a prefix announces", () => {
  const reader = new FrameReader(64 * 1024 * 1024);
  const head = new Uint8Array(9);
  new DataView(head.buffer).setUint32(0, 64 * 1024 * 1024 - 4, true);
  let space = reader.space();
  space.set(head);
  reader.commit(head.length);
  assert.equal(reader.next(), null);
  let received = head.length;
  for (let i = 0; i < 3; i++) {
    space = reader.space();
    assert.ok(space.length + reader.buffered <= Math.max(2 * received, 128 * 1024), `space ${space.length}`);
    const n = Math.min(space.length, 100_000);
    reader.commit(n);
    received += n;
  }
  assert.ok(
    reader.capacity <= 2 * received + 128 * 1024,
    `capacity ${reader.capacity} for ${received} bytes`,
  );
});

Deno.test("FrameReader refuses a frame over its limit before reserving anything for it", () => {
  const reader = new FrameReader(4096);
  const head = new Uint8Array(9);
  new DataView(head.buffer).setUint32(0, 1_000_000, true);
  reader.space().set(head);
  reader.commit(9);
  assert.throws(() => reader.space(), /frame of 1000004 bytes exceeds the limit of 4096 bytes/);
  assert.ok(reader.capacity <= 64 * 1024);
});

Deno.test("TcpStoreServer holds no more than the bytes received for frames that announce 64 MiB", async () => {
  await using server = await startServer();
  const before = Deno.memoryUsage().external;
  const conns = await Promise.all(Array.from({ length: 8 }, () => rawHello(server.port)));
  for (const conn of conns) {
    await rawAuthenticate(conn);
    // The first 1000 bytes of a SET of 64 MiB (only the prefix says how long it is).
    const head = encodeFrame(1, Op.SET, [str("k"), { bytes: new Uint8Array(1000 - 18) }]);
    new DataView(head.buffer).setUint32(0, 64 * 1024 * 1024 - 4, true);
    await conn.write(head);
  }
  await delay(100);
  const grown = Deno.memoryUsage().external - before;
  assert.ok(
    grown < 32 * 1024 * 1024,
    `8 announced frames of 64 MiB hold ${(grown / 2 ** 20).toFixed(1)} MiB`,
  );
  for (const conn of conns) conn.close();
});

Deno.test("TcpStoreServer tells an authenticated client why it closes the connection on an oversized frame", async () => {
  await using server = await startServer({ maxFrameBytes: 4096 });
  const conn = await rawHello(server.port);
  await rawAuthenticate(conn);
  await conn.write(encodeFrame(7, Op.SET, [str("k"), { bytes: new Uint8Array(5000) }]));
  const goodbye = await readFrame(conn);
  assert.equal(goodbye.op, Reply.GOODBYE);
  assert.match(text(goodbye.body), /frame of 5018 bytes exceeds the limit of 4096 bytes \(maxFrameBytes\)/);
  assert.equal(await closedByPeer(conn), true);
  // TcpStore's calls say so.
  await using store = await TcpStore.connect({ port: server.port, secret: "" });
  const error = await rejectsWithin(store.set("big", new Uint8Array(5000)), 2_000, "the big set");
  assert.ok(error instanceof StoreError, String(error));
  assert.match(
    error.message,
    /^Cannot set key "big": lost the connection to the store at 127\.0\.0\.1:\d+: the server closed the connection: frame of 5020 bytes exceeds the limit of 4096 bytes \(maxFrameBytes\)/,
  );
});

// --- idle connections --------------------------------------------------------------------------------------

Deno.test("TcpStoreServer closes a connection idle after AUTH, saying why, but not one with a parked request", async () => {
  await using server = await startServer({ idleTimeoutMs: 200 });
  const idle = await rawHello(server.port);
  const auth = await rawAuthenticate(idle);
  assert.equal(
    new DataView(auth.body.buffer, auth.body.byteOffset).getUint32(0, true),
    200,
    "AUTH_OK says the timeout",
  );
  const waiting = await rawHello(server.port);
  await rawAuthenticate(waiting);
  await waiting.write(encodeFrame(9, Op.GET, [str("later")]));
  const start = performance.now();
  const goodbye = await settleWithin(readFrame(idle), 3_000);
  assert.ok(goodbye.settled && goodbye.ok, "the idle connection is told");
  assert.equal(goodbye.value.op, Reply.GOODBYE);
  assert.match(text(goodbye.value.body), /idle for 200 ms after authentication \(idleTimeoutMs\)/);
  assert.ok(performance.now() - start >= 150);
  assert.equal(await closedByPeer(idle), true);
  assert.ok(
    connectionLines(server.logs).some((l) => /closed the connection from 127\.0\.0\.1:\d+: idle/.test(l)),
  );
  await delay(400); // twice the timeout, and the parked GET's connection is still there
  await using setter = await TcpStore.connect({ port: server.port, secret: "" });
  await setter.set("later", "v");
  const value = await readFrame(waiting);
  assert.equal(value.id, 9);
  assert.equal(value.op, Reply.VALUE);
  waiting.close();
});

Deno.test("TcpStore keeps an idle connection alive: the server's idle timeout does not close it", async () => {
  await using server = await startServer({ idleTimeoutMs: 150 });
  await using store = await TcpStore.connect({ port: server.port, secret: "" });
  await delay(600);
  assert.equal(store.closed, false);
  assert.equal(await store.add("n", 1), 1);
  assert.deepEqual(connectionLines(server.logs), []);
});

// --- the log --------------------------------------------------------------------------------------------------

Deno.test("TcpStoreServer rate-limits its log of bad connections and counts the lines it left out", async () => {
  await using server = await startServer();
  const garbage = new TextEncoder().encode("GET / HTTP/1.1\r\nHost: x\r\n\r\n");
  const n = 40;
  for (let i = 0; i < n; i++) {
    const conn = await Deno.connect({ hostname: "127.0.0.1", port: server.port });
    await conn.write(garbage);
    await closedByPeer(conn);
  }
  await until(() => connectionLines(server.logs).some((l) => /left out/.test(l)), 3_000);
  await delay(50);
  const lines = connectionLines(server.logs);
  const shown = lines.filter((l) => /closed the connection from/.test(l)).length;
  const leftOut = lines.map((l) => Number(/left out (\d+) more lines/.exec(l)?.[1] ?? 0)).reduce(
    (a, b) => a + b,
    0,
  );
  assert.ok(shown < n / 2, `${shown} of ${n} lines written`);
  assert.equal(shown + leftOut, n, lines.join("\n"));
});
