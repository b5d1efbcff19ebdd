/**
 * In-place all-gather and reduce-scatter (NCCL's and torch's in-place forms: the input is this rank's
 * block of the output, or the output this rank's block of the input), which the sharded trainer relies on,
 * give the out-of-place results by every algorithm: the message algorithms on threads, over TCP processes,
 * and the host segment's plans on shared memory.
 */
import assert from "node:assert/strict";
import { spawnThreads } from "../../backend/threads.ts";
import { launchedResults } from "../_util/launched.ts";

const FIXTURE = new URL("./_fixtures/in_place_rank.ts", import.meta.url);
const MESSAGE = {
  allGather: ["auto", "ring", "recursive-doubling"],
  reduceScatter: ["auto", "ring", "halving", "ordered"],
};

Deno.test("in place equals out of place by every message algorithm, 2 to 4 ranks, even and uneven blocks", async () => {
  for (const worldSize of [2, 3, 4]) {
    const wrong = await spawnThreads(FIXTURE, {
      worldSize,
      args: { algorithms: MESSAGE },
      timeoutMs: 60_000,
    });
    assert.deepEqual(wrong, Array(worldSize).fill([]), `${worldSize} ranks`);
  }
});

Deno.test("in place equals out of place over TCP processes and through the host segment", async () => {
  for (
    const [transport, algorithms] of <[string, string[]][]> [["tcp", ["ring,auto", "ring,ordered,auto"]], [
      "shm",
      [
        "segment,auto",
        "segment,auto",
      ],
    ]]
  ) {
    const wrong = await launchedResults<string[]>(
      FIXTURE.pathname,
      3,
      { DCOMM_TRANSPORT: transport },
      120_000,
      algorithms,
    );
    assert.deepEqual(wrong, [[], [], []], transport);
  }
});
