/**
 * `monitoredBarrier` (torch's `monitored_barrier`) on real processes: the cpu backend through the host
 * segment (shared memory, the default for ranks of one host) and over TCP, and the mpi backend under
 * MPICH's mpiexec. Every rank arrives: it resolves everywhere; ranks absent: every other rank fails
 * within about the timeout naming them; a late rank fails when it arrives. And a plain `barrier` that
 * the others left by timeout must not succeed on the late rank (the host segment's bug).
 *
 * @module
 */
import assert from "node:assert/strict";
import { launchedResults } from "../_util/launched.ts";
import { gatedTest, hasCommand } from "../_util/skip.ts";
import type { MonitoredResult } from "./_fixtures/monitored_barrier_rank.ts";

const FIXTURE = new URL("./_fixtures/monitored_barrier_rank.ts", import.meta.url).pathname;

/** Runs the fixture's case on `ranks` launched processes. */
async function launched(
  ranks: number,
  mode: string,
  env: Record<string, string>,
): Promise<MonitoredResult[]> {
  const results = await launchedResults<MonitoredResult>(FIXTURE, ranks, env, 90_000, [mode]);
  return results.sort((a, b) => a.rank - b.rank);
}

/** The results, one line each, for assertion messages. */
function show(results: readonly MonitoredResult[]): string {
  return results.map((r) =>
    `rank ${r.rank}${r.absent ? " (absent/late)" : ""}: ${
      r.ok ? "ok" : `${r.name} ${r.code} after ${r.ms} ms: ${r.message}`
    }`
  ).join("\n");
}

const TRANSPORTS = [["segment", "shm"], ["TCP", "tcp"]] as const;

/** The ranks that came failed within about the timeout (500 ms), with `pattern` in their message. */
function assertPresentFailed(results: readonly MonitoredResult[], pattern: RegExp): void {
  for (const r of results.filter((r) => !r.absent)) {
    assert.equal(r.ok, false, show(results));
    assert.equal(r.name, "TimeoutError", show(results));
    assert.match(r.message, pattern, show(results));
    assert.ok(r.ms >= 450 && r.ms < 3_000, `rank ${r.rank} failed after ${r.ms} ms:\n${show(results)}`);
  }
}

for (const [where, transport] of TRANSPORTS) {
  const env = { DCOMM_TRANSPORT: transport, MB_TIMEOUT_MS: "500" };

  Deno.test(`monitoredBarrier resolves on every rank when all arrive (${where})`, async () => {
    const results = await launched(3, "all", env);
    for (const r of results) assert.ok(r.ok, show(results));
  });

  Deno.test(`monitoredBarrier fails every other rank within the timeout, naming the absent one (${where})`, async () => {
    const results = await launched(3, "absent", { ...env, MB_ABSENT: "2" });
    assertPresentFailed(
      results,
      /^Monitored barrier timed out after 500 ms on rank [01]: rank 2 did not arrive$/,
    );
  });

  Deno.test(`monitoredBarrier with waitAll names both absent ranks (${where})`, async () => {
    const results = await launched(4, "absent", { ...env, MB_ABSENT: "2,3", MB_WAIT_ALL: "1" });
    assertPresentFailed(
      results,
      /^Monitored barrier timed out after 500 ms on rank [01]: rank 2, rank 3 did not arrive$/,
    );
  });

  Deno.test(`monitoredBarrier fails the late rank when it arrives (${where})`, async () => {
    const results = await launched(3, "late", { ...env, MB_ABSENT: "2", MB_LATE_MS: "1500" });
    assertPresentFailed(results, /on rank [01]: rank 2 did not arrive$/);
    const late = results[2];
    assert.equal(late.name, "TimeoutError", show(results));
    assert.match(
      late.message,
      /^Monitored barrier timed out on rank 2: it arrived after rank [01] had given up waiting 500 ms for it$/,
    );
    assert.ok(late.ms < 450, `the late rank failed after ${late.ms} ms:\n${show(results)}`);
  });

  Deno.test(`a barrier the others left by timeout does not succeed on the late rank (${where})`, async () => {
    const results = await launched(3, "late-barrier", { ...env, MB_ABSENT: "2", MB_LATE_MS: "1500" });
    for (const r of results) assert.equal(r.ok, false, `rank ${r.rank} succeeded:\n${show(results)}`);
    for (const r of results.filter((r) => !r.absent)) {
      assert.match(r.message, /Timed out after 500 ms|aborted/, show(results));
    }
    // The late rank learns that the others gave up at once, not after its own timeout.
    assert.ok(results[2].ms < 450, show(results));
  });
}

Deno.test("monitoredBarrier names an absent rank 0, and only the first absent rank without waitAll", async () => {
  const results = await launched(4, "absent", { MB_TIMEOUT_MS: "500", MB_ABSENT: "0,3" });
  assertPresentFailed(
    results,
    /^Monitored barrier timed out after 500 ms on rank [12]: rank 0 did not arrive \(nor 1 more: waitAll: true names every one\)$/,
  );
});

Deno.test("monitoredBarrier aborted by a rank's signal fails the others naming it", async () => {
  const results = await launched(3, "abort", { MB_TIMEOUT_MS: "2000" });
  assert.match(results[1].message, /^Aborted by the caller's signal while running: /, show(results));
  for (const r of [results[0], results[2]]) {
    assert.equal(r.code, "ABORTED", show(results));
    assert.match(r.message, /^Monitored barrier failed on rank [02]: rank 1 aborted it: /, show(results));
  }
  assert.ok(results[0].ms < 1_500, show(results)); // told at once, not at its own timeout
});

Deno.test("monitoredBarrier's bad options throw the front's TypeError/RangeError, the group stays usable", async () => {
  const results = await launched(3, "args", {});
  assert.deepEqual(results.flatMap((r) => r.failures), []);
  for (const r of results) assert.ok(r.ok, show(results));
});

/** Runs the fixture's case under `mpiexec -n ranks` on the mpi backend. */
async function mpiexec(
  ranks: number,
  mode: string,
  extra: Record<string, string>,
): Promise<MonitoredResult[]> {
  const env = Deno.env.toObject();
  for (const name of Object.keys(env)) {
    if (
      /^(RANK|WORLD_SIZE|LOCAL_RANK|LOCAL_WORLD_SIZE|GROUP_RANK|MASTER_ADDR|MASTER_PORT|DCOMM_STORE_HOSTED)$/
        .test(name) || /^(PMI_|PMIX_|OMPI_|SLURM_)/.test(name)
    ) delete env[name];
  }
  const out = await new Deno.Command("mpiexec", {
    args: ["-n", String(ranks), Deno.execPath(), "run", "-A", FIXTURE, mode, "--mpi"],
    env: { ...env, ...extra },
    clearEnv: true,
    stdout: "piped",
    stderr: "piped",
    signal: AbortSignal.timeout(90_000),
  }).output();
  const text = new TextDecoder().decode(out.stdout) + new TextDecoder().decode(out.stderr);
  assert.equal(out.code, 0, text.slice(-3000));
  const results = [...text.matchAll(/^RESULT (\{.*\})$/gm)].map((m) => JSON.parse(m[1]) as MonitoredResult);
  assert.equal(results.length, ranks, text.slice(-3000));
  return results.sort((a, b) => a.rank - b.rank);
}

const mpiGate = {
  missing: hasCommand("mpiexec") ? undefined : "mpiexec not found (apt-get install mpich libmpich-dev)",
  ciCanSatisfy: true,
};

gatedTest("monitoredBarrier on the mpi backend: all arrive, bad options", mpiGate, async () => {
  for (const r of await mpiexec(3, "all", {})) assert.ok(r.ok, `rank ${r.rank}: ${r.message}`);
  const args = await mpiexec(2, "args", {});
  assert.deepEqual(args.flatMap((r) => r.failures), []);
});

gatedTest("monitoredBarrier on the mpi backend names both absent ranks with waitAll", mpiGate, async () => {
  const results = await mpiexec(4, "absent", { MB_TIMEOUT_MS: "500", MB_ABSENT: "0,3", MB_WAIT_ALL: "1" });
  assertPresentFailed(
    results,
    /^Monitored barrier timed out after 500 ms on rank [12]: rank 0, rank 3 did not arrive$/,
  );
});

gatedTest("monitoredBarrier on the mpi backend fails the late rank when it arrives", mpiGate, async () => {
  const results = await mpiexec(3, "late", { MB_TIMEOUT_MS: "500", MB_ABSENT: "2", MB_LATE_MS: "1500" });
  assertPresentFailed(results, /on rank [01]: rank 2 did not arrive$/);
  assert.match(
    results[2].message,
    /^Monitored barrier timed out on rank 2: it arrived after rank [01] had given up/,
  );
  assert.ok(results[2].ms < 450, show(results));
});
