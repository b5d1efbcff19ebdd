/**
 * A rank of the launcher-death tests. It joins the world (`init()`, which watches the launcher named by
 * `DCOMM_LAUNCHER_PID`), then, as the first argument says:
 * - `sleep` (default): writes its pid to `$PID_DIR/<rank>` (whole, then renamed) and sleeps a minute;
 * - `stdin`: reads all of its stdin and prints `STDIN <bytes>`, then closes its group and ends;
 * - `exit`: closes its group and ends (nothing may keep it alive).
 *
 * @module
 */
import { init } from "../../../backend/init.ts";

const mode = Deno.args[0] ?? "sleep";
const pg = await init({ timeoutMs: 30_000 });
if (mode === "sleep") {
  const dir = Deno.env.get("PID_DIR");
  Deno.writeTextFileSync(`${dir}/.${pg.rank}.tmp`, String(Deno.pid));
  Deno.renameSync(`${dir}/.${pg.rank}.tmp`, `${dir}/${pg.rank}`);
  await new Promise((r) => setTimeout(r, 60_000));
} else if (mode === "stdin") {
  let bytes = 0;
  for await (const chunk of Deno.stdin.readable) bytes += chunk.length;
  console.log(`STDIN ${bytes}`);
}
await pg.close();
