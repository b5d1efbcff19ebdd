/** A rank for `debug_test.ts`: two all-reduces and a broadcast, under `DCOMM_DEBUG`. */
import { init } from "../../../mod.ts";

await using pg = await init();
await pg.allReduce(new Float32Array(4));
await pg.broadcast(new Float32Array(16), { root: 1 });
try {
  await pg.allReduce(new Float32Array(4), { timeoutMs: 300, algorithm: pg.rank === 0 ? "ring" : "auto" });
} catch { /* the failure's line is what the test reads */ }
