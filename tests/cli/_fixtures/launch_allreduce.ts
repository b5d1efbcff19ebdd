/**
 * A rank of the launcher's two-node test: joins the world the launcher describes (RANK, WORLD_SIZE,
 * MASTER_ADDR, MASTER_PORT, the store's secret), all-reduces its rank, and prints
 * `RESULT {rank, worldSize, localRank, sum, runId}`.
 *
 * @module
 */
import { init } from "../../../backend/init.ts";

await using pg = await init();
const t = new Int32Array([pg.rank, 1]);
await pg.allReduce(t);
console.log(
  `RESULT ${
    JSON.stringify({
      rank: pg.rank,
      worldSize: pg.size,
      localRank: Number(Deno.env.get("LOCAL_RANK")),
      sum: t[0],
      count: t[1],
      runId: Deno.env.get("DCOMM_RUN_ID"),
    })
  }`,
);
