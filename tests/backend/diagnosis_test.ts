/**
 * Diagnosis: what a rank says when a world cannot form or breaks (issue 24, item 9). An init that times
 * out names the missing ranks, not the store's keys; a second job on the same port fails in seconds,
 * saying the port is another job's and what to do; a mismatch over TCP is a MismatchError on every rank;
 * a world that failed refuses every later use at once; worlds that share a store keep apart by
 * `storePrefix` (`DCOMM_STORE_PREFIX`). Real processes, sockets and stores; every wait is bounded.
 *
 * @module
 */
import assert from "node:assert/strict";
import { MismatchError, StoreError, TimeoutError, TransportError } from "../../core/errors.ts";
import { peerMismatch } from "../../backend/cpu/engine.ts";
import { Rendezvous } from "../../backend/_rendezvous.ts";
import { TcpStore } from "../../store/tcp_store.ts";
import { TcpStoreServer } from "../../store/tcp_store_server.ts";
import { generateSecret } from "../../store/secret.ts";
import { freePort, worldEnv } from "../_util/net.ts";

const FIXTURE = new URL("./_fixtures/diagnosis_rank.ts", import.meta.url).pathname;
const LAUNCH = new URL("../../cli/launch.ts", import.meta.url).pathname;

/** A rank of the fixture: its stdout lines once it exited (killed after `limitMs`). */
async function runRank(args: string[], env: Record<string, string>, limitMs = 60_000): Promise<string[]> {
  const out = await new Deno.Command(Deno.execPath(), {
    args: ["run", "-A", FIXTURE, ...args],
    env,
    stdout: "piped",
    stderr: "null",
    signal: AbortSignal.timeout(limitMs),
  }).output();
  return new TextDecoder().decode(out.stdout).split("\n").filter((l) => l !== "");
}

interface Failure {
  name: string;
  message: string;
  ms: number;
}

function failureOf(lines: string[]): Failure {
  const line = lines.find((l) => l.startsWith("FAILED "));
  assert.ok(line, `expected a failure, found: ${lines.join(" | ")}`);
  return JSON.parse(line.slice(7));
}

Deno.test("an init that times out after the rendezvous names the rank that never connected, not store keys", async () => {
  const port = freePort();
  const secret = generateSecret();
  const env = (rank: number) =>
    worldEnv(rank, 3, port, { DCOMM_STORE_SECRET: secret, DCOMM_TRANSPORT: "tcp", DIAG_TIMEOUT_MS: "2500" });
  // Rank 2 joins the rendezvous, then hangs: ranks 0 and 1 wait for it in the connect phase.
  const [r0, r1] = await Promise.all([
    runRank(["init"], env(0)),
    runRank(["init"], env(1)),
    runRank(["joinOnly"], env(2)),
  ]);
  for (const [rank, lines] of [[0, r0], [1, r1]] as const) {
    const f = failureOf(lines);
    assert.equal(f.name, "TimeoutError", f.message);
    assert.match(
      f.message,
      new RegExp(`^Cannot connect rank ${rank} of 3 within 2500 ms: waiting for rank 2 \\(2 of 3 `),
    );
    assert.doesNotMatch(f.message, /keys? "|host\//, f.message);
    assert.ok(f.ms < 15_000, `failed after ${f.ms} ms`);
  }
});

Deno.test("a rank whose store went away while it waited to rendezvous names the ranks it waited for", async () => {
  const port = freePort();
  const log = () => {};
  // Rank 0 gives up first (its shorter timeout) and stops serving; rank 1 was still waiting for rank 2.
  const [first, second] = await Promise.allSettled([
    Rendezvous.join({ env: worldEnv(0, 3, port), secret: "", timeoutMs: 1000, log }),
    Rendezvous.join({ env: worldEnv(1, 3, port), secret: "", timeoutMs: 20_000, reportEveryMs: 300, log }),
  ]);
  assert.equal(first.status, "rejected");
  assert.ok((first as PromiseRejectedResult).reason instanceof TimeoutError);
  assert.equal(second.status, "rejected");
  const e = (second as PromiseRejectedResult).reason;
  assert.ok(e instanceof StoreError, String(e));
  assert.match(
    e.message,
    new RegExp(
      `^Cannot rendezvous: lost the store rank 0 serves at 127\\.0\\.0\\.1:${port} while rank 1 waited for ` +
        `rank 2 \\(2 of 3 joined\\): rank 0, which serves it, gave up`,
    ),
  );
  assert.doesNotMatch(e.message, /key "/);
});

Deno.test("a second job on a port whose store is another job's fails at once, saying so and what to do", async (t) => {
  const log = () => {};
  const join = (env: Record<string, string>, secret = "") => {
    const joining = Rendezvous.join({ env, secret, timeoutMs: 30_000, log });
    joining.catch(() => {});
    return joining;
  };
  const fast = async (env: Record<string, string>, pattern: RegExp, secret = ""): Promise<void> => {
    const t0 = performance.now();
    await assert.rejects(Rendezvous.join({ env, secret, timeoutMs: 20_000, log }), (e: unknown) => {
      assert.ok(e instanceof StoreError, String(e));
      assert.match(e.message, pattern);
      assert.match(e.message, /another job/);
      assert.match(e.message, /MASTER_PORT/);
      return true;
    });
    assert.ok(performance.now() - t0 < 5000, `took ${performance.now() - t0} ms`);
  };
  /** Job A's rank 0 (serving its store on `port`) and rank 1 join; rank 2 completes the world. */
  const jobA = async (port: number, extra: Record<string, string>, secret = "") => {
    const joins = [join(worldEnv(0, 3, port, extra), secret)];
    await new Promise((r) => setTimeout(r, 200));
    joins.push(join(worldEnv(1, 3, port, extra), secret));
    await new Promise((r) => setTimeout(r, 200));
    return {
      async finish(): Promise<void> {
        joins.push(join(worldEnv(2, 3, port, extra), secret));
        for (const r of await Promise.all(joins)) await r.abandon();
      },
    };
  };

  await t.step("with run ids: job B's rank 0 cannot serve, and its rank 1 finds job A's run id", async () => {
    const port = freePort();
    const a = await jobA(port, { DCOMM_RUN_ID: "job-a" });
    await fast(worldEnv(0, 2, port, { DCOMM_RUN_ID: "job-b" }), /Address already in use.*the port is taken/);
    await fast(
      worldEnv(1, 2, port, { DCOMM_RUN_ID: "job-b" }),
      /belongs to another job: key "dcomm\/run" holds run id "job-a" but rank 1 runs with run id "job-b"/,
    );
    await a.finish();
  });
  await t.step("without run ids: job B's rank 1 finds job A's world size, or rank 1 claimed", async () => {
    const port = freePort();
    const a = await jobA(port, {});
    await fast(
      worldEnv(1, 2, port),
      /holds a world of 3 ranks \(key "dcomm\/world"\) but rank 1 runs with world size 2/,
    );
    await fast(worldEnv(1, 3, port), /rank 1 already joined .* \(key "dcomm\/joined\/1" counts 2 claims\)/);
    await a.finish();
  });
  await t.step("with another secret: job B's rank 1 is told the store may be another job's", async () => {
    const port = freePort();
    const a = await jobA(port, {}, "secret-a");
    await fast(worldEnv(1, 3, port), /refused this client.*another job's store holds 127\.0\.0\.1:\d+/, "b");
    await a.finish();
  });
});

Deno.test("the launcher on a port another job's store holds fails at once, naming --master-port 0", async () => {
  await using other = await TcpStoreServer.listen({ hostname: "127.0.0.1", port: 0, secret: "x" });
  const t0 = performance.now();
  const out = await new Deno.Command(Deno.execPath(), {
    args: [
      "run",
      "-A",
      LAUNCH,
      "--nproc-per-node",
      "2",
      "--master-port",
      String(other.port),
      FIXTURE,
      "init",
    ],
    stdout: "piped",
    stderr: "piped",
    signal: AbortSignal.timeout(60_000),
  }).output();
  const ms = performance.now() - t0;
  const stderr = new TextDecoder().decode(out.stderr);
  assert.notEqual(out.code, 0);
  assert.ok(ms < 15_000, `took ${ms} ms`);
  assert.match(stderr, /the port is taken, most likely by another job's store/);
  assert.match(stderr, /another --master-port, or --master-port 0/);
});

Deno.test("peerMismatch() finds a mismatch behind a peer's abort, also one relayed through other ranks", () => {
  const text =
    "Mismatched calls: rank 1 called allReduce(4 × int32) #0 in group 0 but rank 2 called allReduce(4 × float32) #0";
  for (const message of [`Rank 2 aborted: ${text}`, `Rank 0 aborted: Rank 2 aborted: ${text}`]) {
    const peer = Number(/^Rank (\d+)/.exec(message)?.[1]);
    const found = peerMismatch(new TransportError(message, { peer }));
    assert.ok(found instanceof MismatchError, message);
    assert.equal(found.message, text);
  }
  // Not from the peer that failed the transport, or not a mismatch: not one.
  assert.equal(peerMismatch(new TransportError(`Rank 2 aborted: ${text}`, { peer: 1 })), undefined);
  assert.equal(peerMismatch(new TransportError("Rank 2 aborted: out of memory", { peer: 2 })), undefined);
});

for (const variant of ["count", "dtype", "collective"]) {
  Deno.test(`a mismatch over TCP (${variant}) is a MismatchError naming both calls on every rank, and the world stays failed`, async () => {
    const port = freePort();
    const secret = generateSecret();
    const ranks = await Promise.all(
      [0, 1, 2].map((rank) =>
        runRank(
          ["mismatch", variant],
          worldEnv(rank, 3, port, {
            DCOMM_STORE_SECRET: secret,
            DCOMM_TRANSPORT: "tcp",
            DIAG_TIMEOUT_MS: "20000",
          }),
        )
      ),
    );
    for (const [rank, lines] of ranks.entries()) {
      const f = failureOf(lines);
      assert.equal(f.name, "MismatchError", `rank ${rank}: ${f.name}: ${f.message}`);
      assert.match(
        f.message,
        /^Mismatched calls: rank \d called \w+\(.*\) #0 in group 0 but rank \d called \w+\(/,
      );
      assert.match(f.message, /rank 1\b/);
      // Every later use fails at once with the world's error; none hangs.
      const again = lines.filter((l) => l.startsWith("AGAIN ")).map((l) => JSON.parse(l.slice(6)));
      assert.deepEqual(again.map((a) => a.what), ["small", "large", "barrier", "newGroup"]);
      for (const a of again) {
        assert.equal(a.ok, undefined, `rank ${rank}: ${a.what} succeeded after the mismatch`);
        assert.equal(a.name, "MismatchError", `rank ${rank} ${a.what}: ${a.name}: ${a.message}`);
        assert.equal(a.message, f.message);
        assert.ok(a.ms < 1000, `rank ${rank} ${a.what} failed after ${a.ms} ms`);
      }
    }
  });
}

Deno.test("two worlds sharing one store keep apart by storePrefix / DCOMM_STORE_PREFIX", async () => {
  const secret = generateSecret();
  await using server = await TcpStoreServer.listen({ hostname: "127.0.0.1", port: 0, secret });
  const shared = { DCOMM_STORE_HOSTED: "1", DCOMM_STORE_SECRET: secret, DCOMM_TRANSPORT: "tcp" };
  // World a by the variable, world b by the option (the fixture passes DIAG_STORE_PREFIX as storePrefix).
  const outputs = await Promise.all([
    ...[0, 1].map((r) =>
      runRank(["sum"], worldEnv(r, 2, server.port, { ...shared, DCOMM_STORE_PREFIX: "a" }))
    ),
    ...[0, 1, 2].map((r) =>
      runRank(["sum"], worldEnv(r, 3, server.port, { ...shared, DIAG_STORE_PREFIX: "b" }))
    ),
  ]);
  assert.deepEqual(outputs.map((lines) => lines.find((l) => l.startsWith("SUM "))), [
    "SUM 3",
    "SUM 3",
    "SUM 6",
    "SUM 6",
    "SUM 6",
  ]);
  await using store = await TcpStore.connect({ hostname: "127.0.0.1", port: server.port, secret });
  assert.ok(await store.check(["a/joined/0", "a/joined/1", "b/joined/2", "a/world", "b/world"]));
  assert.equal(await store.check(["dcomm/joined/0"]), false);
});

Deno.test("storePrefix must be a non-empty string without a trailing slash", async () => {
  const env = worldEnv(0, 1, 0);
  await assert.rejects(Rendezvous.join({ env, storePrefix: "", timeoutMs: 1000 }), /Invalid storePrefix/);
  await assert.rejects(Rendezvous.join({ env, storePrefix: "a/", timeoutMs: 1000 }), /trailing/);
  await assert.rejects(
    Rendezvous.join({ env: { ...env, DCOMM_STORE_PREFIX: "b/" }, timeoutMs: 1000 }),
    /Invalid DCOMM_STORE_PREFIX/,
  );
  const r = await Rendezvous.join({ env: { ...env, DCOMM_STORE_PREFIX: "b" }, timeoutMs: 5000 });
  assert.equal(r.prefix, "b");
  await r.abandon();
  const o = await Rendezvous.join({
    env: { ...env, DCOMM_STORE_PREFIX: "b" },
    storePrefix: "c",
    timeoutMs: 5000,
  });
  assert.equal(o.prefix, "c");
  await o.abandon();
});
