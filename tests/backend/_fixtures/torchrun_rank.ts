/**
 * A rank under the real torchrun (`tests/backend/torchrun_test.ts`): joins through `init()` with nothing set
 * by hand, all-reduces its rank + 1 and prints `RESULT {json}`. `crash-once`: rank 1 fails on attempt 0
 * (torchrun restarts the ranks as attempt 1, which completes); `fail`: rank 1 fails on every attempt.
 *
 * @module
 */
import { init } from "../../../backend/init.ts";

const mode = Deno.args[0] ?? "";
const attempt = Number(Deno.env.get("TORCHELASTIC_RESTART_COUNT") ?? "0");
const pg = await init();
const sum = new Float64Array([pg.rank + 1]);
await pg.allReduce(sum);
if (pg.rank === 1 && (mode === "fail" || (mode === "crash-once" && attempt === 0))) {
  throw new Error(`deliberate failure of rank 1 on attempt ${attempt}`);
}
await pg.barrier();
console.log("RESULT " + JSON.stringify({ rank: pg.rank, size: pg.size, attempt, sum: sum[0] }));
await pg.close();
