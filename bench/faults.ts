/**
 * The fault and security probe, rerun: bounded, on loopback only, every figure from this run.
 *
 * - **soak**: 4 ranks under dcomm's launcher make N calls each (all-reduce, broadcast, all-gather,
 *   reduce-scatter, all-to-all, barrier; 1 to 64 Ki elements, drawn alike on every rank by a seeded
 *   stream), every result checked (`bench/_faults_rank.ts`), over the host segment, the shm rings
 *   (`DCOMM_SEGMENT=0`) and TCP (3 ranks); wrong results, checks, and each rank's RSS before and after.
 * - **kills**: 4 bare ranks loop on all-reduces; rank 2 is SIGKILLed at a random moment; how long the
 *   survivors take to fail, and whether their error names rank 2 (shm and TCP).
 * - **store**: a secret-holding TcpStoreServer in this process under malformed frames (random bytes from
 *   many connections), wrong secrets, and a flood of idle connections: whether each is refused, what it
 *   costs the server, and whether a good client is still served after.
 * - **bad inputs**: calls a user can get wrong (a string root, a detached buffer, a NaN timeout, ...):
 *   each must fail with an error naming what was expected and what was found.
 *
 * Writes `bench/results/faults.json` and prints Markdown tables.
 *
 * ```sh
 * deno task bench:faults [--calls 3000] [--kills 10] [--malformed 2000] [--wrong 100] [--flood 1000]
 * ```
 *
 * @module
 */
import { parseArgs } from "node:util";
import { init } from "../mod.ts";
import { generateSecret } from "../store/secret.ts";
import { TcpStore } from "../store/tcp_store.ts";
import { TcpStoreServer } from "../store/tcp_store_server.ts";

const { values: flags } = parseArgs({
  args: Deno.args,
  options: {
    calls: { type: "string", default: "3000" },
    kills: { type: "string", default: "10" },
    malformed: { type: "string", default: "2000" },
    wrong: { type: "string", default: "100" },
    flood: { type: "string", default: "1000" },
    out: { type: "string", default: new URL("./results/faults.json", import.meta.url).pathname },
  },
});
const root = new URL("../", import.meta.url).pathname;
const RANK = `${root}bench/_faults_rank.ts`;
const decoder = new TextDecoder();

// --- soak ------------------------------------------------------------------------------------------
interface Soak {
  calls: number;
  checks: number;
  wrong: number;
  rssStartMiB: number;
  rssEndMiB: number;
  ms: number;
}
const soaks: { name: string; ranks: number; rows: Soak[] }[] = [];
for (
  const [name, ranks, env] of [
    ["host segment (shm)", 4, {}],
    ["shm rings (DCOMM_SEGMENT=0)", 4, { DCOMM_SEGMENT: "0" }],
    ["tcp", 3, { DCOMM_TRANSPORT: "tcp" }],
  ] as const
) {
  const out = await new Deno.Command(Deno.execPath(), {
    args: [
      "run",
      "-A",
      `${root}cli/launch.ts`,
      "--nproc-per-node",
      String(ranks),
      RANK,
      "soak",
      flags.calls,
      "7",
    ],
    env,
    stdout: "piped",
    stderr: "inherit",
    signal: AbortSignal.timeout(600_000),
  }).output();
  const rows = decoder.decode(out.stdout).split("\n").filter((l) => l.includes("RESULT "))
    .map((l) => JSON.parse(l.slice(l.indexOf("RESULT ") + 7)) as Soak);
  if (out.code !== 0 || rows.length !== ranks) throw new Error(`soak over ${name} failed (exit ${out.code})`);
  soaks.push({ name, ranks, rows });
}

// --- kills -----------------------------------------------------------------------------------------
function freePort(): number {
  const l = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const port = (l.addr as Deno.NetAddr).port;
  l.close();
  return port;
}

interface Kill {
  transport: string;
  latencyMs: number[];
  named: number;
  survivors: number;
}
async function killOnce(transport: string): Promise<{ latencies: number[]; named: number }> {
  const size = 4, victim = 2, port = freePort(), secret = generateSecret();
  const ranks = Array.from({ length: size }, (_, rank) => {
    const child = new Deno.Command(Deno.execPath(), {
      args: ["run", "-A", RANK, "loop"],
      env: {
        RANK: String(rank),
        WORLD_SIZE: String(size),
        MASTER_ADDR: "127.0.0.1",
        MASTER_PORT: String(port),
        DCOMM_STORE_SECRET: secret,
        DCOMM_TRANSPORT: transport,
      },
      stdout: "piped",
      stderr: "null",
    }).spawn();
    const lines: string[] = [];
    const done = (async () => {
      let buf = "";
      for await (const chunk of child.stdout) {
        buf += decoder.decode(chunk);
        const parts = buf.split("\n");
        buf = parts.pop() ?? "";
        lines.push(...parts);
      }
      await child.status;
    })();
    return { child, lines, done };
  });
  const deadline = Date.now() + 60_000;
  while (!ranks.every((r) => r.lines.includes("READY"))) {
    if (Date.now() > deadline) throw new Error("the ranks did not start within 60 s");
    await new Promise((r) => setTimeout(r, 20));
  }
  await new Promise((r) => setTimeout(r, 200 + Math.random() * 300));
  const killedAt = Date.now();
  ranks[victim].child.kill("SIGKILL");
  const timer = setTimeout(() => ranks.forEach((r) => r.child.kill("SIGKILL")), 60_000);
  await Promise.all(ranks.map((r) => r.done));
  clearTimeout(timer);
  const latencies: number[] = [];
  let named = 0;
  for (const [rank, r] of ranks.entries()) {
    if (rank === victim) continue;
    const m = r.lines.map((l) => /^FAILED (\d+) (.*)$/.exec(l)).find((x) => x !== null);
    if (!m) continue;
    latencies.push(Number(m[1]) - killedAt);
    if (/\b[Rr]ank 2\b/.test(m[2])) named++;
  }
  return { latencies, named };
}
const kills: Kill[] = [];
for (const transport of ["shm", "tcp"]) {
  const row: Kill = { transport, latencyMs: [], named: 0, survivors: 0 };
  for (let i = 0; i < Number(flags.kills); i++) {
    const { latencies, named } = await killOnce(transport);
    row.latencyMs.push(...latencies);
    row.named += named;
    row.survivors += 3;
  }
  kills.push(row);
}

// --- store -----------------------------------------------------------------------------------------
const secret = generateSecret();
await using server = await TcpStoreServer.listen({ hostname: "127.0.0.1", port: 0, secret, log: () => {} });
const port = server.port;
const rss = (): number => Deno.memoryUsage().rss / 2 ** 20;
const store: Record<string, unknown> = {};
{
  // Malformed frames: random bytes, each from its own connection; the server must close every one.
  const n = Number(flags.malformed), rss0 = rss(), t0 = performance.now();
  let closed = 0;
  for (let i = 0; i < n; i += 50) {
    await Promise.all(Array.from({ length: Math.min(50, n - i) }, async () => {
      const conn = await Deno.connect({ hostname: "127.0.0.1", port });
      try {
        await conn.write(crypto.getRandomValues(new Uint8Array(64)));
        const buf = new Uint8Array(4096);
        const until = Date.now() + 5000;
        for (;;) {
          const got = await Promise.race([
            conn.read(buf),
            new Promise<"late">((r) => setTimeout(() => r("late"), Math.max(1, until - Date.now()))),
          ]);
          if (got === null) {
            closed++;
            break;
          }
          if (got === "late") break;
        }
      } catch {
        closed++; // reset by the server: closed too
      } finally {
        try {
          conn.close();
        } catch { /* closed */ }
      }
    }));
  }
  store.malformed = {
    connections: n,
    closedByServer: closed,
    ms: performance.now() - t0,
    rssDeltaMiB: rss() - rss0,
  };
}
{
  // Wrong secrets, on a server of their own (the rate limit is per address, and every client here is
  // 127.0.0.1): every attempt refused, those after the limit before any challenge.
  await using guarded = await TcpStoreServer.listen({
    hostname: "127.0.0.1",
    port: 0,
    secret,
    log: () => {},
  });
  const n = Number(flags.wrong), t0 = performance.now();
  let refused = 0, rateLimited = 0;
  const limitedMs: number[] = [];
  for (let i = 0; i < n; i++) {
    const t = performance.now();
    try {
      const s = await TcpStore.connect({
        hostname: "127.0.0.1",
        port: guarded.port,
        secret: generateSecret(),
        timeoutMs: 10_000,
      });
      await s.close();
    } catch (e) {
      refused++;
      if (/too many failed attempts/.test((e as Error).message)) {
        rateLimited++;
        limitedMs.push(performance.now() - t);
      }
    }
  }
  const right = await TcpStore.connect({
    hostname: "127.0.0.1",
    port: guarded.port,
    secret,
    timeoutMs: 5_000,
  })
    .then(
      async (s) => (await s.close(), "served"),
      (e: Error) => (/too many failed/.test(e.message) ? "refused (rate-limited)" : `refused: ${e.message}`),
    );
  store.wrongSecret = {
    attempts: n,
    refused,
    rateLimited,
    msPerLimitedAttempt: limitedMs.length ? limitedMs.reduce((a, b) => a + b, 0) / limitedMs.length : null,
    rightSecretWhileBlocked: right,
    msPerAttempt: (performance.now() - t0) / n,
  };
}
{
  // A flood of idle connections, held open; then a good client, while they are held and after.
  const n = Number(flags.flood), held: Deno.Conn[] = [], rss0 = rss();
  let opened = 0;
  for (let i = 0; i < n; i++) {
    try {
      held.push(await Deno.connect({ hostname: "127.0.0.1", port }));
      opened++;
    } catch {
      break;
    }
  }
  const good = async (): Promise<string> => {
    try {
      const s = await TcpStore.connect({ hostname: "127.0.0.1", port, secret, timeoutMs: 5_000 });
      await s.set("probe", "1");
      const ok = decoder.decode(await s.get("probe")) === "1";
      await s.close();
      return ok ? "served" : "wrong value";
    } catch (e) {
      return `refused: ${(e as Error).message.split("\n")[0]}`;
    }
  };
  const during = await good();
  const rssHeld = rss() - rss0;
  for (const c of held) {
    try {
      c.close();
    } catch { /* closed by the server */ }
  }
  await new Promise((r) => setTimeout(r, 200));
  store.flood = {
    connections: n,
    opened,
    goodClientDuring: during,
    goodClientAfter: await good(),
    rssDeltaMiB: rssHeld,
  };
}

// --- bad inputs ------------------------------------------------------------------------------------
const badInputs: { call: string; error: string; clear: boolean }[] = [];
{
  await using pg = await init({ rank: 0, worldSize: 1, env: {} });
  const detached = new Float32Array(4);
  detached.buffer.transfer();
  const cases: [string, () => unknown][] = [
    [
      'broadcast(t, { root: "0" })',
      () => pg.broadcast(new Float32Array(4), { root: "0" as unknown as number }),
    ],
    ["broadcast(t, { root: 5 })", () => pg.broadcast(new Float32Array(4), { root: 5 })],
    ["allReduce(detached)", () => pg.allReduce(detached)],
    ["allReduce(t, { timeoutMs: NaN })", () => pg.allReduce(new Float32Array(4), { timeoutMs: NaN })],
    ["allReduce([1, 2])", () => pg.allReduce([1, 2] as unknown as Float32Array)],
    ['allReduce(t, { op: "mean" })', () => pg.allReduce(new Float32Array(4), { op: "mean" as "sum" })],
    ['allReduce(t, { algorithm: "magic" })', () => pg.allReduce(new Float32Array(4), { algorithm: "magic" })],
    [
      'allReduce(t, { dtype: "int8" }) of a Float32Array',
      () => pg.allReduce(new Float32Array(4), { dtype: "int8" }),
    ],
    ["allGather(output too short, input)", () => pg.allGather(new Float32Array(1), new Float32Array(4))],
    ["send(t, 7)", () => pg.send(new Float32Array(4), 7)],
    ["allReduce(t, null)", () => pg.allReduce(new Float32Array(4), null as unknown as object)],
    [
      "allToAll with sendCounts only",
      () => pg.allToAll(new Float32Array(4), new Float32Array(4), { sendCounts: [4] }),
    ],
    ["init({ worldSize: 0 })", () => init({ rank: 0, worldSize: 0, env: {} })],
    ['init({ backend: "gloo" })', () => init({ rank: 0, worldSize: 1, env: {}, backend: "gloo" as "cpu" })],
  ];
  for (const [call, run] of cases) {
    let error: unknown;
    try {
      await run();
    } catch (e) {
      error = e;
    }
    const message = error instanceof Error
      ? `${error.name}: ${error.message}`
      : `no error (${String(error)})`;
    badInputs.push({
      call,
      error: message,
      clear: error instanceof Error &&
        (/not available/.test(message) || (/found/.test(message) && /expected|must|holds/.test(message))),
    });
  }
}

// --- report ----------------------------------------------------------------------------------------
const pct = (xs: number[], p: number): number => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length ? s[Math.min(s.length - 1, Math.floor(p * (s.length - 1)))] : NaN;
};
console.log(
  "\n| soak | ranks | calls per rank | checks per rank | wrong | RSS per rank, start → end (MiB) | time (s) |",
);
console.log("|---|---|---|---|---|---|---|");
for (const s of soaks) {
  const r = s.rows[0];
  console.log(
    `| ${s.name} | ${s.ranks} | ${r.calls} | ${r.checks} | ${s.rows.reduce((a, x) => a + x.wrong, 0)} | ` +
      `${Math.min(...s.rows.map((x) => x.rssStartMiB)).toFixed(0)} → ` +
      `${Math.max(...s.rows.map((x) => x.rssEndMiB)).toFixed(0)} | ${(r.ms / 1000).toFixed(1)} |`,
  );
}
console.log("\n| SIGKILL of rank 2 of 4 | survivors | failed within (ms): median, max | named rank 2 |");
console.log("|---|---|---|---|");
for (const k of kills) {
  console.log(
    `| ${k.transport} | ${k.latencyMs.length} of ${k.survivors} | ${pct(k.latencyMs, 0.5).toFixed(0)}, ` +
      `${Math.max(...k.latencyMs).toFixed(0)} | ${k.named} |`,
  );
}
console.log("\n| store attack | result |");
console.log("|---|---|");
const m = store.malformed as { connections: number; closedByServer: number; ms: number; rssDeltaMiB: number };
console.log(
  `| ${m.connections} connections of random bytes | ${m.closedByServer} closed by the server, ` +
    `${(m.ms / 1000).toFixed(1)} s, RSS +${m.rssDeltaMiB.toFixed(0)} MiB |`,
);
const w = store.wrongSecret as {
  attempts: number;
  refused: number;
  rateLimited: number;
  msPerLimitedAttempt: number | null;
  rightSecretWhileBlocked: string;
  msPerAttempt: number;
};
console.log(
  `| ${w.attempts} wrong secrets from one address | ${w.refused} refused, ${w.rateLimited} of them rate-limited ` +
    `before any challenge (${
      w.msPerLimitedAttempt?.toFixed(2) ?? "-"
    } ms each); the right secret from that ` +
    `address meanwhile: ${w.rightSecretWhileBlocked} |`,
);
const f = store.flood as {
  connections: number;
  opened: number;
  goodClientDuring: string;
  goodClientAfter: string;
};
console.log(
  `| ${f.connections} idle connections held | ${f.opened} opened; a good client during: ${f.goodClientDuring}; ` +
    `after: ${f.goodClientAfter} |`,
);
console.log(`\n| bad input | error |`);
console.log("|---|---|");
for (const b of badInputs) {
  console.log(`| \`${b.call}\` | ${b.clear ? "" : "**unclear** "}${b.error.replace(/\|/g, "\\|")} |`);
}
Deno.writeTextFileSync(
  flags.out,
  JSON.stringify(
    {
      date: new Date().toISOString(),
      cpus: navigator.hardwareConcurrency,
      deno: Deno.version.deno,
      soaks,
      kills,
      store,
      badInputs,
    },
    null,
    2,
  ) + "\n",
);
