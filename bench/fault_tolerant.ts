/**
 * `deno task bench:fault-tolerant`: what `DistributedDataParallel`'s `faultTolerant` costs on a clean step
 * (two copies of each bucket per step: at its launch, and of its average), beside a plain helper on the
 * same group in alternating rounds, and what a lost rank costs (the step that lost it, from its start to
 * the averages over the survivors, against a normal step), on 4 ranks under the launcher's
 * `--fault-tolerant`, over shared memory and TCP. Writes `bench/results/fault-tolerant.json` and prints a
 * Markdown table.
 *
 * ```sh
 * deno task bench:fault-tolerant [--transports shm,tcp] [--trials 3]
 * ```
 *
 * @module
 */
import { parseArgs } from "node:util";

const { values: flags } = parseArgs({
  args: Deno.args,
  options: {
    transports: { type: "string", default: "shm,tcp" },
    trials: { type: "string", default: "3" },
    out: { type: "string", default: new URL("./results/fault-tolerant.json", import.meta.url).pathname },
  },
});
const root = new URL("../", import.meta.url).pathname;

async function run(transport: string, args: string[]): Promise<Record<string, number>> {
  const out = await new Deno.Command(Deno.execPath(), {
    args: [
      "run",
      "-A",
      `${root}cli/launch.ts`,
      "--fault-tolerant",
      "--nproc-per-node",
      "4",
      `${root}bench/_ft_rank.ts`,
      ...args,
    ],
    env: { NO_COLOR: "1", DCOMM_TRANSPORT: transport },
    stdout: "piped",
    stderr: "piped",
  }).output();
  const text = new TextDecoder().decode(out.stdout) + new TextDecoder().decode(out.stderr);
  const m = /RESULT (.*)$/m.exec(text);
  if (!out.success || !m) {
    throw new Error(`bench/_ft_rank.ts ${args.join(" ")} over ${transport} failed:\n${text.slice(-2000)}`);
  }
  return JSON.parse(m[1]);
}

const rows: Record<string, unknown>[] = [];
const table = [
  "| transport | trial | clean step, plain ms | clean step, faultTolerant ms | cost | step that lost a rank ms | 4 → 3 |",
  "|---|---|---|---|---|---|---|",
];
for (const transport of flags.transports.split(",")) {
  for (let trial = 1; trial <= Number(flags.trials); trial++) {
    const o = await run(transport, ["--mode", "overhead"]);
    const r = await run(transport, [
      "--mode",
      "recover",
      "--kill-step",
      String(20 + Math.floor(Math.random() * 20)),
    ]);
    rows.push({ transport, trial, ...o, ...r });
    table.push(
      `| ${transport} | ${trial} | ${o.plainMs.toFixed(2)} | ${o.tolerantMs.toFixed(2)} | ${
        ((o.tolerantMs / o.plainMs - 1) * 100).toFixed(1)
      } % | ${r.lostStepMs.toFixed(0)} (a step: ${r.stepMs.toFixed(2)}) | ${r.from} → ${r.to} |`,
    );
    console.error(table.at(-1));
  }
}
await Deno.writeTextFile(flags.out, JSON.stringify({ date: new Date().toISOString(), rows }, null, 2) + "\n");
console.log(table.join("\n"));
