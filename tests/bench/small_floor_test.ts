/**
 * `bench:floor`: its rows and table from known rounds, and one short run of both ranks (without MPICH,
 * and under mpiexec when it is installed), whose every implementation was checked on fresh data first.
 */
import assert from "node:assert/strict";
import { floorRows, floorTable } from "../../bench/small_floor.ts";
import { gatedTest, hasCommand } from "../_util/skip.ts";

Deno.test("floorRows() pairs each round with MPICH's and the bare all-reduce's", () => {
  const rows = floorRows({ bare: [0.1, 0.2, 0.1], dcomm: [0.5, 0.4, 0.6], mpich: [1, 0.8, 0.3] }, 100);
  assert.deepEqual(rows.map((r) => r.implementation), ["bare", "dcomm", "mpich"]);
  const dcomm = rows[1];
  assert.equal(dcomm.medianUs, 0.5);
  assert.equal(dcomm.bestUs, 0.4);
  // Round by round: MPICH / dcomm = 2, 2, 0.5 → median 2; dcomm / bare = 5, 2, 6 → median 5.
  assert.equal(dcomm.vsMpichPaired, 2);
  assert.equal(dcomm.vsFloorPaired, 5);
  assert.equal(rows[0].vsFloorPaired, 1);
  const withoutMpich = floorRows({ bare: [0.1], dcomm: [0.3] }, 10);
  assert.equal("vsMpichPaired" in withoutMpich[1], false);
  const table = floorTable(withoutMpich);
  assert.equal(table.length, 4);
  assert.match(table[0], /µs median/);
  assert.doesNotMatch(table[0], /MPICH/);
});

async function shortRun(extra: string[]): Promise<{ implementation: string; medianUs: number }[]> {
  const out = await Deno.makeTempFile({ suffix: ".json" });
  try {
    const run = await new Deno.Command(Deno.execPath(), {
      args: [
        "run",
        "-A",
        new URL("../../bench/small_floor.ts", import.meta.url).pathname,
        "-n",
        "200",
        "-r",
        "2",
        "--out",
        out,
        ...extra,
      ],
      stdout: "piped",
      stderr: "piped",
      signal: AbortSignal.timeout(120_000),
    }).output();
    const text = new TextDecoder().decode(run.stdout) + new TextDecoder().decode(run.stderr);
    assert.equal(run.code, 0, text.slice(-3000));
    return JSON.parse(await Deno.readTextFile(out));
  } finally {
    await Deno.remove(out);
  }
}

Deno.test("bench:floor runs every implementation on two ranks, each checked first", async () => {
  const rows = await shortRun(["--no-mpi"]);
  assert.deepEqual(rows.map((r) => r.implementation), [
    "ping-pong",
    "bare",
    "bare-awaited",
    "work",
    "await",
    "dcomm",
  ]);
  for (const r of rows) assert.ok(r.medianUs > 0 && Number.isFinite(r.medianUs), JSON.stringify(r));
});

gatedTest(
  "bench:floor under mpiexec adds MPICH's loop in the same processes",
  {
    missing: hasCommand("mpiexec") && hasCommand("mpicc")
      ? undefined
      : "mpiexec and mpicc (apt-get install mpich libmpich-dev)",
  },
  async () => {
    const rows = await shortRun([]);
    assert.equal(rows.at(-1)?.implementation, "mpich");
  },
);
