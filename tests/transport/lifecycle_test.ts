import assert from "node:assert/strict";
import { TransportError } from "../../core/errors.ts";
import { Grace, Lifecycle, type LifecycleOptions } from "../../transport/_lifecycle.ts";

/** A lifecycle whose hooks record their calls and end when the test says. */
function recorded(overrides: Partial<LifecycleOptions> = {}): {
  life: Lifecycle;
  calls: string[];
  finish: () => void;
} {
  const calls: string[] = [];
  const { promise: finished, resolve: finish } = Promise.withResolvers<void>();
  const life = new Lifecycle({
    name: "TCP",
    rank: 2,
    onFail: (error) => {
      calls.push(`fail: ${error.message}`);
      return finished;
    },
    onClose: (closed) => {
      calls.push(`close: ${closed.message}`);
      return finished;
    },
    ...overrides,
  });
  return { life, calls, finish };
}

/** "pending" if `promise` has not settled within `ms`, else "settled". */
async function settledWithin(promise: Promise<unknown>, ms: number): Promise<"settled" | "pending"> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const pending = new Promise<"pending">((resolve) => timer = setTimeout(() => resolve("pending"), ms));
  try {
    return await Promise.race([promise.then(() => "settled" as const, () => "settled" as const), pending]);
  } finally {
    clearTimeout(timer);
  }
}

Deno.test("Lifecycle.fail() keeps the first failure: failed resolves with it, onFail runs once, operations are refused with it", async () => {
  const { life, calls, finish } = recorded();
  assert.equal(life.state, "open");
  assert.equal(life.unusable(), undefined);
  const first = new TransportError("Rank 1 stopped responding to rank 2 mid-collective");
  life.fail(first);
  life.fail(new Error("A later failure is ignored"));
  assert.equal(await life.failed, first);
  assert.equal(life.failure, first);
  assert.equal(life.unusable(), first);
  assert.equal(life.state, "failed");
  assert.deepEqual(calls, ["fail: Rank 1 stopped responding to rank 2 mid-collective"]);
  // close() after a failure waits for the failure's shutdown, and runs no farewell of its own.
  const closed = life.close();
  assert.equal(await settledWithin(closed, 20), "pending");
  finish();
  await closed;
  assert.deepEqual(calls, ["fail: Rank 1 stopped responding to rank 2 mid-collective"]);
  assert.equal(life.state, "failed");
  assert.equal(life.unusable(), first);
});

Deno.test("Lifecycle.fail() turns a thrown value that is no Error into a TransportError with its text", async () => {
  const { life, finish } = recorded();
  finish();
  life.fail("the ring's magic is gone");
  const error = await life.failed;
  assert.ok(error instanceof TransportError);
  assert.equal(error.message, "the ring's magic is gone");
});

Deno.test("Lifecycle.close() runs onClose once, refuses operations naming the transport and rank, and ignores later failures", async () => {
  const { life, calls, finish } = recorded();
  const closing = life.close();
  assert.equal(life.close(), closing, "close() is idempotent");
  assert.equal(life.state, "closing");
  const refused = life.unusable();
  assert.ok(refused instanceof TransportError);
  assert.equal(refused.message, "Cannot use the TCP transport of rank 2: it was closed");
  life.fail(new Error("A failure found while closing is ignored"));
  assert.equal(life.failure, undefined);
  assert.equal(await settledWithin(life.failed, 20), "pending");
  finish();
  await closing;
  assert.equal(life.state, "closed");
  assert.equal(life.unusable(), refused);
  assert.deepEqual(calls, ["close: Cannot use the TCP transport of rank 2: it was closed"]);
});

Deno.test("Lifecycle.checkReceive() runs the receive's check, then the length check, and fails the transport with what throws", async () => {
  const seen: [number, number][] = [];
  const { life } = recorded();
  const desc = new Uint8Array(32).fill(7);
  life.checkReceive(0, { into: new Uint8Array(8), desc, bytes: 8, check: (d, n) => seen.push([d[0], n]) });
  assert.deepEqual(seen, [[7, 8]]);
  assert.equal(life.state, "open");

  assert.throws(
    () => life.checkReceive(0, { into: new Uint8Array(10), desc, bytes: 12 }),
    (e: Error) => {
      assert.ok(e instanceof TransportError);
      assert.equal(e.message, "Rank 0 sent a message of 12 bytes but rank 2 expected 10");
      assert.equal(e.peer, 0);
      return true;
    },
  );
  assert.equal((await life.failed).message, "Rank 0 sent a message of 12 bytes but rank 2 expected 10");

  const other = recorded().life;
  const refused = new Error("Collective mismatch: rank 0 sent allReduce #4, rank 2 expected broadcast #4");
  const check = (): void => {
    throw refused;
  };
  assert.throws(
    () => other.checkReceive(0, { into: new Uint8Array(4), desc, bytes: 4, check }),
    (e) => e === refused,
  );
  assert.equal(await other.failed, refused);
});

Deno.test("Lifecycle.peerClosed() and peerAborted() name the peer and this rank", () => {
  const { life } = recorded();
  const closed = life.peerClosed("receive from", 0);
  assert.equal(
    closed.message,
    "Cannot receive from rank 0: it closed its transport while rank 2 still used it",
  );
  assert.equal(closed.peer, 0);
  const aborted = life.peerAborted(3, "Out of memory");
  assert.equal(aborted.message, "Rank 3 aborted: Out of memory");
  assert.equal(aborted.peer, 3);
});

Deno.test("Grace.waitWhile() steps while busy, and stops once the time is up", async () => {
  let steps = 0;
  await new Grace(1000).waitWhile(() => steps < 3, () => Promise.resolve(void steps++));
  assert.equal(steps, 3);

  const grace = new Grace(30);
  const t0 = performance.now();
  await grace.waitWhile(() => true);
  assert.ok(grace.over);
  assert.ok(performance.now() - t0 >= 29, "it waited out the grace period");
  // The waits of one farewell share one deadline: a second wait after it is up returns at once.
  let more = 0;
  await grace.waitWhile(() => true, () => Promise.resolve(void more++));
  assert.equal(more, 0);
});

Deno.test("Grace.waitFor() returns when the work settles or the time is up, and rethrows the work's error", async () => {
  await new Grace(1000).waitFor(Promise.resolve());
  const t0 = performance.now();
  await new Grace(30).waitFor(new Promise(() => {}));
  assert.ok(performance.now() - t0 >= 29);
  const error = new Error("The socket broke");
  await assert.rejects(new Grace(1000).waitFor(Promise.reject(error)), (e) => e === error);
});
