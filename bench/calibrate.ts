/**
 * `deno task bench:calibrate`: measures the cost model's constants on this machine — α and β by a
 * two-rank ping-pong over each transport (least squares over message sizes), γ by the engine's float32 sum
 * through its wasm staging — and the host segment's by timing its all-reduce in both plans (one-shot and
 * two-phase, least squares through their formulas), and writes them to `sim/measured.ts`, which `"auto"`
 * and the segment's choice of plan use. The in-process transport shares the shared-memory transport's
 * ring code and takes its constants.
 *
 * @module
 */
import { launch } from "../cli/launch.ts";
import { fitConstants, fitSegmentConstants, type SegmentSample } from "../sim/cost_model.ts";

const rank = new URL("./_calibrate_rank.ts", import.meta.url).pathname;
const results: Record<string, { alpha: number; beta: number; gamma: number }> = {};
for (const kind of ["tcp", "shm"]) {
  let line = "";
  const r = await launch({
    nprocPerNode: 2,
    command: [rank, kind],
    write: (l) => {
      const m = /CALIBRATION (.*)$/.exec(l);
      if (m) line = m[1];
      else console.log(l);
    },
  });
  if (r.code !== 0 || !line) throw new Error(`calibration over ${kind} failed (exit ${r.code})`);
  const { samples, gamma } = JSON.parse(line);
  const { alpha, beta } = fitConstants(samples);
  results[kind] = { alpha, beta, gamma };
  console.log(
    `${kind}: α ${(alpha * 1e6).toFixed(1)} µs, β ${(1 / beta / 1e9).toFixed(2)} GB/s, γ ${
      (1 / gamma / 1e9).toFixed(2)
    } GB/s reduced  (samples: ${
      samples.map((s: { bytes: number; seconds: number }) =>
        `${s.bytes} B ${(s.seconds * 1e6).toFixed(0)} µs`
      ).join(
        ", ",
      )
    })`,
  );
}
results.inproc = results.shm;
// Each plan in 3 runs, taking turns, and the fastest of the runs per size: the machine's speed drifts
// between runs, and a fit through noise gives constants that mean nothing.
const runs: SegmentSample[] = [];
for (const plan of ["one-shot", "two-phase", "one-shot", "two-phase", "one-shot", "two-phase"]) {
  const r = await launch({
    nprocPerNode: 2,
    command: [new URL("./_calibrate_segment_rank.ts", import.meta.url).pathname],
    env: { DCOMM_SEGMENT_PLAN: plan, DCOMM_TRANSPORT: "shm" },
    write: (l) => {
      const m = /SEGMENT (.*)$/.exec(l);
      if (m) runs.push(...JSON.parse(m[1]));
      else console.log(l);
    },
  });
  if (r.code !== 0) throw new Error(`calibration of the segment (${plan}) failed (exit ${r.code})`);
}
const fastest = new Map<string, SegmentSample>();
for (const s of runs) {
  const key = `${s.plan}:${s.bytes}`;
  if (!fastest.has(key) || s.seconds < (fastest.get(key) as SegmentSample).seconds) fastest.set(key, s);
}
const segmentSamples = [...fastest.values()];
results.segment = fitSegmentConstants(segmentSamples);
console.log(
  `segment: α ${(results.segment.alpha * 1e6).toFixed(1)} µs, β ${
    (1 / results.segment.beta / 1e9).toFixed(2)
  } ` +
    `GB/s copied, γ ${(1 / results.segment.gamma / 1e9).toFixed(2)} GB/s read by reductions  (samples: ${
      segmentSamples.map((s) => `${s.plan} ${s.bytes} B ${(s.seconds * 1e6).toFixed(0)} µs`).join(", ")
    })`,
);
const fmt = (c: { alpha: number; beta: number; gamma: number }): string =>
  `{ alpha: ${c.alpha.toExponential(3)}, beta: ${c.beta.toExponential(3)}, gamma: ${
    c.gamma.toExponential(3)
  } }`;
const source = `/**
 * The cost model's constants as \`deno task bench:calibrate\` measured them (${
  new Date().toISOString().slice(0, 10)
},
 * ${navigator.hardwareConcurrency} CPUs, Deno ${Deno.version.deno}). α: seconds per message, β: seconds per byte,
 * γ: seconds per byte reduced. Rerun the task on your machine to refit them.
 *
 * @module
 */
import type { CostConstants } from "./cost_model.ts";

/**
 * Measured constants by transport (inproc shares the shm ring code and takes its constants), and of the
 * host segment's collectives.
 */
export const MEASURED_CONSTANTS: Readonly<Record<"tcp" | "shm" | "inproc" | "segment", CostConstants>> = Object
  .freeze({
  tcp: Object.freeze(${fmt(results.tcp)}),
  shm: Object.freeze(${fmt(results.shm)}),
  inproc: Object.freeze(${fmt(results.inproc)}),
  segment: Object.freeze(${fmt(results.segment)}),
});
`;
const out = new URL("../sim/measured.ts", import.meta.url).pathname;
Deno.writeTextFileSync(out, source);
new Deno.Command(Deno.execPath(), { args: ["fmt", out] }).outputSync();
console.log(`wrote ${out}`);
