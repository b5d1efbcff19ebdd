/**
 * A rank of the fault-tolerant DDP test, started directly (`tests/_util/processes.ts`): `steps` steps of
 * DDP with `faultTolerant`, each rank's gradients seeded multiples of 1/64 (exact averages over 2 or 4
 * ranks, within one rounding over 3), printing `STARTED` after the first step; the test kills a rank. Each
 * step checks the averages against the exact ones over the group's members at that step (after a shrink,
 * the survivors, by their old ranks). Prints `RESULT {json}`.
 */
import { init } from "../../../backend/init.ts";
import { DistributedDataParallel } from "../../../ddp/mod.ts";

const LENGTHS = [3000, 40, 70000, 10, 5];
const grad = (r: number, i: number, j: number, s: number): number =>
  (((r * 131 + i * 31 + j * 7 + s * 17) % 1024) - 512) / 64;

const steps = Number(Deno.args[0] ?? "40");
const pg = await init({ timeoutMs: 20_000 });
const old = pg.rank;
const params = LENGTHS.map((n) => new Float32Array(n));
await using ddp = await DistributedDataParallel.create(pg, params, { faultTolerant: true, bucketMb: 0.1 });
let members = Array.from({ length: pg.size }, (_, r) => r);
const wrong: string[] = [];
const shrunkAt: number[] = [];
for (let s = 0; s < steps; s++) {
  ddp.grads.forEach((g, i) => {
    for (let j = 0; j < g.length; j++) g[j] = grad(old, i, j, s);
  });
  for (let i = LENGTHS.length - 1; i >= 0; i--) ddp.gradReady(i);
  const step = await ddp.synchronize();
  if (step.shrunk) {
    // (No collective of its own here: the ranks that completed the failed step see the shrink one step later.)
    shrunkAt.push(s);
    members = step.shrunk.members.map((r) => members[r]);
  }
  ddp.grads.forEach((g, i) => {
    for (let j = 0; j < g.length && wrong.length < 3; j += 97) {
      const exact = members.reduce((sum, r) => sum + grad(r, i, j, s), 0) / members.length;
      if (Math.abs(g[j] - exact) > 2 ** -20 * Math.abs(exact)) {
        wrong.push(`step ${s} grad ${i}[${j}] = ${g[j]}, expected ${exact}`);
      }
    }
  });
  if (s === 0) console.log("STARTED");
  await new Promise((r) => setTimeout(r, 5)); // the forward and backward passes
}
console.log(
  `RESULT ${JSON.stringify({ old, members, wrong, shrunkAt, shrinks: ddp.shrinks, size: ddp.pg.size })}`,
);
await ddp.pg.close().catch(() => {});
Deno.exit(0);
