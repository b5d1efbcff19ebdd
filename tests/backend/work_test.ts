import assert from "node:assert/strict";
import { Work, type WorkReport } from "../../backend/work.ts";

const REPORT: WorkReport = {
  collective: "allReduce",
  algorithm: "ring",
  transport: "inproc",
  bytes: 4,
  bytesSent: 4,
  timeMs: 1,
  startedAt: 0,
  finishedAt: 1,
};

Deno.test("Work: completed, report and wait() once the collective resolves; await gives undefined", async () => {
  const { promise, resolve } = Promise.withResolvers<WorkReport | undefined>();
  const work = new Work(promise);
  assert.equal(work.completed, false);
  assert.equal(work.report, undefined);
  resolve(REPORT);
  assert.equal(await work, undefined);
  assert.equal(work.completed, true);
  assert.equal(work.error, undefined);
  assert.equal(work.report, REPORT);
  assert.equal(await work.wait(), REPORT);
});

Deno.test("Work: the state is set before any waiter runs", async () => {
  const { promise, resolve } = Promise.withResolvers<WorkReport | undefined>();
  const work = new Work(promise);
  const seen = work.then(() => [work.completed, work.report]);
  const seenByWait = work.wait().then(() => work.completed);
  resolve(REPORT);
  assert.deepEqual(await seen, [true, REPORT]);
  assert.equal(await seenByWait, true);
});

Deno.test("Work: a failure reaches every waiter and is kept", async () => {
  const error = new Error("peer 3 died");
  const work = new Work(Promise.reject(error));
  await assert.rejects(work.wait(), (e) => e === error);
  await assert.rejects(async () => await work, (e) => e === error);
  assert.equal(await work.then(() => "ok", (e) => (e === error ? "caught" : "other")), "caught");
  assert.equal(work.completed, true);
  assert.equal(work.error, error);
  assert.equal(work.report, undefined);
});

Deno.test("Work: a failed collective nobody waits for does not crash the process", async () => {
  const work = new Work(Promise.reject(new Error("nobody waits")));
  // An unhandled rejection would fail this test (Deno reports it at the end of the test).
  await new Promise((resolve) => setTimeout(resolve, 10));
  assert.equal(work.completed, true);
  assert.equal((work.error as Error).message, "nobody waits");
});
