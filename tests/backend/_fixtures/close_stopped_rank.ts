/**
 * A rank of `close_stopped_test.ts`: joins a world whose store a separate process serves (as a launcher's),
 * runs one all-reduce, prints `READY`, and when a line comes on stdin closes the world and prints
 * `CLOSED <ms>`.
 *
 * @module
 */
import { init } from "../../../mod.ts";

const timeoutMs = Number(Deno.env.get("FIXTURE_TIMEOUT_MS") ?? "4000");
const pg = await init({ timeoutMs });
const t = new Float32Array([pg.rank + 1]);
await pg.allReduce(t);
console.log(`READY ${t[0]}`);
const reader = Deno.stdin.readable.getReader();
await reader.read();
reader.releaseLock();
const start = performance.now();
await pg.close();
console.log(`CLOSED ${Math.round(performance.now() - start)}`);
