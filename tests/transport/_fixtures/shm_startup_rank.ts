/**
 * A rank of the cpu backend for the startup-signal test: writes its pid as a file into
 * `$DCOMM_TEST_PID_DIR` (so the test knows whose `/dev/shm/dcomm-<pid>-*` names to look for), then
 * starts, all-reduces once and closes. It prints `START <ms>` before `init()` and `READY <ms>` after
 * (`Date.now()`), for the test to aim its signals at that window.
 *
 * @module
 */
import { init } from "../../../backend/init.ts";

Deno.writeTextFileSync(`${Deno.env.get("DCOMM_TEST_PID_DIR")}/${Deno.pid}`, "");
console.log(`START ${Date.now()}`);
await using pg = await init();
console.log(`READY ${Date.now()}`);
const t = new Float32Array(4).fill(pg.rank + 1);
await pg.allReduce(t);
console.log(`SUM ${t[0]}`);
