/**
 * One rank of `deno task bench:collectives` (started by bench/collectives.ts: under dcomm's launcher on the
 * cpu backend, under mpiexec on the mpi backend): the harness's sweep of one collective (`_harness.ts`),
 * host tensors timed call by call, awaited; rank 0 prints nccl-tests' table and a `RESULTS` line of the
 * JSON rows. Exits 1 on any wrong element.
 *
 * @module
 */
import { init } from "../backend/init.ts";
import { type BenchConfig, describeRun } from "./_collectives_common.ts";
import { collective } from "./_descriptors.ts";
import { hostDevice, runSweep, sweepSizes } from "./_harness.ts";
import { tableHeader, tableRow } from "./_rows.ts";

const config = JSON.parse(Deno.args[0]) as BenchConfig;
const descriptor = collective(config.collective);
const sizes = sweepSizes(config.minBytes, config.maxBytes, config.factor);
// The pool holds one size's tensors (an out-of-place collective's two), in whole 64 KiB pages: the largest
// of the sweep and of the JIT warm-up (256 KiB).
const largest = Math.max(...sizes, config.jitWarmup > 0 ? 262144 : 0);
const poolBytes = Math.ceil((2 * largest + 65536) / 65536) * 65536;
await using pg = await init({
  backend: config.backend,
  checkCalls: config.checkCalls,
  deterministic: config.deterministic ?? false,
  ...(config.pool ? { segment: { poolBytes } } : {}),
});
const transport = (pg as { transport?: string }).transport ?? pg.backend;
const leader = pg.rank === 0;
if (leader) {
  console.log(describeRun(config, pg.size, transport));
  console.log(tableHeader());
}
const results = await runSweep(pg, descriptor, {
  sizes,
  iters: config.iters,
  warmup: config.warmup,
  check: config.check,
  rounds: config.rounds,
  dtype: config.dtype,
  op: config.op,
  root: config.root,
  algorithm: config.algorithm,
  algorithmLabel: config.backend === "mpi" ? "mpi" : config.algorithm,
  transport,
  firstWarmup: config.firstWarmup,
  jitWarmup: config.jitWarmup,
  device: hostDevice(pg, { pool: config.pool }),
  onSize: ([row]) => {
    if (leader) console.log(tableRow([row]));
  },
});
const rows = results.map(([row]) => row);
if (leader) console.log("RESULTS " + JSON.stringify(rows));
if (rows.some((r) => r.wrong > 0)) Deno.exitCode = 1;
