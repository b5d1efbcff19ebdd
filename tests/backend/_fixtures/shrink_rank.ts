/**
 * A rank of the shrink tests, started directly (`tests/_util/processes.ts`; rank 0 serves the store).
 * `kill`: all-reduces of 1 MiB in a loop, printing `STARTED` after the first; the test kills one rank; the
 * others catch the failure, `shrink()`, and all-reduce their old ranks in the new world. `exclude N`: no
 * failure; every rank passes `exclude: [N]`, so rank N is refused and the others form a world without it.
 * Prints `RESULT {json}` (old rank, new rank and size, the sum, ms from the failure to the new world's first
 * call done) or `FAILED <name> <message>`.
 */
import { init } from "../../../backend/init.ts";

const [mode, arg] = Deno.args;
const pg = await init({ timeoutMs: 20_000 });
const old = pg.rank;
try {
  let failedAt = performance.now();
  if (mode === "kill") {
    const t = new Float32Array(1 << 18);
    try {
      for (let i = 0;; i++) {
        await pg.allReduce(t).wait();
        if (i === 0) console.log("STARTED");
      }
    } catch {
      failedAt = performance.now();
    }
  }
  const exclude = mode === "exclude" ? [Number(arg)] : undefined;
  const next = await pg.shrink({ exclude, windowMs: 3_000 });
  const sum = new Float32Array([old]);
  await next.allReduce(sum).wait();
  const recoverMs = performance.now() - failedAt;
  console.log(`RESULT ${JSON.stringify({ old, rank: next.rank, size: next.size, sum: sum[0], recoverMs })}`);
  await next.close();
} catch (e) {
  console.log(`FAILED ${(e as Error).name} ${(e as Error).message}`);
}
await pg.close().catch(() => {});
Deno.exit(0);
