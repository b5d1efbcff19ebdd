/**
 * A rank of the hybrid-transport test, run by the launcher with `DCOMM_HOST_ID` set per rank by
 * `DCOMM_HOST_OF` ("a,a,b,b": rank r's host): all-reduces with "auto" and with "hierarchical" and
 * "ring", int32 (exact) and float32, and prints `RESULT {json}` with what ran.
 *
 * @module
 */
import { init } from "../../../backend/init.ts";
import { applyHostOf } from "../../_util/launched.ts";

applyHostOf();
await using pg = await init();
const n = pg.size;
const out: Record<string, unknown> = { rank: pg.rank };
const wrong: string[] = [];
for (
  const [algorithm, count] of [["auto", 1 << 20], ["hierarchical", 1000], ["ring", 1000], [
    "auto",
    10,
  ]] as const
) {
  const t = new Int32Array(count).map((_, j) => pg.rank * 1000 + j);
  const report = await pg.allReduce(t, { algorithm }).wait();
  for (let j = 0; j < count; j++) {
    const want = 1000 * (n * (n - 1)) / 2 + n * j;
    if (t[j] !== want) {
      wrong.push(`${algorithm} ${count}: [${j}] ${t[j]} != ${want}`);
      break;
    }
  }
  out[`${algorithm}/${count}`] = { algorithm: report?.algorithm, transport: report?.transport };
}
out.wrong = wrong;
console.log(`RESULT ${JSON.stringify(out)}`);
