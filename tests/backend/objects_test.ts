/**
 * The object collectives (`broadcastObject`, `allGatherObject`, `gatherObject`, `scatterObject`) on real
 * ranks: threads over the in-process transport, processes over TCP and shared memory, and the mpi
 * backend under MPICH's mpiexec.
 */
import assert from "node:assert/strict";
import { spawnThreads } from "../../backend/threads.ts";
import type { ObjectsResult } from "./_fixtures/objects_rank.ts";
import { launchedResults } from "../_util/launched.ts";
import { gatedTest, hasCommand } from "../_util/skip.ts";

const FIXTURE = new URL("./_fixtures/objects_rank.ts", import.meta.url);

function check(results: ObjectsResult[], size: number): void {
  assert.equal(results.length, size);
  assert.deepEqual(results.flatMap((r) => r.failures), []);
  for (const r of results) assert.equal(r.ran, results[0].ran);
}

for (const size of [1, 2, 3, 5]) {
  Deno.test(`object collectives and split on ${size} threads`, async () => {
    const results = await spawnThreads(FIXTURE, { worldSize: size, timeoutMs: 60_000 });
    check(results as ObjectsResult[], size);
  });
}

for (const transport of ["tcp", "shm"]) {
  Deno.test(`object collectives and split on 3 processes over ${transport}`, async () => {
    const results = await launchedResults<ObjectsResult>(
      FIXTURE.pathname,
      3,
      { DCOMM_TRANSPORT: transport },
      60_000,
    );
    check(results, 3);
  });
}

gatedTest("object collectives and split on the mpi backend, 3 ranks under mpiexec", {
  missing: hasCommand("mpiexec") ? undefined : "mpiexec not found (apt-get install mpich libmpich-dev)",
  ciCanSatisfy: true,
}, async () => {
  const env = Deno.env.toObject();
  for (const name of Object.keys(env)) {
    if (
      /^(RANK|WORLD_SIZE|LOCAL_RANK|LOCAL_WORLD_SIZE|MASTER_ADDR|MASTER_PORT|PMI_\w+|SLURM_\w+)$/.test(name)
    ) {
      delete env[name];
    }
  }
  const out = await new Deno.Command("mpiexec", {
    args: ["-n", "3", Deno.execPath(), "run", "-A", FIXTURE.pathname, "mpi"],
    env,
    clearEnv: true,
    stdout: "piped",
    stderr: "piped",
    signal: AbortSignal.timeout(60_000),
  }).output();
  const text = new TextDecoder().decode(out.stdout) + new TextDecoder().decode(out.stderr);
  assert.equal(out.code, 0, text.slice(-3000));
  const results = [...text.matchAll(/^RESULT (\{.*\})$/gm)].map((m) => JSON.parse(m[1]) as ObjectsResult);
  check(results.sort((a, b) => a.rank - b.rank), 3);
});
