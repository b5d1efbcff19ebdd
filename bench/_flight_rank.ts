/**
 * A rank of `bench/flight.ts`: all-reduces of each size in blocks, the flight recorder on and off in
 * alternate blocks (the order flipped every round), every block starting from a barrier; prints
 * `RESULT {json}` on rank 0 with each block's time per call.
 *
 * @module
 */
import { init } from "../mod.ts";
import { setFlightRecording } from "../backend/flight.ts";

const [sizesArg, roundsArg, budgetArg] = Deno.args;
const sizes = sizesArg.split(",").map(Number);
const rounds = Number(roundsArg);
const budgetMs = Number(budgetArg);
await using pg = await init();
const out: { bytes: number; iters: number; on: number[]; off: number[] }[] = [];
for (const bytes of sizes) {
  const t = new Float32Array(Math.max(1, bytes / 4));
  // Warm up, then calibrate: iterations that take about budgetMs (rank 0's count, for every rank).
  const probe = bytes >= 1 << 20 ? 20 : 2000;
  for (let i = 0; i < probe; i++) await pg.allReduce(t);
  await pg.barrier();
  const t0 = performance.now();
  for (let i = 0; i < probe; i++) await pg.allReduce(t);
  const ms = new Float64Array([performance.now() - t0]);
  await pg.broadcast(ms);
  let iters = Math.max(1, Math.round(probe * budgetMs / Math.max(ms[0], 1e-3)));
  const count = new Float64Array([iters]);
  await pg.broadcast(count);
  iters = count[0];
  const row = { bytes, iters, on: [] as number[], off: [] as number[] };
  for (let r = 0; r < rounds; r++) {
    for (const on of r % 2 === 0 ? [true, false] : [false, true]) {
      setFlightRecording(on);
      await pg.barrier();
      const t0 = performance.now();
      for (let i = 0; i < iters; i++) await pg.allReduce(t);
      const us = new Float64Array([(performance.now() - t0) * 1000 / iters]);
      await pg.allReduce(us, { op: "max" });
      (on ? row.on : row.off).push(us[0]);
    }
  }
  setFlightRecording(true);
  out.push(row);
}
if (pg.rank === 0) console.log(`RESULT ${JSON.stringify(out)}`);
