/**
 * `pg.revoke()` on 3 ranks: ranks 0 and 2 start an all-reduce of 4 MiB that rank 1 never joins, and queue
 * two more calls behind it; rank 1 revokes the group after 200 ms. Every call of every rank must fail with
 * a RevokedError naming rank 1 and the reason, and later calls too. Returns, per rank, each call's error
 * (name and message) and how long after the revoke the first one failed.
 */
import type { ProcessGroup } from "../../../backend/process_group.ts";

const describe = (e: unknown): string => `${(e as Error).name}: ${(e as Error).message}`;

/** Runs the scenario on this rank. */
export async function main(pg: ProcessGroup): Promise<unknown> {
  const errors: string[] = [];
  const t0 = performance.now();
  if (pg.rank === 1) {
    await new Promise((r) => setTimeout(r, 200));
    pg.revoke("rank 1 saw a peer die");
  } else {
    const works = [
      pg.allReduce(new Float32Array(1 << 20)),
      pg.broadcast(new Float32Array(16)),
      pg.barrier(),
    ];
    for (const w of works) {
      try {
        await w.wait();
        errors.push("no error");
      } catch (e) {
        errors.push(describe(e));
      }
    }
  }
  const failedAfterMs = performance.now() - t0 - 200;
  try {
    await pg.allReduce(new Float32Array(4)).wait();
    errors.push("no error");
  } catch (e) {
    errors.push(describe(e));
  }
  return { rank: pg.rank, errors, failedAfterMs };
}

if (import.meta.main) {
  const { init } = await import("../../../backend/init.ts");
  const pg = await init({ timeoutMs: 30_000 });
  console.log(`RESULT ${JSON.stringify(await main(pg))}`);
  await pg.close().catch(() => {});
}
