import assert from "node:assert/strict";
import { StoreError, TimeoutError } from "../../core/errors.ts";
import { encodeFrame, Op, PROTOCOL_VERSION, Reply, str } from "../../store/_protocol.ts";
import { generateSecret, STORE_SECRET_ENV } from "../../store/secret.ts";
import { TcpStore } from "../../store/tcp_store.ts";
import { TcpStoreServer, type TcpStoreServerOptions } from "../../store/tcp_store_server.ts";
import { stillPending, storeContract } from "./_contract.ts";
import { closedByPeer, rawAuthenticate, rawHello as rawConnect, readFrame } from "./_raw.ts";
import { freePort } from "../_util/net.ts";
import { startServerProcess } from "./_server_process.ts";

/** A server whose log lines are kept, not printed. */
async function startServer(
  options: TcpStoreServerOptions = {},
): Promise<TcpStoreServer & { logs: string[] }> {
  const logs: string[] = [];
  const server = await TcpStoreServer.listen({ secret: "", log: (line) => logs.push(line), ...options });
  return Object.assign(server, { logs });
}

storeContract("TcpStore", async (clients, timeoutMs) => {
  const server = await startServer();
  const stores = await Promise.all(
    Array.from({ length: clients }, () => TcpStore.connect({ port: server.port, secret: "", timeoutMs })),
  );
  return {
    clients: stores,
    [Symbol.asyncDispose]: async () => {
      for (const store of stores) await store.close();
      await server.close();
    },
  };
});

const text = (bytes: Uint8Array): string => new TextDecoder().decode(bytes);
const delay = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

/** Polls `condition` every 5 ms for up to `ms`; for effects another connection's read loop completes. */
async function until(condition: () => boolean, ms = 2_000): Promise<void> {
  const end = performance.now() + ms;
  while (!condition()) {
    if (performance.now() > end) throw new Error(`Condition not met within ${ms} ms`);
    await delay(5);
  }
}

/** A port nobody listens on right now. */

/** Sends `bytes` on a fresh (optionally authenticated) connection; checks the server closes it and logs why. */
async function expectRejected(
  server: TcpStoreServer & { logs: string[] },
  bytes: Uint8Array,
  reason: RegExp,
  options: { authenticate?: boolean; closeAfter?: boolean } = {},
): Promise<void> {
  const healthy = await TcpStore.connect({ port: server.port, secret: "" });
  const conn = await rawConnect(server.port);
  const { port } = conn.localAddr as Deno.NetAddr;
  if (options.authenticate) await rawAuthenticate(conn);
  await conn.write(bytes);
  if (options.closeAfter) await conn.closeWrite();
  assert.equal(await closedByPeer(conn), true, "the server should close the connection");
  const line = server.logs.find((l) => l.includes(`127.0.0.1:${port}`));
  assert.ok(line, `no log line names the peer 127.0.0.1:${port}: ${JSON.stringify(server.logs)}`);
  assert.match(line, reason);
  assert.equal(server.logs.filter((l) => l.includes(`127.0.0.1:${port}`)).length, 1, "one line per peer");
  // The server keeps serving the others.
  await healthy.set("still", "serving");
  assert.equal(text(await healthy.get("still")), "serving");
  await healthy.close();
}

Deno.test("TcpStoreServer.listen() binds loopback on an ephemeral port by default", async () => {
  await using server = await startServer();
  assert.equal(server.hostname, "127.0.0.1");
  assert.ok(server.port > 0);
  assert.equal(server.address, `127.0.0.1:${server.port}`);
  assert.equal(server.authenticates, false);
});

Deno.test("TcpStoreServer.listen() throws a StoreError when the port is taken", async () => {
  await using server = await startServer();
  await assert.rejects(TcpStoreServer.listen({ port: server.port }), (error: Error) => {
    assert.ok(error instanceof StoreError);
    assert.match(error.message, new RegExp(`Cannot start the store server on 127.0.0.1:${server.port}`));
    assert.ok(error.cause instanceof Deno.errors.AddrInUse);
    return true;
  });
  await assert.rejects(TcpStoreServer.listen({ port: 70_000 }), RangeError);
  await assert.rejects(TcpStoreServer.listen({ maxFrameBytes: 10 }), RangeError);
});

Deno.test("TcpStore.connect() retries until the server starts listening", async () => {
  const port = freePort();
  const connecting = TcpStore.connect({ port, secret: "", connectTimeoutMs: 5_000 });
  await delay(150); // the client has been refused a few times by now
  await using server = await startServer({ port });
  await using store = await connecting;
  await store.set("k", "v");
  assert.equal(text(await store.get("k")), "v");
  assert.equal(server.connections, 1);
});

Deno.test("TcpStore.connect() throws a TimeoutError naming the address when no server comes up", async () => {
  const port = freePort();
  const start = performance.now();
  await assert.rejects(TcpStore.connect({ port, connectTimeoutMs: 100 }), (error: Error) => {
    assert.ok(error instanceof TimeoutError, String(error));
    assert.match(error.message, new RegExp(`store at 127\\.0\\.0\\.1:${port}.*within 100 ms`));
    assert.ok(error.cause instanceof Deno.errors.ConnectionRefused);
    return true;
  });
  assert.ok(performance.now() - start < 1_000);
});

Deno.test("TcpStore.connect() rejects with the signal's reason when aborted", async () => {
  const controller = new AbortController();
  const connecting = TcpStore.connect({ port: freePort(), signal: controller.signal });
  await delay(30);
  const reason = new Error("launcher shutting down");
  controller.abort(reason);
  await assert.rejects(connecting, (error) => error === reason);
});

Deno.test("TcpStore.connect() validates its options", async () => {
  await assert.rejects(TcpStore.connect({ port: 0 }), RangeError);
  await assert.rejects(TcpStore.connect({ port: 1.5 }), RangeError);
  await assert.rejects(TcpStore.connect({ port: 80, hostname: "" }), TypeError);
  await assert.rejects(TcpStore.connect({ port: 80, timeoutMs: -1 }), RangeError);
  await assert.rejects(TcpStore.connect({ port: 80, maxFrameBytes: 12 }), RangeError);
});

Deno.test("TcpStore.connect() with the right secret is accepted", async () => {
  const secret = generateSecret();
  await using server = await startServer({ secret });
  assert.equal(server.authenticates, true);
  await using store = await TcpStore.connect({ port: server.port, secret });
  await store.set("k", "v");
  assert.equal(await store.numKeys(), 1);
  assert.deepEqual(server.logs, []);
});

Deno.test("TcpStore.connect() with a wrong secret is refused with a StoreError and one server log line", async () => {
  await using server = await startServer({ secret: generateSecret() });
  const start = performance.now();
  await assert.rejects(
    TcpStore.connect({ port: server.port, secret: generateSecret(), connectTimeoutMs: 5_000 }),
    (error: Error) => {
      assert.ok(error instanceof StoreError, String(error));
      assert.equal(
        error.message,
        `The store at 127.0.0.1:${server.port} refused this client: wrong or missing secret (set ` +
          `${STORE_SECRET_ENV} to the secret the launcher generated, or pass \`secret\` to TcpStore.connect())`,
      );
      return true;
    },
  );
  assert.ok(performance.now() - start < 1_000, "a refusal is not retried");
  assert.equal(server.logs.length, 1);
  assert.match(
    server.logs[0],
    new RegExp(
      `^dcomm store server 127\\.0\\.0\\.1:${server.port}: refused 127\\.0\\.0\\.1:\\d+: wrong secret$`,
    ),
  );
  await until(() => server.connections === 0);
});

Deno.test("TcpStore.connect() without a secret is refused by a server that has one", async () => {
  await using server = await startServer({ secret: "s3cret" });
  await assert.rejects(TcpStore.connect({ port: server.port, secret: "" }), (error: Error) => {
    assert.ok(error instanceof StoreError);
    assert.match(error.message, /refused this client: wrong or missing secret \(set DCOMM_STORE_SECRET/);
    return true;
  });
  assert.match(server.logs[0], /refused 127\.0\.0\.1:\d+: no secret given/);
});

Deno.test("TcpStoreServer closes a connection that sends garbage, logs it and keeps serving", async () => {
  await using server = await startServer();
  const garbage = new TextEncoder().encode("GET / HTTP/1.1\r\nHost: x\r\n\r\n");
  await expectRejected(
    server,
    garbage,
    /closed the connection from .*: frame of \d+ bytes exceeds the limit of 1024 bytes/,
  );
});

Deno.test("TcpStoreServer closes a connection that announces an oversized frame", async () => {
  await using server = await startServer({ maxFrameBytes: 4096 });
  const header = new Uint8Array(9);
  new DataView(header.buffer).setUint32(0, 0x7fff_fff0, true);
  await expectRejected(server, header, /frame of 2147483636 bytes exceeds the limit of 4096 bytes/, {
    authenticate: true,
  });
  const bigSet = encodeFrame(7, Op.SET, [str("k"), { bytes: new Uint8Array(5000) }]);
  await expectRejected(server, bigSet, /frame of 5018 bytes exceeds the limit of 4096 bytes/, {
    authenticate: true,
  });
});

Deno.test("TcpStoreServer closes a connection that sends an unknown opcode", async () => {
  await using server = await startServer();
  await expectRejected(server, encodeFrame(1, 0xee), /unknown opcode 0xee/, { authenticate: true });
});

Deno.test("TcpStoreServer closes a connection that sends a request before AUTH", async () => {
  await using server = await startServer();
  await expectRejected(
    server,
    encodeFrame(1, Op.SET, [str("k"), str("v")]),
    /expected AUTH \(0x01\).*found opcode 0x10/,
  );
});

Deno.test("TcpStoreServer closes a connection whose frame body overruns its fields", async () => {
  await using server = await startServer();
  const frame = encodeFrame(1, Op.GET, [str("abc")]);
  new DataView(frame.buffer).setUint32(9, 1000, true); // the key claims 1000 bytes
  await expectRejected(server, frame, /truncated frame body/, { authenticate: true });
  await expectRejected(server, encodeFrame(2, Op.NUM_KEYS, [{ u8: 1 }]), /1 unexpected trailing bytes/, {
    authenticate: true,
  });
  await expectRejected(server, encodeFrame(3, Op.GET, [str("")]), /a key is empty/, { authenticate: true });
  await expectRejected(
    server,
    encodeFrame(4, Op.GET, [{ bytes: new Uint8Array([0xff, 0xfe]) }]),
    /not valid UTF-8/,
    {
      authenticate: true,
    },
  );
});

Deno.test("TcpStoreServer logs a connection closed in the middle of a frame", async () => {
  await using server = await startServer();
  const partial = encodeFrame(1, Op.SET, [str("key"), str("a value of some length")]).subarray(0, 15);
  await expectRejected(server, partial, /in the middle of a frame \(15 of 42 bytes received\)/, {
    authenticate: true,
    closeAfter: true,
  });
});

Deno.test("TcpStoreServer refuses a client that speaks another protocol version", async () => {
  await using server = await startServer();
  const conn = await rawConnect(server.port);
  await conn.write(encodeFrame(5, Op.AUTH, [{ u8: PROTOCOL_VERSION + 1 }]));
  const reply = await readFrame(conn);
  assert.equal(reply.op, Reply.AUTH_REFUSED);
  assert.equal(await closedByPeer(conn), true);
  const lines = server.logs.filter((l) => !l.includes("WARNING"));
  assert.equal(lines.length, 1);
  assert.match(
    lines[0],
    new RegExp(
      `refused 127\\.0\\.0\\.1:\\d+: protocol version ${
        PROTOCOL_VERSION + 1
      }, but this server speaks version ${PROTOCOL_VERSION}$`,
    ),
  );
});

Deno.test("TcpStoreServer keeps serving when its log callback throws", async () => {
  await using server = await TcpStoreServer.listen({
    secret: "s3cret",
    log: () => {
      throw new Error("logger down");
    },
  });
  await assert.rejects(TcpStore.connect({ port: server.port, secret: "wrong" }), StoreError);
  await using store = await TcpStore.connect({ port: server.port, secret: "s3cret" });
  assert.equal(await store.add("n", 1), 1);
});

Deno.test("TcpStoreServer closes a connection that does not authenticate in time", async () => {
  await using server = await startServer({ handshakeTimeoutMs: 50 });
  const conn = await rawConnect(server.port);
  assert.equal(await closedByPeer(conn), true);
  assert.ok(server.logs.some((l) => /refused 127\.0\.0\.1:\d+: no authentication within 50 ms/.test(l)));
});

Deno.test("TcpStore keeps many requests in flight on one connection, answered out of order", async () => {
  await using server = await startServer();
  await using reader = await TcpStore.connect({ port: server.port, secret: "" });
  await using writer = await TcpStore.connect({ port: server.port, secret: "" });
  const keys = Array.from({ length: 100 }, (_, i) => `k${i}`);
  const gets = keys.map((key) => reader.get(key));
  await reader.set("unrelated", "x"); // answered while 100 gets are parked before it
  for (const key of keys.toReversed()) await writer.set(key, key.toUpperCase());
  assert.deepEqual((await Promise.all(gets)).map(text), keys.map((k) => k.toUpperCase()));
});

Deno.test("TcpStore round-trips a 4 MiB value and refuses one over its frame limit", async () => {
  await using server = await startServer();
  await using store = await TcpStore.connect({
    port: server.port,
    secret: "",
    maxFrameBytes: 8 * 1024 * 1024,
  });
  const big = new Uint8Array(4 * 1024 * 1024).map((_, i) => i * 7);
  await store.set("big", big);
  assert.deepEqual(await store.get("big"), big);
  await assert.rejects(store.set("huge", new Uint8Array(8 * 1024 * 1024)), (error: Error) => {
    assert.ok(error instanceof RangeError);
    assert.match(
      error.message,
      /Cannot set key "huge": the request takes 8388629 bytes, over the frame limit/,
    );
    return true;
  });
  assert.equal(await store.check(["big"]), true); // the refused call did not hurt the connection
});

Deno.test("TcpStore.get() that times out cancels its waiter on the server", async () => {
  await using server = await startServer();
  await using store = await TcpStore.connect({ port: server.port, secret: "" });
  await assert.rejects(store.get("never", { timeoutMs: 20 }), TimeoutError);
  await store.numKeys(); // the CANCEL went first on the same connection, so it has been handled
  assert.equal(server.waitedKeys, 0);
  const controller = new AbortController();
  const pending = store.wait(["a", "b"], { signal: controller.signal });
  await store.numKeys();
  assert.equal(server.waitedKeys, 2);
  controller.abort();
  await assert.rejects(pending);
  await store.numKeys();
  assert.equal(server.waitedKeys, 0);
});

Deno.test("TcpStoreServer drops the waiters of a client that disconnects", async () => {
  await using server = await startServer();
  const store = await TcpStore.connect({ port: server.port, secret: "" });
  const rejected = assert.rejects(store.get("never"), StoreError);
  await store.check([]);
  assert.equal(server.waitedKeys, 1);
  await store.close();
  await rejected;
  await until(() => server.connections === 0);
  assert.equal(server.waitedKeys, 0);
});

Deno.test("TcpStore.close() rejects its pending calls with a StoreError", async () => {
  await using server = await startServer();
  const store = await TcpStore.connect({ port: server.port, secret: "" });
  const rejected = assert.rejects(store.wait(["never"]), (error: Error) => {
    assert.ok(error instanceof StoreError);
    assert.equal(error.message, 'Cannot wait for key "never": the TcpStore client was closed');
    return true;
  });
  await store.close();
  await rejected;
  assert.equal(store.closed, true);
});

Deno.test("TcpStore.get() fails fast with a StoreError when the server closes mid-wait", async () => {
  const server = await startServer();
  await using store = await TcpStore.connect({ port: server.port, secret: "" });
  const pending = store.get("never", { timeoutMs: 60_000 });
  assert.equal(await stillPending(pending), true);
  const start = performance.now();
  const closing = server.close();
  await assert.rejects(pending, (error: Error) => {
    assert.ok(error instanceof StoreError, String(error));
    assert.match(
      error.message,
      /^Cannot get key "never": lost the connection to the store at 127\.0\.0\.1:\d+: the server closed/,
    );
    return true;
  });
  assert.ok(performance.now() - start < 1_000);
  await closing;
  await assert.rejects(store.set("k", "v"), /lost the connection/);
});

Deno.test("TcpStore.get() fails fast with a StoreError when the server's process is killed", async () => {
  await using server = await startServerProcess("inherit");
  await using store = await TcpStore.connect({ port: server.port, secret: "" });
  await store.set("alive", "1");
  const pending = store.get("never", { timeoutMs: 60_000 });
  assert.equal(await stillPending(pending), true);
  const start = performance.now();
  server.child.kill("SIGKILL");
  await assert.rejects(
    pending,
    (error: Error) => error instanceof StoreError && /lost the connection/.test(error.message),
  );
  assert.ok(performance.now() - start < 2_000);
});

Deno.test("TcpStore works across processes: ranks in child processes rendezvous through the server", async () => {
  const secret = generateSecret();
  await using server = await startServer({ secret });
  await using store = await TcpStore.connect({ port: server.port, secret, timeoutMs: 15_000 });
  const ranks = [1, 2];
  const children = ranks.map((rank) =>
    new Deno.Command(Deno.execPath(), {
      args: [
        "run",
        "-A",
        new URL("./_fixtures/store_client.ts", import.meta.url).pathname,
        String(server.port),
        String(rank),
      ],
      env: { [STORE_SECRET_ENV]: secret },
      stdout: "piped",
      stderr: "piped",
    }).output()
  );
  await store.wait(ranks.map((rank) => `rank/${rank}`));
  assert.equal(text(await store.get("arrived")), "2");
  await store.set("go", "1");
  await store.wait(ranks.map((rank) => `done/${rank}`));
  for (const output of await Promise.all(children)) {
    assert.equal(output.code, 0, new TextDecoder().decode(output.stderr));
  }
  assert.match(text(await store.get("rank/1")), /^pid \d+$/);
  assert.deepEqual(server.logs, []);
});
