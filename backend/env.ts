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
  // `[::1]` or `::1`: the address is kept without brackets (they go back only before a port).
  let masterAddr = env["MASTER_ADDR"]?.trim() ? unbracket(env["MASTER_ADDR"]) : undefined;
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
 * Parses an init method URL: `env://` or `tcp://host:port`, an IPv6 address in brackets
 * (`tcp://[::1]:29500`).
 *
 * @param url The init method.
 * @returns The store address it names (`undefined` fields for `env://`, which reads MASTER_ADDR/PORT); an
 * IPv6 host without its brackets.
 * @throws {TypeError} If the scheme is neither `env` nor `tcp`, or a tcp URL lacks a port.
 */
export function parseInitMethod(url: string): { hostname?: string; port?: number } {
  if (url === "env://" || url === "env:") return {};
  const m = /^tcp:\/\/(\[[0-9A-Fa-f:.%\w-]+\]|[^:/\[\]]+):(\d+)\/?$/.exec(url);
  if (!m) {
    const bare = /^tcp:\/\/[^[\]/]*:[^[\]/]*:/.test(url);
    throw new TypeError(
      `Invalid init method: expected "env://" or "tcp://host:port", found "${url}"` +
        (bare ? "; put the IPv6 address in brackets, as tcp://[::1]:29500" : ""),
    );
  }
  const port = Number(m[2]);
  if (port > 65535) throw new RangeError(`Invalid init method port: expected 0..65535, found ${port}`);
  return { hostname: unbracket(m[1]), port };
}

/**
 * A host without the brackets an IPv6 address has before a port: `[::1]` → `::1`; others as they are.
 *
 * @param host A host name or address, maybe in brackets.
 * @returns The host without brackets.
 */
export function unbracket(host: string): string {
  const m = /^\[(.*)\]$/.exec(host.trim());
  return m ? m[1] : host.trim();
}

/**
 * Whether `host` is an IPv6 address literal (it has a colon; brackets are allowed).
 *
 * @param host A host name or address.
 * @returns Whether it is IPv6.
 */
export function isIPv6(host: string): boolean {
  return unbracket(host).includes(":");
}

/**
 * `host:port` as it is written and dialed: an IPv6 address in brackets (`[::1]:29500`).
 *
 * @param host A host name or address (an IPv6 one with or without brackets).
 * @param port The port.
 * @returns The address.
 */
export function hostPort(host: string, port: number | string | undefined): string {
  const h = unbracket(host);
  return `${h.includes(":") ? `[${h}]` : h}:${port}`;
}

/**
 * Whether `host` names this machine's loopback interface (`127.x.x.x`, `localhost`, `::1` in any spelling,
 * with or without brackets, or an IPv4-mapped `::ffff:127.x.x.x`): a store or listener for it binds to
 * loopback ({@linkcode bindHostname}), and a rank meeting a loopback master publishes loopback too.
 *
 * @param host A host name or address.
 * @returns Whether it is loopback.
 *
 * @example
 * ```ts
 * import { isLoopback } from "./env.ts";
 * import assert from "node:assert/strict";
 * assert.equal(isLoopback("127.0.0.1"), true);
 * assert.equal(isLoopback("[::1]"), true);
 * assert.equal(isLoopback("10.0.0.1"), false);
 * ```
 */
export function isLoopback(host: string): boolean {
  const h = unbracket(host).toLowerCase();
  if (/^(127\.|localhost$)/.test(h)) return true;
  return h === "::1" || /^(0{1,4}:){7}0{0,3}1$/.test(h) || (isMappedIPv4(h) && /:127\.[\d.]+$/.test(h));
}

/** An IPv4 address written as IPv6 (`::ffff:10.0.0.1`): its family, to a socket, is IPv4's. */
function isMappedIPv4(host: string): boolean {
  return /^(::|(0{1,4}:){5})ffff:\d+\.\d+\.\d+\.\d+$/i.test(unbracket(host));
}

/**
 * The address a server for clients that dial `host` binds: loopback for a loopback host (`::1` for an
 * IPv6 one, else 127.0.0.1), else every interface of the host's family (`::` for an IPv6 address, else
 * 0.0.0.0).
 *
 * @param host The address clients dial (the master's).
 * @returns The address to listen on.
 *
 * @example
 * ```ts
 * import { bindHostname } from "./env.ts";
 * import assert from "node:assert/strict";
 * assert.deepEqual(["::1", "fd00::2", "127.0.0.1", "10.0.0.1"].map(bindHostname), ["::1", "::", "127.0.0.1", "0.0.0.0"]);
 * ```
 */
export function bindHostname(host: string): string {
  const v6 = isIPv6(host) && !isMappedIPv4(host);
  if (isLoopback(host)) return v6 ? "::1" : "127.0.0.1";
  return v6 ? "::" : "0.0.0.0";
}

/**
 * The address a rank's TCP listener publishes when none is given: loopback when the master is (`::1` for
 * an IPv6 master, else 127.0.0.1), else this machine's first address of the master's family that peers can
 * dial (an IPv6 one that is not link-local for an IPv6 master, else the first non-loopback IPv4: its
 * address in its network namespace, on the emulated cluster).
 *
 * @param master The master's (the store's) address.
 * @returns The address.
 *
 * @example
 * ```ts
 * import { defaultHostname } from "./env.ts";
 * import assert from "node:assert/strict";
 * assert.equal(defaultHostname("127.0.0.1"), "127.0.0.1");
 * assert.equal(defaultHostname("::1"), "::1");
 * ```
 */
export function defaultHostname(master: string): string {
  const v6 = isIPv6(master) && !isMappedIPv4(master);
  if (isLoopback(master)) return v6 ? "::1" : "127.0.0.1";
  const nics = Deno.networkInterfaces();
  if (v6) {
    for (const nic of nics) {
      if (nic.family === "IPv6" && !isLoopback(nic.address) && !/^fe[89ab]/i.test(nic.address)) {
        return nic.address;
      }
    }
  }
  for (const nic of nics) {
    if (nic.family === "IPv4" && !nic.address.startsWith("127.")) return nic.address;
  }
  return "127.0.0.1";
}

/**
 * The variable dcomm's launcher sets, for every rank, to its own pid: {@linkcode watchLauncher} (started
 * by `init()`) makes a rank exit when that launcher is gone.
 */
export const LAUNCHER_PID_ENV = "DCOMM_LAUNCHER_PID";

/** Whether this thread watches its launcher already. */
let watching = false;

/** A process's state and start time from `/proc/<pid>/stat`; "gone" without it; undefined without /proc. */
function procStat(pid: number): { state: string; start: string } | "gone" | undefined {
  let text: string;
  try {
    text = Deno.readTextFileSync(`/proc/${pid}/stat`);
  } catch (e) {
    if (e instanceof Deno.errors.NotFound) {
      try {
        Deno.statSync("/proc/self/stat");
        return "gone"; // /proc is there, the process is not.
      } catch {
        return undefined;
      }
    }
    return undefined; // No --allow-read, or no /proc: only the parent pid can tell.
  }
  // "pid (comm) state ppid ...": comm may hold spaces and parentheses; field 22 is the start time.
  const fields = text.slice(text.lastIndexOf(")") + 2).split(" ");
  return { state: fields[0], start: fields[19] };
}

/**
 * Makes this rank exit when the launcher that started it is gone (killed with SIGKILL, say, so that it
 * could not stop its ranks): when `DCOMM_LAUNCHER_PID` is set, a timer checks every second whether this
 * process's parent changed (the launcher died and the process was re-parented, to pid 1 or a subreaper),
 * and, where `/proc` is readable, whether the launcher's pid is gone, a zombie, or another process now
 * (ranks started through a wrapper, such as a shell script with `--no-deno`). Then the rank says so on
 * stderr and sends itself SIGTERM, as the launcher would have: its SIGTERM listeners run, and without one
 * it ends with code 143; one that keeps running is ended with code 1 after 5 s.
 *
 * The timer does not keep the process alive, and nothing reads stdin: a script that reads its stdin still
 * gets all of it (the launcher gives its ranks none, /dev/null, but a wrapper may). Once per thread; no
 * permission is needed beyond `--allow-read` for the `/proc` check (without it, only the parent is watched).
 *
 * @param env The environment, e.g. `Deno.env.toObject()`.
 * @param everyMs How often to check. @default 1000
 * @returns Whether a watch started (false without `DCOMM_LAUNCHER_PID`, or when one runs already).
 */
export function watchLauncher(env: Readonly<Record<string, string | undefined>>, everyMs = 1000): boolean {
  const raw = env[LAUNCHER_PID_ENV]?.trim();
  if (watching || raw === undefined || !/^\d+$/.test(raw)) return false;
  const launcher = Number(raw);
  const parent = Deno.ppid;
  const first = procStat(launcher);
  const startedAt = typeof first === "object" ? first.start : undefined;
  const gone = (): boolean => {
    if (Deno.ppid !== parent) return true;
    // Started after the launcher died, re-parented already (no /proc to tell more).
    if (parent === 1 && launcher !== 1) return true;
    if (first === undefined) return false;
    const now = procStat(launcher);
    if (now === undefined) return false;
    return now === "gone" || now.state === "Z" || now.state === "X" || now.start !== startedAt;
  };
  watching = true;
  const timer = setInterval(() => {
    if (!gone()) return;
    clearInterval(timer);
    const rank = env["RANK"] === undefined ? "a rank" : `rank ${env["RANK"]}`;
    try {
      console.error(
        `dcomm: ${rank} (pid ${Deno.pid}) stops: its launcher (pid ${launcher}) is gone, so nothing would ` +
          "stop it or read its output (exiting as if the launcher had sent SIGTERM)",
      );
    } catch { /* its stderr went with the launcher */ }
    try {
      Deno.kill(Deno.pid, "SIGTERM");
    } catch {
      Deno.exit(1); // No --allow-run: no signal to itself.
    }
    const force = setTimeout(() => Deno.exit(1), 5000);
    Deno.unrefTimer(force);
  }, everyMs);
  Deno.unrefTimer(timer);
  return true;
}
