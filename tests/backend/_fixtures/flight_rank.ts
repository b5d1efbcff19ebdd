/**
 * A rank for the flight recorder's tests (`flight_test.ts`), with `DCOMM_TRACE_DIR` set by the test: five
 * collectives, seq 1–5, the last two with a 3 s timeout, and one fault by mode:
 * - `skip`: rank 2 skips the barrier of seq 4 (its seq 4 is the others' seq 5, an all-reduce);
 * - `stop`: rank 1 stops itself (SIGSTOP) before seq 5, so the others time out in it;
 * - `dtype`: rank 1 passes int32 to the all-reduce of seq 5, the others float32;
 * - `none`: no fault; each rank ends with `pg.dump()`.
 * Prints `FAILED <message>` when a call fails (the recorder wrote the dump then), else `DONE`.
 */
import { init } from "../../../mod.ts";

const mode = Deno.args[0] ?? "none";
const pg = await init();
const t = new Float32Array(256).fill(pg.rank + 1);
try {
  await pg.allReduce(t); // seq 1
  await pg.barrier(); // seq 2
  await pg.broadcast(t, { root: 0 }); // seq 3
  // Rank 2 comes late to what it calls next, so that the others are in seq 4 when it does.
  if (mode === "skip" && pg.rank === 2) await new Promise((r) => setTimeout(r, 300));
  else await pg.barrier({ timeoutMs: 3000 }); // seq 4
  if (mode === "stop" && pg.rank === 1) Deno.kill(Deno.pid, "SIGSTOP");
  const x = mode === "dtype" && pg.rank === 1 ? new Int32Array(256) : new Float32Array(256);
  await pg.allReduce(x, { timeoutMs: 3000 }); // seq 5
  if (mode === "none") pg.dump();
  console.log("DONE");
} catch (e) {
  console.log(`FAILED ${(e as Error).message.split("\n")[0]}`);
}
// Not closing: the peers may be stopped or gone (the test ends every process).
Deno.exit(0);
