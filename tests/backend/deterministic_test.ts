/**
 * Deterministic mode: the same inputs give the same bits through every path a reduction can take — the
 * host segment (one-shot and two-phase plans, the small path), the ordered algorithms over TCP, over
 * shared memory with the segment off, over the in-process transport and over two emulated hosts, at
 * three chunk sizes — and the default mode is shown to differ between two algorithms on the same inputs,
 * so the comparison can fail.
 */
import assert from "node:assert/strict";
import { launchedResults } from "../_util/launched.ts";
import { spawnThreads } from "../../backend/threads.ts";
import { UnsupportedError } from "../../core/errors.ts";
import { init } from "../../backend/init.ts";

const FIXTURE = new URL("./_fixtures/deterministic_rank.ts", import.meta.url).pathname;

interface Result {
  rank: number;
  hashes: Record<string, string>;
}

/** Every rank's hashes, merged (a rank's own keys: reduce on the root, reduce-scatter blocks). */
function merged(results: Result[]): Record<string, string> {
  const out: Record<string, string> = {};
  for (const r of results) {
    for (const [k, v] of Object.entries(r.hashes)) {
      if (k in out) assert.equal(out[k], v, `${k}: ranks differ`);
      out[k] = v;
    }
  }
  return out;
}

const RUNS: [string, Record<string, string>][] = [
  ["the host segment", { DCOMM_TRANSPORT: "shm" }],
  ["the host segment, two-phase plans", { DCOMM_TRANSPORT: "shm", DCOMM_SEGMENT_PLAN: "two-phase" }],
  ["ordered over tcp", { DCOMM_TRANSPORT: "tcp" }],
  ["ordered over tcp, 4 KiB chunks", { DCOMM_TRANSPORT: "tcp", DET_CHUNK_BYTES: "4096" }],
  ["ordered over shm without the segment", { DCOMM_TRANSPORT: "shm", DCOMM_SEGMENT: "0" }],
  ["ordered over two emulated hosts", { DCOMM_TRANSPORT: "auto", DCOMM_HOST_OF: "a,a,b,b" }],
];

Deno.test("deterministic mode gives the same bits on every path, transport and chunk size (4 ranks)", async () => {
  let first: Record<string, string> | undefined;
  for (const [name, env] of RUNS) {
    const got = merged(await launchedResults<Result>(FIXTURE, 4, env, 180_000, ["det"]));
    if (first === undefined) first = got;
    else assert.deepEqual(got, first, name);
  }
  // Threads over the in-process transport, 64-byte chunks.
  const threads = await spawnThreads(new URL("./_fixtures/deterministic_thread.ts", import.meta.url), {
    worldSize: 4,
    timeoutMs: 120_000,
    init: { chunkBytes: 64 },
  });
  assert.deepEqual(merged(threads as Result[]), first, "threads over inproc");
});

Deno.test("the default mode's sums differ between algorithms (what deterministic mode removes)", async () => {
  const ring = merged(
    await launchedResults<Result>(FIXTURE, 4, { DCOMM_TRANSPORT: "tcp" }, 120_000, ["ring"]),
  );
  const tree = merged(
    await launchedResults<Result>(FIXTURE, 4, { DCOMM_TRANSPORT: "tcp" }, 120_000, ["tree"]),
  );
  const differ = Object.keys(ring).filter((k) => ring[k] !== tree[k]);
  assert.ok(differ.length > 0, "ring and tree gave the same bits everywhere: the inputs show no order");
});

Deno.test("deterministic mode refuses what cannot fold in rank order, with the reason", async () => {
  await using pg = await init({ rank: 0, worldSize: 1, env: {}, deterministic: true });
  const t = new Float32Array(4);
  assert.throws(
    () => pg.allReduce(t, { algorithm: "ring" }),
    {
      name: "UnsupportedError",
      message: /deterministically with algorithm "ring": expected "auto", "segment" or "ordered"/,
    },
  );
  assert.throws(() => pg.allReduce(t, { commDtype: "float16" }), UnsupportedError);
  assert.throws(() => pg.allReduce(t, { deterministic: "yes" as never }), TypeError);
  // Integers and min/max do not depend on the order: any algorithm.
  await pg.allReduce(new Int32Array(4), { algorithm: "ring" });
  await pg.allReduce(t, { algorithm: "ring", op: "max" });
  // A call may turn it off.
  await pg.allReduce(t, { algorithm: "ring", deterministic: false });
  await assert.rejects(
    init({ backend: "mpi", rank: 0, worldSize: 1, env: {}, deterministic: true }),
    {
      name: "UnsupportedError",
      message: /Cannot init deterministically: the mpi backend reduces in its library's/,
    },
  );
});
