/**
 * `pg.revoke()`: every call in flight or queued fails at once with a RevokedError on every rank, naming
 * the revoking rank and its reason, and every later call too, on threads (in-process rings) and on
 * processes over TCP and shared memory; the mpi and nccl backends refuse it with the reason.
 */
import assert from "node:assert/strict";
import { spawnThreads } from "../../backend/threads.ts";
import { launchedResults } from "../_util/launched.ts";

const FIXTURE = new URL("./_fixtures/revoke_rank.ts", import.meta.url);
const REVOKED = /^RevokedError: Group 0 revoked by rank 1: rank 1 saw a peer die$/;

function check(unordered: { rank: number; errors: string[]; failedAfterMs: number }[], where: string): void {
  const results = [...unordered].sort((a, b) => a.rank - b.rank);
  assert.equal(results[1].errors.length, 1, where);
  for (const [rank, r] of results.entries()) {
    for (const e of r.errors) assert.match(e, REVOKED, `${where}, rank ${rank}`);
    if (rank !== 1) {
      assert.equal(r.errors.length, 4, where);
      assert.ok(
        r.failedAfterMs < 5_000,
        `${where}, rank ${rank}: failed ${r.failedAfterMs} ms after the revoke`,
      );
    }
  }
}

Deno.test("revoke fails every rank's calls in flight, queued and later with a RevokedError (threads)", async () => {
  check(await spawnThreads(FIXTURE, { worldSize: 3, timeoutMs: 60_000 }) as never, "threads");
});

Deno.test("revoke fails every rank's calls over TCP and shared memory processes", async () => {
  for (const transport of ["tcp", "shm"]) {
    check(await launchedResults(FIXTURE.pathname, 3, { DCOMM_TRANSPORT: transport }, 60_000), transport);
  }
});
