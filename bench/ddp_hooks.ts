/**
 * The demo (`examples/train_mnist.ts`) once per DDP communication hook, on the same ranks, epochs and
 * seed, and the table of what each did: final test accuracy (and its distance from the uncompressed
 * run's), bytes each rank sent per step (from the step reports), the training time per step, the share of
 * it spent waiting for communication, and the overlap measurement (backward alone, communication alone,
 * both). Writes `bench/results/ddp-hooks.json` and prints a Markdown table.
 *
 * ```sh
 * deno task bench:hooks [--ranks 4] [--epochs 10] [--hooks allreduce,fp16,...] [--overlap-steps 100]
 * ```
 *
 * @module
 */
import { parseArgs } from "node:util";

const { values: flags } = parseArgs({
  args: Deno.args,
  options: {
    ranks: { type: "string", default: "4" },
    epochs: { type: "string", default: "10" },
    hooks: {
      type: "string",
      default: "allreduce,fp16,bf16,int8,1bit,1bit-noef,topk,topk-noef,powersgd,powersgd-noef",
    },
    "powersgd-rank": { type: "string", default: "2" },
    "overlap-steps": { type: "string", default: "100" },
    out: { type: "string", default: new URL("./results/ddp-hooks.json", import.meta.url).pathname },
  },
});

const root = new URL("../", import.meta.url).pathname;

/** One hook's run. */
interface Row {
  hook: string;
  accuracy: number;
  bytesPerStep: number;
  trainingS: number;
  stepMs: number;
  commShare: number;
  backwardMs: number;
  commMs: number;
  bothMs: number;
  identical: boolean;
}

async function runHook(hook: string): Promise<Row> {
  const args = [
    "run",
    "-A",
    `${root}cli/launch.ts`,
    "--nproc-per-node",
    flags.ranks,
    `${root}examples/train_mnist.ts`,
    "--epochs",
    flags.epochs,
    "--hook",
    hook,
    "--powersgd-rank",
    flags["powersgd-rank"],
    "--overlap-steps",
    flags["overlap-steps"],
  ];
  const out = await new Deno.Command(Deno.execPath(), { args, stdout: "piped", stderr: "piped" }).output();
  const text = new TextDecoder().decode(out.stdout) + new TextDecoder().decode(out.stderr);
  if (out.code !== 0) {
    throw new Error(`The demo with --hook ${hook} failed (exit ${out.code}):\n${text.slice(-2000)}`);
  }
  const epochs = [...text.matchAll(/test accuracy ([\d.]+)%.*?([\d.]+) KiB sent per rank per step/g)];
  const last = epochs.at(-1);
  const done = text.match(
    /weights after training: (identical|DIFFERENT).*?; ([\d.]+) s of training, ([\d.]+)% of it/,
  );
  const overlap = text.match(
    /backward alone ([\d.]+) ms\/step, communication alone ([\d.]+) ms\/step, both ([\d.]+)/,
  );
  const steps = text.match(/(\d+) training digits, batch (\d+)\/rank/);
  if (!last || !done || !overlap || !steps) {
    throw new Error(`Unexpected demo output for ${hook}:\n${text.slice(-2000)}`);
  }
  const perEpoch = Math.floor(Number(steps[1]) / Number(flags.ranks) / Number(steps[2]));
  const trainingS = Number(done[2]);
  return {
    hook,
    accuracy: Number(last[1]),
    bytesPerStep: Number(last[2]) * 1024,
    trainingS,
    stepMs: (trainingS * 1000) / (perEpoch * Number(flags.epochs)),
    commShare: Number(done[3]),
    backwardMs: Number(overlap[1]),
    commMs: Number(overlap[2]),
    bothMs: Number(overlap[3]),
    identical: done[1] === "identical",
  };
}

const rows: Row[] = [];
for (const hook of flags.hooks.split(",")) {
  const row = await runHook(hook);
  rows.push(row);
  console.error(`${hook}: ${JSON.stringify(row)}`);
}
const base = rows.find((r) => r.hook === "allreduce");
const kib = (b: number): string => (b / 1024).toFixed(1);
const lines = [
  `| hook | test accuracy | vs allreduce | KiB sent/rank/step | fewer bytes | step (ms) | waiting | backward alone | comm alone | both |`,
  `|---|---|---|---|---|---|---|---|---|---|`,
  ...rows.map((r) =>
    `| ${r.hook} | ${r.accuracy.toFixed(2)}% | ${
      base ? (r.accuracy - base.accuracy >= 0 ? "+" : "") + (r.accuracy - base.accuracy).toFixed(2) : "-"
    } | ${kib(r.bytesPerStep)} | ${base ? (base.bytesPerStep / r.bytesPerStep).toFixed(1) + "×" : "-"} | ${
      r.stepMs.toFixed(2)
    } | ${r.commShare.toFixed(1)}% | ${r.backwardMs.toFixed(2)} | ${r.commMs.toFixed(2)} | ${
      r.bothMs.toFixed(2)
    } |`
  ),
];
console.log(lines.join("\n"));
await Deno.writeTextFile(
  flags.out,
  JSON.stringify(
    {
      ranks: Number(flags.ranks),
      epochs: Number(flags.epochs),
      powersgdRank: Number(flags["powersgd-rank"]),
      date: new Date().toISOString(),
      rows,
    },
    null,
    2,
  ) + "\n",
);
