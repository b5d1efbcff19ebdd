/**
 * What a task started by `srun` learns from Slurm's variables, so that `srun -n 4 deno run -A train.ts`
 * needs nothing set by hand: the step's hosts (`SLURM_STEP_NODELIST`, in Slurm's compressed form), the
 * tasks on each host (`SLURM_STEP_TASKS_PER_NODE`), and where the rendezvous store is: on the first host
 * of the step, where task 0 runs, at a port derived from the job and step ids.
 *
 * Task 0 runs on the first host of `SLURM_STEP_NODELIST` under srun's block, cyclic and plane
 * distributions (srun lays tasks out over that list in its order), but not under `--distribution=arbitrary`,
 * where it runs on the first host of `SLURM_HOSTFILE`: there no address is derived.
 *
 * @module
 */

type Env = Readonly<Record<string, string | undefined>>;

/** The most hosts one bracketed range may name (Slurm's own limit: `n[0-65535]` is the largest). */
const MAX_RANGE = 65536n;

/**
 * Expands a host list as Slurm prints it in `SLURM_STEP_NODELIST` and `SLURM_JOB_NODELIST`
 * (`scontrol show hostnames` does the same): comma-separated items, each a name with bracketed groups of
 * numbers and ranges. A range keeps the zero padding of its first number (`node[08-11]` is node08 to
 * node11); several groups in one item give every combination, the first group varying slowest
 * (`rack[1-2]-node[1-2]`: rack1-node1, rack1-node2, rack2-node1, rack2-node2), and, as in Slurm, the last
 * group must end the item. Stricter than Slurm on what Slurm never prints: empty items, white space, an
 * unclosed `[` and a range without its end are errors here.
 *
 * @param list The host list.
 * @param name What the list is, for messages (e.g. the variable's name). @default "host list"
 * @returns Every host, in order, repeats kept.
 * @throws {RangeError} If the list is empty, has an empty item, white space, unbalanced or nested
 *   brackets, text after an item's last `]`, an empty or malformed group, a range that goes down, a
 *   range of more than 65536 hosts, or more than 2^20 hosts in all.
 *
 * @example Ranges, zero padding and several groups
 * ```ts
 * import { parseHostList } from "./_slurm.ts";
 * import assert from "node:assert/strict";
 * assert.deepEqual(parseHostList("node[01-03,07],gpu-a[1-2]"), [
 *   "node01", "node02", "node03", "node07", "gpu-a1", "gpu-a2",
 * ]);
 * assert.deepEqual(parseHostList("rack[1-2]-n[8-9]"), ["rack1-n8", "rack1-n9", "rack2-n8", "rack2-n9"]);
 * assert.throws(() => parseHostList("node[5-2]", "SLURM_STEP_NODELIST"), /Invalid SLURM_STEP_NODELIST/);
 * ```
 */
export function parseHostList(list: string, name = "host list"): string[] {
  const fail = (expected: string, found: string): never => {
    throw new RangeError(`Invalid ${name}: expected ${expected}, found ${found}`);
  };
  if (list === "") fail('a host list like "node[01-04,07],gpu1"', '""');
  const hosts: string[] = [];
  let item: (string | string[])[] = [];
  let text = "";
  let start = 0;
  const endItem = (at: number): void => {
    if (text === "" && item.length === 0) {
      fail("a host name before and after every comma", `an empty item at index ${at} of "${list}"`);
    }
    if (text !== "" && item.length > 0 && typeof item[item.length - 1] !== "string") {
      fail(
        `"," or the end of the list after an item's last "]" (as Slurm requires)`,
        `"${text}" after "${list.slice(start, at - text.length)}" in "${list}"`,
      );
    }
    if (text !== "") item.push(text);
    expand(item, hosts, fail);
    item = [];
    text = "";
  };
  for (let i = 0; i < list.length; i++) {
    const c = list[i];
    if (c === ",") {
      endItem(i);
      start = i + 1;
    } else if (c === "[") {
      const close = list.indexOf("]", i + 1);
      const open = list.indexOf("[", i + 1);
      if (close < 0) fail(`"]" to close the "[" at index ${i}`, `the end of "${list}"`);
      if (open >= 0 && open < close) fail(`"]" to close the "[" at index ${i}`, `another "[" in "${list}"`);
      if (text !== "") item.push(text);
      text = "";
      item.push(parseGroup(list.slice(i + 1, close), list, fail));
      i = close;
    } else if (c === "]") {
      fail(`a "[" before the "]" at index ${i}`, `none in "${list}"`);
    } else if (/\s/.test(c)) {
      fail("no white space in a host list", `${JSON.stringify(c)} at index ${i} of "${list}"`);
    } else {
      text += c;
    }
  }
  endItem(list.length);
  return hosts;
}

/** The numbers of one bracketed group (`01-04,07`), formatted with their padding. */
function parseGroup(group: string, list: string, fail: (expected: string, found: string) => never): string[] {
  const out: string[] = [];
  for (const range of group.split(",")) {
    const m = /^(\d+)(?:-(\d+))?$/.exec(range);
    if (!m) {
      fail(`numbers or ranges like "01-04" between brackets`, `"${range}" in "[${group}]" of "${list}"`);
    }
    const [, first, last = first] = m;
    const lo = BigInt(first);
    const hi = BigInt(last);
    if (hi < lo) fail("ranges that go up (lo-hi with lo <= hi)", `"${range}" in "${list}"`);
    if (hi - lo + 1n > MAX_RANGE) {
      fail(
        `at most ${MAX_RANGE} hosts in a range (Slurm's limit)`,
        `${hi - lo + 1n} in "${range}" of "${list}"`,
      );
    }
    for (let n = lo; n <= hi; n++) out.push(String(n).padStart(first.length, "0"));
  }
  return out;
}

/** The most hosts a whole list may expand to (several groups multiply). */
const MAX_HOSTS = 1 << 20;

/** Every combination of an item's parts (text, and the numbers of each group), the first varying slowest. */
function expand(
  parts: readonly (string | string[])[],
  into: string[],
  fail: (expected: string, found: string) => never,
): void {
  let count = 1;
  for (const part of parts) if (typeof part !== "string") count *= part.length;
  if (into.length + count > MAX_HOSTS) fail(`at most ${MAX_HOSTS} hosts in a list`, `${into.length + count}`);
  let names = [""];
  for (const part of parts) {
    if (typeof part === "string") names = names.map((n) => n + part);
    else names = names.flatMap((n) => part.map((p) => n + p));
  }
  for (const n of names) into.push(n);
}

/**
 * Expands a tasks-per-node list as Slurm writes it in `SLURM_STEP_TASKS_PER_NODE` and
 * `SLURM_TASKS_PER_NODE`: counts, each optionally repeated with `(xN)`, comma-separated.
 *
 * @param value The list, e.g. `"2(x3),1"`.
 * @param name The variable, for messages. @default "SLURM_STEP_TASKS_PER_NODE"
 * @returns The task count of each node, in the order of the node list.
 * @throws {RangeError} If the value is not of that form, or a count or repeat is 0.
 *
 * @example
 * ```ts
 * import { parseTasksPerNode } from "./_slurm.ts";
 * import assert from "node:assert/strict";
 * assert.deepEqual(parseTasksPerNode("2(x3),1"), [2, 2, 2, 1]);
 * assert.deepEqual(parseTasksPerNode("3,2"), [3, 2]);
 * ```
 */
export function parseTasksPerNode(value: string, name = "SLURM_STEP_TASKS_PER_NODE"): number[] {
  const out: number[] = [];
  for (const item of value.split(",")) {
    const m = /^(\d+)(?:\(x(\d+)\))?$/.exec(item);
    const count = m ? Number(m[1]) : 0;
    const times = m?.[2] === undefined ? 1 : Number(m[2]);
    if (!m || count < 1 || times < 1) {
      throw new RangeError(
        `Invalid ${name}: expected task counts >= 1, each optionally repeated, like "2(x3),1", found "${value}"`,
      );
    }
    for (let i = 0; i < times; i++) out.push(count);
  }
  return out;
}

/** The first port {@linkcode slurmPort} gives. */
export const SLURM_PORT_BASE = 12000;
/** How many ports {@linkcode slurmPort} spreads over: 12000..31999, below Linux's ephemeral ports (32768+). */
export const SLURM_PORT_SPAN = 20000;

/**
 * The rendezvous port of a Slurm job step: `12000 + (61 × jobId + stepId) mod 20000`. The ports stay in
 * 12000..31999, unprivileged and below the range Linux hands out to outgoing connections (32768 and up),
 * so no client socket holds them. Consecutive steps of a job get consecutive ports, and since 61 and 20000
 * have no common factor, step 0 of 20000 consecutive jobs gets 20000 different ports: jobs side by side on
 * one first node differ unless their ids are a multiple of 20000 apart. A job's step s and another's step
 * 0 meet only when 61 × (the other's id - this id) ≡ s mod 20000 (step 8 and the job 328 ids later).
 *
 * @param jobId `SLURM_JOB_ID`.
 * @param stepId `SLURM_STEP_ID`.
 * @returns The port.
 * @throws {RangeError} If either is not a non-negative integer.
 *
 * @example
 * ```ts
 * import { slurmPort } from "./_slurm.ts";
 * import assert from "node:assert/strict";
 * assert.equal(slurmPort(4242, 0), 30762); // 12000 + (61 × 4242 + 0) mod 20000
 * assert.equal(slurmPort(4242, 1), 30763);
 * assert.equal(slurmPort(4243, 0), 30823);
 * ```
 */
export function slurmPort(jobId: number, stepId: number): number {
  for (const [what, v] of [["job id", jobId], ["step id", stepId]] as const) {
    if (!Number.isSafeInteger(v) || v < 0) {
      throw new RangeError(`Invalid Slurm ${what}: expected a non-negative integer, found ${v}`);
    }
  }
  const span = SLURM_PORT_SPAN;
  return SLURM_PORT_BASE + (((jobId % span) * 61 + (stepId % span)) % span);
}

/** A non-negative integer variable, or undefined when unset or empty. */
function integer(env: Env, name: string): number | undefined {
  const raw = env[name];
  if (raw === undefined || raw === "") return undefined;
  if (!/^\d+$/.test(raw.trim())) {
    throw new RangeError(`Invalid ${name}: expected a non-negative integer, found "${raw}"`);
  }
  return Number(raw.trim());
}

/** The value of the first of several variables that is set. */
function first(env: Env, ...names: string[]): number | undefined {
  for (const name of names) {
    const v = integer(env, name);
    if (v !== undefined) return v;
  }
  return undefined;
}

/** The job and step ids when this process is a task srun started (the batch script itself has no step). */
function stepIds(env: Env): { jobId: number; stepId: number } | undefined {
  const step = first(env, "SLURM_STEP_ID", "SLURM_STEPID");
  const job = first(env, "SLURM_JOB_ID", "SLURM_JOBID");
  return step !== undefined && job !== undefined ? { jobId: job, stepId: step } : undefined;
}

/**
 * The number of tasks in the srun step this process is a task of: `SLURM_STEP_NUM_TASKS`, else
 * `SLURM_NTASKS` (which srun sets to the step's count), or `undefined` outside a step (no
 * `SLURM_STEP_ID`: not started by srun, e.g. the batch script itself, whose `SLURM_NTASKS` is the job's).
 *
 * @param env The environment.
 * @returns The step's task count, or undefined.
 * @throws {RangeError} If a variable is not a non-negative integer.
 *
 * @example
 * ```ts
 * import { slurmStepTasks } from "./_slurm.ts";
 * import assert from "node:assert/strict";
 * assert.equal(slurmStepTasks({ SLURM_JOB_ID: "7", SLURM_STEP_ID: "0", SLURM_STEP_NUM_TASKS: "4" }), 4);
 * assert.equal(slurmStepTasks({ SLURM_JOB_ID: "7", SLURM_NTASKS: "4" }), undefined);
 * ```
 */
export function slurmStepTasks(env: Readonly<Record<string, string | undefined>>): number | undefined {
  if (stepIds(env) === undefined) return undefined;
  return first(env, "SLURM_STEP_NUM_TASKS", "SLURM_NTASKS", "SLURM_NPROCS");
}

/**
 * The number of tasks on this node: the entry of `SLURM_STEP_TASKS_PER_NODE` (srun sets it for every
 * step; `SLURM_TASKS_PER_NODE` is the same under srun, the job's in the batch script) at this node's index
 * in the step, `SLURM_NODEID`; else `SLURM_NTASKS_PER_NODE`, which only `--ntasks-per-node` sets (and
 * which a step inherits from its job even when it runs fewer tasks, hence the last resort).
 *
 * @param env The environment.
 * @returns The count, or undefined when none of these is set.
 * @throws {RangeError} If a list is malformed, or `SLURM_NODEID` is past its end.
 *
 * @example An uneven step, `srun -N 2 -n 5`
 * ```ts
 * import { slurmLocalWorldSize } from "./_slurm.ts";
 * import assert from "node:assert/strict";
 * assert.equal(slurmLocalWorldSize({ SLURM_STEP_TASKS_PER_NODE: "3,2", SLURM_NODEID: "1" }), 2);
 * assert.equal(slurmLocalWorldSize({ SLURM_STEP_TASKS_PER_NODE: "2(x2),1", SLURM_NODEID: "1" }), 2);
 * assert.equal(slurmLocalWorldSize({ SLURM_NTASKS_PER_NODE: "4" }), 4);
 * ```
 */
export function slurmLocalWorldSize(env: Readonly<Record<string, string | undefined>>): number | undefined {
  for (const name of ["SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE"]) {
    const value = env[name];
    if (!value) continue;
    const counts = parseTasksPerNode(value, name);
    const node = integer(env, "SLURM_NODEID");
    if (node === undefined) {
      // Without this node's index only a list of one node (or of equal counts) tells.
      if (counts.every((c) => c === counts[0])) return counts[0];
      continue;
    }
    if (node >= counts.length) {
      throw new RangeError(
        `Invalid SLURM_NODEID: expected a node index below ${counts.length} (the nodes of ${name}="${value}"), ` +
          `found ${node}`,
      );
    }
    return counts[node];
  }
  // --ntasks-per-node=4 is one number; older code wrote "4(x2)" here too, whose first count is ours.
  const raw = env["SLURM_NTASKS_PER_NODE"];
  if (raw === undefined || raw === "") return undefined;
  return parseTasksPerNode(raw, "SLURM_NTASKS_PER_NODE")[0];
}

/**
 * The host of this srun step's rendezvous store: task 0's, the first host of `SLURM_STEP_NODELIST`.
 * Unknown under `--distribution=arbitrary`, where task 0 runs on the first host of `SLURM_HOSTFILE`.
 *
 * @param env The environment.
 * @returns The host, or undefined outside an srun step (no `SLURM_STEP_ID`), without
 *   `SLURM_STEP_NODELIST`, or under an arbitrary distribution.
 * @throws {RangeError} If `SLURM_STEP_NODELIST` is malformed.
 *
 * @example
 * ```ts
 * import { slurmStoreHost } from "./_slurm.ts";
 * import assert from "node:assert/strict";
 * const env = { SLURM_JOB_ID: "4242", SLURM_STEP_ID: "0", SLURM_STEP_NODELIST: "gpu[07-08]" };
 * assert.equal(slurmStoreHost(env), "gpu07");
 * assert.equal(slurmStoreHost({ ...env, SLURM_DISTRIBUTION: "arbitrary" }), undefined);
 * ```
 */
export function slurmStoreHost(env: Readonly<Record<string, string | undefined>>): string | undefined {
  const list = env["SLURM_STEP_NODELIST"];
  if (stepIds(env) === undefined || list === undefined) return undefined;
  if ((env["SLURM_DISTRIBUTION"] ?? "").startsWith("arbitrary")) return undefined;
  return parseHostList(list, "SLURM_STEP_NODELIST")[0];
}

/**
 * The port of this srun step's rendezvous store: `DCOMM_SLURM_PORT` if set, else {@linkcode slurmPort} of
 * `SLURM_JOB_ID` and `SLURM_STEP_ID`.
 *
 * @param env The environment.
 * @returns The port, or undefined outside an srun step (no `SLURM_STEP_ID`).
 * @throws {RangeError} If `DCOMM_SLURM_PORT` is not in 1..65535, or an id is not an integer.
 *
 * @example
 * ```ts
 * import { slurmStorePort } from "./_slurm.ts";
 * import assert from "node:assert/strict";
 * const env = { SLURM_JOB_ID: "4242", SLURM_STEP_ID: "0" };
 * assert.equal(slurmStorePort(env), 30762);
 * assert.equal(slurmStorePort({ ...env, DCOMM_SLURM_PORT: "29400" }), 29400);
 * assert.equal(slurmStorePort({ SLURM_JOB_ID: "4242" }), undefined);
 * ```
 */
export function slurmStorePort(env: Readonly<Record<string, string | undefined>>): number | undefined {
  const ids = stepIds(env);
  if (ids === undefined) return undefined;
  const port = integer(env, "DCOMM_SLURM_PORT");
  if (port !== undefined && (port < 1 || port > 65535)) {
    throw new RangeError(`Invalid DCOMM_SLURM_PORT: expected 1..65535, found ${port}`);
  }
  return port ?? slurmPort(ids.jobId, ids.stepId);
}
