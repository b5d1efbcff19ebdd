/**
 * The launcher's command line, read as torchrun reads its own: the flags (both spellings, `--flag=value`,
 * short `-r`/`-t`), each falling back to its `PET_<FLAG>` variable (torchrun's and Kubeflow's PyTorchJob's),
 * up to the script. `launch.ts` re-exports what is public.
 *
 * @module
 */
import type { LaunchOptions, StdSpec, StdStreams } from "./launch.ts";

/**
 * A command line {@linkcode parseLaunchArgs} cannot read: an unknown flag, a flag without its value, a
 * value of the wrong form. The CLI prints its message and a usage line, and exits with code 2.
 *
 * @example A flag without its value
 * ```ts
 * import { LaunchUsageError, parseLaunchArgs } from "@dcomm/dcomm/launch";
 * import assert from "node:assert/strict";
 * assert.throws(() => parseLaunchArgs(["--nproc-per-node"], {}), LaunchUsageError);
 * assert.throws(() => parseLaunchArgs(["--nprocs", "2", "train.ts"], {}), { name: "LaunchUsageError" });
 * ```
 */
export class LaunchUsageError extends Error {
  /**
   * Makes the error.
   *
   * @param message What was expected and what was found.
   */
  constructor(message: string) {
    super(message);
    this.name = "LaunchUsageError";
  }
}

/**
 * What {@linkcode parseLaunchArgs} read from a command line and the environment.
 *
 * @example `--help`, and a command line with the variable it fell back to
 * ```ts
 * import { type LaunchArgs, parseLaunchArgs } from "@dcomm/dcomm/launch";
 * import assert from "node:assert/strict";
 * const help: LaunchArgs = parseLaunchArgs(["--help"], {});
 * assert.equal(help.help, true);
 * assert.equal(help.options, undefined);
 * const args = parseLaunchArgs(["--monitor-interval", "5", "train.ts"], { PET_NPROC_PER_NODE: "4" });
 * assert.equal(args.options?.nprocPerNode, 4);
 * assert.deepEqual(args.fromEnv, { PET_NPROC_PER_NODE: "4" });
 * assert.equal(args.monitorInterval, 5);
 * ```
 */
export interface LaunchArgs {
  /** Whether `-h`/`--help` was given (then nothing else is read). */
  help: boolean;
  /** The job; undefined with `help`. */
  options: LaunchOptions | undefined;
  /** The `PET_*` variables that gave a value, by name (those a flag overrode are left out). */
  fromEnv: Record<string, string>;
  /** `--monitor-interval`, in seconds: accepted and checked, but the launcher hears of exits at once. */
  monitorInterval: number;
}

type Flag =
  | "nproc-per-node"
  | "nnodes"
  | "node-rank"
  | "master-addr"
  | "master-port"
  | "standalone"
  | "rdzv-endpoint"
  | "rdzv-backend"
  | "rdzv-id"
  | "max-restarts"
  | "fault-tolerant"
  | "monitor-interval"
  | "log-dir"
  | "redirects"
  | "tee"
  | "deno-args"
  | "store-protocol"
  | "no-deno"
  | "no-python"
  | "help";

const SWITCHES: ReadonlySet<Flag> = new Set(["standalone", "fault-tolerant", "no-deno", "no-python", "help"]);
const FLAGS: ReadonlySet<string> = new Set<Flag>([
  "nproc-per-node",
  "nnodes",
  "node-rank",
  "master-addr",
  "master-port",
  "standalone",
  "rdzv-endpoint",
  "rdzv-backend",
  "rdzv-id",
  "max-restarts",
  "fault-tolerant",
  "monitor-interval",
  "log-dir",
  "redirects",
  "tee",
  "deno-args",
  "store-protocol",
  "no-deno",
  "no-python",
  "help",
]);
const SHORT: Readonly<Record<string, Flag>> = { "-r": "redirects", "-t": "tee", "-h": "help" };
// torchrun's flags that have no meaning here, named as such when given.
const TORCHRUN_ONLY: ReadonlySet<string> = new Set([
  "rdzv-conf",
  "start-method",
  "event-log-handler",
  "role",
  "module",
  "run-path",
  "local-ranks-filter",
  "duplicate-stdout-filters",
  "duplicate-stderr-filters",
  "local-addr",
  "logs-specs",
  "numa-binding",
  "signals-to-handle",
  "shutdown-timeout",
  "virtual-local-rank",
]);
// One setting, the store's address, given four ways: a flag for any of them drops the PET_* of the others.
const ADDRESS: readonly Flag[] = ["master-addr", "master-port", "rdzv-endpoint", "standalone"];

/** The variable torchrun reads a flag from: `--nproc-per-node` → `PET_NPROC_PER_NODE`. */
function envName(flag: Flag): string {
  return `PET_${flag.toUpperCase().replaceAll("-", "_")}`;
}

function parseStd(text: string, source: string): StdSpec {
  if (/^[0-3]$/.test(text)) return Number(text) as StdStreams;
  if (/^\d+:[0-3](,\d+:[0-3])*$/.test(text)) {
    const spec: Record<number, StdStreams> = {};
    for (const pair of text.split(",")) {
      const [local, streams] = pair.split(":");
      spec[Number(local)] = Number(streams) as StdStreams;
    }
    return spec;
  }
  throw new LaunchUsageError(
    `Invalid ${source}: expected 0 (none), 1 (stdout), 2 (stderr) or 3 (both), or one per local rank ` +
      `as 0:3,1:2, found "${text}"`,
  );
}

/**
 * Reads the launcher's command line as torchrun does: its flags (both `--a-b` and `--a_b`, `--flag value`
 * and `--flag=value`, `-r 3`), each falling back to its `PET_<FLAG>` variable, up to the script (the first
 * argument that is not a flag, or the one after `--`); the rest is the script's. Forms are checked here
 * (numbers, `MIN:MAX` with MIN == MAX, `--rdzv-backend`, `--redirects`); {@linkcode launch} checks how
 * the values go together.
 *
 * @param args The arguments after `launch.ts`.
 * @param env The variables to read `PET_*` from. @default the process's (none without --allow-env)
 * @returns The options for {@linkcode launch}, or `help`.
 * @throws {LaunchUsageError} For an unknown flag, a flag missing its value, a value of the wrong form, an
 * elastic node range, an unsupported rendezvous backend, or no script.
 *
 * @example Flags win over PyTorchJob's PET_* variables
 * ```ts
 * import { parseLaunchArgs } from "@dcomm/dcomm/launch";
 * import assert from "node:assert/strict";
 *
 * const env = { PET_NNODES: "2", PET_NODE_RANK: "1", PET_NPROC_PER_NODE: "4", PET_MASTER_ADDR: "job-master-0" };
 * const { options, fromEnv } = parseLaunchArgs(["--nproc_per_node=2", "train.ts", "--epochs", "3"], env);
 * assert.equal(options?.nprocPerNode, 2);
 * assert.equal(options?.nnodes, 2);
 * assert.equal(options?.nodeRank, 1);
 * assert.equal(options?.masterAddr, "job-master-0");
 * assert.deepEqual(options?.command, ["train.ts", "--epochs", "3"]);
 * assert.deepEqual(Object.keys(fromEnv), ["PET_NNODES", "PET_NODE_RANK", "PET_MASTER_ADDR"]);
 * ```
 */
export function parseLaunchArgs(
  args: readonly string[],
  env: Readonly<Record<string, string | undefined>> = processEnv(),
): LaunchArgs {
  const given = new Map<Flag, { value: string; as: string }>();
  let i = 0;
  for (; i < args.length; i++) {
    const arg = args[i];
    if (arg === "--") {
      i++;
      break;
    }
    if (!arg.startsWith("-") || arg === "-") break;
    let name: string;
    let key: string;
    let inline: string | undefined;
    if (arg.startsWith("--")) {
      const eq = arg.indexOf("=");
      name = eq < 0 ? arg : arg.slice(0, eq);
      inline = eq < 0 ? undefined : arg.slice(eq + 1);
      key = name.slice(2).replaceAll("_", "-");
    } else {
      name = arg.slice(0, 2);
      inline = arg.length > 2 ? arg.slice(2).replace(/^=/, "") : undefined;
      key = SHORT[name] ?? "";
    }
    if (!FLAGS.has(key)) {
      throw new LaunchUsageError(
        `Unknown flag ${name}` +
          (TORCHRUN_ONLY.has(key) ? ": it is torchrun's, and dcomm's launcher does not support it" : "") +
          "; --help lists the flags",
      );
    }
    const flag = key as Flag;
    if (SWITCHES.has(flag)) {
      if (inline !== undefined) {
        throw new LaunchUsageError(`Flag ${name} takes no value, found "${inline}"`);
      }
      if (flag === "help") return { help: true, options: undefined, fromEnv: {}, monitorInterval: 0.1 };
      given.set(flag, { value: "1", as: name });
      continue;
    }
    let value = inline;
    if (value === undefined) {
      const next = args[i + 1];
      // A value may begin with "-" (a negative number is refused later, by its check); one that is a flag
      // means this flag's value is missing. --deno-args' values are flags of deno run.
      const isFlag = next !== undefined && flag !== "deno-args" && /^-[^\d.]/.test(next);
      if (next === undefined || isFlag) {
        throw new LaunchUsageError(
          `Flag ${name} expects a value, found ${next === undefined ? "nothing" : `the flag ${next}`}`,
        );
      }
      value = next;
      i++;
    }
    given.set(flag, { value, as: name });
  }

  const fromEnv: Record<string, string> = {};
  const addressByFlag = ADDRESS.some((f) => given.has(f));
  /** A flag's value and where it came from, the flag winning over its variable. */
  const read = (flag: Flag): { value: string; source: string } | undefined => {
    const g = given.get(flag);
    if (g) return { value: g.value, source: g.as };
    if (addressByFlag && ADDRESS.includes(flag)) return undefined;
    const name = envName(flag);
    const value = env[name]?.trim();
    if (value === undefined || value === "") return undefined;
    fromEnv[name] = value;
    return { value, source: name };
  };
  const int = (flag: Flag): number | undefined => {
    const r = read(flag);
    if (r === undefined) return undefined;
    if (!/^\d+$/.test(r.value)) {
      throw new LaunchUsageError(`Invalid ${r.source}: expected a non-negative integer, found "${r.value}"`);
    }
    return Number(r.value);
  };
  const on = (flag: Flag): boolean => {
    const r = read(flag);
    if (r === undefined) return false;
    // torchrun's check_env: an integer, true unless 0.
    if (!/^-?\d+$/.test(r.value)) {
      throw new LaunchUsageError(`Invalid ${r.source}: expected 0 or 1, found "${r.value}"`);
    }
    return Number(r.value) !== 0;
  };

  const nprocRead = read("nproc-per-node");
  let nprocPerNode: LaunchOptions["nprocPerNode"] = 1; // torchrun's default
  if (nprocRead) {
    const v = nprocRead.value;
    if (/^\d+$/.test(v)) nprocPerNode = Number(v);
    else if (v === "auto" || v === "cpu" || v === "gpu") nprocPerNode = v;
    else {
      throw new LaunchUsageError(
        `Invalid ${nprocRead.source}: expected a positive integer or auto, cpu or gpu, found "${v}"`,
      );
    }
  }
  let nnodes: number | undefined;
  const nnodesRead = read("nnodes");
  if (nnodesRead) {
    const m = /^(\d+)(?::(\d+))?$/.exec(nnodesRead.value);
    if (!m) {
      throw new LaunchUsageError(
        `Invalid ${nnodesRead.source}: expected a number of nodes N (or N:N), found "${nnodesRead.value}"`,
      );
    }
    if (m[2] !== undefined && m[1] !== m[2]) {
      throw new LaunchUsageError(
        `Elastic ${nnodesRead.source} ${nnodesRead.value} is not supported: dcomm's launcher runs a fixed ` +
          `number of nodes; expected N or N:N (MIN == MAX), found MIN ${m[1]} and MAX ${m[2]}`,
      );
    }
    nnodes = Number(m[1]);
  }
  const backend = read("rdzv-backend");
  if (backend && backend.value !== "c10d" && backend.value !== "static") {
    throw new LaunchUsageError(
      `Unsupported ${backend.source} ${backend.value}: expected c10d or static (dcomm's launcher serves ` +
        `node 0's TCP store itself; etcd, etcd-v2 and other rendezvous backends are not supported)`,
    );
  }
  let monitorInterval = 0.1; // torchrun's default
  const monitor = read("monitor-interval");
  if (monitor) {
    monitorInterval = Number(monitor.value);
    if (!/^[\d.eE+-]+$/.test(monitor.value) || !Number.isFinite(monitorInterval) || monitorInterval <= 0) {
      throw new LaunchUsageError(
        `Invalid ${monitor.source}: expected a number of seconds > 0, found "${monitor.value}"`,
      );
    }
  }
  const protocol = read("store-protocol");
  if (protocol && protocol.value !== "dcomm" && protocol.value !== "torch") {
    throw new LaunchUsageError(
      `Invalid ${protocol.source}: expected dcomm or torch, found "${protocol.value}"`,
    );
  }
  const redirects = read("redirects");
  const tee = read("tee");
  const denoArgs = read("deno-args");
  const options: LaunchOptions = {
    nprocPerNode,
    nnodes,
    nodeRank: int("node-rank"),
    masterAddr: read("master-addr")?.value,
    masterPort: int("master-port"),
    standalone: on("standalone"),
    rdzvEndpoint: read("rdzv-endpoint")?.value,
    runId: read("rdzv-id")?.value,
    maxRestarts: int("max-restarts"),
    faultTolerant: on("fault-tolerant"),
    logDir: read("log-dir")?.value,
    redirects: redirects && parseStd(redirects.value, redirects.source),
    tee: tee && parseStd(tee.value, tee.source),
    denoArgs: denoArgs?.value.split(/\s+/).filter(Boolean),
    storeProtocol: protocol?.value as LaunchOptions["storeProtocol"],
    noDeno: on("no-deno") || on("no-python"),
    command: args.slice(i),
  };
  if (options.command.length === 0) {
    throw new LaunchUsageError("Expected a script after the flags, found none");
  }
  return { help: false, options, fromEnv, monitorInterval };
}

function processEnv(): Record<string, string | undefined> {
  try {
    return Deno.env.toObject();
  } catch {
    return {}; // No --allow-env: flags only.
  }
}
