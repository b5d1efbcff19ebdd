/**
 * A rank killed during `model.fit()`: every other rank's fit fails within seconds, naming the dead rank
 * (ranks as processes, started directly so that no launcher stops the survivors itself).
 */
import assert from "node:assert/strict";
import { type Rank, startRanks, stopAll, until } from "../_util/processes.ts";

const FIXTURE = new URL("./_fixtures/fit_rank.ts", import.meta.url).pathname;

for (const transport of ["shm", "tcp"]) {
  Deno.test(`a rank killed during model.fit() fails every other rank's fit, naming it (${transport})`, async () => {
    const ranks = await startRanks(FIXTURE, 3, [], { DCOMM_TRANSPORT: transport });
    try {
      await until(() => ranks.every((r) => r.lines.includes("STARTED")), 60_000);
      await new Promise((r) => setTimeout(r, 300));
      const killedAt = Date.now();
      ranks[2].child.kill("SIGKILL");
      const survivors = [ranks[0], ranks[1]];
      const failed = (r: Rank) => r.lines.find((l) => l.startsWith("FAILED "));
      await until(() => survivors.every((r) => failed(r) !== undefined), 30_000);
      assert.ok(Date.now() - killedAt < 10_000, `the survivors took ${Date.now() - killedAt} ms to fail`);
      for (const r of survivors) {
        const m = /^FAILED (\S+) (\d+) (.*)$/.exec(failed(r) as string);
        assert.ok(m, failed(r));
        assert.match(m[1], /TransportError|DistError/, m[0]);
        assert.match(m[3], /[Rr]ank 2\b/, `the error does not name the dead rank: ${m[0]}`);
      }
    } finally {
      await stopAll(ranks);
    }
  });
}
