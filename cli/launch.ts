/**
 * The launcher: `deno run -A jsr:@dcomm/dcomm/launch --nproc-per-node N script.ts [args]`, with torchrun's
 * flags and environment. It serves the rendezvous store (on node 0), starts one process per rank with
 * `RANK`, `WORLD_SIZE`, `LOCAL_RANK`, `LOCAL_WORLD_SIZE`, `GROUP_RANK`, `MASTER_ADDR`, `MASTER_PORT`, the
 * store's secret, the run id (`DCOMM_RUN_ID`) and the attempt (`DCOMM_RESTART_COUNT`) in its environment,
 * and prefixes every line a rank prints with `[rankN]:` (a line ends at `\n`, `\r\n` or `\r`, so each redraw
 * of a progress bar is a line; output without a line break goes on in pieces of 64 KiB, in linear time).
 * Every rank also gets `DCOMM_LAUNCHER_PID`: a rank's `init()` watches it, and the rank exits (as on SIGTERM)
 * within about a second of the launcher's death, even a SIGKILL that left it no time to stop its ranks;
 * nothing reads the ranks' stdin for that (it is /dev/null). If a rank exits non-zero, the launcher stops the
 * others; with `--max-restarts N` it then starts every rank of this node again as a new attempt, at most N
 * times, the store staying up; when no restart is left it prints which rank failed, its exit code and its
 * last lines, and exits non-zero itself. On SIGTERM or SIGINT it forwards the signal to every rank (SIGKILL
 * after a grace period, or at once on a second signal), says it was stopped by that signal, and exits with
 * 128 + the signal's number (143, 130), whatever the ranks' own codes. Its output carries no ANSI colour
 * codes unless stdout and stderr are terminals and `NO_COLOR` is unset: the ranks then get `NO_COLOR=1`
 * (Deno colours its uncaught-error reports even into a pipe), and escape sequences left in their lines
 * are removed.
 *
 * Flags (torchrun's, in both `--a-b` and `--a_b` spellings, and `--flag=value`; each also read from
 * `PET_<FLAG>`, e.g. `PET_NPROC_PER_NODE`, as torchrun and Kubeflow's PyTorchJob do, a flag winning over
 * its variable): `--nproc-per-node` (a number, `auto`, `cpu` or `gpu`), `--nnodes` (N, or `N:N`),
 * `--node-rank`, `--master-addr`, `--master-port`, `--standalone`, `--rdzv-endpoint host[:port]`,
 * `--rdzv-backend c10d|static`, `--rdzv-id`, `--max-restarts`, `--fault-tolerant` (dcomm's own: a failed rank
 * does not stop the others), `--monitor-interval`, `--log-dir`,
 * `-r`/`--redirects`, `-t`/`--tee`, `--deno-args`, `--no-deno` (alias `--no-python`), `-h`/`--help`.
 * An unknown flag, or one without its value, is a usage error: one line naming it, and exit code 2.
 *
 * ```sh
 * deno run -A jsr:@dcomm/dcomm/launch --standalone --nproc-per-node 4 train.ts --epochs 3
 * # two hosts:
 * DCOMM_STORE_SECRET=s3cret deno run -A jsr:@dcomm/dcomm/launch --nnodes 2 --node-rank 0 \
 *   --nproc-per-node 8 --rdzv-endpoint 10.0.0.1:29500 --max-restarts 3 --log-dir /var/log/dcomm train.ts
 * ```
 *
 * @module
 */
import { TcpStoreServer } from "../store/tcp_store_server.ts";
import { StoreError } from "../core/errors.ts";
import { bindHostname, isLoopback, LAUNCHER_PID_ENV, unbracket } from "../backend/env.ts";
import { cudaStatus } from "../gpu/device.ts";
import { generateSecret, STORE_SECRET_ENV } from "../store/secret.ts";
import { TorchStoreServer } from "../store/torch_store_server.ts";
import { type LaunchArgs, parseLaunchArgs } from "./_launch_args.ts";

export { type LaunchArgs, LaunchUsageError, parseLaunchArgs } from "./_launch_args.ts";

/**
 * Which of a rank's streams a `--redirects` or `--tee` value names, torchrun's `Std`: 0 none, 1 stdout,
 * 2 stderr, 3 both.
 *
 * @example
 * ```ts
 * import { parseLaunchArgs, type StdStreams } from "@dcomm/dcomm/launch";
 * import assert from "node:assert/strict";
 * const both: StdStreams = 3;
 * assert.equal(parseLaunchArgs(["--redirects", "3", "train.ts"], {}).options?.redirects, both);
 * ```
 */
export type StdStreams = 0 | 1 | 2 | 3;

/**
 * A `--redirects` or `--tee` setting: one value for every local rank (`3`), or one per local rank
 * (`{ 0: 3, 1: 2 }`, torchrun's `0:3,1:2`; local ranks not named get 0).
 *
 * @example torchrun's per-rank form
 * ```ts
 * import { parseLaunchArgs, type StdSpec } from "@dcomm/dcomm/launch";
 * import assert from "node:assert/strict";
 * const tee: StdSpec = { 0: 3, 1: 2 }; // local rank 0: both streams, local rank 1: stderr
 * assert.deepEqual(parseLaunchArgs(["-t", "0:3,1:2", "train.ts"], {}).options?.tee, tee);
 * ```
 */
export type StdSpec = StdStreams | Readonly<Record<number, StdStreams>>;

/**
 * What {@linkcode launch} needs.
 *
 * @example Two ranks whose stdout also goes to log files, in torchrun's layout
 * ```ts
 * import { launch, type LaunchOptions } from "@dcomm/dcomm/launch";
 * import assert from "node:assert/strict";
 * const logDir = await Deno.makeTempDir();
 * const options: LaunchOptions = {
 *   nprocPerNode: 2,
 *   noDeno: true, // the command runs as it is, not with `deno run`
 *   command: [Deno.execPath(), "eval", "console.log('hello from rank', Deno.env.get('RANK'))"],
 *   runId: "job-7",
 *   logDir,
 *   tee: 1, // stdout to the console and to the files
 *   write: () => {}, // the console: here nowhere
 * };
 * const result = await launch(options);
 * assert.equal(result.logDir, `${logDir}/job-7`);
 * const log = await Deno.readTextFile(`${logDir}/job-7/attempt_0/1/stdout.log`);
 * assert.equal(log, "hello from rank 1\n");
 * await Deno.remove(logDir, { recursive: true });
 * ```
 */
export interface LaunchOptions {
  /**
   * Processes on this node: a number, or as torchrun counts them, `"cpu"` (the CPUs this process may
   * run on), `"gpu"` (the GPUs CUDA sees; an error without one) or `"auto"` (the GPUs if CUDA sees any,
   * else the CPUs).
   */
  nprocPerNode: number | "auto" | "cpu" | "gpu";
  /** Nodes in the job. @default 1 */
  nnodes?: number;
  /** This node's index. @default 0 */
  nodeRank?: number;
  /** The host of node 0, where the store runs (an IPv6 address as `::1` or `[::1]`). @default "127.0.0.1" */
  masterAddr?: string;
  /**
   * The store's port; 0 picks a free one (single node only).
   * @default 0 with one node, 29500 with several (29400 with a {@linkcode LaunchOptions.rdzvEndpoint} without a port)
   */
  masterPort?: number;
  /**
   * One node on 127.0.0.1 and a free port, as torchrun's `--standalone`. Throws with `nnodes` > 1, a
   * `rdzvEndpoint`, a `masterAddr` other than loopback or a `masterPort` other than 0. @default false
   */
  standalone?: boolean;
  /**
   * Node 0's store as `host[:port]` (`[::1]:29400` for IPv6), torchrun's `--rdzv-endpoint`: the same as
   * `masterAddr` and `masterPort`, the port 29400 when it names none (as torchrun's c10d rendezvous), or
   * `masterPort` when that is given. Throws when it names another host or port than those.
   * @default none: masterAddr and masterPort
   */
  rdzvEndpoint?: string;
  /**
   * The job's run id (torchrun's `--rdzv-id`): every rank gets it as `DCOMM_RUN_ID` (and
   * `TORCHELASTIC_RUN_ID`), and it names the run's folder of logs. Every node of a job must use the same.
   * @default a random UUID with one node, "none" (torchrun's default) with several
   */
  runId?: string;
  /**
   * How many times the ranks of this node may be started again after one of them failed: every rank is
   * stopped, then all start again as a new attempt with `DCOMM_RESTART_COUNT=<attempt>` (and
   * `TORCHELASTIC_RESTART_COUNT`). The store stays up across attempts. @default 0
   */
  maxRestarts?: number;
  /**
   * A rank that fails does not stop the others: they go on (a script whose `DistributedDataParallel` is
   * `faultTolerant` shrinks its group to them), the attempt ends when every rank has exited, and it
   * succeeds when one rank at least exits with 0. The ranks get `DCOMM_FAULT_TOLERANT=1`. @default false
   */
  faultTolerant?: boolean;
  /**
   * Where the ranks' log files go, in torchrun's layout:
   * `<logDir>/<runId>/attempt_<n>/<local rank>/{stdout,stderr}.log`, for the streams that
   * {@linkcode LaunchOptions.redirects} or {@linkcode LaunchOptions.tee} name. An attempt's folder is
   * emptied before it starts. Nodes sharing one folder need a `logDir` each (their local ranks collide).
   * @default none: a new temporary folder when redirects or tee name a stream
   */
  logDir?: string;
  /** The ranks' streams that go to their log files only, not to the console. @default 0 */
  redirects?: StdSpec;
  /** The ranks' streams that go to their log files and to the console. @default 0 */
  tee?: StdSpec;
  /** The command of each rank: a script (run with `deno run`) and its arguments. */
  command: readonly string[];
  /** Flags given to `deno run` before the script. @default ["-A"] */
  denoArgs?: readonly string[];
  /** Run `command` as it is instead of with `deno run` (torchrun's `--no-python`). @default false */
  noDeno?: boolean;
  /**
   * Serve the rendezvous store on node 0 (false for programs that serve their own on MASTER_PORT, as
   * PyTorch's rank 0 does; a free port is then picked when none is given). @default true
   */
  hostStore?: boolean;
  /**
   * The protocol of the store node 0 serves: dcomm's own (`"dcomm"`, with the shared secret), or torch's
   * c10d `TCPStore`'s (`"torch"`): then the launcher serves it as torchrun's agent does
   * (`TORCHELASTIC_USE_AGENT_STORE=True` for the ranks), so that Python ranks (`torch.distributed` with
   * `env://`) and Deno ranks of one job meet in it. torch's store has **no secret**: anyone who reaches
   * its port can use it, so bind it to a network only the job reaches. @default "dcomm"
   */
  storeProtocol?: "dcomm" | "torch";
  /** Extra environment for every rank. @default {} */
  env?: Record<string, string>;
  /** Lines kept per rank for the failure summary. @default 20 */
  tailLines?: number;
  /** Milliseconds a rank gets to exit after SIGTERM before SIGKILL. @default 5000 */
  graceMs?: number;
  /** Where prefixed lines go. @default writes to stdout / stderr */
  write?: (line: string, stream: "stdout" | "stderr") => void;
  /**
   * Whether lines may keep ANSI escape sequences. When false the ranks get `NO_COLOR=1` (unless
   * {@linkcode LaunchOptions.env} sets it) and escape sequences are removed from their lines.
   * @default {@linkcode colorEnabled}()
   */
  color?: boolean;
}

/**
 * The signals the launcher forwards to its ranks.
 *
 * @example The exit code of a launcher stopped by a signal
 * ```ts
 * import { type LaunchSignal, SIGNAL_NUMBERS } from "@dcomm/dcomm/launch";
 * import assert from "node:assert/strict";
 * const exitCode = (signal: LaunchSignal): number => 128 + SIGNAL_NUMBERS[signal];
 * assert.equal(exitCode("SIGTERM"), 143);
 * ```
 */
export type LaunchSignal = "SIGINT" | "SIGTERM";

/**
 * The number of each forwarded signal (the same on Linux and macOS), for the exit code 128 + n.
 *
 * @example
 * ```ts
 * import { SIGNAL_NUMBERS } from "@dcomm/dcomm/launch";
 * import assert from "node:assert/strict";
 * assert.deepEqual(SIGNAL_NUMBERS, { SIGINT: 2, SIGTERM: 15 }); // Ctrl-C exits 130, `kill` 143
 * ```
 */
export const SIGNAL_NUMBERS: Readonly<Record<LaunchSignal, number>> = { SIGINT: 2, SIGTERM: 15 };

/**
 * How one rank ended.
 *
 * @example The summary of a rank that failed while another was stopped
 * ```ts
 * import { type RankExit, summarize } from "@dcomm/dcomm/launch";
 * import assert from "node:assert/strict";
 * const ranks: RankExit[] = [
 *   { rank: 0, code: 143, signal: "SIGTERM", stopped: true, tail: [] },
 *   { rank: 1, code: 1, signal: null, stopped: false, tail: ["error: Uncaught RangeError: bad batch"] },
 * ];
 * const text = summarize({ ranks, code: 1 });
 * assert.match(text, /^Rank 1 exited with code 1; the launcher stopped the other ranks\./);
 * assert.match(text, /\| error: Uncaught RangeError: bad batch/);
 * ```
 */
export interface RankExit {
  /** Global rank. */
  rank: number;
  /** Exit code (128 + signal number when killed). */
  code: number;
  /** The signal that killed it, if any. */
  signal: string | null;
  /** Whether the launcher stopped it because another rank failed. */
  stopped: boolean;
  /** Its last lines of output. */
  tail: string[];
}

/**
 * How one attempt of this node's ranks ended.
 *
 * @example A rank that fails on the first attempt only
 * ```ts
 * import { type AttemptResult, launch } from "@dcomm/dcomm/launch";
 * import assert from "node:assert/strict";
 * const { attempts, code } = await launch({
 *   nprocPerNode: 2,
 *   noDeno: true,
 *   maxRestarts: 1,
 *   command: [
 *     Deno.execPath(),
 *     "eval",
 *     "if (Deno.env.get('RANK') === '1' && Deno.env.get('DCOMM_RESTART_COUNT') === '0') Deno.exit(3)",
 *   ],
 *   write: () => {},
 * });
 * assert.equal(code, 0);
 * const [first, second]: AttemptResult[] = attempts;
 * assert.deepEqual([first.attempt, first.code, second.attempt, second.code], [0, 3, 1, 0]);
 * ```
 */
export interface AttemptResult {
  /** The attempt: 0, then 1 for the first restart, and so on (the ranks' `DCOMM_RESTART_COUNT`). */
  attempt: number;
  /** Every rank of this node in this attempt. */
  ranks: RankExit[];
  /** 0 if every rank exited 0, else the first failing rank's code (128 + n if a signal stopped it). */
  code: number;
  /** The signal that stopped the launcher during this attempt, if one did. */
  signal?: LaunchSignal;
}

/**
 * The outcome of a launch.
 *
 * @example A rank that exits non-zero, and the summary the launcher prints
 * ```ts
 * import { launch, type LaunchResult, summarize } from "@dcomm/dcomm/launch";
 * import assert from "node:assert/strict";
 * const result: LaunchResult = await launch({
 *   nprocPerNode: 2,
 *   noDeno: true,
 *   command: [Deno.execPath(), "eval", "if (Deno.env.get('RANK') === '1') Deno.exit(3)"],
 *   write: () => {},
 * });
 * assert.equal(result.code, 3); // the first failing rank's code
 * assert.equal(result.attempts.length, 1);
 * assert.equal(result.ranks.find((r) => !r.stopped && r.code !== 0)?.rank, 1);
 * assert.match(summarize(result), /^Rank 1 exited with code 3/);
 * ```
 */
export interface LaunchResult {
  /** Every rank of this node, in the last attempt. */
  ranks: RankExit[];
  /**
   * The launcher's exit code: 128 + the signal's number if it was stopped by a signal, else 0 if every
   * rank of the last attempt exited 0, else the first failing rank's code.
   */
  code: number;
  /** The signal that stopped the launcher (forwarded to every rank), if one did. */
  signal?: LaunchSignal;
  /** Every attempt that ran, in order: one, unless ranks failed and restarts were allowed. */
  attempts: AttemptResult[];
  /** The run id the ranks got. */
  runId: string;
  /** The run's folder of log files (`<logDir>/<runId>`), if any stream went to files. */
  logDir?: string;
}

/**
 * Whether the launcher's output may be coloured: `NO_COLOR` is unset (or empty) and both stdout and
 * stderr are terminals.
 *
 * @returns Whether to keep ANSI escape sequences.
 *
 * @example Colour only where someone reads it
 * ```ts
 * import { colorEnabled, stripAnsi } from "@dcomm/dcomm/launch";
 * const line = "\x1b[31merror\x1b[0m: rank 1 failed";
 * console.log(colorEnabled() ? line : stripAnsi(line));
 * ```
 */
export function colorEnabled(): boolean {
  let noColor: string | undefined;
  try {
    noColor = Deno.env.get("NO_COLOR");
  } catch {
    noColor = undefined; // No --allow-env: only the terminals decide.
  }
  if (noColor) return false;
  return Deno.stdout.isTerminal() && Deno.stderr.isTerminal();
}

// CSI sequences (colours, cursor moves) and OSC sequences (titles, links), as terminals parse them.
// deno-lint-ignore no-control-regex
const ANSI_ESCAPE = /\x1b\[[0-?]*[ -\/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[@-Z\\-_]/g;

/**
 * A line without its ANSI escape sequences.
 *
 * @param line The text.
 * @returns The text with every CSI, OSC and two-byte escape sequence removed.
 *
 * @example
 * ```ts
 * import { stripAnsi } from "@dcomm/dcomm/launch";
 * import assert from "node:assert/strict";
 * assert.equal(stripAnsi("\x1b[1;31merror\x1b[0m: Uncaught RangeError"), "error: Uncaught RangeError");
 * ```
 */
export function stripAnsi(line: string): string {
  return line.replace(ANSI_ESCAPE, "");
}

const encoder = new TextEncoder();

function writeAll(target: { writeSync(p: Uint8Array): number }, text: string): void {
  const bytes = encoder.encode(text);
  for (let off = 0; off < bytes.length;) off += target.writeSync(bytes.subarray(off));
}

function defaultWrite(line: string, stream: "stdout" | "stderr"): void {
  writeAll(stream === "stdout" ? Deno.stdout : Deno.stderr, line + "\n");
}

/**
 * The longest piece of a line the launcher holds: a rank's output without a line break (a progress bar
 * redrawn with `\r` only, a binary dump) is passed on in pieces of this many characters.
 */
const MAX_PARTIAL_LINE = 64 << 10;

/**
 * Reads a rank's stream and hands on its lines in linear time: lines end at `\n`, `\r\n` or a lone `\r`
 * (each redraw of a progress bar is a line; a redraw that is empty is dropped), only the unfinished tail is
 * kept between chunks, and a tail longer than {@linkcode MAX_PARTIAL_LINE} goes out in pieces of that size.
 */
async function pump(
  readable: ReadableStream<Uint8Array>,
  onLine: (line: string) => void,
): Promise<void> {
  const decoder = new TextDecoder();
  // The unfinished line, in parts (joined once, when it ends): appending never copies what came before.
  let parts: string[] = [];
  let partLength = 0;
  // A chunk that ended in "\r": a "\n" at the start of the next one ends nothing more.
  let afterCR = false;
  const end = (last: string, byCR: boolean): void => {
    const line = partLength === 0 ? last : parts.join("") + last;
    parts = [];
    partLength = 0;
    if (!(byCR && line === "")) onLine(line);
  };
  const feed = (text: string): void => {
    let start = 0;
    if (afterCR && text.startsWith("\n")) start = 1;
    afterCR = false;
    const breaks = /\r\n?|\n/g;
    breaks.lastIndex = start;
    for (let m: RegExpExecArray | null; (m = breaks.exec(text)) !== null;) {
      end(text.slice(start, m.index), m[0] === "\r");
      start = m.index + m[0].length;
      if (m[0] === "\r" && start === text.length) afterCR = true;
    }
    let rest = text.slice(start);
    while (partLength + rest.length > MAX_PARTIAL_LINE) {
      let cut = MAX_PARTIAL_LINE - partLength;
      // Not between the two halves of a surrogate pair.
      if (cut > 0 && /[\uD800-\uDBFF]/.test(rest[cut - 1])) cut--;
      end(rest.slice(0, cut), false);
      rest = rest.slice(cut);
    }
    if (rest !== "") {
      parts.push(rest);
      partLength += rest.length;
    }
  };
  for await (const chunk of readable) feed(decoder.decode(chunk, { stream: true }));
  feed(decoder.decode());
  if (partLength > 0) end("", false);
}

/** One stream of one rank written to its log file, a line at a time. */
class LogFile {
  #file: Deno.FsFile;

  constructor(path: string) {
    this.#file = Deno.openSync(path, { write: true, create: true, truncate: true });
  }

  line(text: string): void {
    writeAll(this.#file, text + "\n");
  }

  [Symbol.dispose](): void {
    this.#file.close();
  }
}

function checkInt(name: string, value: number, min: number, max = Number.MAX_SAFE_INTEGER): number {
  if (!Number.isInteger(value) || value < min || value > max) {
    const range = max === Number.MAX_SAFE_INTEGER ? `>= ${min}` : `in ${min}..${max}`;
    throw new RangeError(`Invalid ${name}: expected an integer ${range}, found ${value}`);
  }
  return value;
}

/** The CPUs this process may run on (its affinity and cgroup quota, as Rust's `available_parallelism`). */
function cpuCount(): number {
  return Math.max(1, navigator.hardwareConcurrency);
}

function resolveNproc(value: LaunchOptions["nprocPerNode"]): number {
  if (value === "cpu") return cpuCount();
  if (value === "gpu" || value === "auto") {
    const cuda = cudaStatus();
    if (cuda.available) return cuda.deviceCount;
    if (value === "auto") return cpuCount();
    throw new RangeError(
      `Cannot use --nproc-per-node gpu: expected CUDA to see at least one GPU, found none (${cuda.reason})`,
    );
  }
  if (typeof value !== "number") {
    throw new RangeError(
      `Invalid --nproc-per-node: expected a positive integer or auto, cpu or gpu, found ${value}`,
    );
  }
  return checkInt("--nproc-per-node", value, 1);
}

/** `host[:port]`, `[v6]` or `[v6]:port`; a bare IPv6 address (several colons) is a host alone. */
function parseEndpoint(endpoint: string): { host: string; port: number | undefined } {
  const text = endpoint.trim();
  const v6 = /^\[([^\]]*)\](?::(.*))?$/.exec(text);
  let host = text;
  let port: string | undefined;
  if (v6) [, host, port] = v6;
  else if (text.split(":").length === 2) [host, port] = text.split(":");
  if (host === "" || !/^[\w.:%-]+$/.test(host) || (port !== undefined && !/^\d+$/.test(port))) {
    throw new RangeError(
      `Invalid --rdzv-endpoint: expected host[:port] (or [IPv6]:port), found "${endpoint}"`,
    );
  }
  return {
    host,
    port: port === undefined ? undefined : checkInt("--rdzv-endpoint's port", Number(port), 0, 65535),
  };
}

/** The local ranks' streams a spec names, checked against this node's ranks. */
function stdOf(spec: StdSpec | undefined, flag: string, nproc: number): (local: number) => StdStreams {
  const valid = (v: unknown): boolean => v === 0 || v === 1 || v === 2 || v === 3;
  if (spec === undefined) return () => 0;
  if (typeof spec === "number") {
    if (!valid(spec)) throw new RangeError(`Invalid ${flag}: expected 0, 1, 2 or 3, found ${spec}`);
    return () => spec;
  }
  for (const [key, v] of Object.entries(spec)) {
    if (!/^\d+$/.test(key) || Number(key) >= nproc) {
      throw new RangeError(
        `Invalid ${flag}: it names local rank ${key}, but this node runs local ranks 0..${nproc - 1}`,
      );
    }
    if (!valid(v)) {
      throw new RangeError(`Invalid ${flag}: expected 0, 1, 2 or 3 for local rank ${key}, found ${v}`);
    }
  }
  return (local) => spec[local] ?? 0;
}

/** Everything {@linkcode launch} derives from its options, checked before anything starts. */
interface Job {
  nproc: number;
  nnodes: number;
  nodeRank: number;
  masterAddr: string;
  masterPort: number;
  runId: string;
  maxRestarts: number;
  faultTolerant: boolean;
  redirects: (local: number) => StdStreams;
  tee: (local: number) => StdStreams;
}

function resolveJob(options: LaunchOptions): Job {
  const nproc = resolveNproc(options.nprocPerNode);
  const nnodes = checkInt("--nnodes", options.nnodes ?? 1, 1);
  const nodeRank = checkInt("--node-rank", options.nodeRank ?? 0, 0);
  if (nodeRank >= nnodes) {
    throw new RangeError(`Invalid --node-rank: expected 0..${nnodes - 1}, found ${nodeRank}`);
  }
  if (options.command.length === 0) throw new RangeError("Nothing to launch: expected a script, found none");
  // `[::1]` and `::1` are one host: kept without brackets (MASTER_ADDR=::1 for the ranks).
  let masterAddr = options.masterAddr === undefined ? undefined : unbracket(options.masterAddr);
  let masterPort = options.masterPort;
  if (options.standalone) {
    const clash = nnodes > 1
      ? `--nnodes ${nnodes}`
      : options.rdzvEndpoint !== undefined
      ? `--rdzv-endpoint ${options.rdzvEndpoint}`
      : masterAddr !== undefined && !isLoopback(masterAddr)
      ? `--master-addr ${masterAddr}`
      : masterPort !== undefined && masterPort !== 0
      ? `--master-port ${masterPort}`
      : undefined;
    if (clash) {
      throw new RangeError(
        `Cannot combine --standalone with ${clash}: --standalone runs one node on 127.0.0.1 and a free ` +
          `port; drop one of them`,
      );
    }
    masterAddr = masterAddr ?? "127.0.0.1";
    masterPort = 0;
  }
  if (options.rdzvEndpoint !== undefined) {
    const { host, port } = parseEndpoint(options.rdzvEndpoint);
    if (masterAddr !== undefined && masterAddr.toLowerCase() !== host.toLowerCase()) {
      throw new RangeError(
        `Cannot combine --rdzv-endpoint ${options.rdzvEndpoint} with --master-addr ${masterAddr}: both ` +
          `name node 0's host, and they differ (${host} and ${masterAddr}); give one`,
      );
    }
    if (port !== undefined && masterPort !== undefined && port !== masterPort) {
      throw new RangeError(
        `Cannot combine --rdzv-endpoint ${options.rdzvEndpoint} with --master-port ${masterPort}: both ` +
          `name the store's port, and they differ (${port} and ${masterPort}); give one`,
      );
    }
    masterAddr = host;
    masterPort = port ?? masterPort ?? 29400;
  }
  const runId = options.runId ?? (nnodes === 1 ? crypto.randomUUID() : "none");
  if (runId === "" || runId === "." || runId === ".." || /[/\\\0]/.test(runId)) {
    throw new RangeError(
      `Invalid --rdzv-id: expected a name without "/" (it names a folder of logs), found "${runId}"`,
    );
  }
  return {
    nproc,
    nnodes,
    nodeRank,
    masterAddr: masterAddr ?? "127.0.0.1",
    masterPort: checkInt("--master-port", masterPort ?? (nnodes === 1 ? 0 : 29500), 0, 65535),
    runId,
    maxRestarts: checkInt("--max-restarts", options.maxRestarts ?? 0, 0),
    faultTolerant: options.faultTolerant ?? false,
    redirects: stdOf(options.redirects, "--redirects", nproc),
    tee: stdOf(options.tee, "--tee", nproc),
  };
}

/** One attempt's ranks while they run: what stops them, and what the signal handlers reach. */
interface RunningAttempt {
  children: Deno.ChildProcess[];
  stopping: boolean;
  stop(signal: Deno.Signal): void;
  kill(signal: Deno.Signal): void;
}

/**
 * Starts this node's ranks and waits for them; when one fails and restarts are left, stops the others and
 * starts them all again.
 *
 * @param options The job.
 * @returns How every attempt and every rank ended.
 * @throws {RangeError} For invalid sizes, ranks, ports, run ids or log settings, and contradicting
 * options (`standalone` with several nodes, a `rdzvEndpoint` naming another host than `masterAddr`), all
 * before anything starts.
 *
 * @example Two ranks of a command run as it is (here `deno eval`)
 * ```ts
 * import { launch } from "@dcomm/dcomm/launch";
 * import assert from "node:assert/strict";
 *
 * const lines: string[] = [];
 * const result = await launch({
 *   nprocPerNode: 2,
 *   noDeno: true,
 *   command: [Deno.execPath(), "eval", "console.log('rank', Deno.env.get('RANK'), Deno.env.get('DCOMM_RUN_ID'))"],
 *   runId: "demo",
 *   write: (line) => lines.push(line),
 * });
 * assert.equal(result.code, 0);
 * assert.deepEqual(lines.toSorted(), ["[rank0]: rank 0 demo", "[rank1]: rank 1 demo"]);
 * ```
 */
export async function launch(options: LaunchOptions): Promise<LaunchResult> {
  const job = resolveJob(options);
  const { nproc, nnodes, nodeRank, runId, maxRestarts, faultTolerant } = job;
  let masterPort = job.masterPort;
  const worldSize = nnodes * nproc;
  const rawWrite = options.write ?? defaultWrite;
  const color = options.color ?? colorEnabled();
  const write = color ? rawWrite : (line: string, stream: "stdout" | "stderr"): void => {
    rawWrite(stripAnsi(line), stream);
  };
  const tailLines = options.tailLines ?? 20;
  const graceMs = options.graceMs ?? 5000;
  const torchStore = options.storeProtocol === "torch";
  if (options.storeProtocol !== undefined && options.storeProtocol !== "dcomm" && !torchStore) {
    throw new RangeError(`Invalid --store-protocol: expected dcomm or torch, found ${options.storeProtocol}`);
  }
  const inherited = Deno.env.get(STORE_SECRET_ENV);
  if (nnodes > 1 && !inherited && !torchStore) {
    throw new RangeError(
      `A job of ${nnodes} nodes needs one shared secret: set ${STORE_SECRET_ENV} to the same value on every node`,
    );
  }
  const secret = inherited || generateSecret();

  let server: TcpStoreServer | TorchStoreServer | undefined;
  const hostStore = options.hostStore ?? true;
  if (!hostStore && masterPort === 0) {
    const probe = Deno.listen({ hostname: bindHostname(job.masterAddr), port: 0 });
    masterPort = (probe.addr as Deno.NetAddr).port;
    probe.close();
  }
  if (nodeRank === 0 && hostStore) {
    const bind = {
      // Loopback for a loopback master (::1 for an IPv6 one), else every interface of its family.
      hostname: bindHostname(job.masterAddr),
      port: masterPort,
      log: (m: string) => write(`[launcher]: ${m}`, "stderr"),
    };
    try {
      server = torchStore
        ? await TorchStoreServer.listen(bind)
        : await TcpStoreServer.listen({ ...bind, secret });
    } catch (e) {
      if (e instanceof StoreError && e.cause instanceof Deno.errors.AddrInUse) {
        // Most often another job's store on this machine: say so now, and what to do.
        throw new StoreError(
          `${e.message}: the port is taken, most likely by another job's store (two jobs on one machine ` +
            `with the same --master-port). Give this job another --master-port, or --master-port 0 for a ` +
            "free one (the default on one node)",
          { cause: e },
        );
      }
      throw e;
    }
    masterPort = server.port;
  } else if (hostStore && masterPort === 0) {
    throw new RangeError("Invalid --master-port: nodes other than 0 must be given node 0's port, found 0");
  }
  const logging = Array.from({ length: nproc }, (_, l) => job.redirects(l) | job.tee(l)).some((s) => s !== 0);
  let runLogDir: string | undefined;
  try {
    runLogDir = logging
      ? `${options.logDir ?? Deno.makeTempDirSync({ prefix: "dcomm_" })}/${runId}`.replace(/\/+/g, "/")
      : undefined;
  } catch (e) {
    await server?.[Symbol.asyncDispose]();
    throw e;
  }
  if (runLogDir) write(`[launcher]: logs of run ${runId} in ${runLogDir}`, "stderr");

  let current: RunningAttempt | undefined;
  let stoppedBy: LaunchSignal | undefined;
  const signals: LaunchSignal[] = ["SIGINT", "SIGTERM"];
  const listeners = signals.map((signal) => ({
    signal,
    listener: (): void => {
      // A second signal (Ctrl-C again) does not wait for the grace period.
      if (stoppedBy) return current?.kill("SIGKILL");
      stoppedBy = signal;
      write(`[launcher]: received ${signal}, forwarding it to ${nproc} ranks`, "stderr");
      current?.stop(signal);
    },
  }));
  for (const { signal, listener } of listeners) Deno.addSignalListener(signal, listener);

  /** Runs one attempt: spawns every rank, stops all when one fails, and resolves when all have exited. */
  const runAttempt = async (attempt: number): Promise<AttemptResult> => {
    const attemptDir = runLogDir && `${runLogDir}/attempt_${attempt}`;
    if (attemptDir) {
      // As torchrun: an attempt's folder holds that attempt's logs only, even when a run id is reused.
      try {
        Deno.removeSync(attemptDir, { recursive: true });
      } catch (e) {
        if (!(e instanceof Deno.errors.NotFound)) throw e;
      }
    }
    const exits: RankExit[] = [];
    const done: Promise<void>[] = [];
    let failed: RankExit | undefined;
    let grace: ReturnType<typeof setTimeout> | undefined;
    const running: RunningAttempt = {
      children: [],
      stopping: false,
      kill(signal): void {
        for (const child of this.children) {
          try {
            child.kill(signal);
          } catch { /* already gone */ }
        }
      },
      stop(signal): void {
        this.kill(signal);
        if (this.stopping) return;
        this.stopping = true;
        grace = setTimeout(() => this.kill("SIGKILL"), graceMs);
        Deno.unrefTimer(grace);
      },
    };
    current = running;
    try {
      for (let local = 0; local < nproc; local++) {
        const rank = nodeRank * nproc + local;
        const env: Record<string, string> = {
          ...options.env,
          RANK: String(rank),
          WORLD_SIZE: String(worldSize),
          LOCAL_RANK: String(local),
          LOCAL_WORLD_SIZE: String(nproc),
          GROUP_RANK: String(nodeRank),
          NODE_RANK: String(nodeRank),
          MASTER_ADDR: job.masterAddr,
          MASTER_PORT: String(masterPort),
          [STORE_SECRET_ENV]: secret,
          DCOMM_RUN_ID: runId,
          DCOMM_RESTART_COUNT: String(attempt),
          DCOMM_MAX_RESTARTS: String(maxRestarts),
          ...(faultTolerant ? { DCOMM_FAULT_TOLERANT: "1" } : {}),
          // A rank's init() watches this pid: ranks exit when the launcher is gone (SIGKILLed, say).
          [LAUNCHER_PID_ENV]: String(Deno.pid),
          // torchrun's names, read by scripts that resume from a checkpoint after a restart.
          TORCHELASTIC_RUN_ID: runId,
          TORCHELASTIC_RESTART_COUNT: String(attempt),
          TORCHELASTIC_MAX_RESTARTS: String(maxRestarts),
          ...(hostStore ? { DCOMM_STORE_HOSTED: "1" } : {}),
          // torch's store, served as torchrun's agent serves it: torch.distributed's ranks join it too.
          ...(torchStore
            ? { DCOMM_STORE_PROTOCOL: "torch", TORCHELASTIC_USE_AGENT_STORE: String(hostStore) }
            : {}),
        };
        if (!color && options.env?.NO_COLOR === undefined) env.NO_COLOR = "1";
        const files = job.redirects(local) | job.tee(local);
        const quiet = job.redirects(local) & ~job.tee(local);
        const logs: Partial<Record<"stdout" | "stderr", LogFile>> = {};
        if (attemptDir && files) {
          Deno.mkdirSync(`${attemptDir}/${local}`, { recursive: true });
          if (files & 1) logs.stdout = new LogFile(`${attemptDir}/${local}/stdout.log`);
          if (files & 2) logs.stderr = new LogFile(`${attemptDir}/${local}/stderr.log`);
        }
        const closeLogs = (): void => {
          logs.stdout?.[Symbol.dispose]();
          logs.stderr?.[Symbol.dispose]();
        };
        const [cmd, ...rest] = options.noDeno
          ? options.command
          : [Deno.execPath(), "run", ...(options.denoArgs ?? ["-A"]), ...options.command];
        let child: Deno.ChildProcess;
        try {
          child = new Deno.Command(cmd, { args: rest, env, stdin: "null", stdout: "piped", stderr: "piped" })
            .spawn();
        } catch (e) {
          closeLogs();
          throw e;
        }
        running.children.push(child);
        const tail: string[] = [];
        const onLine = (stream: "stdout" | "stderr") => (line: string): void => {
          tail.push(line);
          if (tail.length > tailLines) tail.shift();
          logs[stream]?.line(line);
          if (!(quiet & (stream === "stdout" ? 1 : 2))) write(`[rank${rank}]: ${line}`, stream);
        };
        done.push((async () => {
          try {
            const [status] = await Promise.all([
              child.status,
              pump(child.stdout, onLine("stdout")),
              pump(child.stderr, onLine("stderr")),
            ]);
            const exit: RankExit = {
              rank,
              code: status.code,
              signal: status.signal,
              stopped: running.stopping,
              tail,
            };
            exits.push(exit);
            if (status.code !== 0 && !failed && !running.stopping) {
              failed = exit;
              if (faultTolerant) {
                write(
                  `[launcher]: rank ${rank} ${
                    status.signal ? `was killed by ${status.signal}` : `exited with code ${status.code}`
                  }; the other ranks go on (--fault-tolerant)`,
                  "stderr",
                );
              } else running.stop("SIGTERM");
            }
          } finally {
            closeLogs();
          }
        })());
      }
    } catch (e) {
      // A rank that cannot start (a missing command) stops the ones that did.
      running.stop("SIGTERM");
      await Promise.allSettled(done);
      clearTimeout(grace);
      throw e;
    } finally {
      // The signal may have come while ranks were starting: the ones started after it get it too.
      if (stoppedBy) running.stop(stoppedBy);
    }
    await Promise.all(done);
    clearTimeout(grace);
    current = undefined;
    exits.sort((a, b) => a.rank - b.rank);
    if (stoppedBy) {
      return { attempt, ranks: exits, code: 128 + SIGNAL_NUMBERS[stoppedBy], signal: stoppedBy };
    }
    const first = failed ?? exits.find((e) => e.code !== 0);
    // Fault tolerant: the job went on without the failed ranks, and succeeded if any rank finished it.
    if (faultTolerant && exits.some((e) => e.code === 0)) return { attempt, ranks: exits, code: 0 };
    return { attempt, ranks: exits, code: first ? (first.code || 1) : 0 };
  };

  const attempts: AttemptResult[] = [];
  try {
    for (let attempt = 0; attempt <= maxRestarts && !stoppedBy; attempt++) {
      const result = await runAttempt(attempt);
      attempts.push(result);
      if (result.code === 0 || result.signal || attempt === maxRestarts) break;
      write(
        `[launcher]: attempt ${attempt} failed (${describeAttempt(result)}); restarting all ${nproc} ranks ` +
          `of this node as attempt ${attempt + 1} (restart ${attempt + 1} of --max-restarts ${maxRestarts})`,
        "stderr",
      );
    }
  } finally {
    for (const { signal, listener } of listeners) Deno.removeSignalListener(signal, listener);
    await server?.[Symbol.asyncDispose]();
  }
  const last = attempts.at(-1);
  const ranks = last?.ranks ?? [];
  const signal = stoppedBy;
  const code = signal ? 128 + SIGNAL_NUMBERS[signal] : (last?.code ?? 0);
  return {
    ranks,
    code,
    ...(signal ? { signal } : {}),
    attempts,
    runId,
    ...(runLogDir ? { logDir: runLogDir } : {}),
  };
}

/** The first rank of an attempt that failed on its own, not stopped by the launcher. */
function firstFailure(ranks: readonly RankExit[]): RankExit | undefined {
  return ranks.find((r) => r.code !== 0 && !r.stopped);
}

function describeAttempt(a: AttemptResult): string {
  if (a.signal) return `stopped by ${a.signal}`;
  if (a.code === 0) return `all ${a.ranks.length} ranks exited with code 0`;
  const first = firstFailure(a.ranks);
  if (!first) {
    return `${a.ranks.filter((r) => r.code !== 0).length} ranks exited non-zero while being stopped`;
  }
  return `rank ${first.rank} ${
    first.signal ? `was killed by ${first.signal}` : `exited with code ${first.code}`
  }`;
}

/**
 * Options of {@linkcode summarize}.
 *
 * @example Keeping a rank's colours in its last lines
 * ```ts
 * import { summarize, type SummarizeOptions } from "@dcomm/dcomm/launch";
 * import assert from "node:assert/strict";
 * const tail = ["\x1b[31merror\x1b[0m: out of memory"];
 * const result = { code: 1, ranks: [{ rank: 0, code: 1, signal: null, stopped: false, tail }] };
 * const options: SummarizeOptions = { color: true };
 * assert.match(summarize(result, options), /\| \x1b\[31merror/);
 * assert.match(summarize(result), /\| error: out of memory/);
 * ```
 */
export interface SummarizeOptions {
  /** Keep ANSI escape sequences found in the ranks' last lines. @default false */
  color?: boolean;
}

/**
 * The summary the launcher prints when it exits non-zero or restarted its ranks: the signal that stopped
 * it, or which rank failed first, how, and its last lines; then how every rank ended; then, after
 * restarts, how many attempts ran and how each ended.
 *
 * @param result What {@linkcode launch} returned (its attempts may be left out).
 * @param options Whether to keep colours.
 * @returns The text, several lines.
 *
 * @example Two attempts, the second successful
 * ```ts
 * import { type RankExit, summarize } from "@dcomm/dcomm/launch";
 * import assert from "node:assert/strict";
 * const ok = (rank: number): RankExit => ({ rank, code: 0, signal: null, stopped: false, tail: [] });
 * const failed: RankExit = { rank: 1, code: 3, signal: null, stopped: false, tail: [] };
 * const text = summarize({
 *   code: 0,
 *   ranks: [ok(0), ok(1)],
 *   attempts: [
 *     { attempt: 0, code: 3, ranks: [ok(0), failed] },
 *     { attempt: 1, code: 0, ranks: [ok(0), ok(1)] },
 *   ],
 * });
 * assert.equal(
 *   text,
 *   "All 2 ranks exited with code 0 on attempt 1\n" +
 *     "Attempts: 2 ran (1 restart); 1 failed:\n" +
 *     "  attempt 0: rank 1 exited with code 3\n" +
 *     "  attempt 1: all 2 ranks exited with code 0",
 * );
 * ```
 */
export function summarize(
  result: Pick<LaunchResult, "ranks" | "code" | "signal"> & Partial<Pick<LaunchResult, "attempts">>,
  options: SummarizeOptions = {},
): string {
  const plain = options.color ? (l: string): string => l : stripAnsi;
  const ranks = [
    "Ranks:",
    ...result.ranks.map((r) =>
      `  rank ${r.rank}: ${r.signal ? `signal ${r.signal}` : `exit ${r.code}`}${
        r.stopped ? " (stopped)" : ""
      }`
    ),
  ];
  const attempts = result.attempts ?? [];
  const history = attempts.length <= 1 ? [] : [
    `Attempts: ${attempts.length} ran (${attempts.length - 1} restart${attempts.length === 2 ? "" : "s"}); ` +
    `${attempts.filter((a) => a.code !== 0).length} failed:`,
    ...attempts.map((a) => `  attempt ${a.attempt}: ${describeAttempt(a)}`),
  ];
  if (result.signal) {
    return [
      `Stopped by ${result.signal}: the launcher forwarded it to its ${result.ranks.length} ranks and ` +
      `exits with code ${result.code} (128 + ${SIGNAL_NUMBERS[result.signal]}).`,
      ...ranks,
      ...history,
    ].join("\n");
  }
  const first = firstFailure(result.ranks);
  if (!first) {
    const bad = result.ranks.filter((r) => r.code !== 0).length;
    const last = attempts.at(-1);
    return bad === 0
      ? [
        `All ${result.ranks.length} ranks exited with code 0` +
        (attempts.length > 1 ? ` on attempt ${last?.attempt}` : ""),
        ...history,
      ].join("\n")
      : [`${bad} of ${result.ranks.length} ranks exited non-zero while being stopped.`, ...ranks, ...history]
        .join("\n");
  }
  const how = first.signal ? `was killed by ${first.signal}` : `exited with code ${first.code}`;
  // A timeout that names a rank gone silent (the heartbeat): that rank, not the first to time out, is
  // the likely cause.
  const silent = first.tail.map((l) =>
    /(ranks? [\d, rank]+) sent no heartbeat for [\d.]+ s/.exec(plain(l))?.[1]
  )
    .find((m) => m !== undefined);
  return [
    `Rank ${first.rank} ${how}; the launcher stopped the other ranks.` +
    (silent ? ` Its error names ${silent} as the likely cause: no heartbeat (stopped or hung?).` : ""),
    `Last lines of rank ${first.rank}:`,
    ...first.tail.map((l) => `  | ${plain(l)}`),
    ...ranks,
    ...history,
  ].join("\n");
}

const USAGE = `Usage: deno run -A jsr:@dcomm/dcomm/launch [options] script.ts [script args]

Every option is also read from PET_<OPTION> (PET_NPROC_PER_NODE, PET_NNODES, PET_NODE_RANK,
PET_MASTER_ADDR, ...), as torchrun and Kubeflow's PyTorchJob do; a flag wins over its variable.
Both --a-b and --a_b spellings work, and --flag=value.

  --nproc-per-node N     processes on this node: a number, cpu (the CPUs), gpu (the GPUs CUDA sees),
                         auto (the GPUs if any, else the CPUs) (default 1)
  --nnodes N             nodes in the job; N:N works, an elastic MIN:MAX does not (default 1)
  --node-rank R          this node's index (default 0)
  --master-addr HOST     node 0's address, where the store runs, IPv6 as ::1 (default 127.0.0.1)
  --master-port PORT     the store's port (default: a free one with one node, 29500 with several)
  --standalone           one node on 127.0.0.1 and a free port (with several nodes or another
                         address: an error)
  --rdzv-endpoint H[:P]  the store's address, the same as --master-addr H --master-port P (P: 29400
                         if not given); naming another host or port than those is an error
  --rdzv-backend B       c10d or static (both: node 0's launcher serves the store) (default static)
  --rdzv-id ID           the run id, DCOMM_RUN_ID for the ranks and the name of the run's log folder
                         (default: a random UUID with one node, "none" with several)
  --max-restarts N       when a rank fails, stop this node's ranks and start them all again, at
                         most N times; ranks get DCOMM_RESTART_COUNT=<attempt> (default 0)
  --fault-tolerant       a rank that fails does not stop the others: they go on without it (a
                         faultTolerant DDP shrinks its group); the job succeeds if any rank exits 0
  --monitor-interval S   accepted for torchrun's command lines (seconds > 0); the launcher hears of
                         a rank's exit at once, so nothing polls (default 0.1)
  --log-dir DIR          rank logs in DIR/<run id>/attempt_<n>/<local rank>/{stdout,stderr}.log
                         (default: a temporary folder, when -r or -t name a stream)
  -r, --redirects SPEC   streams written to the log files only: 0 none, 1 stdout, 2 stderr, 3 both,
                         or per local rank as 0:3,1:2 (default 0)
  -t, --tee SPEC         streams written to the log files and the console (same forms) (default 0)
  --deno-args "ARGS"     flags for deno run before the script, in place of the default -A
                         (--deno-args "-A --v8-flags=..." or --deno-args=-A) (default "-A")
  --store-protocol P     dcomm (node 0 serves dcomm's store, with the secret) or torch (torch's c10d
                         TCPStore, served as torchrun's agent does, so torch.distributed ranks join
                         it too; it has no secret) (default dcomm)
  --no-deno              run the command as it is, not with deno run
  --no-python            the same as --no-deno (torchrun's name)
  -h, --help             this text

Exit code: 0 when every rank of the last attempt exited 0; else the first failing rank's code;
128 + n when stopped by signal n; 2 for a bad command line.`;

const USAGE_LINE =
  "Usage: deno run -A jsr:@dcomm/dcomm/launch [options] script.ts [script args] (--help lists the options)";

if (import.meta.main) {
  if (Deno.args.length === 0) {
    console.log(USAGE);
    Deno.exit(2);
  }
  let parsed: LaunchArgs;
  try {
    parsed = parseLaunchArgs(Deno.args);
  } catch (e) {
    console.error(`launch: ${(e as Error).message}`);
    console.error(USAGE_LINE);
    Deno.exit(2);
  }
  if (parsed.help || !parsed.options) {
    console.log(USAGE);
    Deno.exit(0);
  }
  try {
    const color = colorEnabled();
    const result = await launch({ ...parsed.options, color });
    if (result.code !== 0 || result.attempts.length > 1) console.error(summarize(result, { color }));
    Deno.exit(result.code);
  } catch (e) {
    console.error(`launch: ${(e as Error).message}`);
    const env = Object.entries(parsed.fromEnv);
    if (env.length > 0) {
      console.error(`launch: values from the environment: ${env.map(([k, v]) => `${k}=${v}`).join(" ")}`);
    }
    Deno.exit(2);
  }
}
