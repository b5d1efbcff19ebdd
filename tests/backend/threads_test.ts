/**
 * spawnThreads: a rank's error reaches the caller as the rank threw it (class, code, cause), prefixed with
 * the rank.
 */
import assert from "node:assert/strict";
import { spawnThreads } from "../../backend/threads.ts";
import { DistError, MismatchError, TransportError } from "../../core/errors.ts";

const FIXTURE = new URL("./_fixtures/throwing_rank.ts", import.meta.url);
const opts = (kind: string) => ({ worldSize: 2, args: { kind }, timeoutMs: 30_000 });

Deno.test("spawnThreads() rejects with a rank's MismatchError as a MismatchError, with its cause", async () => {
  const error = await spawnThreads(FIXTURE, opts("mismatch")).then(
    () => assert.fail("expected spawnThreads to reject"),
    (e: unknown) => e,
  );
  assert.ok(error instanceof MismatchError, `expected a MismatchError, found ${error}`);
  assert.ok(error instanceof DistError);
  assert.equal(error.name, "MismatchError");
  assert.equal(error.code, "MISMATCH");
  assert.equal(error.message, "Rank 1 failed: Rank 1 called broadcast where rank 0 called allReduce");
  assert.match(error.stack ?? "", /^MismatchError: Rank 1 failed: Rank 1 called broadcast/);
  assert.match(error.stack ?? "", /throwing_rank\.ts/, "the stack is the rank's own");
  const cause = error.cause;
  assert.ok(cause instanceof TransportError, `expected a TransportError cause, found ${cause}`);
  assert.equal(cause.message, "Rank 0 sent an ABORT");
  assert.equal(cause.peer, 0);
  assert.equal(cause.code, "TRANSPORT");
  assert.equal(cause.cause, "the wire said so");
});

Deno.test("spawnThreads() rejects with a rank's TypeError as a TypeError", async () => {
  const error = await spawnThreads(FIXTURE, opts("type")).then(
    () => assert.fail("expected spawnThreads to reject"),
    (e: unknown) => e,
  );
  assert.ok(error instanceof TypeError, `expected a TypeError, found ${error}`);
  assert.ok(!(error instanceof DistError));
  assert.equal(error.message, "Rank 1 failed: Expected a Float32Array, found a string");
});

Deno.test("spawnThreads() rejects with a TypeError when a rank's main returns a value that does not clone", async () => {
  const error = await spawnThreads(FIXTURE, opts("uncloneable")).then(
    () => assert.fail("expected spawnThreads to reject"),
    (e: unknown) => e,
  );
  assert.ok(error instanceof TypeError, `expected a TypeError, found ${error}`);
  assert.match(
    error.message,
    /^Rank 1 failed: .*throwing_rank\.ts's main must return a structured-cloneable value/,
  );
});
