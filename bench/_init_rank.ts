/**
 * One rank of `bench/init.ts`'s real worlds: the time from before `init()` to the end of the first
 * all-reduce, printed by each rank as `init_ms <ms>`. It imports dcomm from `DCOMM_BENCH_ROOT` (a checkout:
 * this one, or the baseline's), so the same rank runs both trees.
 *
 * @module
 */
const given = Deno.env.get("DCOMM_BENCH_ROOT");
const root = given
  ? `file://${given.endsWith("/") ? given : `${given}/`}`
  : new URL("../", import.meta.url).href;
const t0 = performance.now();
const { init } = await import(new URL("mod.ts", root).href);
const pg = await init();
await pg.allReduce(new Float32Array(1024));
console.log(`init_ms ${(performance.now() - t0).toFixed(1)}`);
await pg.close();
