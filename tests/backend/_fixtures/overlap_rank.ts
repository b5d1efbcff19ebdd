/**
 * Issues a 64 MiB all-reduce without awaiting it, then keeps the main thread busy for 2 s; prints when
 * the loop ended and when the communication thread finished the all-reduce (both Unix epoch ms).
 */
import { init } from "../../../backend/init.ts";

const pg = await init();
const t = new Float32Array(16 << 20).fill(pg.rank + 1);
await pg.barrier();
const work = pg.allReduce(t);
const until = Date.now() + 2000;
let spins = 0;
while (Date.now() < until) spins++;
const loopEnd = Date.now();
const report = await work.wait();
console.log(
  `OVERLAP ${
    JSON.stringify({
      loopEnd,
      finishedAt: report?.finishedAt,
      startedAt: report?.startedAt,
      value: t[12345],
      spins,
    })
  }`,
);
await pg.close();
