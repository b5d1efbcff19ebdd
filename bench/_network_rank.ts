/**
 * A rank of `bench/network.ts` on the emulated cluster: for each size and algorithm, an fp32 all-reduce
 * (one untimed call, then as many as fit in `--seconds`, 5 to 200, the count rank 0's first call decides,
 * back to back, each timed), and rank 0 prints `RESULT {json}`: the slowest rank's median seconds per call,
 * and what `"auto"` chose.
 * With `--servers S` the ranks 0..S-1 are dedicated parameter servers: they add zeros.
 *
 * @module
 */
import { parseArgs } from "node:util";
import { init } from "../backend/init.ts";

const { values: flags } = parseArgs({
  args: Deno.args,
  options: {
    sizes: { type: "string", default: "1K,16K,256K,1M,4M,16M,64M" },
    algorithms: {
      type: "string",
      default: "ring,tree,double-tree,halving-doubling,direct,ps,hierarchical,auto",
    },
    "direct-max": { type: "string", default: "1M" },
    servers: { type: "string", default: "0" },
    seconds: { type: "string", default: "0.3" },
  },
});
const bytesOf = (s: string): number => Number(s.slice(0, -1)) * (s.endsWith("M") ? 1 << 20 : 1024);

await using pg = await init({ timeoutMs: 600_000 });
const servers = Number(flags.servers);
const rows: { algorithm: string; ran: string; bytes: number; seconds: number; iterations: number }[] = [];
// Every algorithm's code compiled before anything is timed: the first sizes measured otherwise pay for it.
const warm = new Float32Array(16384);
for (const algorithm of flags.algorithms.split(",")) {
  const options = algorithm === "ps" && servers > 0 ? { algorithm, servers } : { algorithm };
  for (let i = 0; i < 20; i++) await pg.allReduce(warm, options);
}
for (const size of flags.sizes.split(",")) {
  const bytes = bytesOf(size);
  const t = new Float32Array(bytes / 4);
  for (const algorithm of flags.algorithms.split(",")) {
    if (algorithm === "direct" && bytes > bytesOf(flags["direct-max"])) continue;
    const options = algorithm === "ps" && servers > 0 ? { algorithm, servers } : { algorithm };
    t.fill(pg.rank < servers ? 0 : 1);
    await pg.barrier();
    let t0 = performance.now();
    const first = await pg.allReduce(t, options).wait();
    const plan = new Float64Array([(performance.now() - t0) / 1000]);
    await pg.broadcast(plan);
    const iterations = Math.min(200, Math.max(5, Math.ceil(Number(flags.seconds) / plan[0])));
    await pg.barrier();
    // Calls back to back, as a training loop makes them, each timed: the median call of each rank, and the
    // slowest rank's. (A mean would be set by the few calls that a busy 2-core machine stalls for tens of
    // milliseconds, which say nothing about the algorithm.)
    const times = new Float64Array(iterations);
    for (let i = 0; i < iterations; i++) {
      t0 = performance.now();
      await pg.allReduce(t, options);
      times[i] = (performance.now() - t0) / 1000;
    }
    times.sort();
    const worst = new Float64Array([times[iterations >> 1]]);
    await pg.allReduce(worst, { op: "max" });
    rows.push({ algorithm, ran: first?.algorithm ?? algorithm, bytes, seconds: worst[0], iterations });
  }
}
if (pg.rank === 0) {
  console.log(`RESULT ${JSON.stringify({ size: pg.size, transport: "", rows })}`);
}
