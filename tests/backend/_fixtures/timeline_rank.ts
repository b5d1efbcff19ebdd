/**
 * A rank for `timeline_test.ts` (`DCOMM_TIMELINE` set by the test): three rounds of a small all-reduce,
 * a 1 MiB all-reduce and a broadcast (the last two in flight together); with `die`, rank 2 then exits
 * without closing, so the others cannot gather the timeline; with `codec`, two int8-compressed 1 MiB
 * all-reduces instead (run over TCP by the test).
 */
import { init } from "../../../mod.ts";

const pg = await init();
if (Deno.args[0] === "codec") {
  for (let i = 0; i < 2; i++) {
    await pg.allReduce(new Float32Array(1 << 18), { compression: { codec: "int8" } });
  }
  await pg.close();
  Deno.exit(0);
}
for (let i = 0; i < 3; i++) {
  await pg.allReduce(new Float32Array(4));
  const w = pg.allReduce(new Float32Array(1 << 18));
  const b = pg.broadcast(new Float32Array(1 << 16), { root: 1 });
  await w;
  await b;
}
if (Deno.args[0] === "die" && pg.rank === 2) Deno.exit(0);
await pg.close();
