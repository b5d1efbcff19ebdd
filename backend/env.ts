/**
 * Where a rank learns who it is: torchrun's variables (`RANK`, `WORLD_SIZE`, `LOCAL_RANK`,
 * `LOCAL_WORLD_SIZE`, `MASTER_ADDR`, `MASTER_PORT`), MPI launchers' (`PMI_RANK`/`PMI_SIZE` of MPICH and
 * Hydra, `OMPI_COMM_WORLD_RANK`/`OMPI_COMM_WORLD_SIZE` of Open MPI) and Slurm's (`SLURM_PROCID`,
 * `SLURM_STEP_NUM_TASKS` or `SLURM_NTASKS`, `SLURM_LOCALID`), in that order of precedence: an MPI launcher
 * run inside a Slurm allocation starts its ranks under one Slurm task, so they all inherit that task's
 * `SLURM_PROCID`, while srun's own PMI (`srun --mpi=pmi2`) sets `PMI_RANK` equal to it.
 *
 * Under srun nothing needs to be set by hand: when the world is srun's step and `MASTER_ADDR` or
 * `MASTER_PORT` is missing, the store is on the step's first host (where task 0 runs) at a port derived
 * from the job and step ids (`backend/_slurm.ts`; `DCOMM_SLURM_PORT` overrides it).
 *
 * @module
 */
import { slurmLocalWorldSize, slurmStepTasks, slurmStoreHost, slurmStorePort } from "./_slurm.ts";

/**
 * A rank's place in the world and where the rendezvous store is.
 *
 * @example From the variables srun sets (`srun -N 2 -n 8`, task 5)
 * ```ts
 * import { type RankInfo, rankInfo } from "@dcomm/dcomm";
 * import assert from "node:assert/strict";
 * const env = {
 *   SLURM_JOB_ID: "4242",
 *   SLURM_STEP_ID: "0",
 *   SLURM_PROCID: "5",
 *   SLURM_STEP_NUM_TASKS: "8",
 *   SLURM_LOCALID: "1",
 *   SLURM_NODEID: "1",
 *   SLURM_STEP_NODELIST: "gpu[07-08]",
 *   SLURM_STEP_TASKS_PER_NODE: "4(x2)",
 * };
 * const info: RankInfo = rankInfo(env);
 * assert.deepEqual(info, {
 *   rank: 5,
 *   worldSize: 8,
 *   localRank: 1,
 *   localWorldSize: 4,
 *   masterAddr: "gpu07",
 *   masterPort: 30762, // 12000 + (61 × 4242 + 0) mod 20000
 *   addressSource: "slurm",
 *   source: "slurm",
 * });
 * ```
 */
export interface RankInfo {
  /** This process's rank. */
  rank: number;
  /** The number of ranks. */
  worldSize: number;
  /** The rank among the processes of this host. */
  localRank: number;
  /** The number of ranks on this host. */
  localWorldSize: number;
  /** The store's host, if known. */
  masterAddr: string | undefined;
  /** The store's port, if known. */
  masterPort: number | undefined;
  /**
   * Where `masterAddr` and `masterPort` came from, for messages: `"env"` (`MASTER_ADDR`/`MASTER_PORT`),
   * `"slurm"` when srun's variables gave either (the step's first host, the port of its job and step ids
   * or `DCOMM_SLURM_PORT`), `undefined` when neither is known.
   */
  addressSource: "env" | "slurm" | undefined;
  /** Which family of variables gave the rank: `"torchrun"`, `"slurm"`, `"pmi"`, `"ompi"` or `"options"`. */
  source: string;
}

/** Each family: its name, the rank's variable, the world size's (first set wins), the local ones. */
const FAMILIES:
  readonly (readonly [string, string, readonly string[], string | undefined, string | undefined])[] = [
    ["torchrun", "RANK", ["WORLD_SIZE"], "LOCAL_RANK", "LOCAL_WORLD_SIZE"],
    ["pmi", "PMI_RANK", ["PMI_SIZE"], "MPI_LOCALRANKID", "MPI_LOCALNRANKS"],
    [
      "ompi",
      "OMPI_COMM_WORLD_RANK",
      ["OMPI_COMM_WORLD_SIZE"],
      "OMPI_COMM_WORLD_LOCAL_RANK",
      "OMPI_COMM_WORLD_LOCAL_SIZE",
    ],
    // The step's count first: inside an allocation SLURM_NTASKS of the batch script is the job's.
    ["slurm", "SLURM_PROCID", ["SLURM_STEP_NUM_TASKS", "SLURM_NTASKS"], "SLURM_LOCALID", undefined],
  ];

/**
 * Parses a non-negative integer from an environment variable.
 *
 * @throws {RangeError} If the value is not a non-negative integer.
 */
function int(env: Readonly<Record<string, string | undefined>>, name: string): number | undefined {
  const raw = env[name];
  if (raw === undefined || raw === "") return undefined;
  if (!/^\d+$/.test(raw.trim())) {
    throw new RangeError(`Invalid ${name}: expected a non-negative integer, found "${raw}"`);
  }
  return Number(raw.trim());
}

/**
 * Options of {@linkcode rankInfo}: explicit values win over the environment.
 *
 * @example Explicit values win
 * ```ts
 * import { rankInfo, type RankInfoOptions } from "@dcomm/dcomm";
 * import assert from "node:assert/strict";
 * const options: RankInfoOptions = { rank: 0, worldSize: 2 };
 * const info = rankInfo({ RANK: "3", WORLD_SIZE: "4" }, options);
 * assert.deepEqual([info.rank, info.worldSize], [0, 2]);
 * assert.equal(rankInfo({}, { rank: 0, worldSize: 1 }).source, "options");
 * ```
 */
export interface RankInfoOptions {
  /** This rank. @default from the environment */
  rank?: number;
  /** The number of ranks. @default from the environment */
  worldSize?: number;
}

/**
 * Reads a rank's place in the world from `env` (explicit options win). Under srun, when the world is the
 * step's (its rank and size agree with `SLURM_PROCID` and the step's task count) and has more than one
 * rank, a missing `MASTER_ADDR` is the step's first host and a missing `MASTER_PORT` the port of its job and
 * step ids (or `DCOMM_SLURM_PORT`); the local rank and size are the task's on its node.
 *
 * @param env The environment, e.g. `Deno.env.toObject()`.
 * @param options Explicit rank and world size.
 * @returns The rank info.
 * @throws {RangeError} If no rank or world size can be found, the world size is 0, the rank is not below
 * it, or a variable is malformed (`MASTER_PORT` above 65535, Slurm's node or task lists).
 *
 * @example From torchrun's variables
 * ```ts
 * import { rankInfo } from "@dcomm/dcomm";
 * import assert from "node:assert/strict";
 * const info = rankInfo({ RANK: "1", WORLD_SIZE: "4", MASTER_ADDR: "10.0.0.1", MASTER_PORT: "29500" });
 * assert.equal(info.rank, 1);
 * assert.equal(info.masterPort, 29500);
 * ```
 */
export function rankInfo(
  env: Readonly<Record<string, string | undefined>>,
  options: RankInfoOptions = {},
): RankInfo {
  let rank = options.rank;
  let worldSize = options.worldSize;
  let localRank: number | undefined;
  let localWorldSize: number | undefined;
  let source = "options";
  for (const [name, r, ws, lr, lw] of FAMILIES) {
    const er = int(env, r);
    const ew = ws.map((w) => int(env, w)).find((v) => v !== undefined);
    if (er === undefined && ew === undefined) continue;
    if (rank === undefined) rank = er;
    if (worldSize === undefined) worldSize = ew;
    localRank = lr === undefined ? undefined : int(env, lr);
    localWorldSize = lw === undefined ? undefined : int(env, lw);
    if (name === "slurm") localWorldSize = slurmLocalWorldSize(env);
    source = name;
    break;
  }
  if (rank === undefined || worldSize === undefined) {
    throw new RangeError(
      `Cannot find this process's rank: expected RANK and WORLD_SIZE (torchrun), SLURM_PROCID and ` +
        `SLURM_NTASKS, PMI_RANK and PMI_SIZE, or OMPI_COMM_WORLD_RANK and OMPI_COMM_WORLD_SIZE in the ` +
        `environment, or { rank, worldSize } in the options; found rank ${rank} and world size ${worldSize}`,
    );
  }
  if (!Number.isInteger(worldSize) || worldSize < 1) {
    throw new RangeError(`Invalid world size: expected an integer >= 1, found ${worldSize}`);
  }
  if (!Number.isInteger(rank) || rank < 0 || rank >= worldSize) {
    throw new RangeError(`Invalid rank: expected an integer in 0..${worldSize - 1}, found ${rank}`);
  }
  let masterPort = int(env, "MASTER_PORT");
  if (masterPort !== undefined && masterPort > 65535) {
    throw new RangeError(`Invalid MASTER_PORT: expected 0..65535, found ${masterPort}`);
  }
  let masterAddr = env["MASTER_ADDR"] || undefined;
  let addressSource: RankInfo["addressSource"] = masterAddr !== undefined || masterPort !== undefined
    ? "env"
    : undefined;
  // The world is srun's step (whichever family named it: srun --mpi=pmi2 sets PMI_RANK too) when it agrees
  // with Slurm's task id and count; a world of one needs no store address.
  if (
    worldSize > 1 && (masterAddr === undefined || masterPort === undefined) &&
    slurmStepTasks(env) === worldSize && int(env, "SLURM_PROCID") === rank
  ) {
    const host = masterAddr ?? slurmStoreHost(env);
    // No port without a host: rank 0 would serve on loopback while the others found no address.
    const port = masterPort ?? (host === undefined ? undefined : slurmStorePort(env));
    if (host !== masterAddr || port !== masterPort) addressSource = "slurm";
    masterAddr = host;
    masterPort = port;
    if (source !== "slurm") {
      localRank ??= int(env, "SLURM_LOCALID");
      localWorldSize ??= slurmLocalWorldSize(env);
    }
  }
  return {
    rank,
    worldSize,
    localRank: localRank ?? (worldSize === 1 ? 0 : rank),
    localWorldSize: localWorldSize ?? worldSize,
    masterAddr,
    masterPort,
    addressSource,
    source,
  };
}

/**
 * Parses an init method URL: `env://` or `tcp://host:port`.
 *
 * @param url The init method.
 * @returns The store address it names (`undefined` fields for `env://`, which reads MASTER_ADDR/PORT).
 * @throws {TypeError} If the scheme is neither `env` nor `tcp`, or a tcp URL lacks a port.
 */
export function parseInitMethod(url: string): { hostname?: string; port?: number } {
  if (url === "env://" || url === "env:") return {};
  const m = /^tcp:\/\/(\[[^\]]+\]|[^:/]+):(\d+)\/?$/.exec(url);
  if (!m) {
    throw new TypeError(`Invalid init method: expected "env://" or "tcp://host:port", found "${url}"`);
  }
  const port = Number(m[2]);
  if (port > 65535) throw new RangeError(`Invalid init method port: expected 0..65535, found ${port}`);
  return { hostname: m[1].replace(/^\[|\]$/g, ""), port };
}

/**
 * Whether `host` names this machine's loopback interface (`127.x.x.x`, `localhost`, `::1`): a store or
 * listener for it binds to 127.0.0.1, and a rank meeting a loopback master publishes 127.0.0.1 too.
 *
 * @param host A host name or address.
 * @returns Whether it is loopback.
 *
 * @example
 * ```ts
 * import { isLoopback } from "./env.ts";
 * import assert from "node:assert/strict";
 * assert.equal(isLoopback("127.0.0.1"), true);
 * assert.equal(isLoopback("10.0.0.1"), false);
 * ```
 */
export function isLoopback(host: string): boolean {
  return /^(127\.|localhost$|::1$)/.test(host);
}

/**
 * The address a rank's TCP listener publishes when none is given: loopback when the master is, else this
 * machine's first non-loopback IPv4 address (its address in its network namespace, on the emulated
 * cluster).
 *
 * @param master The master's (the store's) address.
 * @returns The address.
 *
 * @example
 * ```ts
 * import { defaultHostname } from "./env.ts";
 * import assert from "node:assert/strict";
 * assert.equal(defaultHostname("127.0.0.1"), "127.0.0.1");
 * ```
 */
export function defaultHostname(master: string): string {
  if (isLoopback(master)) return "127.0.0.1";
  for (const nic of Deno.networkInterfaces()) {
    if (nic.family === "IPv4" && !nic.address.startsWith("127.")) return nic.address;
  }
  return "127.0.0.1";
}
