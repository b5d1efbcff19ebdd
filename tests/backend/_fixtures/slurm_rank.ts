/**
 * A task of the Slurm tests, started by `srun deno run -A slurm_rank.ts <mode>` with nothing set by hand
 * (no MASTER_ADDR, MASTER_PORT, RANK or WORLD_SIZE). Modes:
 * - `info`: joins the world, all-reduces rank + 1 and prints `RESULT {json}`: what `rankInfo` read, the
 *   node srun ran it on (`SLURMD_NODENAME`), the job and step ids, the group's rank and size and the sum.
 * - `die`: all-reduces 256 KiB in a loop, printing `STARTED <rank>` after the first; on the 20th call rank
 *   2 starts the call and kills itself (SIGKILL). Every other rank prints `FAILED <rank> <name> <message>`
 *   when its call fails.
 *
 * @module
 */
import { init } from "../../../backend/init.ts";
import { rankInfo } from "../../../backend/env.ts";

const mode = Deno.args[0];
const info = rankInfo(Deno.env.toObject());
const pg = await init({ timeoutMs: 60_000 });
if (mode === "info") {
  const t = new Float64Array([pg.rank + 1]);
  await pg.allReduce(t, { op: "sum" });
  const [node, job, step] = ["SLURMD_NODENAME", "SLURM_JOB_ID", "SLURM_STEP_ID"].map((v) => Deno.env.get(v));
  console.log("RESULT " + JSON.stringify({ info, node, job, step, rank: pg.rank, size: pg.size, sum: t[0] }));
} else if (mode === "die") {
  const t = new Float32Array(64 << 10).fill(1);
  try {
    for (let i = 0;; i++) {
      const work = pg.allReduce(t);
      if (i === 20 && pg.rank === 2) Deno.kill(Deno.pid, "SIGKILL");
      await work;
      if (i === 0) console.log(`STARTED ${pg.rank}`);
    }
  } catch (e) {
    console.log(`FAILED ${pg.rank} ${(e as Error).name} ${(e as Error).message.replaceAll("\n", " ")}`);
  }
} else {
  throw new TypeError(`Unknown mode: expected "info" or "die", found "${mode}"`);
}
await pg.close().catch(() => {});
