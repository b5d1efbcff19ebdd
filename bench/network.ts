/**
 * `deno task bench:network` (root, iproute2): the all-reduce study on the emulated cluster of
 * `bench/cluster.ts`, at 100 Mb/s and 1 Gb/s by default (this 2-core machine moves about 950 MB/s through
 * its shaped veths in all with iperf3, less with dcomm's 8 or 16 ranks beside: 1 Gb/s on 8 hosts measures
 * its CPUs as much as the links, and 10 Gb/s would measure nothing else). For each rate and layout (hosts ×
 * ranks per host):
 *
 * 1. calibration on that layout (`bench/_calibrate_rank.ts tcp ring`): every rank in a ring of its local
 *    index across the hosts, every link busy with its host's ranks at once, steps taken as the algorithms
 *    take them (each send after the last receive), and the same within the hosts; fitted to α and β
 *    (`fitConstants`; β per link is the ring's β over the ranks that share the link), γ the engine's
 *    summing rate;
 * 2. fp32 all-reduces of 1 KiB–16 MiB (and 64 MiB at 1 Gb/s on up to `--big-hosts` hosts) with ring, tree,
 *    double tree, halving-doubling, direct (to 1 MiB), co-located parameter servers, hierarchical, and
 *    `"auto"` (whose constants are the fitted ones, through `DCOMM_COST_MODEL`), each row (the slowest
 *    rank's median of back-to-back calls) beside the model's prediction for it (`predict`, the same
 *    constants, the hosts' map);
 * 3. at the first rate, dedicated parameter-server hosts: 4 worker hosts and 1 or 2 server hosts.
 *
 * Then the seed's claims by the model (stated assumptions, printed with them): parameter servers against
 * the ring over worker counts, and the communication share of a ResNet-50- and a GPT-3-size step at 10 and
 * 100 Gb/s, with the hooks' compression ratios and the hierarchical all-reduce. Writes
 * `bench/results/network.json`, SVG plots under `docs/plots/`, and prints the tables (Markdown).
 *
 * ```sh
 * sudo deno task bench:network [--rates 1gbit,10gbit] [--hosts 2,4,8] [--ranks-per-host 1,2]
 *   [--sizes 1K,16K,256K,1M,4M,16M] [--big 64M] [--big-hosts 4] [--seconds 1] [--algorithms ring,hierarchical]
 * ```
 *
 * @module
 */
import { parseArgs } from "node:util";
import { clusterUnavailable, createCluster, rateBytes, resultOf, runOnCluster } from "./cluster.ts";
import { lineChart, scatterChart, type Series, shareChart, sizeLabel } from "./_svg.ts";
import { calibrate, type Fitted } from "./_fit.ts";
import type { CostConstants } from "../sim/cost_model.ts";
import { ALGORITHMS, predict } from "../collectives/mod.ts";

const { values: flags } = parseArgs({
  args: Deno.args,
  options: {
    rates: { type: "string", default: "100mbit,1gbit" },
    hosts: { type: "string", default: "2,4,8" },
    "ranks-per-host": { type: "string", default: "1,2" },
    sizes: { type: "string", default: "1K,16K,256K,1M,4M,16M" },
    /** Sizes added where the links, not this machine's CPUs, still set the pace (see the module doc). */
    big: { type: "string", default: "64M" },
    "big-rate": { type: "string", default: "1gbit" },
    "big-hosts": { type: "string", default: "4" },
    seconds: { type: "string", default: "1" },
    /** The algorithms of step 2 (every one by default). */
    algorithms: { type: "string" },
    "ps-servers": { type: "string", default: "1,2" },
    out: { type: "string", default: new URL("./results/network.json", import.meta.url).pathname },
    plots: { type: "string", default: new URL("../docs/plots/", import.meta.url).pathname },
  },
});

const why = await clusterUnavailable();
if (why !== undefined) {
  console.error(`Cannot run the network study: ${why}`);
  Deno.exit(2);
}

const here = new URL("./", import.meta.url).pathname;
const DELAY = "50us";

/** One measured row with its prediction. */
interface Row {
  rate: string;
  hosts: number;
  ranksPerHost: number;
  /** Dedicated server hosts (the ps rows of step 3), else 0. */
  serverHosts: number;
  algorithm: string;
  /** What ran (for "auto": its choice). */
  ran: string;
  bytes: number;
  seconds: number;
  predicted: number;
  busbw: number;
}

async function study(
  rate: string,
  hosts: number,
  ranksPerHost: number,
  fitted: Fitted,
  options: { serverHosts?: number; algorithms?: string } = {},
): Promise<Row[]> {
  const serverHosts = options.serverHosts ?? 0;
  const cluster = await createCluster({ hosts: hosts + serverHosts, rate, delay: DELAY });
  const constants = fitted.tcp;
  const model = JSON.stringify({ tcp: fitted.tcp, shm: fitted.shm });
  try {
    const big = flags.big && rate === flags["big-rate"] && hosts <= Number(flags["big-hosts"]) &&
      serverHosts === 0;
    const sizes = big ? `${flags.sizes},${flags.big}` : flags.sizes;
    const args = [`${here}_network_rank.ts`, "--sizes", sizes, "--seconds", flags.seconds];
    if (serverHosts > 0) args.push("--servers", String(serverHosts * ranksPerHost));
    const algorithms = options.algorithms ?? flags.algorithms;
    if (algorithms) args.push("--algorithms", algorithms);
    const runs = await runOnCluster(cluster, ranksPerHost, args, {
      env: { DCOMM_COST_MODEL: model },
      timeoutMs: 1_800_000,
    });
    const result = resultOf(runs, "RESULT", `The study on ${hosts} hosts × ${ranksPerHost} at ${rate}`);
    const size = (hosts + serverHosts) * ranksPerHost;
    const hostMap = Array.from({ length: size }, (_, r) => Math.floor(r / ranksPerHost));
    const workers = size - serverHosts * ranksPerHost;
    const rows =
      (result as { rows: { algorithm: string; ran: string; bytes: number; seconds: number }[] }).rows;
    return rows.map((r) => {
      const servers = r.ran === "ps" && serverHosts > 0 ? serverHosts * ranksPerHost : undefined;
      const predicted = predict("allReduce", r.ran as never, {
        size,
        bytes: r.bytes,
        chunkBytes: 1 << 20,
        servers,
        hosts: hostMap,
        intra: fitted.shm,
        constants,
      });
      const busbw = (r.bytes / r.seconds) * (2 * (workers - 1) / workers);
      return { rate, hosts, ranksPerHost, serverHosts, ...r, predicted, busbw };
    });
  } finally {
    await cluster.destroy();
  }
}

const rows: Row[] = [];
/** Constants by rate and layout (`4x2`: 4 hosts of 2 ranks): what the links give with every one of them busy. */
const fitted: Record<string, Record<string, Fitted>> = {};
const rates = flags.rates.split(",");
const hostCounts = flags.hosts.split(",").map(Number);
const perHost = flags["ranks-per-host"].split(",").map(Number);
for (const [i, rate] of rates.entries()) {
  fitted[rate] = {};
  for (const hosts of hostCounts) {
    for (const rph of perHost) {
      const k = fitted[rate][`${hosts}x${rph}`] = await calibrate(rate, hosts, rph);
      console.error(
        `${rate}, ${hosts} hosts × ${rph}: α ${(k.tcp.alpha * 1e6).toFixed(1)} µs, β ${
          (1 / k.tcp.beta / 1e6).toFixed(1)
        } MB/s per link (the link: ${(rateBytes(rate) / 1e6).toFixed(1)} MB/s), within a host α ${
          (k.shm.alpha * 1e6).toFixed(1)
        } µs, β ${(1 / k.shm.beta / 1e9).toFixed(2)} GB/s; γ ${(1 / k.tcp.gamma / 1e9).toFixed(2)} GB/s`,
      );
      const got = await study(rate, hosts, rph, k);
      rows.push(...got);
      console.error(`  ${hosts} hosts × ${rph}: ${got.length} rows`);
    }
  }
  if (i === 0) {
    for (const s of flags["ps-servers"].split(",").map(Number).filter((s) => s > 0)) {
      const k = fitted[rate]["4x1"] ?? Object.values(fitted[rate])[0];
      const got = await study(rate, 4, 1, k, { serverHosts: s, algorithms: "ps" });
      rows.push(...got);
      console.error(`  4 worker hosts + ${s} server hosts: ${got.length} rows`);
    }
  }
}

// ---- accuracy of the model -----------------------------------------------------------------------------
const judged = rows.filter((r) => r.bytes >= 64 * 1024);
const within = judged.filter((r) => Math.abs(r.predicted - r.seconds) <= 0.2 * r.seconds);
const lines: string[] = [];
const pct = (a: number, b: number): string => `${((100 * a) / b).toFixed(0)}%`;
lines.push(
  `Model: ${within.length} of ${judged.length} rows from 64 KiB up predicted within 20% (${
    pct(within.length, judged.length)
  }); by rate: ${
    rates.map((rate) => {
      const j = judged.filter((r) => r.rate === rate), w = j.filter((r) => within.includes(r));
      return `${rate} ${w.length}/${j.length}`;
    }).join(", ")
  }; by algorithm: ${
    [...new Set(judged.map((r) => r.ran))].map((a) => {
      const j = judged.filter((r) => r.ran === a), w = j.filter((r) => within.includes(r));
      return `${a} ${w.length}/${j.length}`;
    }).join(", ")
  }`,
);

// ---- tables ---------------------------------------------------------------------------------------------
const algorithms = [...new Set(rows.filter((r) => r.serverHosts === 0).map((r) => r.algorithm))];
for (const rate of rates) {
  lines.push(`\n#### ${rate} links: busbw GB/s measured (predicted), auto's choice\n`);
  for (const hosts of hostCounts) {
    for (const rph of perHost) {
      const mine = rows.filter((r) =>
        r.rate === rate && r.hosts === hosts && r.ranksPerHost === rph && r.serverHosts === 0
      );
      if (mine.length === 0) continue;
      const k = fitted[rate][`${hosts}x${rph}`];
      lines.push(
        `${hosts} hosts × ${rph} rank${rph > 1 ? "s" : ""} (fitted on this layout, every link busy: α ${
          (k.tcp.alpha * 1e6).toFixed(0)
        } µs, ${(1 / k.tcp.beta / 1e6).toFixed(0)} MB/s per link${
          rph > 1 ? `; within a host α ${(k.shm.alpha * 1e6).toFixed(0)} µs` : ""
        }):\n`,
      );
      lines.push(`| size | ${algorithms.join(" | ")} |`, `|---|${algorithms.map(() => "---").join("|")}|`);
      for (const bytes of [...new Set(mine.map((r) => r.bytes))]) {
        const cells = algorithms.map((a) => {
          const r = mine.find((x) => x.algorithm === a && x.bytes === bytes);
          if (!r) return "-";
          const bw = (r.busbw / 1e9).toFixed(3), p = ((r.busbw * r.seconds / r.predicted) / 1e9).toFixed(3);
          return a === "auto" ? `${bw} (${r.ran})` : `${bw} (${p})`;
        });
        lines.push(`| ${sizeLabel(bytes)} | ${cells.join(" | ")} |`);
      }
      lines.push("");
    }
  }
}
const dedicated = rows.filter((r) => r.serverHosts > 0);
if (dedicated.length > 0) {
  lines.push(
    `\n#### Parameter servers on hosts of their own (${rates[0]}): time per all-reduce, ms (predicted)\n`,
  );
  const servers = [...new Set(dedicated.map((r) => r.serverHosts))];
  lines.push(
    `| size | ring, 4 workers | ps co-located, 4 | ${
      servers.map((s) => `ps, 4 + ${s} server host${s > 1 ? "s" : ""}`).join(" | ")
    } |`,
    `|---|---|---|${servers.map(() => "---").join("|")}|`,
  );
  for (const bytes of [...new Set(dedicated.map((r) => r.bytes))]) {
    const at = (f: (r: Row) => boolean): string => {
      const r = rows.find((x) => x.rate === rates[0] && x.bytes === bytes && f(x));
      return r ? `${(r.seconds * 1e3).toFixed(2)} (${(r.predicted * 1e3).toFixed(2)})` : "-";
    };
    lines.push(
      `| ${sizeLabel(bytes)} | ${
        at((r) => r.hosts === 4 && r.ranksPerHost === 1 && r.serverHosts === 0 && r.algorithm === "ring")
      } | ${
        at((r) => r.hosts === 4 && r.ranksPerHost === 1 && r.serverHosts === 0 && r.algorithm === "ps")
      } | ${servers.map((s) => at((r) => r.serverHosts === s)).join(" | ")} |`,
    );
  }
}

// ---- the seed's claims, by the model ---------------------------------------------------------------------
const claims: string[] = [];
const gammaHere = Object.values(fitted[rates[0]])[0].tcp.gamma;
const net = (gbit: number): CostConstants => ({ alpha: 20e-6, beta: 8 / (gbit * 1e9), gamma: gammaHere });
const RESNET = 25.6e6 * 4, GPT3 = 175e9 * 4;
claims.push(
  "\nParameter servers against the ring, dense fp32 gradients of ResNet-50 size (102.4 MB), 10 Gb/s links (α 20 µs), " +
    "by the model (ms per all-reduce):\n",
  "| workers | ring | ps, 1 server | ps, W/4 servers | ps, W servers (co-located) |",
  "|---|---|---|---|---|",
);
for (const w of [2, 4, 8, 16, 32, 64]) {
  const k = net(10);
  const ps = (s: number): string =>
    (predict("allReduce", "ps", { size: w, bytes: RESNET, servers: s, constants: k }) * 1e3).toFixed(0);
  claims.push(
    `| ${w} | ${
      (predict("allReduce", "ring", { size: w, bytes: RESNET, constants: k }) * 1e3).toFixed(0)
    } | ${ps(1)} | ${ps(Math.max(1, w / 4))} | ${ps(w)} |`,
  );
}
// Compute per step, stated: ResNet-50 fp32 at 360 images/s per V100 (NVIDIA's published fp32 throughput), batch
// 64 per GPU; GPT-3 175B: 6·N·T flops, T = 3.2 M tokens per step over 512 GPUs at 100 TFLOP/s each.
const resnetCompute = 64 / 360, gptCompute = (6 * 175e9 * 3.2e6) / (512 * 100e12);
const bars: { label: string; compute: number; comm: number }[] = [];
claims.push(
  "\nCommunication share of a step (no overlap), 8 hosts × 8 GPUs (64 ranks), by the model; compute: ResNet-50 " +
    `${(resnetCompute * 1e3).toFixed(0)} ms (batch 64 at 360 images/s, fp32 V100), GPT-3 175B ${
      gptCompute.toFixed(1)
    } s ` +
    "(6·N·T flops, 3.2 M tokens over 512 GPUs at 100 TFLOP/s); fp32 gradients all-reduced once per step; intra-host " +
    "links NVLink-class (300 GB/s, α 5 µs):\n",
  "| model | network | flat ring | hierarchical | 1-bit (22×) | PowerSGD (46×) | int8 (3.1×) |",
  "|---|---|---|---|---|---|---|",
);
const intraNv: CostConstants = { alpha: 5e-6, beta: 1 / 300e9, gamma: 0 };
const hosts64 = Array.from({ length: 64 }, (_, r) => Math.floor(r / 8));
for (
  const [name, bytes, compute] of [["ResNet-50", RESNET, resnetCompute], [
    "GPT-3 175B",
    GPT3,
    gptCompute,
  ]] as const
) {
  for (const gbit of [10, 100]) {
    const k = { ...net(gbit), gamma: 0 };
    const flat = predict("allReduce", "ring", { size: 64, bytes, constants: k });
    const hier = predict("allReduce", "hierarchical", {
      size: 64,
      bytes,
      hosts: hosts64,
      intra: intraNv,
      constants: k,
    });
    const share = (t: number): string => `${((100 * t) / (t + compute)).toFixed(0)}%`;
    claims.push(
      `| ${name} | ${gbit} Gb/s | ${share(flat)} | ${share(hier)} | ${share(hier / 22)} | ${
        share(hier / 46)
      } | ${share(hier / 3.1)} |`,
    );
    bars.push({ label: `${name}, ${gbit} Gb/s, flat ring`, compute, comm: flat });
    bars.push({ label: `${name}, ${gbit} Gb/s, hierarchical`, compute, comm: hier });
    bars.push({ label: `${name}, ${gbit} Gb/s, hierarchical + 1-bit`, compute, comm: hier / 22 });
  }
}
claims.push(
  "\n(The compressed columns scale the hierarchical all-reduce's time by the hooks' measured byte ratios, `bench:hooks`; " +
    "their kernel time is left out, which `bench:compress` shows to matter above 10 Gb/s on this machine's CPU.)",
);

console.log([...lines, ...claims].join("\n"));

// ---- plots ----------------------------------------------------------------------------------------------
await Deno.mkdir(flags.plots, { recursive: true });
for (const rate of rates) {
  for (const [hosts, rph] of [[4, 2], [8, 1]]) {
    const mine = rows.filter((r) =>
      r.rate === rate && r.hosts === hosts && r.ranksPerHost === rph && r.serverHosts === 0
    );
    if (mine.length === 0) continue;
    const series: Series[] = [...new Set(mine.map((r) => r.algorithm))].map((a) => ({
      name: a,
      points: mine.filter((r) => r.algorithm === a).map((r) => ({ x: r.bytes, y: r.busbw / 1e9 })),
    }));
    await Deno.writeTextFile(
      `${flags.plots}network-busbw-${rate}-${hosts}x${rph}.svg`,
      lineChart(
        `all-reduce busbw, ${hosts} hosts × ${rph}, ${rate} links (emulated)`,
        "busbw (GB/s)",
        series,
      ),
    );
  }
}
await Deno.writeTextFile(
  `${flags.plots}network-predicted-vs-measured.svg`,
  scatterChart(
    "all-reduce time: the model against the emulated cluster (≥ 64 KiB)",
    [...new Set(judged.map((r) => r.ran))].map((a) => ({
      name: a,
      points: judged.filter((r) => r.ran === a).map((r) => ({ x: r.seconds, y: r.predicted })),
    })),
  ),
);
await Deno.writeTextFile(
  `${flags.plots}network-comm-share.svg`,
  shareChart("Communication share of a step (model)", bars),
);
await Deno.writeTextFile(
  flags.out,
  JSON.stringify(
    { date: new Date().toISOString(), delay: DELAY, fitted, algorithms: ALGORITHMS.allReduce, rows },
    null,
    2,
  ) + "\n",
);
