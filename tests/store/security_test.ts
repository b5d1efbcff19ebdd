/**
 * The security model of dcomm's store (docs/store.md): the secret is proved both ways (a client holding one
 * refuses a server that has none, or cannot prove it: a squatter on the port); a server without a secret
 * warns, and refuses to serve beyond loopback unless told it may; wrong secrets are rate-limited per
 * client address.
 *
 * @module
 */
import assert from "node:assert/strict";
import { StoreError } from "../../core/errors.ts";
import { Rendezvous } from "../../backend/_rendezvous.ts";
import { Reply } from "../../store/_protocol.ts";
import { generateSecret, STORE_INSECURE_ENV, STORE_SECRET_ENV } from "../../store/secret.ts";
import { TcpStore } from "../../store/tcp_store.ts";
import { TcpStoreServer, type TcpStoreServerOptions } from "../../store/tcp_store_server.ts";
import { TorchStoreServer } from "../../store/torch_store_server.ts";
import { AuthLimiter } from "../../store/_auth.ts";
import { closedByPeer, fakeDcommServer, rawConnect, rejectsWithin } from "./_raw.ts";

async function startServer(
  options: TcpStoreServerOptions = {},
): Promise<TcpStoreServer & { logs: string[] }> {
  const logs: string[] = [];
  const server = await TcpStoreServer.listen({ secret: "", log: (line) => logs.push(line), ...options });
  return Object.assign(server, { logs });
}

/** This machine's first non-loopback IPv4 address, if it has one. */
function outsideAddress(): string | undefined {
  return Deno.networkInterfaces().find((nic) => nic.family === "IPv4" && !nic.address.startsWith("127."))
    ?.address;
}

/** Runs `fn` with `name` set in this process's environment, then restores it. */
async function withEnv<T>(name: string, value: string, fn: () => Promise<T>): Promise<T> {
  const saved = Deno.env.get(name);
  Deno.env.set(name, value);
  try {
    return await fn();
  } finally {
    if (saved === undefined) Deno.env.delete(name);
    else Deno.env.set(name, saved);
  }
}

// --- mutual proof -------------------------------------------------------------------------------------

Deno.test("a TcpStore holding a secret refuses a server that has none", async () => {
  await using server = await startServer({ secret: "" });
  const error = await rejectsWithin(
    TcpStore.connect({ port: server.port, secret: "s3cret", connectTimeoutMs: 5_000 }),
    3_000,
    "connect",
  );
  assert.ok(error instanceof StoreError, String(error));
  assert.match(
    error.message,
    new RegExp(
      `^The store at 127\\.0\\.0\\.1:${server.port} has no secret, but this client has one: refusing it`,
    ),
  );
  assert.match(error.message, /another process listening on its port/);
  assert.match(error.message, /DCOMM_STORE_SECRET/);
});

Deno.test("a TcpStore holding a secret refuses a squatter that claims a secret but cannot prove it", async () => {
  // HELLO says "secret required"; AUTH_OK comes back with an idle timeout and 32 random bytes as its proof.
  for (const proof of [crypto.getRandomValues(new Uint8Array(32)), new Uint8Array()]) {
    await using squatter = fakeDcommServer({
      flags: 1,
      authOk: [{ raw: new Uint8Array(4) }, { raw: proof }],
    });
    const error = await rejectsWithin(
      TcpStore.connect({ port: squatter.port, secret: "s3cret", connectTimeoutMs: 5_000 }),
      3_000,
      "connect",
    );
    assert.ok(error instanceof StoreError, String(error));
    assert.match(
      error.message,
      new RegExp(`^The store at 127\\.0\\.0\\.1:${squatter.port} did not prove it knows the secret`),
    );
    assert.equal(squatter.accepted, 1, "a failed proof is not retried");
  }
});

Deno.test("the right secret on both ends connects; a different one is refused by the server", async () => {
  const secret = generateSecret();
  await using server = await startServer({ secret });
  await using store = await TcpStore.connect({ port: server.port, secret });
  assert.equal(await store.add("n", 1), 1);
  await assert.rejects(
    TcpStore.connect({ port: server.port, secret: generateSecret() }),
    /wrong or missing secret/,
  );
});

// --- a server without a secret ---------------------------------------------------------------------------

Deno.test("a TcpStoreServer without a secret warns once, naming the risk and the fix", async () => {
  await using server = await startServer({ secret: "" });
  assert.equal(server.logs.length, 1, JSON.stringify(server.logs));
  assert.match(
    server.logs[0],
    new RegExp(`^dcomm store server 127\\.0\\.0\\.1:${server.port}: WARNING: serving without a secret`),
  );
  assert.match(server.logs[0], /can read, change and delete every key/);
  assert.match(server.logs[0], /set DCOMM_STORE_SECRET/);
  assert.match(server.logs[0], /dcomm's launcher/);
  await using store = await TcpStore.connect({ port: server.port, secret: "" });
  await store.set("k", "v");
  assert.equal(server.logs.length, 1, "one line, at start");
  await using secured = await startServer({ secret: "s3cret" });
  assert.deepEqual(secured.logs, []);
});

Deno.test("the warning of a TcpStoreServer without a secret goes to console.warn by default", async () => {
  const lines: unknown[][] = [];
  const warn = console.warn;
  console.warn = (...args: unknown[]) => lines.push(args);
  try {
    await using _server = await TcpStoreServer.listen({ secret: "" });
  } finally {
    console.warn = warn;
  }
  assert.equal(lines.length, 1);
  assert.match(String(lines[0][0]), /WARNING: serving without a secret/);
});

Deno.test("a TcpStoreServer without a secret refuses to bind beyond loopback unless told it may", async () => {
  await assert.rejects(
    TcpStoreServer.listen({ hostname: "0.0.0.0", secret: "", log: () => {} }),
    (e: Error) => {
      assert.ok(e instanceof StoreError, String(e));
      assert.match(e.message, /^Refusing to serve the store on 0\.0\.0\.0:0 without a secret/);
      assert.match(e.message, /set DCOMM_STORE_SECRET/);
      assert.match(e.message, /`insecure: true` or DCOMM_STORE_INSECURE=1/);
      return true;
    },
  );
  // The opt-in: the option, or the environment variable. It serves, and warns.
  await using opted = await startServer({ hostname: "0.0.0.0", secret: "", insecure: true });
  assert.equal(opted.hostname, "0.0.0.0");
  assert.match(opted.logs[0], /WARNING: serving without a secret on 0\.0\.0\.0:\d+, beyond loopback/);
  await withEnv(STORE_INSECURE_ENV, "1", async () => {
    await using byEnv = await startServer({ hostname: "0.0.0.0", secret: "" });
    assert.match(byEnv.logs[0], /WARNING: serving without a secret/);
  });
  // With a secret, any address, without a word.
  await using secured = await startServer({ hostname: "0.0.0.0", secret: "s3cret" });
  assert.deepEqual(secured.logs, []);
  // Every loopback name is loopback.
  for (const hostname of ["127.0.0.1", "localhost", "127.1.2.3"]) {
    await using local = await startServer({ hostname, secret: "" });
    assert.equal(local.logs.length, 1);
  }
});

Deno.test("a TorchStoreServer beyond loopback warns that torch's protocol has no secret", async () => {
  const logs: string[] = [];
  await using open = await TorchStoreServer.listen({ hostname: "0.0.0.0", log: (l) => logs.push(l) });
  assert.equal(logs.length, 1, JSON.stringify(logs));
  assert.match(
    logs[0],
    new RegExp(
      `^torch store server 0\\.0\\.0\\.0:${open.port}: WARNING: torch's TCPStore protocol has no secret`,
    ),
  );
  assert.match(logs[0], /anyone who reaches this port/);
  const local: string[] = [];
  await using _loopback = await TorchStoreServer.listen({ hostname: "127.0.0.1", log: (l) => local.push(l) });
  assert.deepEqual(local, []);
});

Deno.test(
  "Rendezvous.join without a secret refuses to serve a non-loopback MASTER_ADDR unless DCOMM_STORE_INSECURE=1",
  {
    ignore: outsideAddress() === undefined,
  },
  async () => {
    const probe = Deno.listen({ hostname: "127.0.0.1", port: 0 });
    const port = probe.addr.port;
    probe.close();
    const master = outsideAddress() ?? "";
    const env = (rank: number, extra: Record<string, string> = {}): Record<string, string> => ({
      RANK: String(rank),
      WORLD_SIZE: "2",
      MASTER_ADDR: master,
      MASTER_PORT: String(port),
      ...extra,
    });
    await assert.rejects(
      Rendezvous.join({ env: env(0), secret: "", timeoutMs: 2_000 }),
      (e: Error) =>
        e instanceof StoreError &&
        /^Refusing to serve the store on 0\.0\.0\.0:\d+ without a secret/.test(e.message),
    );
    const all = await Promise.all(
      [0, 1].map((rank) =>
        Rendezvous.join({
          env: env(rank, { [STORE_INSECURE_ENV]: "1" }),
          secret: "",
          timeoutMs: 10_000,
          log: () => {},
        })
      ),
    );
    assert.equal(all[0].server?.hostname, "0.0.0.0");
    await Promise.all(all.map((r) => r.checkOut("", false)));
  },
);

Deno.test("a one-rank world serves its store with a secret of its own", async () => {
  const saved = Deno.env.get(STORE_SECRET_ENV);
  const warn = console.warn;
  const lines: unknown[][] = [];
  console.warn = (...args: unknown[]) => lines.push(args);
  try {
    Deno.env.delete(STORE_SECRET_ENV);
    const r = await Rendezvous.join({ env: { RANK: "0", WORLD_SIZE: "1" }, timeoutMs: 5_000, log: () => {} });
    assert.ok(r.server instanceof TcpStoreServer && r.server.authenticates);
    assert.match(r.address.secret ?? "", /^[0-9a-f]{64}$/);
    await r.checkOut("", false);
  } finally {
    console.warn = warn;
    if (saved !== undefined) Deno.env.set(STORE_SECRET_ENV, saved);
  }
  assert.deepEqual(lines, [], "nothing to warn about");
});

// --- rate limit ---------------------------------------------------------------------------------------

Deno.test("wrong secrets are rate-limited per client address: after 5 in 10 s the address is closed at once", async () => {
  const secret = generateSecret();
  await using server = await startServer({ secret, authBlockMs: 2_000 });
  for (let i = 0; i < 5; i++) {
    await assert.rejects(TcpStore.connect({ port: server.port, secret: "wrong" }), /wrong or missing secret/);
  }
  // The sixth attempt, even with the right secret, is refused before any challenge: no HELLO, a refusal.
  const { conn, first } = await rawConnect(server.port);
  assert.equal(first.op, Reply.AUTH_REFUSED);
  assert.match(new TextDecoder().decode(first.body), /too many failed attempts/);
  assert.equal(await closedByPeer(conn), true);
  const start = performance.now();
  const error = await rejectsWithin(
    TcpStore.connect({ port: server.port, secret, connectTimeoutMs: 5_000 }),
    2_000,
    "connect",
  );
  assert.ok(error instanceof StoreError, String(error));
  const match =
    /^The store at 127\.0\.0\.1:\d+ refused this client: too many failed attempts from 127\.0\.0\.1 \(5 wrong secrets within 10 s\); try again in ([0-9.]+) s$/
      .exec(error.message);
  assert.ok(match, error.message);
  assert.ok(performance.now() - start < 1_000, "a refusal is not retried");
  // Each refusal costs a log line, or a count in the line about the ones left out (5 lines a second).
  const refusals = (): number =>
    server.logs.filter((l) => /refused 127\.0\.0\.1:\d+: too many failed attempts/.test(l)).length +
    server.logs.map((l) => Number(/left out (\d+) more lines/.exec(l)?.[1] ?? 0)).reduce((a, b) => a + b, 0);
  const end = performance.now() + 2_000;
  while (refusals() < 2 && performance.now() < end) await new Promise((resolve) => setTimeout(resolve, 20));
  assert.equal(refusals(), 2, server.logs.join("\n"));
  // Once the block is over the address may try again.
  await new Promise((resolve) => setTimeout(resolve, Number(match[1]) * 1000 + 100));
  await using store = await TcpStore.connect({ port: server.port, secret });
  assert.equal(await store.add("n", 1), 1);
});

Deno.test("AuthLimiter counts failures per address, forgets old ones, and blocks for a while", () => {
  let now = 0;
  const limiter = new AuthLimiter({ failures: 3, windowMs: 1_000, blockMs: 5_000, now: () => now });
  limiter.fail("10.0.0.1");
  limiter.fail("10.0.0.1");
  now = 1_500; // the first two are older than the window
  limiter.fail("10.0.0.1");
  assert.equal(limiter.blocked("10.0.0.1"), undefined);
  limiter.fail("10.0.0.1");
  limiter.fail("10.0.0.1");
  assert.ok(limiter.blocked("10.0.0.1"), "3 failures within 1 s");
  assert.equal(limiter.blocked("10.0.0.2"), undefined, "another address is not blocked");
  now = 6_000;
  assert.ok(limiter.blocked("10.0.0.1"), "still within the block");
  now = 6_600;
  assert.equal(limiter.blocked("10.0.0.1"), undefined, "the block ended");
  // The table is bounded: addresses beyond its size push out the oldest.
  const small = new AuthLimiter({
    failures: 1,
    windowMs: 1_000,
    blockMs: 1_000,
    now: () => now,
    maxAddresses: 2,
  });
  for (const address of ["a", "b", "c"]) small.fail(address);
  assert.equal(small.size, 2);
});
