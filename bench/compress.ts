/**
 * `deno task bench:compress`: the DDP hooks' codecs against the plain all-reduce, in one run. For 2 and 4
 * ranks on this host (the host segment) and a world of one (the codecs' own kernel time, no peer), every
 * size from 1 to 256 MiB of float32 gradient: the time per call and the GB/s of gradient each rank gets
 * through (size / time), and the bytes each rank sent. Then a projection with the cost model
 * (`collectives/compressed_*.ts`, `sim/cost_model.ts`): each hook's time on an 8-rank ring over 1, 10 and
 * 100 Gb/s links = the collectives of its bytes over the link + its kernel time measured here on a world
 * of one, and which hook is fastest at each size. Writes `bench/results/compress.json` and prints
 * Markdown tables.
 *
 * ```sh
 * deno task bench:compress [--ranks 1,2,4] [--sizes 1M,4M,16M,64M,256M] [--hooks allreduce,fp16,int8,1bit,topk,powersgd]
 * ```
 *
 * Assumptions of the projection, stated in the output: α = 50 µs / 20 µs / 5 µs per message at 1 / 10 /
 * 100 Gb/s, β = 8 / rate s per byte, the plain all-reduce's summing γ from the measured TCP constants; a
 * codec's kernel time on n ranks is its time on one (each pass of its kernels runs over the whole tensor
 * either way, to within 1/n of a pass); fp16 is the ring all-reduce of half the bytes plus its casts.
 *
 * @module
 */
import { parseArgs } from "node:util";
import {
  int8AllReduceCost,
  powerSgdAllReduceCost,
  signAllReduceCost,
  topKAllReduceCost,
} from "../collectives/mod.ts";
import { type CostConstants, DEFAULT_TCP_CONSTANTS, ringAllReduceCost } from "../sim/cost_model.ts";

const { values: flags } = parseArgs({
  args: Deno.args,
  options: {
    ranks: { type: "string", default: "1,2,4" },
    sizes: { type: "string", default: "1M,4M,16M,64M,256M" },
    hooks: { type: "string", default: "allreduce,fp16,int8,1bit,topk,powersgd" },
    "project-ranks": { type: "string", default: "8" },
    out: { type: "string", default: new URL("./results/compress.json", import.meta.url).pathname },
  },
});

const root = new URL("../", import.meta.url).pathname;

interface Row {
  hook: string;
  bytes: number;
  ms: number;
  bytesSent: number;
  iterations: number;
}

async function measure(ranks: number): Promise<Row[]> {
  const out = await new Deno.Command(Deno.execPath(), {
    args: [
      "run",
      "-A",
      `${root}cli/launch.ts`,
      "--nproc-per-node",
      String(ranks),
      `${root}bench/_compress_rank.ts`,
      "--sizes",
      flags.sizes,
      "--hooks",
      flags.hooks,
    ],
    env: { DCOMM_TRANSPORT: "shm" },
    stdout: "piped",
    stderr: "piped",
  }).output();
  const text = new TextDecoder().decode(out.stdout) + new TextDecoder().decode(out.stderr);
  const m = text.match(/RESULT (\{.*\})/);
  if (out.code !== 0 || !m) {
    throw new Error(`bench/_compress_rank.ts on ${ranks} ranks failed:\n${text.slice(-3000)}`);
  }
  return (JSON.parse(m[1]) as { rows: Row[] }).rows;
}

const measured = new Map<number, Row[]>();
for (const n of flags.ranks.split(",").map(Number)) {
  measured.set(n, await measure(n));
  console.error(`measured ${n} rank(s)`);
}

const hooks = flags.hooks.split(",");
const sizes = [...new Set([...measured.values()][0].map((r) => r.bytes))];
const mib = (b: number): string => `${b / (1 << 20)} MiB`;
const lines: string[] = [];
for (const [n, rows] of measured) {
  if (n === 1) continue;
  lines.push(
    `\n### ${n} ranks on this host (host segment): GB/s of gradient per rank (bytes sent per rank)\n`,
    `| size | ${hooks.join(" | ")} |`,
    `|---|${hooks.map(() => "---").join("|")}|`,
  );
  for (const bytes of sizes) {
    const cells = hooks.map((h) => {
      const r = rows.find((x) => x.hook === h && x.bytes === bytes);
      return r ? `${(bytes / r.ms / 1e6).toFixed(2)} (${(r.bytesSent / (1 << 20)).toFixed(2)} MiB)` : "-";
    });
    lines.push(`| ${mib(bytes)} | ${cells.join(" | ")} |`);
  }
}

// ---- projection ---------------------------------------------------------------------------------------
const NETWORKS: { name: string; constants: CostConstants }[] = [
  { name: "1 Gb/s", constants: { alpha: 50e-6, beta: 8 / 1e9, gamma: DEFAULT_TCP_CONSTANTS.gamma } },
  { name: "10 Gb/s", constants: { alpha: 20e-6, beta: 8 / 10e9, gamma: DEFAULT_TCP_CONSTANTS.gamma } },
  { name: "100 Gb/s", constants: { alpha: 5e-6, beta: 8 / 100e9, gamma: DEFAULT_TCP_CONSTANTS.gamma } },
];
const one = measured.get(1) ?? [];
const kernelSeconds = (hook: string, bytes: number): number =>
  hook === "allreduce" ? 0 : (one.find((r) => r.hook === hook && r.bytes === bytes)?.ms ?? NaN) / 1000;
const project = (hook: string, bytes: number, size: number, k: CostConstants): number => {
  const count = bytes / 4, shape = { size, count };
  const compute = kernelSeconds(hook, bytes);
  switch (hook) {
    case "allreduce":
      return ringAllReduceCost({ size, bytes }, k);
    case "fp16":
      return ringAllReduceCost({ size, bytes: bytes / 2 }, k) + compute;
    case "int8":
      return int8AllReduceCost(shape, k, compute);
    case "1bit":
      return signAllReduceCost(shape, k, compute);
    case "topk":
      return topKAllReduceCost(shape, k, compute);
    case "powersgd":
      return powerSgdAllReduceCost(shape, k, compute);
    default:
      return NaN;
  }
};
const projection: {
  network: string;
  ranks: number;
  bytes: number;
  seconds: Record<string, number>;
  best: string;
}[] = [];
for (const size of flags["project-ranks"].split(",").map(Number)) {
  for (const net of NETWORKS) {
    lines.push(
      `\n### Projected on ${size} ranks over ${net.name}: ms per all-reduce (fastest in bold)\n`,
      `| size | ${hooks.join(" | ")} |`,
      `|---|${hooks.map(() => "---").join("|")}|`,
    );
    for (const bytes of sizes) {
      const seconds = Object.fromEntries(hooks.map((h) => [h, project(h, bytes, size, net.constants)]));
      const best = hooks.reduce((a, b) => (seconds[b] < seconds[a] ? b : a));
      projection.push({ network: net.name, ranks: size, bytes, seconds, best });
      lines.push(
        `| ${mib(bytes)} | ${
          hooks.map((
            h,
          ) => (h === best ? `**${(seconds[h] * 1000).toFixed(2)}**` : (seconds[h] * 1000).toFixed(2)))
            .join(" | ")
        } |`,
      );
    }
  }
}
console.log(lines.join("\n"));
await Deno.writeTextFile(
  flags.out,
  JSON.stringify(
    {
      date: new Date().toISOString(),
      measured: Object.fromEntries(measured),
      networks: NETWORKS,
      projection,
      assumptions: "kernel time on n ranks = measured on a world of one; alpha 50/20/5 us; beta = 8/rate",
    },
    null,
    2,
  ) + "\n",
);
