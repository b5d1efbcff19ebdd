/**
 * `deno task bench:hierarchical` (root, iproute2): the hierarchical all-reduce against the flat ring on
 * the emulated cluster of `bench/cluster.ts`, 4 hosts × 2 ranks by default, at 1 Gb/s and at 10 Gb/s,
 * measured call for call (`bench/_interleaved_rank.ts`: the two alternate in blocks, so the drift of this
 * machine's speed falls on both alike). Besides each time, the share of the machine's CPUs busy during the
 * calls and the CPU time a call costs the whole machine: where the CPUs are saturated, the time per call
 * is that CPU time over the cores, whatever the links, and an algorithm that saves link bytes only wins
 * once the links, not the CPUs, set the pace. 10 Gb/s is the control: links ten times faster, the same
 * CPU work. With `--bare`, the same two schedules on bare Deno sockets (`bench/_bare_rank.ts`: no engine, no
 * Worker, no shared memory), the floor dcomm's own runs are held to. Writes `bench/results/hierarchical.json`
 * (`hierarchical_bare.json`) and prints a Markdown table.
 *
 * ```sh
 * sudo deno task bench:hierarchical [--rates 1gbit,10gbit] [--hosts 4] [--ranks-per-host 2]
 *   [--sizes 512K,1M,2M,4M,16M] [--blocks 12] [--calls 8] [--bare]
 * ```
 *
 * @module
 */
import { parseArgs } from "node:util";
import { clusterUnavailable, createCluster, rateBytes, resultOf, runOnCluster } from "./cluster.ts";
import { sizeLabel } from "./_svg.ts";

const { values: flags } = parseArgs({
  args: Deno.args,
  options: {
    rates: { type: "string", default: "1gbit,10gbit" },
    hosts: { type: "string", default: "4" },
    "ranks-per-host": { type: "string", default: "2" },
    sizes: { type: "string", default: "512K,1M,2M,4M,16M" },
    blocks: { type: "string", default: "12" },
    calls: { type: "string", default: "8" },
    /** The two schedules on bare Deno sockets (`_bare_rank.ts`): the floor dcomm's runs are held to. */
    bare: { type: "boolean", default: false },
    out: { type: "string" },
  },
});
const out = flags.out ??
  new URL(`./results/hierarchical${flags.bare ? "_bare" : ""}.json`, import.meta.url).pathname;

const why = await clusterUnavailable();
if (why !== undefined) {
  console.error(`Cannot run the hierarchical benchmark: ${why}`);
  Deno.exit(2);
}

/** One size at one rate: both algorithms. */
interface Row {
  rate: string;
  bytes: number;
  /** The slowest rank's median call (s), per algorithm. */
  ring: number;
  hierarchical: number;
  /** Share of the machine's CPUs busy during the calls, per algorithm. */
  ringBusy: number;
  hierarchicalBusy: number;
  /** CPU time per call, all CPUs (s), per algorithm. */
  ringCpu: number;
  hierarchicalCpu: number;
  /** Seconds the bytes each algorithm sends through the busiest host link take at the link's rate. */
  ringLink: number;
  hierarchicalLink: number;
}

const hosts = Number(flags.hosts), ranksPerHost = Number(flags["ranks-per-host"]);
const n = hosts * ranksPerHost;
const here = new URL("./", import.meta.url).pathname;
const rows: Row[] = [];
for (const rate of flags.rates.split(",")) {
  const cluster = await createCluster({ hosts, rate, delay: "50us" });
  try {
    const args = flags.bare
      ? [`${here}_bare_rank.ts`, "--addresses", cluster.addresses.join(",")]
      : [`${here}_interleaved_rank.ts`, "--algorithms", "ring,hierarchical"];
    args.push("--sizes", flags.sizes, "--blocks", flags.blocks, "--calls", flags.calls);
    const runs = await runOnCluster(cluster, ranksPerHost, args, { timeoutMs: 1_800_000 });
    const result = resultOf(runs, "RESULT", `ring against hierarchical at ${rate}`) as {
      rows: { bytes: number; algorithm: string; seconds: number; busy: number; cpuSeconds: number }[];
    };
    const of = (bytes: number, algorithm: string) =>
      result.rows.find((r) => r.bytes === bytes && r.algorithm === algorithm) as (typeof result.rows)[0];
    // A flat ring puts 2(n−1)/n of the buffer through each host's link; the hierarchical 2(H−1)/H.
    const perSecond = rateBytes(rate);
    for (const bytes of new Set(result.rows.map((r) => r.bytes))) {
      const ring = of(bytes, "ring"), hier = of(bytes, "hierarchical");
      rows.push({
        rate,
        bytes,
        ring: ring.seconds,
        hierarchical: hier.seconds,
        ringBusy: ring.busy,
        hierarchicalBusy: hier.busy,
        ringCpu: ring.cpuSeconds,
        hierarchicalCpu: hier.cpuSeconds,
        ringLink: (2 * (n - 1) / n) * bytes / perSecond,
        hierarchicalLink: (2 * (hosts - 1) / hosts) * bytes / perSecond,
      });
    }
  } finally {
    await cluster.destroy();
  }
}

const ms = (s: number): string => (s * 1e3).toFixed(1);
const pct = (x: number): string => `${Math.round(x * 100)}%`;
const table = [
  `${
    flags.bare ? "bare sockets, " : ""
  }${hosts} hosts × ${ranksPerHost} ranks, ${navigator.hardwareConcurrency} CPUs; times: the slowest rank's median call; ` +
  "link: the bytes through each host's link at the link's rate; CPU: the whole machine's CPU time per call",
  "",
  "| rate | size | ring ms | hierarchical ms | ring / hier | link ms (ring, hier) | CPUs busy (ring, hier) | CPU ms per call (ring, hier) |",
  "|---|---|---|---|---|---|---|---|",
  ...rows.map((r) =>
    `| ${r.rate} | ${sizeLabel(r.bytes)} | ${ms(r.ring)} | ${ms(r.hierarchical)} | ` +
    `${(r.ring / r.hierarchical).toFixed(2)}× | ${ms(r.ringLink)}, ${ms(r.hierarchicalLink)} | ` +
    `${pct(r.ringBusy)}, ${pct(r.hierarchicalBusy)} | ${ms(r.ringCpu)}, ${ms(r.hierarchicalCpu)} |`
  ),
].join("\n");
console.log(table);
await Deno.writeTextFile(
  out,
  JSON.stringify(
    {
      date: new Date().toISOString(),
      bare: flags.bare,
      hosts,
      ranksPerHost,
      cpus: navigator.hardwareConcurrency,
      rows,
    },
    null,
    2, // as deno fmt writes JSON, so that the results pass `deno fmt --check` as written
  ) +
    "\n",
);
console.log(`\nWrote ${out}`);
