import assert from "node:assert/strict";
import { parseInitMethod, rankInfo } from "../../backend/env.ts";

Deno.test("rankInfo() reads torchrun's variables", () => {
  const info = rankInfo({
    RANK: "3",
    WORLD_SIZE: "8",
    LOCAL_RANK: "1",
    LOCAL_WORLD_SIZE: "2",
    MASTER_ADDR: "10.1.2.3",
    MASTER_PORT: "29500",
  });
  assert.deepEqual(info, {
    rank: 3,
    worldSize: 8,
    localRank: 1,
    localWorldSize: 2,
    masterAddr: "10.1.2.3",
    masterPort: 29500,
    addressSource: "env",
    source: "torchrun",
  });
});

Deno.test("rankInfo() reads Slurm's, MPICH's and Open MPI's variables", () => {
  assert.equal(
    rankInfo({ SLURM_PROCID: "5", SLURM_NTASKS: "6", SLURM_NTASKS_PER_NODE: "3(x2)" }).localWorldSize,
    3,
  );
  assert.equal(rankInfo({ SLURM_PROCID: "5", SLURM_NTASKS: "6" }).source, "slurm");
  assert.deepEqual(
    [rankInfo({ PMI_RANK: "1", PMI_SIZE: "2" }).rank, rankInfo({ PMI_RANK: "1", PMI_SIZE: "2" }).source],
    [1, "pmi"],
  );
  const ompi = rankInfo({
    OMPI_COMM_WORLD_RANK: "2",
    OMPI_COMM_WORLD_SIZE: "4",
    OMPI_COMM_WORLD_LOCAL_RANK: "0",
  });
  assert.deepEqual([ompi.rank, ompi.worldSize, ompi.localRank, ompi.source], [2, 4, 0, "ompi"]);
});

Deno.test("rankInfo() prefers torchrun's variables and lets options win", () => {
  const env = { RANK: "1", WORLD_SIZE: "2", PMI_RANK: "0", PMI_SIZE: "4" };
  assert.equal(rankInfo(env).source, "torchrun");
  assert.deepEqual([rankInfo(env, { rank: 0 }).rank, rankInfo({}, { rank: 0, worldSize: 1 }).source], [
    0,
    "options",
  ]);
});

Deno.test("rankInfo() rejects a missing rank, world size 0, a rank >= world size, and garbage", () => {
  assert.throws(() => rankInfo({}), /Cannot find this process's rank: expected RANK and WORLD_SIZE/);
  assert.throws(
    () => rankInfo({ RANK: "0", WORLD_SIZE: "0" }),
    /Invalid world size: expected an integer >= 1, found 0/,
  );
  assert.throws(
    () => rankInfo({ RANK: "4", WORLD_SIZE: "4" }),
    /Invalid rank: expected an integer in 0\.\.3, found 4/,
  );
  assert.throws(
    () => rankInfo({ RANK: "one", WORLD_SIZE: "4" }),
    /Invalid RANK: expected a non-negative integer, found "one"/,
  );
  assert.throws(() => rankInfo({ RANK: "0", WORLD_SIZE: "1", MASTER_PORT: "70000" }), /Invalid MASTER_PORT/);
});

Deno.test("parseInitMethod() accepts env:// and tcp://host:port only", () => {
  assert.deepEqual(parseInitMethod("env://"), {});
  assert.deepEqual(parseInitMethod("tcp://10.0.0.1:29500"), { hostname: "10.0.0.1", port: 29500 });
  assert.deepEqual(parseInitMethod("tcp://[::1]:1234"), { hostname: "::1", port: 1234 });
  assert.throws(
    () => parseInitMethod("file:///tmp/x"),
    /Invalid init method: expected "env:\/\/" or "tcp:\/\/host:port", found "file:\/\/\/tmp\/x"/,
  );
  assert.throws(() => parseInitMethod("tcp://host"), /Invalid init method/);
});
