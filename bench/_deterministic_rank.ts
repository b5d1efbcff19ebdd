/**
 * One rank of `deno task bench:deterministic` (started by bench/deterministic.ts under dcomm's launcher):
 * the harness's all-reduce sweep, float32 sum, with deterministic mode as the peer timed round by round
 * with the default mode on the same tensors; rank 0 prints each size's default and deterministic times,
 * the paired ratio (the median over rounds of deterministic time / default time), what each ran, and a
 * `RESULTS` line of the JSON rows.
 *
 * @module
 */
import { init } from "../backend/init.ts";
import { collective } from "./_descriptors.ts";
import { hostDevice, runSweep, sweepSizes } from "./_harness.ts";

const [minBytes, maxBytes, factor, iters, rounds] = Deno.args.map(Number);
await using pg = await init();
const descriptor = collective("allReduce");
let ranDeterministic = "", ranDefault = "";
const results = await runSweep(pg, descriptor, {
  sizes: sweepSizes(minBytes, maxBytes, factor),
  iters,
  warmup: 3,
  rounds,
  check: true,
  jitWarmup: 300,
  device: hostDevice(pg),
  peers: [{
    name: "deterministic",
    call: (input) =>
      pg.allReduce(input, { deterministic: true }).wait().then((r) => {
        ranDeterministic = r?.algorithm ?? "";
      }),
  }],
});
// What each mode ran at the largest size (one more call of each).
const probe = new Float32Array(maxBytes / 4);
ranDefault = (await pg.allReduce(probe).wait())?.algorithm ?? "";
await pg.allReduce(probe, { deterministic: true });
if (pg.rank === 0) {
  const transport = (pg as { transport?: string }).transport ?? pg.backend;
  console.log(
    `# all-reduce float32 sum, ${pg.size} ranks over ${transport}: default (${ranDefault}) against ` +
      `deterministic mode (${ranDeterministic}), ${iters} calls × ${rounds} rounds per size, in turn`,
  );
  console.log("#      bytes   default µs   determ. µs   determ./default (paired)");
  for (const [base, det] of results) {
    const ratios = (base.roundsUs ?? []).map((t, i) => (det.roundsUs ?? [])[i] / t).sort((a, b) => a - b);
    const paired = ratios[ratios.length >> 1];
    console.log(
      `${String(base.bytes).padStart(12)} ${base.timeUs.toFixed(1).padStart(12)} ${
        det.timeUs.toFixed(1).padStart(12)
      } ${paired.toFixed(2).padStart(10)}×  wrong ${base.wrong}/${det.wrong}`,
    );
  }
  console.log("RESULTS " + JSON.stringify(results.flat()));
}
