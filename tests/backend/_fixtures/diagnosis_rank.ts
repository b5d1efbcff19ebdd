/**
 * One rank of the diagnosis tests (`../diagnosis_test.ts`), from the environment (RANK, WORLD_SIZE,
 * MASTER_ADDR, MASTER_PORT, ...). Modes (first argument):
 * - `init`: `init({ timeoutMs: DIAG_TIMEOUT_MS })` and close; prints `FORMED`, or `FAILED <json>`.
 * - `joinOnly`: joins the rendezvous and never connects (a rank that hangs right after it), for 8 s.
 * - `mismatch <variant>`: rank 1 makes another call than the others (`count`, `dtype`, `collective`); the
 *   failure is printed as `FAILED <json>`, then each later use of the group (a small and a large
 *   all-reduce, a barrier, `newGroup`) as `AGAIN <json>`.
 * - `sum`: an all-reduce of `rank + 1` under `DIAG_STORE_PREFIX` (the `storePrefix` option, when set);
 *   prints `SUM <value>`.
 *
 * A failure is `{ name, message, ms }`: its class, its message and how long after the call it came.
 *
 * @module
 */
import { init } from "../../../backend/init.ts";
import { Rendezvous } from "../../../backend/_rendezvous.ts";

const [mode, variant = "count"] = Deno.args;
const timeoutMs = Number(Deno.env.get("DIAG_TIMEOUT_MS") ?? 20_000);

function failure(e: unknown, t0: number): string {
  const error = e as Error;
  return JSON.stringify({ name: error.name, message: error.message, ms: Math.round(performance.now() - t0) });
}

if (mode === "joinOnly") {
  const rendezvous = await Rendezvous.join({ timeoutMs });
  await new Promise((resolve) => setTimeout(resolve, 8000));
  await rendezvous.abandon();
} else if (mode === "init") {
  const t0 = performance.now();
  try {
    const pg = await init({ timeoutMs });
    console.log("FORMED");
    await pg.close();
  } catch (e) {
    console.log(`FAILED ${failure(e, t0)}`);
  }
} else if (mode === "sum") {
  const storePrefix = Deno.env.get("DIAG_STORE_PREFIX");
  const pg = await init({ timeoutMs, ...(storePrefix ? { storePrefix } : {}) });
  const t = new Float32Array([pg.rank + 1]);
  await pg.allReduce(t);
  console.log(`SUM ${t[0]}`);
  await pg.close();
} else if (mode === "mismatch") {
  const pg = await init({ timeoutMs });
  const odd = pg.rank === 1;
  const n = odd && variant === "count" ? 4096 : 1024;
  const t = odd && variant === "dtype" ? new Int32Array(n) : new Float32Array(n);
  let t0 = performance.now();
  try {
    if (odd && variant === "collective") await pg.broadcast(t, { root: 0 });
    else await pg.allReduce(t, { algorithm: "ring" });
    console.log("DONE");
  } catch (e) {
    console.log(`FAILED ${failure(e, t0)}`);
  }
  const later: [string, () => PromiseLike<unknown>][] = [
    ["small", () => pg.allReduce(new Float32Array(16))],
    ["large", () => pg.allReduce(new Float32Array(1 << 22))],
    ["barrier", () => pg.barrier()],
    ["newGroup", () => pg.newGroup([0, 1, 2])],
  ];
  for (const [what, call] of later) {
    t0 = performance.now();
    try {
      await call();
      console.log(`AGAIN ${JSON.stringify({ what, ok: true })}`);
    } catch (e) {
      console.log(`AGAIN ${JSON.stringify({ what, ...JSON.parse(failure(e, t0)) })}`);
    }
  }
  await pg.close().catch(() => {});
}
