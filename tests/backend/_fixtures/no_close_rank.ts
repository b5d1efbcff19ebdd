/**
 * A script that never closes its process group: rank 0 even leaves its last all-reduce un-awaited. The
 * process must still end by itself, and only after that all-reduce is done (rank 1 checks the sum).
 */
import { init } from "../../../backend/init.ts";

const pg = await init();
const t = new Float64Array(1 << 16).fill(pg.rank + 1);
await pg.allReduce(t);
const u = new Float64Array(1 << 16).fill(pg.rank + 1);
const work = pg.allReduce(u);
if (pg.rank === 1) {
  await work;
  console.log(`SUM ${t[0]} ${u[123]}`);
}
