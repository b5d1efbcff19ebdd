/**
 * `pg.shrink()`: after a rank is SIGKILLed mid-collective, the survivors form a new world of themselves
 * (renumbered in order) through the store, in bounded time, and run collectives in it, over TCP and shared
 * memory; an excluded rank is refused with a clear error while the others go on; bad input.
 */
import assert from "node:assert/strict";
import { init } from "../../backend/init.ts";
import { spawnThreads } from "../../backend/threads.ts";
import { type Rank, startRanks, stopAll, until } from "../_util/processes.ts";

const FIXTURE = new URL("./_fixtures/shrink_rank.ts", import.meta.url).pathname;

function result(r: Rank): Record<string, number> | string | undefined {
  const line = r.lines.find((l) => l.startsWith("RESULT ") || l.startsWith("FAILED "));
  return line === undefined ? undefined : line.startsWith("RESULT ") ? JSON.parse(line.slice(7)) : line;
}

for (const [transport, trial] of ["tcp", "shm"].flatMap((t) => [[t, 1], [t, 2], [t, 3]] as const)) {
  Deno.test(`after a rank is killed the survivors shrink to a world of 3 and go on (${transport}, trial ${trial})`, async () => {
    const ranks = await startRanks(FIXTURE, 4, ["kill"], { DCOMM_TRANSPORT: transport });
    try {
      await until(() => ranks.every((r) => r.lines.includes("STARTED")), 60_000);
      // At a random moment of the loop of all-reduces (each about a millisecond).
      await new Promise((r) => setTimeout(r, 50 + Math.random() * 300));
      ranks[2].child.kill("SIGKILL");
      const survivors = [ranks[0], ranks[1], ranks[3]];
      await until(() => survivors.every((r) => result(r) !== undefined), 30_000);
      const results = survivors.map(result) as Record<string, number>[];
      // Renumbered in order: old 0, 1, 3 are new 0, 1, 2; the sum of their old ranks is 4.
      assert.deepEqual(results.map((r) => [r.old, r.rank, r.size, r.sum]), [[0, 0, 3, 4], [1, 1, 3, 4], [
        3,
        2,
        3,
        4,
      ]]);
      for (const r of results) assert.ok(r.recoverMs < 10_000, `recovered in ${r.recoverMs} ms`);
    } finally {
      await stopAll(ranks);
    }
  });
}

Deno.test("an excluded rank that calls shrink is refused; the others form the world without it", async () => {
  const ranks = await startRanks(FIXTURE, 3, ["exclude", "1"], { DCOMM_TRANSPORT: "tcp" });
  await Promise.all(ranks.map((r) => r.done));
  assert.deepEqual(
    result(ranks[1]),
    "FAILED DistError Cannot shrink: this rank (1) is in exclude; only the others shrink",
  );
  assert.deepEqual(
    [result(ranks[0]), result(ranks[2])].map((
      r,
    ) => [
      (r as Record<string, number>).rank,
      (r as Record<string, number>).size,
      (r as Record<string, number>).sum,
    ]),
    [[0, 2, 2], [1, 2, 2]],
  );
});

Deno.test("shrink refuses bad input: no rank left, ranks out of range, two at once, sub-groups, threads", async () => {
  await using pg = await init({ rank: 0, worldSize: 1, env: {}, transport: "tcp" });
  await assert.rejects(pg.shrink({ exclude: [0] }), /excluding every rank \(1\) leaves no group/);
  await assert.rejects(pg.shrink({ exclude: [3] }), /expected exclude to list ranks in 0\.\.0, found \[3\]/);
  await assert.rejects(pg.shrink({ windowMs: -1 }), /expected windowMs a number of ms > 0, found -1/);
  // Two at once on one rank: the second is refused, the first goes on.
  const first = pg.shrink();
  await assert.rejects(pg.shrink(), /another shrink of this group is running/);
  await (await first).close();
  const sub = await pg.newGroup([0]);
  await assert.rejects(sub.shrink(), /Cannot shrink a sub-group: shrink the world group/);
  const [threads] = await spawnThreads(new URL("./_fixtures/shrink_threads.ts", import.meta.url), {
    worldSize: 1,
  });
  assert.match(String(threads), /Cannot shrink a world of threads/);
});
