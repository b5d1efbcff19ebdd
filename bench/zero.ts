/**
 * `deno task bench:zero`: sharded data parallel (ZeRO 1/2/3, ZeRO++) against DDP, in the same runs.
 *
 * 1. **Memory, bytes and time** (`_zero_rank.ts`, an MLP of 12 layers of 1536², 28.3 M parameters, fp32
 *    Adam, batch 4), on 2 and 4 ranks over TCP on this host (real sockets, so each rank's bytes sent are
 *    the bytes a network would carry): per rank the bytes held for parameters, gradients and optimizer
 *    state beside ZeRO's formulas (DDP 4Ψ + 4Ψ + 8Ψ; stage 1 4Ψ + 4Ψ + 8Ψ/n; stage 2 4Ψ + 12Ψ/n; stage 3
 *    16Ψ/n, plus the reused buffers of whole layers), bytes sent per step, and the step time (the slowest
 *    rank's median). Stage 3's overlap (through the host segment): its step with prefetch beside the
 *    compute alone, the gathers alone and the communication alone (a step without the matrix products).
 * 2. **Accuracy**: the demo (`examples/train_mnist.ts`, `--epochs`) by DDP and by each stage and ZeRO++
 *    option, on the same seed, on 2 and 4 ranks.
 * 3. **The emulated network** (root: `bench/cluster.ts`, 4 hosts × 2 ranks at 1 Gb/s and 100
 *    Mb/s): stage 3 with and without hpZ and qwZ + qgZ, and DDP, on a 2.1 M-parameter MLP without its
 *    compute (each row a step's communication and optimizer), each beside the cost model's prediction
 *    (`_zero_model.ts`) with the constants fitted on that cluster (`_fit.ts`).
 *
 * Writes `bench/results/zero.json` and prints the tables (Markdown).
 *
 * ```sh
 * deno task bench:zero [--ranks 2,4] [--steps 5] [--epochs 5] [--parts local,accuracy,cluster] [--rates 1gbit,100mbit]
 * ```
 *
 * @module
 */
import { parseArgs } from "node:util";
import { clusterUnavailable, createCluster, resultOf, runOnCluster } from "./cluster.ts";
import { calibrate } from "./_fit.ts";
import { predictZeroStep } from "./_zero_model.ts";

const { values: flags } = parseArgs({
  args: Deno.args,
  options: {
    ranks: { type: "string", default: "2,4" },
    steps: { type: "string", default: "5" },
    epochs: { type: "string", default: "5" },
    configs: { type: "string", default: "ddp,1,2,3,3+p0,3+qwz+qgz,2+sign,2+topk" },
    /** Which of the three parts to run: `local`, `accuracy`, `cluster` (root). */
    parts: { type: "string", default: "local,accuracy,cluster" },
    rates: { type: "string", default: "1gbit,100mbit" },
    out: { type: "string", default: new URL("./results/zero.json", import.meta.url).pathname },
  },
});
const root = new URL("../", import.meta.url).pathname;
const RANK = `${root}bench/_zero_rank.ts`;

// deno-lint-ignore no-explicit-any
type Json = any;

async function launch(ranks: number, script: string[], env: Record<string, string> = {}): Promise<string> {
  const out = await new Deno.Command(Deno.execPath(), {
    args: ["run", "-A", `${root}cli/launch.ts`, "--nproc-per-node", String(ranks), ...script],
    env: { NO_COLOR: "1", ...env },
    stdout: "piped",
    stderr: "piped",
  }).output();
  const text = new TextDecoder().decode(out.stdout) + new TextDecoder().decode(out.stderr);
  if (!out.success) throw new Error(`${script.join(" ")} on ${ranks} ranks failed:\n${text.slice(-3000)}`);
  return text;
}

const mb = (bytes: number): string => (bytes / 1e6).toFixed(1);

// 1. Memory, bytes, time.
const parts = new Set(flags.parts.split(","));
const local: Json[] = [];
for (const ranks of parts.has("local") ? flags.ranks.split(",").map(Number) : []) {
  const text = await launch(ranks, [RANK, "--configs", flags.configs, "--steps", flags.steps], {
    DCOMM_TRANSPORT: "tcp",
  });
  const result = JSON.parse(/RESULT (.*)$/m.exec(text)?.[1] ?? "null");
  if (!result) throw new Error(`no result:\n${text.slice(-2000)}`);
  local.push(result);
  console.error(`memory and time on ${ranks} ranks: ${result.rows.length} rows`);
}

function formula(config: string, psi: number, n: number): number {
  const stage = config === "ddp" ? 0 : Number(config.split("+")[0]);
  return [16 * psi, 8 * psi + (8 * psi) / n, 4 * psi + (12 * psi) / n, (16 * psi) / n][stage];
}

const memoryTable = [
  "| ranks | run | params MB | grads MB | optimizer MB | buffers MB | total MB | formula MB | sent per step MB | step ms | vs DDP |",
  "|---|---|---|---|---|---|---|---|---|---|---|",
];
for (const r of local) {
  const ddp = r.rows.find((x: Json) => x.config === "ddp");
  for (const row of r.rows) {
    memoryTable.push(
      `| ${r.size} | ${row.config === "ddp" ? "DDP" : `ZeRO ${row.config}`} | ${mb(row.params)} | ${
        mb(row.grads)
      } | ${mb(row.optimizer)} | ${mb(row.buffers + (row.residuals ?? 0))} | ${mb(row.total)} | ${
        mb(formula(row.config, r.psi, r.size))
      } | ${mb(row.bytesPerStep)} | ${row.stepMs.toFixed(0)} | ${(row.stepMs / ddp.stepMs).toFixed(2)}× |`,
    );
  }
}
// Stage 3's overlap, through the host segment (this machine's cheapest transport: over TCP the
// communication threads take the cores the compute needs).
const overlaps: Json[] = [];
for (const ranks of parts.has("local") ? flags.ranks.split(",").map(Number) : []) {
  const text = await launch(ranks, [RANK, "--configs", "", "--steps", flags.steps, "--overlap"]);
  overlaps.push({ ranks, ...JSON.parse(/RESULT (.*)$/m.exec(text)?.[1] ?? "null").overlap });
}
const overlapTable = [
  "| ranks | compute alone ms | gathers alone ms | communication alone ms | compute + communication ms | step, prefetch 1 ms | prefetch 0 ms |",
  "|---|---|---|---|---|---|---|",
  ...overlaps.map((o) =>
    `| ${o.ranks} | ${o.computeMs.toFixed(0)} | ${o.gathersMs.toFixed(0)} | ${o.commMs.toFixed(0)} | ${
      (o.computeMs + o.commMs).toFixed(0)
    } | ${o.stepMs.toFixed(0)} | ${o.noPrefetchMs.toFixed(0)} |`
  ),
];

// 2. Accuracy of the demo.
const DEMOS: [string, string[]][] = [
  ["DDP", []],
  ["ZeRO 1", ["--zero", "1"]],
  ["ZeRO 2", ["--zero", "2"]],
  ["ZeRO 3", ["--zero", "3"]],
  ["ZeRO 3 + qwZ + qgZ", ["--zero", "3", "--qwz", "--qgz"]],
  ["ZeRO 2 + 1-bit", ["--zero", "2", "--zero-codec", "sign"]],
  ["ZeRO 2 + top-k 1%", ["--zero", "2", "--zero-codec", "topk"]],
  ["ZeRO 2 + top-k 10%", ["--zero", "2", "--zero-codec", "topk", "--topk-ratio", "0.1"]],
  // The same codecs as DDP hooks (all-reduce of the whole gradient), for comparison.
  ["DDP + 1-bit hook", ["--hook", "1bit"]],
  ["DDP + top-k 1% hook", ["--hook", "topk"]],
];
const accuracy: Json[] = [];
for (const ranks of parts.has("accuracy") ? flags.ranks.split(",").map(Number) : []) {
  for (const [name, args] of DEMOS) {
    const text = await launch(ranks, [`${root}examples/train_mnist.ts`, "--epochs", flags.epochs, ...args]);
    const accs = [...text.matchAll(/test accuracy ([\d.]+)%/g)].map((m) => Number(m[1]));
    const checksum = /checksum (\w+)\)/.exec(text)?.[1] ?? "different";
    accuracy.push({ ranks, name, accuracy: accs.at(-1), checksum });
    console.error(`demo on ${ranks} ranks, ${name}: ${accs.at(-1)}%`);
  }
}
const accuracyTable = [
  "| ranks | run | test accuracy | vs DDP | weights checksum |",
  "|---|---|---|---|---|",
  ...accuracy.map((a) => {
    const ddp = accuracy.find((b) => b.ranks === a.ranks && b.name === "DDP");
    return `| ${a.ranks} | ${a.name} | ${a.accuracy.toFixed(2)}% | ${
      (a.accuracy - ddp.accuracy).toFixed(2)
    } | ${a.checksum}${a.checksum === ddp.checksum && a.name !== "DDP" ? " (DDP's)" : ""} |`;
  }),
];

// 3. The emulated network.
const network: Json[] = [];
const clusterTable = [
  "| rate | run | host's wire bytes per step MB | step ms (measured) | of which codec kernels ms | predicted communication ms | predicted + codec ms |",
  "|---|---|---|---|---|---|---|",
];
if (parts.has("cluster")) {
  const why = await clusterUnavailable();
  if (why) throw new Error(`Cannot run the cluster rows: ${why}`);
  const hosts = 4, perHost = 2, width = 512, layers = 8;
  for (const rate of flags.rates.split(",")) {
    const fitted = await calibrate(rate, hosts, perHost);
    const cluster = await createCluster({ hosts, rate, delay: "50us" });
    try {
      const configs = "ddp,3,3+hpz,3+qwz+qgz,3+hpz+qwz+qgz";
      const args = [
        RANK,
        "--width",
        String(width),
        "--layers",
        String(layers),
        "--configs",
        configs,
        "--steps",
        "3",
        "--comm-only",
      ];
      const runs = await runOnCluster(cluster, perHost, args, { timeoutMs: 1_800_000 });
      const result = resultOf(runs, "RESULT", `ZeRO on ${hosts} hosts × ${perHost} at ${rate}`) as Json;
      for (const row of result.rows) {
        const predicted = predictZeroStep(row.config, {
          hosts,
          local: perHost,
          layers: Array(layers).fill(width * width + width),
          tcp: fitted.tcp,
          shm: fitted.shm,
        });
        network.push({ rate, ...row, predictedMs: predicted * 1e3 });
        clusterTable.push(
          `| ${rate} | ${row.config === "ddp" ? "DDP" : `ZeRO ${row.config}`} | ${mb(row.wirePerStep)} | ${
            row.stepMs.toFixed(0)
          } | ${row.codecMs.toFixed(0)} | ${(predicted * 1e3).toFixed(0)} | ${
            (predicted * 1e3 + row.codecMs).toFixed(0)
          } |`,
        );
      }
      console.error(`cluster at ${rate}: ${result.rows.length} rows`);
    } finally {
      await cluster.destroy();
    }
  }
}

await Deno.writeTextFile(
  flags.out,
  JSON.stringify({ date: new Date().toISOString(), local, overlaps, accuracy, network }, null, 2) + "\n",
);
console.log(
  [
    "## Memory, bytes and step time",
    "",
    ...memoryTable,
    "",
    "## Stage 3 overlap",
    "",
    ...overlapTable,
    "",
    "## Accuracy (demo)",
    "",
    ...accuracyTable,
    ...(network.length ? ["", "## Emulated network (4 hosts × 2 ranks)", "", ...clusterTable] : []),
  ].join("\n"),
);
