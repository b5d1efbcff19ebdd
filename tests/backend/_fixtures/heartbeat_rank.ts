/**
 * A rank for `heartbeat_test.ts`: an all-reduce, then rank 1 stops itself (SIGSTOP) and the others run a
 * ring all-reduce of 1 MiB with a 3 s timeout; prints `FAILED <message>` or `DONE` (with `ring throw`,
 * the failure ends the rank).
 */
import { init } from "../../../mod.ts";

const pg = await init();
await pg.allReduce(new Float32Array(1 << 18));
await pg.barrier();
if (pg.rank === 1) Deno.kill(Deno.pid, "SIGSTOP");
try {
  await pg.allReduce(new Float32Array(1 << 18), { timeoutMs: 3000, algorithm: Deno.args[0] ?? "ring" });
  console.log("DONE");
} catch (e) {
  if (Deno.args[1] === "throw") throw e;
  console.log(`FAILED ${(e as Error).message.split("\n")[0]}`);
}
Deno.exit(0);
