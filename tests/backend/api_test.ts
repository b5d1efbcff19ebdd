/**
 * The process group's API on real ranks (threads): argument checks before anything is sent, sub-groups,
 * several calls in flight, abort signals.
 */
import assert from "node:assert/strict";
import { spawnThreads } from "../../backend/threads.ts";

const FIXTURE = new URL("./_fixtures/api_main.ts", import.meta.url);

Deno.test("ProcessGroup rejects bad arguments with TypeError/RangeError naming expected and found, before sending", async () => {
  const [r0] = (await spawnThreads(FIXTURE, { worldSize: 2, args: { scenario: "bad-arguments" } })) as {
    errors: Record<string, string>;
    sum: number;
  }[];
  const e = r0.errors;
  assert.match(e.root, /^RangeError: Cannot broadcast: root must be a rank in 0\.\.1, found 2/);
  assert.match(e.negativeRoot, /^RangeError: .*found -1/);
  assert.match(
    e.gatherLength,
    /^RangeError: Cannot all-gather: output must hold 2 × 8 = 16 elements, found 8/,
  );
  assert.match(
    e.scatterLength,
    /^RangeError: Cannot reduce-scatter: input must hold 2 × 3 = 6 elements, found 8/,
  );
  assert.match(e.allToAllLength, /^RangeError: Cannot all-to-all: .*multiple of 2/);
  assert.match(e.dtypes, /^TypeError: Cannot all-gather: input is float32 but output is int32/);
  assert.match(
    e.op,
    /^TypeError: Cannot all-reduce: Unknown reduce op: expected one of sum, prod, min, max, avg, band, bor, bxor, premulSum, found median/,
  );
  assert.match(e.uint16, /^TypeError: Cannot all-reduce: A Uint16Array needs an explicit dtype/);
  assert.match(e.clamped, /^TypeError: .*Uint8ClampedArray/);
  assert.match(
    e.algorithm,
    /^TypeError: Unknown allReduce algorithm: expected "auto" or one of "segment", "ring".*found "butterfly"/,
  );
  assert.match(e.peerSelf, /^RangeError: Cannot send: peer 0 is this rank/);
  assert.match(e.peerRange, /^RangeError: Cannot recv: peer must be a rank in 0\.\.1, found 99/);
  assert.match(e.timeout, /^RangeError: Cannot barrier: expected timeoutMs to be a number > 0, found 0/);
  assert.match(e.servers, /^RangeError: Cannot all-reduce: servers must be an integer in 1\.\.2, found 0/);
  assert.match(
    e.device,
    /^UnsupportedError: Cannot all-reduce: the cpu backend takes host TypedArrays, found a float32 tensor on GPU 0/,
  );
  assert.equal(r0.sum, 1);
});

Deno.test("ProcessGroup.newGroup() runs collectives on sub-groups; a non-member gets an error", async () => {
  const results = (await spawnThreads(FIXTURE, { worldSize: 4, args: { scenario: "groups" } })) as Record<
    string,
    unknown
  >[];
  assert.deepEqual(results.map((r) => r.evenRank), [0, -1, 1, -1]);
  assert.deepEqual(results.map((r) => r.oddRank), [-1, 0, -1, 1]);
  assert.deepEqual(results[1].oddRanks, [1, 3]);
  assert.deepEqual(results.map((r) => r.t), [4, 2, 4, 4]);
  assert.deepEqual(results.map((r) => r.u), [10, 40, 30, 40]);
  assert.deepEqual(results.map((r) => r.w), [4, 4, 4, 4]);
  assert.deepEqual(results.map((r) => r.b), [42, 0, 42, 0]);
  assert.match(
    String(results[1].notMember),
    /^RangeError: Cannot all-reduce: this rank is not a member of group 1 \(ranks 0, 2\)/,
  );
});

Deno.test("ProcessGroup runs several un-awaited calls in order, each with a report", async () => {
  const results = (await spawnThreads(FIXTURE, { worldSize: 3, args: { scenario: "async" } })) as {
    completedEarly: boolean[];
    values: number[];
    algorithms: string[];
    bytes: number[];
    sent: boolean[];
  }[];
  for (const r of results) {
    assert.deepEqual(r.completedEarly, [false, false, false, false, false]);
    assert.deepEqual(r.values, [3, 6, 9, 12, 15]);
    assert.deepEqual(r.bytes, [8000, 8000, 8000, 8000, 8000]);
    assert.ok(r.algorithms.every((a) => typeof a === "string" && a.length > 0));
    assert.deepEqual(r.sent, [true, true, true, true, true]);
  }
});

Deno.test("ProcessGroup call with an aborted signal fails before it starts and the group goes on", async () => {
  const results = (await spawnThreads(FIXTURE, { worldSize: 2, args: { scenario: "signal" } })) as {
    before: string;
    sum: number;
  }[];
  for (const r of results) {
    assert.match(r.before, /Aborted before it started: stop/);
    assert.equal(r.sum, 2);
  }
});

Deno.test("a call that throws before sending leaves the group usable; after close() every call rejects at once", async () => {
  const results = (await spawnThreads(FIXTURE, { worldSize: 2, args: { scenario: "holes" } })) as {
    notSignal: string;
    detached: string;
    sum: number;
    afterClose: Record<string, string>;
    afterCloseMs: number;
  }[];
  for (const r of results) {
    assert.match(
      r.notSignal,
      /^TypeError: Cannot all-reduce: expected signal to be an AbortSignal, found an object/,
    );
    assert.match(r.detached, /^TypeError: Cannot all-reduce: .*detached/);
    assert.equal(r.sum, 2);
    for (const [name, message] of Object.entries(r.afterClose)) {
      assert.match(message, /^\w*Error: Cannot [a-z -]+: the process group is closed/, `${name}: ${message}`);
    }
    assert.ok(r.afterCloseMs < 10_000, `calls after close took ${r.afterCloseMs} ms`);
  }
});

Deno.test("a MismatchError from the communication thread is a MismatchError on the rank that called", async () => {
  const results = (await spawnThreads(FIXTURE, { worldSize: 2, args: { scenario: "mismatch" } })) as {
    caught: string;
    mismatch: boolean;
    transport: boolean;
    dist: boolean;
    code: string;
  }[];
  for (const r of results) {
    assert.ok(r.dist, r.caught);
    // Each error is an instance of the class its name says.
    if (r.caught.startsWith("MismatchError")) assert.ok(r.mismatch && r.code === "MISMATCH", r.caught);
    if (r.caught.startsWith("TransportError")) assert.ok(r.transport, r.caught);
  }
  const detected = results.filter((r) => r.mismatch);
  assert.ok(detected.length >= 1, results.map((r) => r.caught).join("\n"));
  assert.match(detected[0].caught, /Mismatched calls: rank \d called allReduce\(\d+ × float32/);
});
