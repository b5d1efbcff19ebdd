/**
 * Where a rank learns who it is: torchrun's variables (`RANK`, `WORLD_SIZE`, `LOCAL_RANK`,
 * `LOCAL_WORLD_SIZE`, `MASTER_ADDR`, `MASTER_PORT`), Slurm's (`SLURM_PROCID`, `SLURM_NTASKS`,
 * `SLURM_LOCALID`), and MPI launchers' (`PMI_RANK`/`PMI_SIZE` of MPICH and Hydra,
 * `OMPI_COMM_WORLD_RANK`/`OMPI_COMM_WORLD_SIZE` of Open MPI), in that order of precedence.
 *
 * @module
 */

/**
 * A rank's place in the world and where the rendezvous store is.
 *
 * @example From Slurm's variables
 * ```ts
 * import { type RankInfo, rankInfo } from "./env.ts";
 * import assert from "node:assert/strict";
 * const env = { SLURM_PROCID: "5", SLURM_NTASKS: "8", SLURM_LOCALID: "1", SLURM_NTASKS_PER_NODE: "4(x2)" };
 * const info: RankInfo = rankInfo(env);
 * assert.deepEqual(info, {
 *   rank: 5,
 *   worldSize: 8,
 *   localRank: 1,
 *   localWorldSize: 4,
 *   masterAddr: undefined,
 *   masterPort: undefined,
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
  /** Which family of variables gave the rank: `"torchrun"`, `"slurm"`, `"pmi"`, `"ompi"` or `"options"`. */
  source: string;
}

const FAMILIES: readonly (readonly [string, string, string, string | undefined, string | undefined])[] = [
  ["torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"],
  ["slurm", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_NTASKS_PER_NODE"],
  ["pmi", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS"],
  [
    "ompi",
    "OMPI_COMM_WORLD_RANK",
    "OMPI_COMM_WORLD_SIZE",
    "OMPI_COMM_WORLD_LOCAL_RANK",
    "OMPI_COMM_WORLD_LOCAL_SIZE",
  ],
];

/**
 * Parses a non-negative integer from an environment variable.
 *
 * @throws {RangeError} If the value is not a non-negative integer.
 */
function int(env: Readonly<Record<string, string | undefined>>, name: string): number | undefined {
  const raw = env[name];
  if (raw === undefined || raw === "") return undefined;
  // Slurm writes tasks-per-node as "4(x2)" on heterogeneous allocations; the first count is ours.
  const text = name === "SLURM_NTASKS_PER_NODE" ? raw.split(/[(,]/)[0] : raw;
  if (!/^\d+$/.test(text.trim())) {
    throw new RangeError(`Invalid ${name}: expected a non-negative integer, found "${raw}"`);
  }
  return Number(text.trim());
}

/**
 * Options of {@linkcode rankInfo}: explicit values win over the environment.
 *
 * @example Explicit values win
 * ```ts
 * import { rankInfo, type RankInfoOptions } from "./env.ts";
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
 * Reads a rank's place in the world from `env` (explicit options win).
 *
 * @param env The environment, e.g. `Deno.env.toObject()`.
 * @param options Explicit rank and world size.
 * @returns The rank info.
 * @throws {RangeError} If no rank or world size can be found, the world size is 0, or the rank is not
 * below it.
 *
 * @example From torchrun's variables
 * ```ts
 * import { rankInfo } from "./env.ts";
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
  for (const [name, r, w, lr, lw] of FAMILIES) {
    const er = int(env, r);
    const ew = int(env, w);
    if (er === undefined && ew === undefined) continue;
    if (rank === undefined) rank = er;
    if (worldSize === undefined) worldSize = ew;
    localRank = lr === undefined ? undefined : int(env, lr);
    localWorldSize = lw === undefined ? undefined : int(env, lw);
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
  const port = int(env, "MASTER_PORT");
  if (port !== undefined && port > 65535) {
    throw new RangeError(`Invalid MASTER_PORT: expected 0..65535, found ${port}`);
  }
  return {
    rank,
    worldSize,
    localRank: localRank ?? (worldSize === 1 ? 0 : rank),
    localWorldSize: localWorldSize ?? worldSize,
    masterAddr: env["MASTER_ADDR"] || undefined,
    masterPort: port,
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
