/**
 * The calling thread's path for small sums through the host segment (`backend/cpu/_segment_small.ts`), on
 * processes started by the launcher: the kernels' bits for every dtype and op it takes, on 2 and 3 ranks;
 * the general pipeline going on with a call whose peer is late, or runs it through that pipeline itself;
 * mismatched calls failing on every rank, naming both.
 */
import assert from "node:assert/strict";
import { launchedResults, launchedRun } from "../_util/launched.ts";
import { DTYPES, REDUCE_OPS } from "../../core/dtype.ts";
import { smallAllReduceTakes } from "../../backend/cpu/_segment_small.ts";

const FIXTURE = new URL("./_fixtures/small_rank.ts", import.meta.url).pathname;

interface Result {
  rank: number;
  failures: string[];
  calls: number;
  smallCalls: number;
  small: number;
  handedOn: number;
}

for (const size of [2, 3]) {
  Deno.test(`small sums on ${size} processes have the reference kernels' bits, through the small path`, async () => {
    const results = await launchedResults<Result>(FIXTURE, size, { DCOMM_TRANSPORT: "shm" }, 120_000, [
      "bits",
    ]);
    for (const r of results) {
      assert.deepEqual(r.failures, []);
      assert.equal(r.calls, 120);
      // Every call of at most 16 KiB went to the small path, and some ran to their end in it.
      assert.equal(r.small, r.smallCalls);
      assert.equal(r.smallCalls, 105);
    }
    assert.ok(results.some((r) => r.handedOn < r.small), JSON.stringify(results));
  });
}

Deno.test("a small sum whose peer is late goes on through the general pipeline, with the same result", async () => {
  const results = await launchedResults<Result>(FIXTURE, 2, { DCOMM_TRANSPORT: "shm" }, 120_000, ["late"]);
  for (const r of results) assert.deepEqual(r.failures, []);
  const early = results.find((r) => r.rank === 0) as Result;
  assert.ok(early.handedOn >= 1, JSON.stringify(results));
});

Deno.test("a small sum meets a peer running the same call through the general pipeline", async () => {
  const results = await launchedResults<Result>(FIXTURE, 2, { DCOMM_TRANSPORT: "shm" }, 120_000, ["mixed"]);
  for (const r of results) assert.deepEqual(r.failures, []);
  assert.equal(results.find((r) => r.rank === 0)?.small, 0);
  assert.equal(results.find((r) => r.rank === 1)?.small, 20);
});

Deno.test("small sums of different lengths fail on every rank with a MismatchError naming both calls", async () => {
  const { results, text } = await launchedRun<Result>(FIXTURE, 3, { DCOMM_TRANSPORT: "shm" }, 60_000, [
    "mismatch",
  ]);
  for (const r of results) assert.deepEqual(r.failures, []);
  const lines = [...text.matchAll(/MISMATCH (.*)$/gm)].map((m) => m[1]);
  assert.equal(lines.length, 3, text.slice(-3000));
  for (const line of lines) {
    assert.match(line, /^MismatchError: Mismatched calls: rank \d called allReduce\(\d × float32/);
    assert.match(line, /2 × float32/);
    assert.match(line, /3 × float32/);
  }
});

Deno.test("a small sum the others timed out of fails on the late rank too, not succeeds", async () => {
  const { results, text } = await launchedRun<Result>(FIXTURE, 3, { DCOMM_TRANSPORT: "shm" }, 60_000, [
    "abandoned",
  ]);
  for (const r of results) assert.deepEqual(r.failures, []);
  const lines = [...text.matchAll(/ABANDONED (\d) (.*)$/gm)];
  assert.equal(lines.length, 3, text.slice(-3000));
  assert.match(lines.find((m) => m[1] === "2")?.[2] ?? "", /aborted: Timed out after 500 ms/);
});

Deno.test("the small path takes only the sums it computes: other ops and dtypes take the general path", () => {
  const taken = DTYPES.flatMap((dtype) =>
    REDUCE_OPS.filter((op) => smallAllReduceTakes(dtype, op, 64)).map((op) => `${dtype} ${op}`)
  );
  assert.deepEqual(taken, ["int32 sum", "float32 sum", "float32 avg", "float64 sum", "float64 avg"]);
  for (const op of ["band", "bor", "bxor", "premulSum"] as const) {
    assert.equal(smallAllReduceTakes("float32", op, 64), false, op);
    assert.equal(smallAllReduceTakes("int32", op, 64), false, op);
  }
  assert.equal(smallAllReduceTakes("bool", "sum", 64), false);
});
