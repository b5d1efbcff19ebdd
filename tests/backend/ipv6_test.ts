/**
 * IPv6 literal addresses end to end: `MASTER_ADDR=::1`, `tcp://[::1]:p` and the launcher's
 * `--master-addr ::1` each form a world of two ranks (processes) that all-reduce; the store binds the
 * master's family (::1 for an IPv6 loopback master, :: for another IPv6 master), the ranks' TCP listeners
 * publish `[v6]:port`, and messages name `[::1]:p`. Skipped, saying why, on a machine without ::1.
 */
import assert from "node:assert/strict";
import { TimeoutError, TransportError } from "../../core/errors.ts";
import {
  bindHostname,
  defaultHostname,
  hostPort,
  isLoopback,
  parseInitMethod,
  rankInfo,
} from "../../backend/env.ts";
import { Rendezvous } from "../../backend/_rendezvous.ts";
import { generateSecret } from "../../store/secret.ts";
import { MemoryStore } from "../../store/memory_store.ts";
import { TcpTransport } from "../../transport/tcp.ts";
import { gatedTest } from "../_util/skip.ts";

const LAUNCH = new URL("../../cli/launch.ts", import.meta.url).pathname;
const RANK = new URL("../cli/_fixtures/ipv6_rank.ts", import.meta.url).pathname;

/** Why ::1 cannot be used here, or undefined when a socket binds it. */
function noLoopbackV6(): string | undefined {
  try {
    Deno.listen({ hostname: "::1", port: 0 }).close();
    return undefined;
  } catch (e) {
    return `this machine has no IPv6 loopback (binding ::1 fails: ${(e as Error).message})`;
  }
}
const gate = { missing: noLoopbackV6(), ciCanSatisfy: false };

/** This machine's first IPv6 address that is neither loopback nor link-local, if it has one. */
function globalV6(): string | undefined {
  return Deno.networkInterfaces().find((n) =>
    n.family === "IPv6" && n.address !== "::1" && !/^fe[89ab]/i.test(n.address)
  )?.address;
}

/** A port nothing listens on now, on ::1. */
function freeV6Port(): number {
  const probe = Deno.listen({ hostname: "::1", port: 0 });
  const port = probe.addr.port;
  probe.close();
  return port;
}

interface RankResult {
  rank: number;
  size: number;
  sum: number;
}

/** Runs the rank fixture as two processes with `env` (plus RANK and WORLD_SIZE) and `args`. */
async function twoRanks(env: Record<string, string>, args: string[]): Promise<RankResult[]> {
  const runs = [0, 1].map((rank) =>
    new Deno.Command(Deno.execPath(), {
      args: ["run", "-A", RANK, ...args],
      env: { ...env, RANK: String(rank), WORLD_SIZE: "2", NO_COLOR: "1" },
      stdout: "piped",
      stderr: "piped",
      signal: AbortSignal.timeout(60_000),
    }).output()
  );
  const outs = await Promise.all(runs);
  return outs.map((o, rank) => {
    const text = new TextDecoder().decode(o.stdout) + new TextDecoder().decode(o.stderr);
    assert.equal(o.code, 0, `rank ${rank}:\n${text.slice(-3000)}`);
    const m = /^RESULT (.*)$/m.exec(text);
    assert.ok(m, `rank ${rank} printed no RESULT:\n${text.slice(-3000)}`);
    return JSON.parse(m[1]) as RankResult;
  });
}

function assertSums(results: RankResult[]): void {
  assert.deepEqual(results.map((r) => r.rank).sort(), [0, 1]);
  for (const r of results) {
    assert.equal(r.size, 2);
    assert.equal(r.sum, 3, "1 + 2 over both ranks");
  }
}

Deno.test("IPv6 addresses: tcp://[v6]:port parses, loopback is seen in every spelling, binds match the family", () => {
  assert.deepEqual(parseInitMethod("tcp://[::1]:29500"), { hostname: "::1", port: 29500 });
  assert.deepEqual(parseInitMethod("tcp://[fd00::2]:80/"), { hostname: "fd00::2", port: 80 });
  assert.throws(() => parseInitMethod("tcp://::1:29500"), /put the IPv6 address in brackets/);
  for (const h of ["::1", "[::1]", "0:0:0:0:0:0:0:1", "0000:0000:0000:0000:0000:0000:0000:0001"]) {
    assert.equal(isLoopback(h), true, h);
    assert.equal(bindHostname(h), "::1", h);
    assert.equal(defaultHostname(h), "::1", h);
  }
  assert.equal(isLoopback("::ffff:127.0.0.1"), true);
  assert.equal(bindHostname("::ffff:127.0.0.1"), "127.0.0.1", "an IPv4-mapped address is IPv4 to a socket");
  assert.equal(isLoopback("fd00::1"), false);
  assert.equal(bindHostname("fd00::1"), "::");
  assert.equal(bindHostname("[2001:db8::7]"), "::");
  assert.equal(bindHostname("10.0.0.1"), "0.0.0.0");
  assert.equal(bindHostname("127.0.0.1"), "127.0.0.1");
  assert.equal(hostPort("::1", 29500), "[::1]:29500");
  assert.equal(hostPort("[::1]", 29500), "[::1]:29500");
  assert.equal(hostPort("10.0.0.1", 29500), "10.0.0.1:29500");
  assert.equal(rankInfo({ RANK: "0", WORLD_SIZE: "2", MASTER_ADDR: "[::1]" }).masterAddr, "::1");
  const v6 = globalV6();
  if (v6) {
    const published = defaultHostname(v6);
    assert.ok(published.includes(":"), `an IPv6 master gets an IPv6 listener address, found ${published}`);
  }
});

gatedTest("TcpTransport over ::1 (and [::1]) publishes [::1]:port and moves bytes", gate, async () => {
  for (const hostname of ["::1", "[::1]"]) {
    const store = new MemoryStore({ timeoutMs: 10_000 });
    const [a, b] = await Promise.all(
      [0, 1].map((rank) => TcpTransport.connect(store, { rank, size: 2, hostname, timeoutMs: 10_000 })),
    );
    try {
      const published = new TextDecoder().decode(await store.get("tcp/addr/0"));
      assert.match(published, /^\[::1\]:\d+$/, hostname);
      const into = new Uint8Array(5);
      const desc = new Uint8Array(32).fill(7);
      const got = b.pair(0).recv(into);
      await a.pair(1).send(desc, new Uint8Array([1, 2, 3, 4, 5]));
      assert.deepEqual([...(await got)], [...desc]);
      assert.deepEqual([...into], [1, 2, 3, 4, 5]);
    } finally {
      await Promise.all([a.close(), b.close()]);
      await store.close();
    }
  }
});

Deno.test("TcpTransport refuses a published IPv6 address without brackets, naming the form", async () => {
  const store = new MemoryStore({ timeoutMs: 10_000 });
  try {
    // Rank 0 "published" ::1:5, which names no port for sure: rank 1 fails at once instead of dialing it.
    await store.set("tcp/token", crypto.getRandomValues(new Uint8Array(16)));
    await store.set("tcp/addr/0", "::1:5");
    // And the table of addresses rank 0 publishes once every rank published its own.
    await store.set("tcp/addrs", JSON.stringify(["::1:5", "127.0.0.1:9"]));
    const error = await TcpTransport.connect(store, { rank: 1, size: 2, timeoutMs: 5_000 }).then(
      () => assert.fail("expected connect to fail"),
      (e: unknown) => e,
    );
    assert.ok(error instanceof TransportError, `expected a TransportError, found ${error}`);
    assert.match(error.message, /holds "::1:5", expected host:port \(an IPv6 host as \[host\]:port\)/);
  } finally {
    await store.close();
  }
});

gatedTest("Rendezvous over tcp://[::1]:0 serves the store on ::1 and names it [::1]:port", gate, async () => {
  const one = await Rendezvous.join({
    initMethod: "tcp://[::1]:0",
    rank: 0,
    worldSize: 1,
    env: {},
    timeoutMs: 5_000,
  });
  try {
    assert.equal(one.server?.hostname, "::1");
    assert.equal(one.hostname, "::1");
  } finally {
    await one.abandon();
  }
  // A rank that waits for a missing peer names the store as [::1]:port.
  const lines: string[] = [];
  const error = await Rendezvous.join({
    initMethod: "tcp://[::1]:0",
    rank: 0,
    worldSize: 2,
    env: {},
    timeoutMs: 1_200,
    reportEveryMs: 400,
    log: (line) => lines.push(line),
  }).then(() => assert.fail("expected the rendezvous to time out"), (e: unknown) => e);
  assert.ok(error instanceof TimeoutError, `expected a TimeoutError, found ${error}`);
  assert.match(error.message, /rank 1 never joined .* at \[::1\]:\d+;/);
  assert.match(lines.join("\n"), /waiting for rank 1 .*the store rank 0 serves at \[::1\]:\d+\)/);
});

gatedTest(
  "Rendezvous with a non-loopback IPv6 master binds the store on ::",
  { missing: gate.missing ?? (globalV6() ? undefined : "this machine has no global IPv6 address") },
  async () => {
    const v6 = globalV6() as string;
    const one = await Rendezvous.join({
      initMethod: `tcp://[${v6}]:0`,
      rank: 0,
      worldSize: 1,
      secret: generateSecret(),
      env: {},
      timeoutMs: 5_000,
    });
    try {
      assert.equal(one.server?.hostname, "::");
    } finally {
      await one.abandon();
    }
  },
);

gatedTest("two ranks meet over MASTER_ADDR=::1 (env://) and all-reduce over TCP", gate, async () => {
  const env = { MASTER_ADDR: "::1", MASTER_PORT: String(freeV6Port()) };
  assertSums(await twoRanks(env, ["", "tcp"]));
  assertSums(await twoRanks({ ...env, MASTER_PORT: String(freeV6Port()) }, ["", "auto"]));
});

gatedTest("two ranks meet over tcp://[::1]:port and all-reduce over TCP", gate, async () => {
  assertSums(await twoRanks({}, [`tcp://[::1]:${freeV6Port()}`, "tcp"]));
});

gatedTest(
  "launch --master-addr ::1 (and --rdzv-endpoint [::1]:p) runs two ranks that all-reduce",
  gate,
  async () => {
    for (const flags of [["--master-addr", "::1"], ["--rdzv-endpoint", `[::1]:${freeV6Port()}`]]) {
      const o = await new Deno.Command(Deno.execPath(), {
        args: ["run", "-A", LAUNCH, "--nproc-per-node", "2", ...flags, RANK, "", "tcp"],
        stdout: "piped",
        stderr: "piped",
        signal: AbortSignal.timeout(60_000),
      }).output();
      const text = new TextDecoder().decode(o.stdout) + new TextDecoder().decode(o.stderr);
      assert.equal(o.code, 0, text.slice(-3000));
      const results = [...text.matchAll(/^\[rank\d\]: RESULT (.*)$/gm)].map((m) => JSON.parse(m[1]));
      assertSums(results);
    }
  },
);
