/**
 * Communication progresses on its own thread: an all-reduce issued before a busy loop on the main thread
 * finishes, by the communication thread's own clock, before the loop ends.
 */
import assert from "node:assert/strict";

const LAUNCH = new URL("../../cli/launch.ts", import.meta.url).pathname;
const FIXTURE = new URL("./_fixtures/overlap_rank.ts", import.meta.url).pathname;

for (const transport of ["tcp", "shm"]) {
  Deno.test(`a 64 MiB allReduce progresses during a 2-second busy loop on the main thread (${transport})`, async () => {
    const out = await new Deno.Command(Deno.execPath(), {
      args: ["run", "-A", LAUNCH, "--nproc-per-node", "2", FIXTURE],
      env: { DCOMM_TRANSPORT: transport },
      stdout: "piped",
      stderr: "piped",
    }).output();
    const text = new TextDecoder().decode(out.stdout) + new TextDecoder().decode(out.stderr);
    assert.equal(out.code, 0, text);
    const reports = [...text.matchAll(/OVERLAP (\{.*\})/g)].map((m) => JSON.parse(m[1]));
    assert.equal(reports.length, 2, text);
    for (const r of reports) {
      assert.equal(r.value, 3);
      assert.ok(
        r.finishedAt < r.loopEnd,
        `the all-reduce finished ${r.finishedAt - r.loopEnd} ms after the busy loop ended (started ${
          r.loopEnd - r.startedAt
        } ms before its end)`,
      );
    }
  });
}
