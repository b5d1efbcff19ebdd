/**
 * What the flight recorder costs: all-reduces of 8 bytes and 1 MiB on 2 ranks under dcomm's launcher
 * (`bench/_flight_rank.ts`), the recorder on and off in alternate blocks of one run (paired: the order
 * flips every round, every block starts from a barrier), each block's time per call the slowest rank's.
 * The target: at most 2 %. The end-to-end ratio on a 2-core machine is noisier than that at 8 bytes, so
 * the run also times `record()` alone, on and off, in this process, and gives its share of each call.
 * Writes `bench/results/flight.json` and prints a Markdown table.
 *
 * ```sh
 * deno task bench:flight [--ranks 2] [--sizes 8,1048576] [--rounds 10] [--block-ms 200]
 * ```
 *
 * @module
 */
import { parseArgs } from "node:util";
import { FlightRecorder, setFlightRecording } from "../backend/flight.ts";
import { doneWork } from "../backend/work.ts";

const { values: flags } = parseArgs({
  args: Deno.args,
  options: {
    ranks: { type: "string", default: "2" },
    sizes: { type: "string", default: "8,1048576" },
    rounds: { type: "string", default: "16" },
    "block-ms": { type: "string", default: "300" },
    out: { type: "string", default: new URL("./results/flight.json", import.meta.url).pathname },
  },
});
const root = new URL("../", import.meta.url).pathname;

const median = (xs: number[]): number => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length % 2 ? s[(s.length - 1) / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2;
};

const output = await new Deno.Command(Deno.execPath(), {
  args: [
    ...["run", "-A", `${root}cli/launch.ts`, "--nproc-per-node", flags.ranks],
    ...[`${root}bench/_flight_rank.ts`, flags.sizes, flags.rounds, flags["block-ms"]],
  ],
  stdout: "piped",
  stderr: "inherit",
}).output();
const text = new TextDecoder().decode(output.stdout);
const line = text.split("\n").find((l) => l.includes("RESULT "));
if (output.code !== 0 || line === undefined) {
  console.error(text);
  throw new Error(`the ranks failed (exit ${output.code})`);
}
const rows = JSON.parse(line.slice(line.indexOf("RESULT ") + 7)) as {
  bytes: number;
  iters: number;
  on: number[];
  off: number[];
}[];
// What recording itself costs, alone: record() into a group's ring, on and off, in this process.
const recorder = new FlightRecorder([0, 1], 0, "cpu", () => false);
const done = doneWork(undefined);
const recordNs = { on: [] as number[], off: [] as number[] };
for (let round = 0; round < 6; round++) {
  for (const on of [true, false]) {
    setFlightRecording(on);
    const t0 = performance.now();
    for (let i = 0; i < 5e6; i++) recorder.record("allReduce", "float32", 2, 0, "sum", "auto", done);
    (on ? recordNs.on : recordNs.off).push((performance.now() - t0) * 1e6 / 5e6);
  }
}
setFlightRecording(true);
const perRecordNs = median(recordNs.on) - median(recordNs.off);
// The first two rounds warm the machine up (frequency, caches): left out of the medians.
const warm = (xs: number[]): number[] => xs.length > 4 ? xs.slice(2) : xs;
const results = rows.map((r) => ({
  ...r,
  onUs: median(warm(r.on)),
  offUs: median(warm(r.off)),
  ratio: median(warm(r.on)) / median(warm(r.off)),
  // Each round's own pair, on over off: their median says the same without the drift between rounds.
  pairedRatio: median(warm(r.on.map((v, i) => v / r.off[i]))),
  // The recorder's own cost per call against the call with it off.
  recordShare: perRecordNs / 1000 / median(warm(r.off)),
}));
const size = (b: number): string =>
  b >= 1 << 20 ? `${b / (1 << 20)} MiB` : b >= 1024 ? `${b / 1024} KiB` : `${b} B`;
console.log(
  `record() alone: ${perRecordNs.toFixed(1)} ns a call (on ${median(recordNs.on).toFixed(1)}, off ${
    median(recordNs.off).toFixed(1)
  })\n`,
);
console.log(
  `| all-reduce, ${flags.ranks} ranks | recorder off (µs) | on (µs) | on / off | paired median | record() / call |`,
);
console.log("|---|---|---|---|---|---|");
for (const r of results) {
  console.log(
    `| ${size(r.bytes)} | ${r.offUs.toFixed(2)} | ${r.onUs.toFixed(2)} | ${r.ratio.toFixed(3)} | ${
      r.pairedRatio.toFixed(3)
    } | ${(100 * r.recordShare).toFixed(3)} % |`,
  );
}
Deno.writeTextFileSync(
  flags.out,
  JSON.stringify(
    {
      date: new Date().toISOString(),
      cpus: navigator.hardwareConcurrency,
      deno: Deno.version.deno,
      ranks: Number(flags.ranks),
      rounds: Number(flags.rounds),
      recordNs: { ...recordNs, perCall: perRecordNs },
      results,
    },
    null,
    2,
  ) + "\n",
);
