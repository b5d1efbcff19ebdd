/**
 * The README's timeline: the demo (`examples/train_mnist.ts`, one epoch) on 4 ranks under dcomm's
 * launcher with `DCOMM_TIMELINE`, then a window of its training steps drawn as an SVG (`bench/_svg.ts`):
 * one lane per rank, each call's `queued` and running slices coloured by collective, its phases (waiting
 * for peers, moving bytes, reducing, codec: each its total in the call) in the lane's lower half. Writes the trace to
 * `bench/results/timeline.json` (open it in Perfetto or `chrome://tracing`) and the chart to
 * `docs/plots/timeline.svg`.
 *
 * ```sh
 * deno task bench:timeline [--ranks 4] [--steps 3]
 * ```
 *
 * @module
 */
import { parseArgs } from "node:util";
import { type Slice, timelineChart } from "./_svg.ts";
import type { TraceEvent } from "../backend/_timeline.ts";

const { values: flags } = parseArgs({
  args: Deno.args,
  options: {
    ranks: { type: "string", default: "4" },
    steps: { type: "string", default: "3" },
    trace: { type: "string", default: new URL("./results/timeline.json", import.meta.url).pathname },
    svg: { type: "string", default: new URL("../docs/plots/timeline.svg", import.meta.url).pathname },
  },
});
const root = new URL("../", import.meta.url).pathname;
const out = await new Deno.Command(Deno.execPath(), {
  args: [
    ...["run", "-A", `${root}cli/launch.ts`, "--nproc-per-node", flags.ranks],
    ...[`${root}examples/train_mnist.ts`, "--epochs", "1"],
  ],
  env: { DCOMM_TIMELINE: flags.trace },
  stdout: "inherit",
  stderr: "inherit",
}).output();
if (out.code !== 0) throw new Error(`the demo failed (exit ${out.code})`);
const { traceEvents } = JSON.parse(Deno.readTextFileSync(flags.trace)) as { traceEvents: TraceEvent[] };
const calls = traceEvents.filter((e) => e.ph === "X").sort((a, b) => (a.ts ?? 0) - (b.ts ?? 0));
// A window of training steps from the middle of the epoch: rank 0's all-reduces mark the steps (DDP
// launches its buckets in the same order every step; the first all-reduce of a step is its first bucket).
const ar = calls.filter((e) => e.pid === 0 && e.cat === "call" && e.name.startsWith("allReduce"));
// Buckets per step: the all-reduce sizes that come back many times.
const sizes = new Map<number, number>();
for (const e of ar) sizes.set(Number(e.args?.count), (sizes.get(Number(e.args?.count)) ?? 0) + 1);
const perStep = Math.max(1, [...sizes.values()].filter((n) => n >= ar.length / sizes.size / 2).length);
const steady = ar.filter((e) => (sizes.get(Number(e.args?.count)) ?? 0) >= ar.length / sizes.size / 2);
const steps = Number(flags.steps);
const middle = Math.floor(steady.length / 2 / perStep) * perStep;
const from = steady[middle]?.ts ?? calls[0].ts ?? 0;
const to = steady[middle + steps * perStep]?.ts ?? from + 1e5;
const slices: Slice[] = calls
  .filter((e) => (e.ts ?? 0) >= from && (e.ts ?? 0) < to)
  .sort((a, b) => a.pid - b.pid)
  .map((e) => ({
    lane: `rank ${e.pid}`,
    start: ((e.ts ?? 0) - from) / 1000,
    end: ((e.ts ?? 0) + (e.dur ?? 0) - from) / 1000,
    kind: e.cat === "call"
      ? e.name.replace(/ #\d+$/, "")
      : e.cat === "phase"
      ? `  ${e.name}`
      : e.cat ?? "other",
    inner: e.cat === "phase",
  }));
Deno.writeTextFileSync(
  flags.svg,
  timelineChart(
    `train_mnist.ts on ${flags.ranks} ranks: ${steps} steps (DCOMM_TIMELINE, ${perStep} buckets per step)`,
    slices,
  ),
);
console.log(`${calls.length} slices in ${flags.trace}; ${slices.length} drawn in ${flags.svg}`);
