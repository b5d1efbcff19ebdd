/**
 * A rank on the emulated cluster: an all-reduce through "auto" and one through "hierarchical", int32
 * (exact), printing `RESULT {json}` with the transport, the algorithms and whether the sums were right;
 * `--fail-on-host H` makes the ranks of host H exit 1 instead, `--hang` keeps every rank alive afterwards
 * (for the teardown tests).
 *
 * @module
 */
import { init } from "../../../backend/init.ts";

const failOn = Deno.args.indexOf("--fail-on-host");
if (failOn >= 0 && Deno.env.get("GROUP_RANK") === Deno.args[failOn + 1]) {
  console.log("failing on purpose");
  Deno.exit(1);
}
await using pg = await init();
const n = pg.size;
const result: Record<string, unknown> = { rank: pg.rank };
let right = true;
for (const algorithm of ["auto", "hierarchical"]) {
  const t = new Int32Array(1 << 16).map((_, j) => pg.rank + j);
  const report = await pg.allReduce(t, { algorithm }).wait();
  right &&= t.every((v, j) => v === (n * (n - 1)) / 2 + n * j);
  result[algorithm] = report?.algorithm;
  result.transport = report?.transport;
}
result.right = right;
console.log(`RESULT ${JSON.stringify(result)}`);
if (Deno.args.includes("--hang")) {
  console.log("waiting until stopped");
  await new Promise(() => setInterval(() => {}, 1000));
}
