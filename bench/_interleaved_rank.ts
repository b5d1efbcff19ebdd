/**
 * A rank of `bench/hierarchical.ts`: fp32 all-reduces of each size with each algorithm, interleaved so
 * that the machine's drift (this 2-core VM's speed moves up to 2× within an hour) falls on all of them
 * alike: `--blocks` rounds, each running every algorithm for one untimed call and then `--calls` timed
 * calls back to back. Rank 0 also reads `/proc/stat` around each algorithm's timed calls (the namespaces
 * share it), for the share of the machine's CPUs busy meanwhile and the CPU time a call costs the whole
 * machine. Rank 0 prints `RESULT {json}`: per size and algorithm the slowest rank's median call.
 *
 * @module
 */
import { parseArgs } from "node:util";
import { init } from "../backend/init.ts";
import { type BlockCpu, cpuPerCall, timedBlock } from "./_bare.ts";

const { values: flags } = parseArgs({
  args: Deno.args,
  options: {
    sizes: { type: "string", default: "512K,1M,2M,4M,16M" },
    algorithms: { type: "string", default: "ring,hierarchical" },
    blocks: { type: "string", default: "12" },
    calls: { type: "string", default: "8" },
  },
});
const bytesOf = (s: string): number => Number(s.slice(0, -1)) * (s.endsWith("M") ? 1 << 20 : 1024);
const algorithms = flags.algorithms.split(",");
const blocks = Number(flags.blocks), calls = Number(flags.calls);

await using pg = await init({ timeoutMs: 600_000 });
const rows: { bytes: number; algorithm: string; seconds: number; busy: number; cpuSeconds: number }[] = [];
// Every algorithm's code compiled, and each size's buffers and plans warm, before anything is timed: the
// first size measured otherwise pays for it (a 512 KiB ring took longer than a 1 MiB one).
const warm = new Float32Array(16384);
for (const algorithm of algorithms) for (let i = 0; i < 20; i++) await pg.allReduce(warm, { algorithm });
for (const size of flags.sizes.split(",")) {
  const bytes = bytesOf(size);
  const t = new Float32Array(bytes / 4).fill(1);
  for (const algorithm of algorithms) for (let i = 0; i < 10; i++) await pg.allReduce(t, { algorithm });
  const times = algorithms.map((): number[] => []);
  const cpu = algorithms.map((): BlockCpu => ({ busy: 0, total: 0, seconds: 0 }));
  for (let b = 0; b < blocks; b++) {
    for (const [j, algorithm] of algorithms.entries()) {
      await pg.barrier();
      await pg.allReduce(t, { algorithm });
      await timedBlock(
        () => pg.allReduce(t, { algorithm }).wait(),
        calls,
        times[j],
        pg.rank === 0 ? cpu[j] : undefined,
      );
    }
  }
  const medians = new Float64Array(times.map((ts) => ts.sort((a, b) => a - b)[ts.length >> 1]));
  await pg.allReduce(medians, { op: "max" });
  algorithms.forEach((algorithm, j) => {
    rows.push({ bytes, algorithm, seconds: medians[j], ...cpuPerCall(cpu[j], blocks * calls) });
  });
}
if (pg.rank === 0) console.log(`RESULT ${JSON.stringify({ size: pg.size, rows })}`);
