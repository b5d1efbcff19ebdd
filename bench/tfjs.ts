/**
 * TensorFlow.js data parallelism on this machine: the demo's CNN (`examples/train_tfjs.ts`, 27,618
 * parameters) fit with a DistributedOptimizer on 1, 2 and 4 ranks under dcomm's launcher
 * (`bench/_tfjs_rank.ts`), and what a step's time goes to: samples per second and the speed-up over one
 * rank (the target: 2 ranks at least 1.8× one; 4 ranks oversubscribe a 2-core machine and are reported,
 * not judged), the glue (gradients out of tfjs into the buckets, tensors over the averages), the wait for
 * communication; and, on 2 ranks with small buckets, the update applied bucket by bucket as each average
 * arrives against all at once when every bucket is in (the update's latency per step). Writes
 * `bench/results/tfjs.json` and prints Markdown tables.
 *
 * ```sh
 * deno task bench:tfjs [--ranks 1,2,4] [--steps 20] [--batch 32] [--overlap-steps 20]
 * ```
 *
 * @module
 */
import { parseArgs } from "node:util";

const { values: flags } = parseArgs({
  args: Deno.args,
  options: {
    ranks: { type: "string", default: "1,2,4" },
    steps: { type: "string", default: "60" },
    batch: { type: "string", default: "32" },
    "overlap-steps": { type: "string", default: "60" },
    out: { type: "string", default: new URL("./results/tfjs.json", import.meta.url).pathname },
  },
});

const root = new URL("../", import.meta.url).pathname;

/** What `_tfjs_rank.ts` reports (averaged over the ranks). */
interface Result {
  ranks: number;
  overlap: boolean;
  parameters: number;
  buckets: { params: number[]; bytes: number }[];
  steps: number;
  batchPerRank: number;
  samplesPerSec: number;
  stepMs: number;
  glueMs: number;
  copyInMs: number;
  wrapMs: number;
  launchMs: number;
  applyMs: number;
  updateMs: number;
  waitMs: number;
  commThreadMs: number;
  glueShare: number;
  commShare: number;
}

async function run(ranks: number, steps: string, extra: string[] = []): Promise<Result> {
  const args = [
    "run",
    "-A",
    `${root}cli/launch.ts`,
    "--nproc-per-node",
    String(ranks),
    `${root}bench/_tfjs_rank.ts`,
    "--steps",
    steps,
    "--batch",
    flags.batch,
    ...extra,
  ];
  const out = await new Deno.Command(Deno.execPath(), { args, stdout: "piped", stderr: "piped", cwd: root })
    .output();
  const text = new TextDecoder().decode(out.stdout) + new TextDecoder().decode(out.stderr);
  const line = /RESULT (.*)$/m.exec(text);
  if (out.code !== 0 || !line) {
    throw new Error(`${ranks} ranks failed (exit ${out.code}):\n${text.slice(-2000)}`);
  }
  return JSON.parse(line[1]) as Result;
}

const scaling: Result[] = [];
for (const ranks of flags.ranks.split(",").map(Number)) {
  const r = await run(ranks, flags.steps);
  scaling.push(r);
  console.error(`${ranks} ranks: ${JSON.stringify(r)}`);
}
// Small buckets (the dense layers, then the convolutions) so that a bucket has a next one to overlap with.
const small = ["--first-bucket-mb", "0.005", "--bucket-mb", "0.02"];
const overlapped = await run(2, flags["overlap-steps"], [...small, "--overlap", "true"]);
const atOnce = await run(2, flags["overlap-steps"], [...small, "--overlap", "false"]);
console.error(`overlap: ${JSON.stringify(overlapped)}\nall at once: ${JSON.stringify(atOnce)}`);
// The machine's ceiling for 2 ranks: two 1-rank runs at once, sharing nothing but the machine (2 cores,
// memory bandwidth, the communication threads' idle spins aside).
const pair = await Promise.all([run(1, flags.steps), run(1, flags.steps)]);
const pairSamples = pair[0].samplesPerSec + pair[1].samplesPerSec;

const one = scaling.find((r) => r.ranks === 1);
const two = scaling.find((r) => r.ranks === 2);
const speedup = (r: Result): number | undefined => (one ? r.samplesPerSec / one.samplesPerSec : undefined);
const pct = (x: number): string => `${(100 * x).toFixed(1)}%`;
console.log(
  [
    `| ranks | samples/s | speed-up | step (ms) | glue (ms) | glue share | waiting for communication (ms) | share | communication thread (ms) |`,
    `|---|---|---|---|---|---|---|---|---|`,
    ...scaling.map((r) =>
      `| ${r.ranks} | ${r.samplesPerSec.toFixed(1)} | ${speedup(r)?.toFixed(2) ?? "-"}× | ${
        r.stepMs.toFixed(1)
      } | ${r.glueMs.toFixed(3)} | ${pct(r.glueShare)} | ${r.waitMs.toFixed(2)} | ${pct(r.commShare)} | ${
        r.commThreadMs.toFixed(2)
      } |`
    ),
    "",
    `| 2 ranks, ${overlapped.buckets.length} buckets | update latency (ms) | apply (ms) | samples/s |`,
    `|---|---|---|---|`,
    ...[["bucket by bucket", overlapped], ["all at once", atOnce]].map(([name, r]) =>
      `| ${name} | ${(r as Result).updateMs.toFixed(2)} | ${(r as Result).applyMs.toFixed(2)} | ${
        (r as Result).samplesPerSec.toFixed(1)
      } |`
    ),
  ].join("\n"),
);
const twoSpeedup = two ? speedup(two) : undefined;
if (twoSpeedup !== undefined) {
  console.log(
    `\n2 ranks: ${twoSpeedup.toFixed(2)}× one rank (target 1.8×: ${
      twoSpeedup >= 1.8 ? "met" : "NOT met"
    }); ` +
      `two independent 1-rank runs at once: ${(pairSamples / (one?.samplesPerSec ?? NaN)).toFixed(2)}× one ` +
      `(the machine's ceiling), so 2 ranks reach ${
        (100 * (two?.samplesPerSec ?? 0) / pairSamples).toFixed(1)
      }% of it`,
  );
}
await Deno.writeTextFile(
  flags.out,
  JSON.stringify(
    {
      date: new Date().toISOString(),
      cpus: navigator.hardwareConcurrency,
      deno: Deno.version.deno,
      tfjs: "4.22.0 (cpu backend)",
      batchPerRank: Number(flags.batch),
      scaling: scaling.map((r) => ({ ...r, speedup: speedup(r) })),
      independentPair: {
        samplesPerSec: pair.map((r) => r.samplesPerSec),
        ceiling: pairSamples / (one?.samplesPerSec ?? NaN),
      },
      twoRankSpeedup: twoSpeedup,
      target: { twoRankSpeedup: 1.8, met: twoSpeedup === undefined ? undefined : twoSpeedup >= 1.8 },
      overlap: { bucketByBucket: overlapped, allAtOnce: atOnce },
    },
    null,
    2,
  ) + "\n",
);
