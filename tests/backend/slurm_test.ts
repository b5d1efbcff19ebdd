/**
 * dcomm under Slurm with nothing set by hand: the parsers of Slurm's host lists and tasks-per-node lists
 * (checked against Slurm's own `scontrol show hostnames`), the store's port, `rankInfo` on the variables
 * srun sets, and, on a real Slurm of this machine (`tests/_util/slurm.ts`, started once for the file),
 * `srun` running the MNIST example, the collectives fixture, a rank that dies, and the mpi backend with
 * and without srun's PMI.
 *
 * @module
 */
import assert from "node:assert/strict";
import {
  parseHostList,
  parseTasksPerNode,
  SLURM_PORT_BASE,
  SLURM_PORT_SPAN,
  slurmPort,
} from "../../backend/_slurm.ts";
import { rankInfo } from "../../backend/env.ts";
import { gatedTest, hasCommand } from "../_util/skip.ts";
import { onPath, type SlurmCluster, type SrunResult, startSlurm, whySlurmCannotRun } from "../_util/slurm.ts";
import { checkResults, collectiveResults, COLLECTIVES_FIXTURE } from "../_util/collective_results.ts";
import type { MpiRankResult } from "./_fixtures/mpi_rank.ts";

const DENO = Deno.execPath();
const ROOT = new URL("../../", import.meta.url).pathname;
const fixture = (name: string): string => new URL(`./_fixtures/${name}`, import.meta.url).pathname;

// --- host lists ---------------------------------------------------------------------------------------

/** Forms Slurm prints or accepts, and what they expand to (scontrol agrees: see below). */
const HOST_LISTS: readonly (readonly [string, readonly string[]])[] = [
  ["n1", ["n1"]],
  ["node[01-04,07],gpu-a[1-2]", ["node01", "node02", "node03", "node04", "node07", "gpu-a1", "gpu-a2"]],
  ["node[08-11]", ["node08", "node09", "node10", "node11"]],
  ["rack[1-2]-node[1-2]", ["rack1-node1", "rack1-node2", "rack2-node1", "rack2-node2"]],
  ["n[1-2][3-4]", ["n13", "n14", "n23", "n24"]],
  ["a[1-2]-b[3]-c[4-5]", ["a1-b3-c4", "a1-b3-c5", "a2-b3-c4", "a2-b3-c5"]],
  ["n[9-10]", ["n9", "n10"]],
  ["n[09-10]", ["n09", "n10"]],
  ["n[098-101]", ["n098", "n099", "n100", "n101"]],
  ["n[1-002]", ["n1", "n2"]],
  ["n[001-2]", ["n001", "n002"]],
  ["n[0-0]", ["n0"]],
  ["n[007]", ["n007"]],
  ["n[1,3-4,6]", ["n1", "n3", "n4", "n6"]],
  ["n[1,1]", ["n1", "n1"]],
  ["n[1-3],n[2-4]", ["n1", "n2", "n3", "n2", "n3", "n4"]],
  ["n1[1-2]", ["n11", "n12"]],
  ["[1-2]", ["1", "2"]],
  ["localhost,vm", ["localhost", "vm"]],
  ["n-1,n_2.x", ["n-1", "n_2.x"]],
  ["gpu-[01-03],login1", ["gpu-01", "gpu-02", "gpu-03", "login1"]],
  ["compute-1-[1-3]", ["compute-1-1", "compute-1-2", "compute-1-3"]],
  ["a1b2c[3-4]", ["a1b2c3", "a1b2c4"]],
  ["n[9999999999-10000000000]", ["n9999999999", "n10000000000"]],
  ["n[18446744073709551615]", ["n18446744073709551615"]],
];

/** Input Slurm never prints, refused, with what the message must say; scontrol refuses these too. */
const REFUSED_BY_BOTH: readonly (readonly [string, RegExp])[] = [
  ["node[5-2]", /expected ranges that go up \(lo-hi with lo <= hi\), found "5-2" in "node\[5-2\]"/],
  ["ab[3-1]", /found "3-1"/],
  ["node[]", /expected numbers or ranges like "01-04" between brackets, found "" in "\[\]"/],
  ["a[1-2]b", /expected "," or the end of the list after an item's last "\]".*found "b" after "a\[1-2\]"/],
  ["n[1-3]p[2,4]q", /found "q" after "n\[1-3\]p\[2,4\]"/],
  ["n[1-2]x,y[3-4]", /found "x" after "n\[1-2\]"/],
  ["n[[1]]", /expected "\]" to close the "\[" at index 1, found another "\["/],
  ["n[1-2]]", /expected a "\[" before the "\]" at index 6/],
  ["n[a-b]", /found "a-b"/],
  ["n[-1]", /found "-1"/],
  ["n[1--2]", /found "1--2"/],
  ["n[1-2-3]", /found "1-2-3"/],
  ["n[1-2,]", /found "" in "\[1-2,\]"/],
  ["n[,1]", /found "" in "\[,1\]"/],
  ["n[0-65536]", /expected at most 65536 hosts in a range \(Slurm's limit\), found 65537/],
];

/**
 * Input Slurm never prints that scontrol still takes (each with what scontrol makes of it): refused here,
 * since a variable holding it is not Slurm's.
 */
const STRICTER_THAN_SCONTROL: readonly (readonly [string, RegExp, readonly string[]])[] = [
  ["", /expected a host list like "node\[01-04,07\],gpu1", found ""/, []],
  ["node[1-2", /expected "\]" to close the "\[" at index 4, found the end of "node\[1-2"/, ["node]"]],
  ["node1-2]", /expected a "\[" before the "\]" at index 7, found none in "node1-2\]"/, ["node1-2]"]],
  ["a,,b", /expected a host name before and after every comma, found an empty item at index 2/, ["a", "b"]],
  ["n[1-2],", /found an empty item at index 7/, ["n1", "n2"]],
  [",n1", /found an empty item at index 0/, ["n1"]],
  ["n1 n2", /expected no white space in a host list, found " " at index 2/, ["n1", "n2"]],
  ["n[ 1-2]", /found " 1-2" in "\[ 1-2\]"/, ["n01", "n02"]],
  ["n[1-]", /found "1-" in "\[1-\]"/, ["n1"]],
];

Deno.test("parseHostList() expands Slurm's ranges, padding and bracket groups", () => {
  for (const [list, hosts] of HOST_LISTS) assert.deepEqual(parseHostList(list), hosts, list);
  const big = parseHostList("n[0-65535]");
  assert.deepEqual([big.length, big[0], big[65535]], [65536, "n0", "n65535"]);
  assert.throws(
    () => parseHostList("n[0-65535]-[0-65535]"),
    /^RangeError: Invalid host list: expected at most 1048576 hosts in a list, found 4294967296$/,
  );
});

Deno.test("parseHostList() throws RangeError naming what it expected and found", () => {
  for (const [list, message] of [...REFUSED_BY_BOTH, ...STRICTER_THAN_SCONTROL]) {
    assert.throws(() => parseHostList(list, "SLURM_STEP_NODELIST"), RangeError, list);
    assert.throws(
      () => parseHostList(list, "SLURM_STEP_NODELIST"),
      /^RangeError: Invalid SLURM_STEP_NODELIST: expected /,
    );
    assert.throws(() => parseHostList(list, "SLURM_STEP_NODELIST"), message, list);
  }
});

/** `scontrol show hostnames <list>`, with a configuration of its own (no controller needed). */
async function scontrolHostnames(conf: string, list: string): Promise<string[] | "invalid"> {
  const out = await new Deno.Command("scontrol", {
    args: ["show", "hostnames", list],
    env: { SLURM_CONF: conf },
    clearEnv: true,
    stdout: "piped",
    stderr: "piped",
    signal: AbortSignal.timeout(10_000),
  }).output();
  const text = new TextDecoder().decode(out.stdout) + new TextDecoder().decode(out.stderr);
  if (out.code !== 0 || /Invalid hostlist|Invalid range/.test(text)) return "invalid";
  return text.split("\n").filter((l) => l !== "");
}

gatedTest(
  "parseHostList() agrees with scontrol show hostnames on every form both accept and refuse",
  { missing: onPath("scontrol") ? undefined : "scontrol not found (apt-get install slurm-client)" },
  async () => {
    const dir = await Deno.makeTempDir({ prefix: "dcomm-scontrol-" });
    try {
      const conf = `${dir}/slurm.conf`;
      await Deno.writeTextFile(conf, "ClusterName=hostlists\nSlurmctldHost=localhost\n");
      for (const [list] of HOST_LISTS) {
        assert.deepEqual(parseHostList(list), await scontrolHostnames(conf, list), `"${list}"`);
      }
      for (const [list] of REFUSED_BY_BOTH) {
        assert.equal(await scontrolHostnames(conf, list), "invalid", `scontrol took "${list}"`);
        assert.throws(() => parseHostList(list), RangeError);
      }
      for (const [list, , theirs] of STRICTER_THAN_SCONTROL) {
        assert.deepEqual(await scontrolHostnames(conf, list), theirs, `what scontrol makes of "${list}"`);
        assert.throws(() => parseHostList(list), RangeError);
      }
    } finally {
      await Deno.remove(dir, { recursive: true });
    }
  },
);

// --- tasks per node, port -----------------------------------------------------------------------------

Deno.test("parseTasksPerNode() expands counts with (xN) repeats and refuses anything else", () => {
  assert.deepEqual(parseTasksPerNode("2(x3),1"), [2, 2, 2, 1]);
  assert.deepEqual(parseTasksPerNode("3,2"), [3, 2]);
  assert.deepEqual(parseTasksPerNode("4"), [4]);
  assert.deepEqual(parseTasksPerNode("1(x2)"), [1, 1]);
  for (const bad of ["", "2(x0)", "0", "2x3", "2(x3", "2(3)", "a", "2,,1", " 2"]) {
    assert.throws(
      () => parseTasksPerNode(bad),
      new RegExp(
        `^RangeError: Invalid SLURM_STEP_TASKS_PER_NODE: expected task counts >= 1, each optionally ` +
          `repeated, like "2\\(x3\\),1", found "${bad.replace(/[()]/g, "\\$&")}"$`,
      ),
      bad,
    );
  }
});

Deno.test("slurmPort() is 12000 + (61 × job + step) mod 20000: unprivileged, apart for steps and jobs", () => {
  assert.equal(slurmPort(0, 0), 12000);
  assert.equal(slurmPort(4242, 0), 12000 + (61 * 4242) % 20000);
  assert.equal(slurmPort(4242, 3), slurmPort(4242, 0) + 3);
  assert.equal(slurmPort(2 ** 32 - 1, 2 ** 32 - 2), 12000 + ((61 * (2 ** 32 - 1) + 2 ** 32 - 2) % 20000));
  const ports = new Set<number>();
  for (let job = 1_000_000; job < 1_020_000; job++) {
    const p = slurmPort(job, 0);
    assert.ok(p >= SLURM_PORT_BASE && p < SLURM_PORT_BASE + SLURM_PORT_SPAN && p < 32768, `${p}`);
    assert.notEqual(slurmPort(job, 1), p);
    assert.notEqual(slurmPort(job + 1, 0), p);
    ports.add(p);
  }
  assert.equal(ports.size, 20000, "step 0 of 20000 consecutive jobs should get 20000 ports");
  assert.throws(() => slurmPort(-1, 0), /Invalid Slurm job id: expected a non-negative integer, found -1/);
  assert.throws(() => slurmPort(1, 0.5), /Invalid Slurm step id/);
});

// --- rankInfo on srun's variables -----------------------------------------------------------------------

/** What srun sets for task `procId` of job 4242's step 0, on node `nodeId` of `nodes`. */
function srunTask(
  procId: number,
  nodeId: number,
  localId: number,
  tasksPerNode: string,
  nodes = "node[07-09]",
  extra: Record<string, string> = {},
): Record<string, string> {
  const tasks = parseTasksPerNode(tasksPerNode).reduce((a, b) => a + b, 0);
  return {
    SLURM_JOB_ID: "4242",
    SLURM_JOBID: "4242",
    SLURM_STEP_ID: "0",
    SLURM_STEPID: "0",
    SLURM_PROCID: String(procId),
    SLURM_LOCALID: String(localId),
    SLURM_NODEID: String(nodeId),
    SLURM_NTASKS: String(tasks),
    SLURM_NPROCS: String(tasks),
    SLURM_STEP_NUM_TASKS: String(tasks),
    SLURM_STEP_NODELIST: nodes,
    SLURM_NODELIST: nodes,
    SLURM_JOB_NODELIST: nodes,
    SLURM_STEP_TASKS_PER_NODE: tasksPerNode,
    SLURM_TASKS_PER_NODE: tasksPerNode,
    ...extra,
  };
}

const PORT_4242 = slurmPort(4242, 0);

Deno.test("rankInfo() under srun -n 4 finds the store on the step's host, at the step's port", () => {
  for (let r = 0; r < 4; r++) {
    assert.deepEqual(rankInfo(srunTask(r, 0, r, "4", "node07")), {
      rank: r,
      worldSize: 4,
      localRank: r,
      localWorldSize: 4,
      masterAddr: "node07",
      masterPort: PORT_4242,
      addressSource: "slurm",
      source: "slurm",
    });
  }
});

Deno.test("rankInfo() under uneven steps (-N 2 -n 5: 3,2; -N 3 -n 5: 2(x2),1) counts each node's tasks", () => {
  // Block: tasks 0-2 on node 0, 3-4 on node 1; cyclic: 0, 2, 4 on node 0 and 1, 3 on node 1.
  const layouts: Record<string, [number, number][]> = {
    "3,2": [[0, 0], [0, 1], [0, 2], [1, 0], [1, 1]],
    "3,2 cyclic": [[0, 0], [1, 0], [0, 1], [1, 1], [0, 2]],
    "2(x2),1": [[0, 0], [0, 1], [1, 0], [1, 1], [2, 0]],
  };
  for (const [name, layout] of Object.entries(layouts)) {
    const tpn = name.split(" ")[0];
    const counts = parseTasksPerNode(tpn);
    layout.forEach(([node, local], r) => {
      const info = rankInfo(srunTask(r, node, local, tpn));
      assert.deepEqual(
        [info.rank, info.worldSize, info.localRank, info.localWorldSize, info.masterAddr, info.masterPort],
        [r, 5, local, counts[node], "node07", PORT_4242],
        `${name}, task ${r}`,
      );
    });
  }
});

Deno.test("rankInfo() under srun takes the step's tasks per node over the job's --ntasks-per-node", () => {
  // srun -n 2 inside sbatch -N 2 --ntasks-per-node=2: the step inherits SLURM_NTASKS_PER_NODE=2.
  const env = srunTask(1, 1, 0, "1(x2)", "node[07-08]", { SLURM_NTASKS_PER_NODE: "2" });
  assert.equal(rankInfo(env).localWorldSize, 1);
  // Without the step's lists (and without SLURM_NODEID), SLURM_NTASKS_PER_NODE is the last resort.
  const bare = { ...env, SLURM_STEP_TASKS_PER_NODE: "", SLURM_TASKS_PER_NODE: "", SLURM_NODEID: "" };
  assert.equal(rankInfo(bare).localWorldSize, 2);
  // A list of different counts without SLURM_NODEID says nothing about this node.
  assert.equal(rankInfo({ ...env, SLURM_NODEID: "", SLURM_STEP_TASKS_PER_NODE: "3,1" }).localWorldSize, 1);
});

Deno.test("rankInfo() under srun lets MASTER_ADDR, MASTER_PORT and DCOMM_SLURM_PORT win", () => {
  const env = srunTask(0, 0, 0, "2", "node07");
  const pick = (e: Record<string, string>) => {
    const i = rankInfo(e);
    return [i.masterAddr, i.masterPort, i.addressSource];
  };
  assert.deepEqual(pick({ ...env, MASTER_ADDR: "10.0.0.1", MASTER_PORT: "29500" }), [
    "10.0.0.1",
    29500,
    "env",
  ]);
  assert.deepEqual(pick({ ...env, MASTER_ADDR: "10.0.0.1" }), ["10.0.0.1", PORT_4242, "slurm"]);
  assert.deepEqual(pick({ ...env, MASTER_PORT: "29500" }), ["node07", 29500, "slurm"]);
  assert.deepEqual(pick({ ...env, DCOMM_SLURM_PORT: "29400" }), ["node07", 29400, "slurm"]);
  assert.deepEqual(pick({ ...env, DCOMM_SLURM_PORT: "29400", MASTER_PORT: "29500" }), [
    "node07",
    29500,
    "slurm",
  ]);
  assert.throws(
    () => rankInfo({ ...env, DCOMM_SLURM_PORT: "70000" }),
    /Invalid DCOMM_SLURM_PORT: expected 1\.\.65535, found 70000/,
  );
  // The older names of the ids.
  const old = { ...env, SLURM_JOB_ID: "", SLURM_STEP_ID: "", SLURM_JOBID: "4243", SLURM_STEPID: "1" };
  assert.equal(rankInfo(old).masterPort, slurmPort(4243, 1));
});

Deno.test("rankInfo() keeps torchrun's and MPI launchers' worlds over Slurm's inside an allocation", () => {
  // The batch script of sbatch -n 4 (no step): its SLURM_PROCID=0 and SLURM_NTASKS=4 are the job's.
  const batch = { SLURM_JOB_ID: "4242", SLURM_PROCID: "0", SLURM_NTASKS: "4", SLURM_JOB_NODELIST: "node07" };
  const torchrun = rankInfo({ ...batch, RANK: "1", WORLD_SIZE: "2", MASTER_ADDR: "h", MASTER_PORT: "1" });
  assert.deepEqual([torchrun.source, torchrun.rank, torchrun.worldSize, torchrun.masterAddr], [
    "torchrun",
    1,
    2,
    "h",
  ]);
  const script = rankInfo(batch);
  assert.deepEqual([script.source, script.masterAddr, script.masterPort, script.addressSource], [
    "slurm",
    undefined,
    undefined,
    undefined,
  ]);
  // cli/launch.ts (or torchrun) run by srun -N 2 --ntasks-per-node=1: the launcher's world, not the step's.
  const launched = rankInfo({ ...srunTask(0, 0, 0, "1(x2)"), RANK: "3", WORLD_SIZE: "8" });
  assert.deepEqual([launched.source, launched.rank, launched.worldSize, launched.masterAddr], [
    "torchrun",
    3,
    8,
    undefined,
  ]);
  // RANK/WORLD_SIZE copied from Slurm's in the script: the same world as the step's, so its store too.
  const copied = rankInfo({ ...srunTask(1, 0, 1, "2", "node07"), RANK: "1", WORLD_SIZE: "2" });
  assert.deepEqual([copied.source, copied.masterAddr], ["torchrun", "node07"]);
  // Hydra's mpiexec inside an allocation: every rank inherits the one Slurm task of its node.
  const hydra = rankInfo({ ...srunTask(0, 0, 0, "1", "node07"), PMI_RANK: "3", PMI_SIZE: "4" });
  assert.deepEqual([hydra.source, hydra.rank, hydra.worldSize, hydra.masterAddr], ["pmi", 3, 4, undefined]);
  // srun --mpi=pmi2: PMI's world is the step's; the store and the local ranks come from Slurm.
  const pmi2 = rankInfo({ ...srunTask(3, 1, 0, "3,2"), PMI_RANK: "3", PMI_SIZE: "5", PMI_JOBID: "4242.0" });
  assert.deepEqual(
    [pmi2.source, pmi2.rank, pmi2.localRank, pmi2.localWorldSize, pmi2.masterAddr, pmi2.addressSource],
    ["pmi", 3, 0, 2, "node07", "slurm"],
  );
});

Deno.test("rankInfo() derives no store for a world of one or under --distribution=arbitrary", () => {
  const one = rankInfo(srunTask(0, 0, 0, "1", "node07"));
  assert.deepEqual([one.worldSize, one.masterAddr, one.masterPort, one.addressSource], [
    1,
    undefined,
    undefined,
    undefined,
  ]);
  // -m arbitrary: task 0 runs on SLURM_HOSTFILE's first host, which need not be the list's first.
  const arbitrary = srunTask(0, 1, 0, "2,1", "node[07-08]", { SLURM_DISTRIBUTION: "arbitrary" });
  assert.deepEqual([rankInfo(arbitrary).masterAddr, rankInfo(arbitrary).masterPort], [undefined, undefined]);
  const told = rankInfo({ ...arbitrary, MASTER_ADDR: "node08" });
  assert.deepEqual([told.masterAddr, told.masterPort], ["node08", PORT_4242]);
});

Deno.test("rankInfo() under srun throws RangeError on malformed lists, read only when needed", () => {
  const env = srunTask(0, 0, 0, "2", "node[5-2]");
  assert.throws(() => rankInfo(env), /^RangeError: Invalid SLURM_STEP_NODELIST: expected ranges that go up/);
  assert.equal(rankInfo({ ...env, MASTER_ADDR: "h", MASTER_PORT: "1" }).masterAddr, "h");
  assert.throws(
    () => rankInfo(srunTask(0, 0, 0, "2", "node07", { SLURM_STEP_TASKS_PER_NODE: "2(x)" })),
    /^RangeError: Invalid SLURM_STEP_TASKS_PER_NODE: expected task counts >= 1/,
  );
  assert.throws(
    () => rankInfo(srunTask(0, 2, 0, "2", "node07", { SLURM_NODEID: "2" })),
    /^RangeError: Invalid SLURM_NODEID: expected a node index below 1 \(the nodes of SLURM_STEP_TASKS_PER_NODE="2"\), found 2/,
  );
});

// --- on a real Slurm --------------------------------------------------------------------------------------

/** The output of a run, for failure messages. */
function shown(r: SrunResult): string {
  return `exit ${r.code}${r.signal ? ` (signal ${r.signal})` : ""} after ${Math.round(r.ms)} ms\n` +
    `stdout:\n${r.stdout.slice(-3000)}\nstderr:\n${r.stderr.slice(-3000)}`;
}

/** Each task's `RESULT {json}`, by rank. */
function results<T extends { rank: number }>(r: SrunResult, expected: number): T[] {
  const out = r.stdout.split("\n").filter((l) => l.startsWith("RESULT ")).map((l) =>
    JSON.parse(l.slice(7)) as T
  )
    .sort((a, b) => a.rank - b.rank);
  assert.equal(out.length, expected, `expected ${expected} RESULT lines, found ${out.length}\n${shown(r)}`);
  return out;
}

interface InfoResult {
  info: ReturnType<typeof rankInfo>;
  node: string;
  job: string;
  step: string;
  rank: number;
  size: number;
  sum: number;
}

/** Runs slurm_rank.ts info under `srun args` and checks every task against srun's layout. */
async function checkLayout(slurm: SlurmCluster, args: string[], tasks: number): Promise<InfoResult[]> {
  const r = await slurm.srun([
    ...args,
    "-n",
    String(tasks),
    DENO,
    "run",
    "-A",
    fixture("slurm_rank.ts"),
    "info",
  ]);
  assert.equal(r.code, 0, shown(r));
  const all = results<InfoResult>(r, tasks);
  const perNode = new Map<string, number[]>();
  for (const t of all) perNode.set(t.node, [...(perNode.get(t.node) ?? []), t.info.localRank]);
  for (const t of all) {
    const what = `task ${t.rank} on ${t.node}: ${JSON.stringify(t.info)}`;
    assert.deepEqual([t.size, t.sum, t.info.rank, t.info.worldSize], [
      tasks,
      (tasks * (tasks + 1)) / 2,
      t.rank,
      tasks,
    ]);
    assert.equal(t.info.localWorldSize, perNode.get(t.node)?.length, what);
    assert.equal(t.info.masterAddr, all[0].node, `the store should be on task 0's node; ${what}`);
    assert.equal(t.info.masterPort, slurmPort(Number(t.job), Number(t.step)), what);
    assert.equal(t.info.addressSource, "slurm", what);
  }
  for (const [node, locals] of perNode) {
    assert.deepEqual(locals.sort((a, b) => a - b), [...locals.keys()], `local ranks on ${node}`);
  }
  return all;
}

const mpich = hasCommand("mpiexec") ? undefined : "MPICH not found (apt-get install mpich libmpich-dev)";

gatedTest("dcomm on a real Slurm (srun with nothing set)", { missing: whySlurmCannotRun() }, async (t) => {
  await using slurm = await startSlurm({ nodes: 2 });
  const host = slurm.nodes[0];
  const step = async (name: string, fn: () => Promise<void>, ignore?: string): Promise<void> => {
    await t.step({
      name: ignore ? `${name} (skipped: ${ignore})` : name,
      ignore: ignore !== undefined,
      fn: async () => {
        try {
          await fn();
        } catch (e) {
          (e as Error).message += `\n--- daemons\n${slurm.logTail(10)}`;
          throw e;
        }
      },
    });
  };

  await step("srun -n 4 examples/train_mnist.ts --epochs 1 trains, weights identical", async () => {
    const r = await slurm.srun([
      "-w",
      host,
      "-n",
      "4",
      DENO,
      "run",
      "-A",
      `${ROOT}examples/train_mnist.ts`,
      "--epochs",
      "1",
    ]);
    assert.equal(r.code, 0, shown(r));
    assert.match(r.stdout, /^dcomm demo: 4 CPU ranks/m, shown(r));
    assert.match(r.stdout, /^epoch 1\/1 .* test accuracy \d+\.\d+%/m, shown(r));
    assert.match(r.stdout, /^weights after training: identical on all 4 ranks/m, shown(r));
  });

  await step("srun -n 4 runs every collective of tests/backend/_fixtures/collectives.ts", async () => {
    const r = await slurm.srun(["-w", host, "-n", "4", DENO, "run", "-A", COLLECTIVES_FIXTURE, ""]);
    assert.equal(r.code, 0, shown(r));
    const all = collectiveResults(r.stdout);
    assert.equal(all.length, 4, shown(r));
    checkResults(all, 4);
  });

  await step(
    "srun -N 2 -n 5 --exclusive (3,2; block and cyclic) gives each task its node's layout",
    async () => {
      if (slurm.nodes.length < 2) return;
      const block = await checkLayout(slurm, ["-N", "2", "--exclusive"], 5);
      assert.deepEqual(block.map((x) => x.info.localWorldSize), [3, 3, 3, 2, 2]);
      const cyclic = await checkLayout(slurm, ["-N", "2", "--exclusive", "-m", "cyclic"], 5);
      assert.deepEqual(cyclic.map((x) => x.info.localWorldSize), [3, 2, 3, 2, 3]);
      await checkLayout(slurm, ["-w", host], 3);
    },
  );

  await step("srun -m arbitrary needs MASTER_ADDR (task 0 is not on the list's first node)", async () => {
    if (slurm.nodes.length < 2) return;
    // The hostfile puts task 0 on the node that comes second in the step's (sorted) node list.
    const [first, second] = [...slurm.nodes].sort();
    const hostfile = `${slurm.dir}/hostfile`;
    await Deno.writeTextFile(hostfile, `${second}\n${first}\n${first}\n`);
    const args = ["-m", "arbitrary", "-n", "3", DENO, "run", "-A", fixture("slurm_rank.ts"), "info"];
    const env = { SLURM_HOSTFILE: hostfile, NO_COLOR: "1" };
    const refused = await slurm.srun(args, { env, timeoutMs: 60_000 });
    assert.notEqual(refused.code, 0, shown(refused));
    assert.equal(refused.signal, null, `srun was stopped: ${shown(refused)}`);
    assert.match(refused.stderr, /MASTER_ADDR/, shown(refused));
    const told = await slurm.srun(args, { env: { ...env, MASTER_ADDR: second } });
    assert.equal(told.code, 0, shown(told));
    const all = results<InfoResult>(told, 3);
    assert.deepEqual(all.map((x) => [x.node, x.sum]), [[second, 6], [first, 6], [first, 6]]);
    assert.ok(all.every((x) => x.info.masterAddr === second && x.info.addressSource === "slurm"));
  });

  await step("a task killed under srun makes the others fail naming it, without hanging", async () => {
    const r = await slurm.srun(["-w", host, "-n", "4", DENO, "run", "-A", fixture("slurm_rank.ts"), "die"], {
      timeoutMs: 90_000,
    });
    assert.equal(r.signal, null, `srun had to be stopped: the survivors hung\n${shown(r)}`);
    assert.notEqual(r.code, 0, shown(r));
    assert.match(r.stderr, /task 2: Killed/, shown(r));
    for (const rank of [0, 1, 3]) {
      const line = r.stdout.split("\n").find((l) => l.startsWith(`FAILED ${rank} `));
      assert.ok(line, `rank ${rank} printed no failure\n${shown(r)}`);
      assert.match(line, /^FAILED \d (TransportError|DistError) /, line);
      assert.match(line, /[Rr]ank 2\b/, `the error does not name the dead rank: ${line}`);
    }
    assert.ok(!r.stdout.includes("FAILED 2 "), shown(r));
  });

  await step("srun --mpi=pmi2 -n 2 runs the mpi backend's collectives", async () => {
    const r = await slurm.srun([
      "--mpi=pmi2",
      "-w",
      host,
      "-n",
      "2",
      DENO,
      "run",
      "-A",
      fixture("mpi_rank.ts"),
      "collectives",
    ]);
    assert.equal(r.code, 0, shown(r));
    const all = results<MpiRankResult>(r, 2);
    assert.deepEqual(all.flatMap((x) => x.failures).slice(0, 10), []);
    assert.deepEqual(all.map((x) => [x.rank, x.size]), [[0, 2], [1, 2]]);
    assert.ok(all.every((x) => x.ran > 600), `cases: ${all.map((x) => x.ran)}`);
    for (const [name, hash] of Object.entries(all[0].hashes)) assert.equal(all[1].hashes[name], hash, name);
  }, mpich);

  await step(
    "srun -n 2 without --mpi: the mpi backend refuses at once and says to use --mpi=pmi2",
    async () => {
      const r = await slurm.srun(["-w", host, "-n", "2", DENO, "run", "-A", fixture("mpi_rank.ts"), "args"], {
        env: { NO_COLOR: "1" },
        timeoutMs: 60_000,
      });
      assert.equal(r.signal, null, shown(r));
      assert.notEqual(r.code, 0, shown(r));
      assert.doesNotMatch(r.stdout, /RESULT/, shown(r));
      const refusals = r.stderr.match(
        /DistError: Cannot use MPI under srun: expected MPI's world to have the step's 2 tasks \(SLURM_STEP_NUM_TASKS\), found 1 rank in MPI's world \([^)]+\): srun offered no PMI \(PMI_SIZE and PMIX_RANK are unset\), so every task would run alone\. Launch with srun --mpi=pmi2 \(or --mpi=pmix/g,
      ) ?? [];
      assert.equal(refusals.length, 2, shown(r));
    },
    mpich,
  );

  await step("sbatch examples/slurm/train.sbatch trains on 2 nodes × 4 tasks", async () => {
    if (slurm.nodes.length < 2) return;
    const out = `${slurm.dir}/train-%j.out`;
    const path = `${DENO.slice(0, DENO.lastIndexOf("/"))}:${Deno.env.get("PATH") ?? ""}`;
    const r = await slurm.run("sbatch", [
      "--wait",
      `--output=${out}`,
      "examples/slurm/train.sbatch",
      "--epochs",
      "1",
    ], {
      cwd: ROOT,
      env: { PATH: path },
      timeoutMs: 180_000,
    });
    const job = /Submitted batch job (\d+)/.exec(r.stdout)?.[1];
    const log = job ? await Deno.readTextFile(out.replace("%j", job)).catch((e) => String(e)) : "";
    assert.equal(r.code, 0, `${shown(r)}\njob output:\n${log.slice(-3000)}`);
    assert.match(log, /^dcomm demo: 8 CPU ranks/m, log);
    assert.match(log, /^weights after training: identical on all 8 ranks/m, log);
  });
});
