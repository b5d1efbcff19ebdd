/**
 * One rank of `bench/fault_tolerant.ts`. `overhead`: two DistributedDataParallel helpers on one group, the
 * same parameters (4 × 256 Ki float32, 4 MiB of gradients), one plain and one `faultTolerant`, stepped in
 * alternating rounds of `--steps`; the slowest rank's median step of each. `recover`: a `faultTolerant`
 * helper stepping until rank `--kill-rank` SIGKILLs itself at step `--kill-step`; the survivors' median
 * step before, and the step that lost the rank (from its start to the averages over the survivors).
 * The (new) rank 0 prints `RESULT {json}`.
 *
 * @module
 */
import { parseArgs } from "node:util";
import { init } from "../backend/init.ts";
import type { ProcessGroup } from "../backend/process_group.ts";
import { DistributedDataParallel } from "../ddp/mod.ts";

const { values: flags } = parseArgs({
  args: Deno.args,
  options: {
    mode: { type: "string", default: "overhead" },
    steps: { type: "string", default: "50" },
    rounds: { type: "string", default: "5" },
    "kill-rank": { type: "string", default: "2" },
    "kill-step": { type: "string", default: "30" },
  },
});
const STEPS = Number(flags.steps);
await using pg = await init({ timeoutMs: 30_000 });
const params = (): Float32Array[] => Array.from({ length: 4 }, () => new Float32Array(1 << 18).fill(1));
const median = (a: number[]): number => [...a].sort((x, y) => x - y)[Math.floor(a.length / 2)];

async function slowest(group: ProcessGroup, ms: number): Promise<number> {
  const t = new Float64Array([ms]);
  await group.allReduce(t, { op: "max" });
  return t[0];
}

async function step(ddp: DistributedDataParallel<Float32Array>, s: number): Promise<number> {
  const t = performance.now();
  ddp.grads.forEach((g) => g.fill(s % 7));
  for (let i = 3; i >= 0; i--) ddp.gradReady(i);
  await ddp.synchronize();
  return performance.now() - t;
}

if (flags.mode === "overhead") {
  await using plain = await DistributedDataParallel.create(pg, params());
  await using tolerant = await DistributedDataParallel.create(pg, params(), { faultTolerant: true });
  const times = { plain: [] as number[], tolerant: [] as number[] };
  for (let round = 0; round < Number(flags.rounds); round++) {
    for (const which of round % 2 ? ["tolerant", "plain"] as const : ["plain", "tolerant"] as const) {
      const ddp = which === "plain" ? plain : tolerant;
      for (let s = 0; s < STEPS; s++) {
        const ms = await step(ddp, s);
        if (s > 0) times[which].push(ms);
      }
    }
  }
  const plainMs = await slowest(pg, median(times.plain)),
    tolerantMs = await slowest(pg, median(times.tolerant));
  if (pg.rank === 0) console.log(`RESULT ${JSON.stringify({ size: pg.size, plainMs, tolerantMs })}`);
} else {
  await using ddp = await DistributedDataParallel.create(pg, params(), { faultTolerant: true });
  const before: number[] = [];
  let lostMs = 0;
  for (let s = 0; s < STEPS; s++) {
    if (pg.rank === Number(flags["kill-rank"]) && s === Number(flags["kill-step"])) {
      Deno.kill(Deno.pid, "SIGKILL");
    }
    const shrinks = ddp.shrinks.length;
    const ms = await step(ddp, s);
    if (ddp.shrinks.length > shrinks) lostMs = ms;
    else if (ddp.shrinks.length === 0 && s > 0) before.push(ms);
  }
  const group = ddp.pg;
  const stepMs = await slowest(group, median(before)), lost = await slowest(group, lostMs);
  if (group.rank === 0) {
    console.log(`RESULT ${JSON.stringify({ from: pg.size, to: group.size, stepMs, lostStepMs: lost })}`);
  }
  if (group !== pg) await group.close();
}
