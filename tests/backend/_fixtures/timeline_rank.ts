/**
 * A rank for `timeline_test.ts` (`DCOMM_TIMELINE` set by the test): three rounds of a small all-reduce,
 * a 1 MiB all-reduce and a broadcast (the last two in flight together); with `die`, rank 2 then exits
 * without closing, so the others cannot gather the timeline.
 */
import { init } from "../../../mod.ts";

const pg = await init();
for (let i = 0; i < 3; i++) {
  await pg.allReduce(new Float32Array(4));
  const w = pg.allReduce(new Float32Array(1 << 18));
  const b = pg.broadcast(new Float32Array(1 << 16), { root: 1 });
  await w;
  await b;
}
if (Deno.args[0] === "die" && pg.rank === 2) Deno.exit(0);
await pg.close();
