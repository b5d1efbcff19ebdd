/**
 * `commDtype`: a float32 all-reduce that travels and sums as float16 or bfloat16, cast down and back on the
 * communication thread: results within the bound of the narrow dtype (exact where they must be), reports
 * that count 2 bytes per element, overflow-safe averages, the ranks' disagreement caught, and bad
 * requests refused. On threads (in-process transport) and on processes (the host segment).
 */
import assert from "node:assert/strict";
import { spawnThreads } from "../../backend/threads.ts";
import { init } from "../../backend/init.ts";
import { launchedResults } from "../_util/launched.ts";

const FIXTURE = new URL("./_fixtures/narrow_rank.ts", import.meta.url);

interface Result {
  failures: string[];
  reports: { commDtype: string; op: string; count: number; bytes: number; algorithm: string }[];
  exact: boolean;
  overflowSafe: boolean;
}

function check(results: Result[], ranks: number): void {
  for (const r of results) {
    assert.deepEqual(r.failures, []);
    for (const rep of r.reports) assert.equal(rep.bytes, rep.count * 2, JSON.stringify(rep));
    assert.equal(r.overflowSafe, true);
    if (ranks === 2) assert.equal(r.exact, true, "float16 over 2 ranks is exact for these inputs");
  }
}

for (const ranks of [2, 3]) {
  Deno.test(`commDtype float16/bfloat16 on ${ranks} threads: within the narrow dtype's bound, 2 bytes an element`, async () => {
    const results = (await spawnThreads(FIXTURE, { worldSize: ranks, timeoutMs: 30_000 })) as Result[];
    check(results, ranks);
  });
}

Deno.test("commDtype on 2 processes through the host segment", async () => {
  const results = await launchedResults<Result>(FIXTURE.pathname, 2, { DCOMM_TRANSPORT: "shm" });
  check(results, 2);
  for (const r of results) {
    assert.ok(r.reports.every((rep) => rep.algorithm === "segment"), JSON.stringify(r.reports));
  }
});

Deno.test("a rank that sends float32 where the others send float16 fails every rank, naming both calls", async () => {
  const results = (await spawnThreads(FIXTURE, {
    worldSize: 3,
    args: { scenario: "mismatch" },
    timeoutMs: 30_000,
  })) as { caught: string; mismatch: boolean }[];
  for (const r of results) assert.notEqual(r.caught, "no error");
  const detail = results.find((r) => r.mismatch);
  assert.ok(detail, results.map((r) => r.caught).join("\n"));
  assert.match(
    detail.caught,
    /allReduce\(1000 × float(16|32).* but rank \d called allReduce\(1000 × float(16|32)/,
  );
});

Deno.test("commDtype is refused where it does not apply, naming what it takes", async () => {
  await using pg = await init({ rank: 0, worldSize: 1, env: {} });
  assert.throws(
    () => pg.allReduce(new Float64Array(4), { commDtype: "float16" }),
    /^TypeError: Cannot all-reduce: commDtype must be the tensor's own dtype for a float64 tensor, found "float16"/,
  );
  assert.throws(
    () => pg.allReduce(new Float32Array(4), { commDtype: "int8" }),
    /commDtype must be one of float16, bfloat16 \(or float32\) for a float32 tensor, found "int8"/,
  );
  assert.throws(
    () => pg.reduce(new Float32Array(4), { commDtype: "float16" }),
    /commDtype is an option of allReduce only/,
  );
  // The tensor's own dtype is no narrowing at all.
  const t = new Float32Array([1, 2]);
  await pg.allReduce(t, { commDtype: "float32" });
  assert.deepEqual([...t], [1, 2]);
});
