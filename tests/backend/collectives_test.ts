/**
 * The CPU backend end to end: every collective × algorithm × world size × count × dtype × op (see
 * `_fixtures/collectives.ts` for the matrix) on real ranks — threads over the in-process transport, and
 * processes started by the launcher over TCP and shared memory — checked against expected values by
 * formula, with every rank required to hold the same bits.
 */
import assert from "node:assert/strict";
import { spawnThreads } from "../../backend/threads.ts";
import type { RankResult } from "./_fixtures/collectives.ts";
import { checkResults } from "../_util/collective_results.ts";

const FIXTURE = new URL("./_fixtures/collectives.ts", import.meta.url);
const LAUNCH = new URL("../../cli/launch.ts", import.meta.url);

for (const size of [1, 2, 3, 4, 5, 8]) {
  const profile = size === 4 ? "sweep,big" : "sweep";
  Deno.test(`CPU backend runs every collective on ${size} threads over inproc (${profile})`, async () => {
    const results = await spawnThreads(FIXTURE, { worldSize: size, args: { profile }, timeoutMs: 120_000 });
    checkResults(results as RankResult[], size);
  });
}

async function launched(
  size: number,
  transport: string,
  profile: string,
  env: Record<string, string> = {},
): Promise<RankResult[]> {
  const out = await new Deno.Command(Deno.execPath(), {
    args: ["run", "-A", LAUNCH.pathname, "--nproc-per-node", String(size), FIXTURE.pathname, profile],
    env: { DCOMM_TRANSPORT: transport, ...env },
    stdout: "piped",
    stderr: "piped",
  }).output();
  const text = new TextDecoder().decode(out.stdout) + new TextDecoder().decode(out.stderr);
  assert.equal(out.code, 0, `the launcher exited with ${out.code}:\n${text.slice(-3000)}`);
  return text.split("\n")
    .map((l) => /^\[rank\d+\]: RESULT (.*)$/.exec(l))
    .filter((m): m is RegExpExecArray => m !== null)
    .map((m) => JSON.parse(m[1]) as RankResult)
    .sort((a, b) => a.rank - b.rank);
}

// Every world size over both process transports; the dtype × op sweep at 3 ranks, the million-element
// calls at one size each (the in-thread matrix above and tests/collectives/ cover the rest of the cross
// product at every size).
const PROCESS_CASES: readonly (readonly [string, number, string])[] = [
  ...[1, 2, 3, 4, 5, 8].map((n) => ["tcp", n, n === 3 ? "sweep,big" : ""] as const),
  ...[1, 2, 3, 4, 5, 8].map((n) =>
    ["shm", n, n === 2 || n === 4 ? "big" : n === 3 ? "sweep,big" : ""] as const
  ),
];
/** dcomm's objects in /dev/shm (inboxes with their segment areas). */
function shmObjects(): string[] {
  return [...Deno.readDirSync("/dev/shm")].map((e) => e.name).filter((n) => n.startsWith("dcomm-")).sort();
}

for (const [transport, size, profile] of PROCESS_CASES) {
  Deno.test(`CPU backend runs every collective on ${size} processes over ${transport} (${profile || "base"})`, async () => {
    const before = shmObjects();
    const results = await launched(size, transport, profile);
    assert.deepEqual(shmObjects(), before, "a run left objects in /dev/shm");
    checkResults(results, size);
    // Over shared memory "auto" runs through the host segment; elsewhere it never can.
    const segmentCalls = results[0].algorithms["segment"] ?? 0;
    if (transport === "shm" && size > 1) assert.ok(segmentCalls > 0, JSON.stringify(results[0].algorithms));
    if (transport !== "shm") assert.equal(segmentCalls, 0);
  });
}

Deno.test("CPU backend runs every collective on 5 processes over tcp with lazily connected pairs", async () => {
  // Every algorithm's peers connect when first used (DCOMM_TCP_CONNECTIONS=lazy), in whatever order.
  const results = await launched(5, "tcp", "sweep", { DCOMM_TCP_CONNECTIONS: "lazy" });
  checkResults(results, 5);
});

Deno.test("CPU backend runs every collective on 3 processes over shm with the segment turned off", async () => {
  const results = await launched(3, "shm", "", { DCOMM_SEGMENT: "0" });
  checkResults(results, 3);
  assert.equal(results[0].algorithms["segment"], undefined, JSON.stringify(results[0].algorithms));
});
