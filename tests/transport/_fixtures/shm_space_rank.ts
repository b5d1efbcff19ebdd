/**
 * A rank of the cpu backend for the `/dev/shm` space tests: all-reduces 4 MiB (several chunks of a
 * shrunk segment's buffers) and a few bytes, checks the sums and prints `SUM <value> <ok>`.
 *
 * @module
 */
import { init } from "../../../backend/init.ts";

await using pg = await init();
const big = new Float32Array(1 << 20).fill(pg.rank + 1);
const small = new Float32Array(3).fill(pg.rank + 1);
await pg.allReduce(big);
await pg.allReduce(small);
const expected = (pg.size * (pg.size + 1)) / 2;
console.log(`SUM ${small[0]} ${big.every((v) => v === expected) && small.every((v) => v === expected)}`);
