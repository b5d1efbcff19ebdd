/**
 * `deno task bench:init`: what a world's start costs as it grows, loopback only and bounded.
 *
 * 1. **The store rendezvous**, N simulated ranks (N `TcpStore` clients in this process, the server in a
 *    process of its own): the host exchange of `backend/cpu/_connect.ts` as it was (each rank sets its key,
 *    waits for all, then gets every key: N² requests) beside the one-table exchange it is now
 *    (`hostTable`: N sets, rank 0's wait and `multiGet`, one table, N − 1 gets of it: 2N + 2 requests).
 *    For each: the time from every client connected to every rank holding the table, the requests sent,
 *    and the server's RSS. The old pattern runs up to `--old-max` ranks (its N² grows to minutes).
 * 2. **Real worlds**, 4 and 8 ranks on this host under the launcher (`_init_rank.ts`: `init()` to the end
 *    of the first all-reduce), this tree beside a baseline checkout (`--baseline REV`, a git worktree made
 *    for the run), alternating, the median of `--repeats` runs each; with `--cluster` (root), also 8 ranks
 *    on 4 emulated hosts.
 * 3. **A ring of `--ring-ranks` processes over TCP** (`_ring_rank.ts`: three ring all-reduces), lazily and
 *    eagerly connected: the TCP connections each rank holds to its peers, from `/proc`, and `init()`'s time.
 * 4. **The init model** (`sim/init_model.ts`): the store server's cost per request and per byte measured
 *    apart, a connection's from the two rings; its prediction beside the rows above, and for 1,000 to
 *    100,000 ranks.
 *
 * ```sh
 * deno task bench:init [--sizes 256,1024,4096] [--old-max 1024] [--baseline HEAD~1] [--repeats 5] [--cluster]
 * ```
 *
 * Writes `bench/results/init.json`.
 *
 * @module
 */
import { parseArgs } from "node:util";
import { hostTable } from "../backend/cpu/_connect.ts";
import { fitInitConstants, initCost, type InitShape } from "../sim/init_model.ts";
import { createCluster, runOnCluster } from "./cluster.ts";
import { TcpStore } from "../store/tcp_store.ts";
import type { Store } from "../store/store.ts";
import { countingStore } from "../tests/_util/counting_store.ts";

const { values: flags } = parseArgs({
  args: Deno.args,
  options: {
    sizes: { type: "string", default: "256,1024,4096" },
    "old-max": { type: "string", default: "1024" },
    baseline: { type: "string", default: "" },
    repeats: { type: "string", default: "5" },
    ranks: { type: "string", default: "4,8" },
    "ring-ranks": { type: "string", default: "64" },
    cluster: { type: "boolean", default: false },
    out: { type: "string", default: new URL("./results/init.json", import.meta.url).pathname },
  },
});
const root = new URL("../", import.meta.url).pathname;
const TIMEOUT_MS = 600_000;

/** The host exchange as `_connect.ts` did it before the one-table rendezvous. */
async function oldHosts(store: Store, rank: number, size: number): Promise<string[]> {
  await store.set(`host/${rank}`, `host-of-${rank}`);
  const keys = Array.from({ length: size }, (_, r) => `host/${r}`);
  await store.wait(keys, { timeoutMs: TIMEOUT_MS });
  return (await Promise.all(keys.map((k) => store.get(k, { timeoutMs: TIMEOUT_MS })))).map((b) =>
    new TextDecoder().decode(b)
  );
}

function rssMiB(pid: number): number {
  const m = /VmRSS:\s+(\d+) kB/.exec(Deno.readTextFileSync(`/proc/${pid}/status`));
  return m ? Number(m[1]) / 1024 : NaN;
}

/** The store server in a process of its own (as rank 0's or the launcher's would be); dispose it to kill it. */
async function storeServer(
  maxConnections: number,
): Promise<{ child: Deno.ChildProcess; port: number } & AsyncDisposable> {
  const child = new Deno.Command(Deno.execPath(), {
    args: ["run", "-A", `${root}bench/_init_store_server.ts`, String(maxConnections), ""],
    stdout: "piped",
    stderr: "null",
  }).spawn();
  const reader = child.stdout.pipeThrough(new TextDecoderStream()).getReader();
  const stop = async (): Promise<void> => {
    child.kill("SIGKILL");
    await reader.cancel();
    await child.status;
  };
  let out = "";
  while (!out.includes("\n")) {
    const { value, done } = await reader.read();
    if (done) {
      await stop();
      throw new Error("the store server exited before printing its port");
    }
    out += value;
  }
  return { child, port: Number(out.trim()), [Symbol.asyncDispose]: stop };
}

interface StoreRow {
  pattern: "old" | "one-table";
  ranks: number;
  connectMs: number;
  rendezvousMs: number;
  requests: number;
  serverRssMiB: number;
}

async function storeRun(pattern: "old" | "one-table", size: number): Promise<StoreRow> {
  await using server = await storeServer(size + 16);
  const { port } = server;
  const stores: TcpStore[] = [];
  try {
    const t0 = performance.now();
    for (let at = 0; at < size; at += 256) {
      const batch = Array.from(
        { length: Math.min(256, size - at) },
        () => TcpStore.connect({ port, secret: "", timeoutMs: TIMEOUT_MS }),
      );
      stores.push(...await Promise.all(batch));
    }
    const connected = performance.now();
    const count = { n: 0 };
    const clients = stores.map((s) => countingStore(s, count));
    // hostTable publishes this process's own identity for every simulated rank: one host, as here.
    const tables = await Promise.all(
      clients.map((s, r) => pattern === "old" ? oldHosts(s, r, size) : hostTable(s, r, size, TIMEOUT_MS)),
    );
    const done = performance.now();
    if (!tables.every((t) => t.length === size)) throw new Error("a rank's table is short");
    return {
      pattern,
      ranks: size,
      connectMs: connected - t0,
      rendezvousMs: done - connected,
      requests: count.n,
      serverRssMiB: rssMiB(server.child.pid),
    };
  } finally {
    await Promise.allSettled(stores.map((s) => s.close()));
  }
}

/** One real world on this host: the slowest rank's `init_ms`. */
async function worldRun(tree: string, ranks: number): Promise<number> {
  const out = await new Deno.Command(Deno.execPath(), {
    args: [
      "run",
      "-A",
      `${tree}cli/launch.ts`,
      "--nproc-per-node",
      String(ranks),
      `${root}bench/_init_rank.ts`,
    ],
    env: { DCOMM_BENCH_ROOT: tree },
    stdout: "piped",
    stderr: "piped",
    signal: AbortSignal.timeout(120_000),
  }).output();
  const text = new TextDecoder().decode(out.stdout) + new TextDecoder().decode(out.stderr);
  const times = [...text.matchAll(/init_ms ([\d.]+)/g)].map((m) => Number(m[1]));
  if (!out.success || times.length !== ranks) throw new Error(`a world of ${ranks} failed:\n${text}`);
  return Math.max(...times);
}

/**
 * The store server's cost per request and per byte sent, measured apart: `clients` clients each send
 * `each` CHECK requests at once (requests a second), then each reads one 1 MiB value (bytes a second).
 */
async function storeCosts(clients: number, each: number): Promise<{ requestS: number; byteS: number }> {
  await using server = await storeServer(clients + 16);
  const { port } = server;
  const stores = await Promise.all(
    Array.from({ length: clients }, () => TcpStore.connect({ port, secret: "", timeoutMs: TIMEOUT_MS })),
  );
  try {
    await stores[0].set("x", "1");
    let t0 = performance.now();
    await Promise.all(stores.map(async (s) => {
      for (let i = 0; i < each; i++) await s.check(["x"]);
    }));
    const requestS = (performance.now() - t0) / 1000 / (clients * each);
    const big = new Uint8Array(1 << 20);
    await stores[0].set("big", big);
    t0 = performance.now();
    await Promise.all(stores.map((s) => s.get("big")));
    const byteS = (performance.now() - t0) / 1000 / (clients * big.length) - requestS / big.length;
    return { requestS, byteS: Math.max(0, byteS) };
  } finally {
    await Promise.allSettled(stores.map((s) => s.close()));
  }
}

const median = (xs: number[]): number => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];

const rows: StoreRow[] = [];
console.log("# store rendezvous (simulated ranks, one TcpStoreServer process, loopback)");
console.log("# pattern     ranks  connect ms  rendezvous ms  requests  server RSS MiB");
for (const size of flags.sizes.split(",").map(Number)) {
  for (const pattern of ["old", "one-table"] as const) {
    if (pattern === "old" && size > Number(flags["old-max"])) continue;
    const row = await storeRun(pattern, size);
    rows.push(row);
    console.log(
      `  ${row.pattern.padEnd(10)} ${String(size).padStart(6)} ${row.connectMs.toFixed(0).padStart(11)} ${
        row.rendezvousMs.toFixed(0).padStart(14)
      } ${String(row.requests).padStart(9)} ${row.serverRssMiB.toFixed(0).padStart(14)}`,
    );
  }
}

const worlds: { tree: string; ranks: number; medianMs: number; runsMs: number[] }[] = [];
if (flags.baseline) {
  const base = await Deno.makeTempDir({ prefix: "dcomm-baseline-" });
  const add = await new Deno.Command("git", {
    args: ["-C", root, "worktree", "add", "--detach", base, flags.baseline],
    stderr: "piped",
  }).output();
  if (!add.success) throw new Error(`git worktree add failed: ${new TextDecoder().decode(add.stderr)}`);
  try {
    const trees = [["this tree", root], [`baseline ${flags.baseline}`, `${base}/`]];
    console.log("#\n# real worlds on this host (init() to the end of the first all-reduce, slowest rank)");
    for (const ranks of flags.ranks.split(",").map(Number)) {
      const runs = new Map<string, number[]>(trees.map(([name]) => [name, []]));
      for (const [, tree] of trees) await worldRun(tree, ranks); // warm the module cache
      for (let i = 0; i < Number(flags.repeats); i++) {
        for (const [name, tree] of i % 2 ? [...trees].reverse() : trees) {
          runs.get(name)?.push(await worldRun(tree, ranks));
        }
      }
      for (const [name, runsMs] of runs) {
        worlds.push({ tree: name, ranks, medianMs: median(runsMs), runsMs });
        console.log(
          `  ${name.padEnd(20)} ${ranks} ranks: median ${median(runsMs).toFixed(1)} ms (${
            runsMs.join(", ")
          })`,
        );
      }
    }

    if (flags.cluster) {
      console.log("#\n# the emulated cluster: 4 hosts × 2 ranks at 1 Gb/s, 50 µs (bench/cluster.ts)");
      const cluster = await createCluster({ hosts: 4, rate: "1gbit", delay: "50us" });
      try {
        // Each tree's own launcher (its store server) and dcomm.
        const clusterRun = async (tree: string): Promise<number> => {
          const runs = await runOnCluster(cluster, 2, [`${root}bench/_init_rank.ts`], {
            env: { DCOMM_BENCH_ROOT: tree },
            launcher: `${tree}cli/launch.ts`,
            timeoutMs: 120_000,
          });
          const text = runs.map((r) => r.output).join("\n");
          const times = [...text.matchAll(/init_ms ([\d.]+)/g)].map((m) => Number(m[1]));
          if (runs.some((r) => r.code !== 0) || times.length !== 8) {
            throw new Error(`the cluster run failed:\n${text}`);
          }
          return Math.max(...times);
        };
        const runs = new Map<string, number[]>(trees.map(([name]) => [name, []]));
        for (const [, tree] of trees) await clusterRun(tree);
        for (let i = 0; i < Number(flags.repeats); i++) {
          for (const [name, tree] of i % 2 ? [...trees].reverse() : trees) {
            runs.get(name)?.push(await clusterRun(tree));
          }
        }
        for (const [name, runsMs] of runs) {
          worlds.push({ tree: `${name}, 4 emulated hosts`, ranks: 8, medianMs: median(runsMs), runsMs });
          console.log(
            `  ${name.padEnd(20)} 8 ranks: median ${median(runsMs).toFixed(1)} ms (${runsMs.join(", ")})`,
          );
        }
      } finally {
        await cluster.destroy();
      }
    }
  } finally {
    await new Deno.Command("git", { args: ["-C", root, "worktree", "remove", "--force", base] }).output();
  }
}

const rings: {
  connections: string;
  ranks: number;
  peerSockets: { min: number; max: number };
  initMs: number;
}[] = [];
const ringRanks = Number(flags["ring-ranks"]);
if (ringRanks > 0) {
  console.log(`#\n# a ring of ${ringRanks} processes over TCP: sockets each rank holds to its peers`);
  for (const connections of ["lazy", "eager"]) {
    const out = await new Deno.Command(Deno.execPath(), {
      args: [
        "run",
        "-A",
        `${root}cli/launch.ts`,
        "--nproc-per-node",
        String(ringRanks),
        `${root}bench/_ring_rank.ts`,
      ],
      env: { DCOMM_TRANSPORT: "tcp", DCOMM_TCP_CONNECTIONS: connections },
      stdout: "piped",
      stderr: "piped",
      signal: AbortSignal.timeout(600_000),
    }).output();
    const text = new TextDecoder().decode(out.stdout) + new TextDecoder().decode(out.stderr);
    const got = [...text.matchAll(/peer_sockets (\d+) init_ms ([\d.]+)/g)].map((
      m,
    ) => [Number(m[1]), Number(m[2])]);
    if (!out.success || got.length !== ringRanks) {
      throw new Error(`the ring of ${ringRanks} failed:\n${text.slice(-3000)}`);
    }
    const sockets = got.map(([n]) => n);
    const row = {
      connections,
      ranks: ringRanks,
      peerSockets: { min: Math.min(...sockets), max: Math.max(...sockets) },
      initMs: median(got.map(([, ms]) => ms)),
    };
    rings.push(row);
    console.log(
      `  ${connections.padEnd(6)} peer sockets per rank ${row.peerSockets.min}..${row.peerSockets.max}, ` +
        `init() median ${row.initMs.toFixed(0)} ms`,
    );
  }
}

// The init model (sim/init_model.ts), fitted to these rows and run at sizes no machine here can.
let model: Record<string, unknown> | undefined;
const lazyRing = rings.find((r) => r.connections === "lazy"),
  eagerRing = rings.find((r) => r.connections === "eager");
if (rows.length >= 2 && lazyRing && eagerRing) {
  const shapeOf = (r: StoreRow): InitShape => ({
    ranks: r.ranks,
    pattern: r.pattern === "old" ? "per-key" : "one-table",
    connections: "lazy",
    scope: "hosts",
  });
  // The store's constants measured apart; a connection's from the two rings (what each more one adds).
  const store = await storeCosts(256, 40);
  const { connectS } = fitInitConstants(
    rows.map((r) => ({ shape: shapeOf(r), seconds: r.rendezvousMs / 1000 })),
    [[lazyRing.peerSockets.max, lazyRing.initMs / 1000], [
      eagerRing.peerSockets.max,
      eagerRing.initMs / 1000,
    ]],
  );
  const constants = { ...store, connectS };
  console.log(
    `#\n# the init model: ${(constants.requestS * 1e6).toFixed(1)} µs a store request and ` +
      `${(constants.byteS * 1e9).toFixed(2)} ns a byte sent (measured apart), ${
        (constants.connectS * 1e3).toFixed(2)
      } ms a connection (the rings)`,
  );
  console.log("#   the rows above (measured: the simulated ranks' own work in this one process included):");
  console.log("#                      ranks  pattern    measured s  predicted s");
  const check = rows.map((r) => {
    const predicted = initCost(shapeOf(r), constants).rendezvousS;
    console.log(
      `    ${String(r.ranks).padStart(20)}  ${r.pattern.padEnd(9)} ${
        (r.rendezvousMs / 1000).toFixed(3).padStart(11)
      } ${predicted.toFixed(3).padStart(12)}`,
    );
    return { ranks: r.ranks, pattern: r.pattern, measuredS: r.rendezvousMs / 1000, predictedS: predicted };
  });
  console.log("#   predicted init (store + connections before the first ring call), 8 ranks a host:");
  console.log("#       ranks   one table + lazy   per key + eager");
  const predictions = [1_000, 4_096, 10_000, 100_000].map((n) => {
    const now = initCost({ ranks: n, hosts: n / 8, pattern: "one-table", connections: "lazy" }, constants);
    const before = initCost({ ranks: n, hosts: n / 8, pattern: "per-key", connections: "eager" }, constants);
    console.log(
      `    ${String(n).padStart(8)} ${`${now.totalS.toFixed(1)} s`.padStart(18)} ${
        `${before.totalS.toFixed(0)} s`.padStart(17)
      }`,
    );
    return {
      ranks: n,
      oneTableLazyS: now.totalS,
      perKeyEagerS: before.totalS,
      oneTable: now,
      perKey: before,
    };
  });
  model = { constants, check, predictions };
}

await Deno.writeTextFile(
  flags.out,
  JSON.stringify(
    {
      bench: "init",
      date: new Date().toISOString(),
      cpus: navigator.hardwareConcurrency,
      store: rows,
      worlds,
      rings,
      model,
    },
    null,
    2,
  ) + "\n",
);
console.log(`# results in ${flags.out}`);
