/**
 * A rank of the IPv6 tests: joins the world (`init()` with the init method and transport given as
 * arguments, else `env://` and `DCOMM_TRANSPORT` or "auto"), all-reduces `rank + 1`, and prints
 * `RESULT {rank, size, sum}`.
 *
 * @module
 */
import { init } from "../../../backend/init.ts";

const [initMethod, transport] = Deno.args;
await using pg = await init({
  initMethod: initMethod || undefined,
  transport: (transport || "auto") as "auto" | "tcp" | "shm",
  segment: transport === "tcp" ? false : undefined,
  timeoutMs: 20_000,
});
const t = new Int32Array([pg.rank + 1]);
await pg.allReduce(t);
console.log(`RESULT ${JSON.stringify({ rank: pg.rank, size: pg.size, sum: t[0] })}`);
