/**
 * Process lifetime: the communication thread keeps a rank alive only while calls are pending, so a script
 * that never closes its group still ends — and not before its un-awaited calls are done.
 */
import assert from "node:assert/strict";

const LAUNCH = new URL("../../cli/launch.ts", import.meta.url).pathname;
const FIXTURE = new URL("./_fixtures/no_close_rank.ts", import.meta.url).pathname;

for (const transport of ["tcp", "shm"]) {
  Deno.test(`a script that never closes its group ends once its calls are done (${transport})`, async () => {
    const t0 = Date.now();
    const out = await new Deno.Command(Deno.execPath(), {
      args: ["run", "-A", LAUNCH, "--nproc-per-node", "2", FIXTURE],
      env: { DCOMM_TRANSPORT: transport },
      stdout: "piped",
      stderr: "piped",
      signal: AbortSignal.timeout(60_000),
    }).output();
    const text = new TextDecoder().decode(out.stdout) + new TextDecoder().decode(out.stderr);
    assert.equal(out.code, 0, text);
    assert.match(text, /\[rank1\]: SUM 3 3/);
    assert.ok(Date.now() - t0 < 30_000, `the ranks took ${Date.now() - t0} ms to end`);
  });
}
