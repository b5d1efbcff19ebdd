/**
 * The launcher: `deno run -A jsr:@dcomm/dcomm/launch --nproc-per-node N script.ts [args]`, with torchrun's
 * flags and environment. It serves the rendezvous store (on node 0), starts one process per rank with
 * `RANK`, `WORLD_SIZE`, `LOCAL_RANK`, `LOCAL_WORLD_SIZE`, `GROUP_RANK`, `MASTER_ADDR`, `MASTER_PORT` and
 * the store's secret in its environment, and prefixes every line a rank prints with `[rankN]:`. If a rank
 * exits non-zero, the launcher stops the others, prints which rank failed, its exit code and its last
 * lines, and exits non-zero itself. On SIGTERM or SIGINT it forwards the signal to every rank (SIGKILL
 * after a grace period, or at once on a second signal), says it was stopped by that signal, and exits with
 * 128 + the signal's number (143, 130), whatever the ranks' own codes. Its output carries no ANSI colour
 * codes unless stdout and stderr are terminals and `NO_COLOR` is unset: the ranks then get `NO_COLOR=1`
 * (Deno colours its uncaught-error reports even into a pipe), and escape sequences left in their lines
 * are removed.
 *
 * ```sh
 * deno run -A jsr:@dcomm/dcomm/launch --nproc-per-node 4 train.ts --epochs 3
 * # two hosts:
 * DCOMM_STORE_SECRET=s3cret deno run -A jsr:@dcomm/dcomm/launch --nnodes 2 --node-rank 0 \
 *   --nproc-per-node 8 --master-addr 10.0.0.1 --master-port 29500 train.ts
 * ```
 *
 * @module
 */
import { parseArgs } from "node:util";
import { TcpStoreServer } from "../store/tcp_store_server.ts";
import { isLoopback } from "../backend/env.ts";
import { generateSecret, STORE_SECRET_ENV } from "../store/secret.ts";

/** What {@linkcode launch} needs. */
export interface LaunchOptions {
  /** Processes on this node. */
  nprocPerNode: number;
  /** Nodes in the job. @default 1 */
  nnodes?: number;
  /** This node's index. @default 0 */
  nodeRank?: number;
  /** The host of node 0, where the store runs. @default "127.0.0.1" */
  masterAddr?: string;
  /** The store's port; 0 picks a free one (single node only). @default 0 with one node, 29500 with several */
  masterPort?: number;
  /** The command of each rank: a script (run with `deno run`) and its arguments. */
  command: readonly string[];
  /** Flags given to `deno run` before the script. @default ["-A"] */
  denoArgs?: readonly string[];
  /** Run `command` as it is instead of with `deno run`. @default false */
  noDeno?: boolean;
  /**
   * Serve the rendezvous store on node 0 (false for programs that serve their own on MASTER_PORT, as
   * PyTorch's rank 0 does; a free port is then picked when none is given). @default true
   */
  hostStore?: boolean;
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

/** The signals the launcher forwards to its ranks. */
export type LaunchSignal = "SIGINT" | "SIGTERM";

/** The number of each forwarded signal (the same on Linux and macOS), for the exit code 128 + n. */
export const SIGNAL_NUMBERS: Readonly<Record<LaunchSignal, number>> = { SIGINT: 2, SIGTERM: 15 };

/** How one rank ended. */
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

/** The outcome of a launch. */
export interface LaunchResult {
  /** Every rank of this node. */
  ranks: RankExit[];
  /**
   * The launcher's exit code: 128 + the signal's number if it was stopped by a signal, else 0 if every
   * rank exited 0, else the first failing rank's code.
   */
  code: number;
  /** The signal that stopped the launcher (forwarded to every rank), if one did. */
  signal?: LaunchSignal;
}

/**
 * Whether the launcher's output may be coloured: `NO_COLOR` is unset (or empty) and both stdout and
 * stderr are terminals.
 *
 * @returns Whether to keep ANSI escape sequences.
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
 */
export function stripAnsi(line: string): string {
  return line.replace(ANSI_ESCAPE, "");
}

const encoder = new TextEncoder();

function defaultWrite(line: string, stream: "stdout" | "stderr"): void {
  (stream === "stdout" ? Deno.stdout : Deno.stderr).writeSync(encoder.encode(line + "\n"));
}

async function pump(
  readable: ReadableStream<Uint8Array>,
  onLine: (line: string) => void,
): Promise<void> {
  const decoder = new TextDecoder();
  let pending = "";
  for await (const chunk of readable) {
    pending += decoder.decode(chunk, { stream: true });
    let nl: number;
    while ((nl = pending.indexOf("\n")) >= 0) {
      onLine(pending.slice(0, nl).replace(/\r$/, ""));
      pending = pending.slice(nl + 1);
    }
  }
  pending += decoder.decode();
  if (pending) onLine(pending);
}

function checkInt(name: string, value: number, min: number): number {
  if (!Number.isInteger(value) || value < min) {
    throw new RangeError(`Invalid ${name}: expected an integer >= ${min}, found ${value}`);
  }
  return value;
}

/**
 * Starts this node's ranks and waits for them.
 *
 * @param options The job.
 * @returns How every rank ended.
 * @throws {RangeError} For invalid sizes or ranks.
 */
export async function launch(options: LaunchOptions): Promise<LaunchResult> {
  const nproc = checkInt("--nproc-per-node", options.nprocPerNode, 1);
  const nnodes = checkInt("--nnodes", options.nnodes ?? 1, 1);
  const nodeRank = checkInt("--node-rank", options.nodeRank ?? 0, 0);
  if (nodeRank >= nnodes) {
    throw new RangeError(`Invalid --node-rank: expected 0..${nnodes - 1}, found ${nodeRank}`);
  }
  if (options.command.length === 0) throw new RangeError("Nothing to launch: expected a script, found none");
  const masterAddr = options.masterAddr ?? "127.0.0.1";
  let masterPort = checkInt("--master-port", options.masterPort ?? (nnodes === 1 ? 0 : 29500), 0);
  const worldSize = nnodes * nproc;
  const rawWrite = options.write ?? defaultWrite;
  const color = options.color ?? colorEnabled();
  const write = color ? rawWrite : (line: string, stream: "stdout" | "stderr"): void => {
    rawWrite(stripAnsi(line), stream);
  };
  const tailLines = options.tailLines ?? 20;
  const inherited = Deno.env.get(STORE_SECRET_ENV);
  if (nnodes > 1 && !inherited) {
    throw new RangeError(
      `A job of ${nnodes} nodes needs one shared secret: set ${STORE_SECRET_ENV} to the same value on every node`,
    );
  }
  const secret = inherited || generateSecret();

  let server: TcpStoreServer | undefined;
  const hostStore = options.hostStore ?? true;
  if (!hostStore && masterPort === 0) {
    const probe = Deno.listen({ hostname: "127.0.0.1", port: 0 });
    masterPort = (probe.addr as Deno.NetAddr).port;
    probe.close();
  }
  if (nodeRank === 0 && hostStore) {
    server = await TcpStoreServer.listen({
      hostname: isLoopback(masterAddr) ? "127.0.0.1" : "0.0.0.0",
      port: masterPort,
      secret,
      log: (m) => write(`[launcher]: ${m}`, "stderr"),
    });
    masterPort = server.port;
  } else if (hostStore && masterPort === 0) {
    throw new RangeError("Invalid --master-port: nodes other than 0 must be given node 0's port, found 0");
  }

  const children: { rank: number; child: Deno.ChildProcess; tail: string[]; done: Promise<void> }[] = [];
  const exits: RankExit[] = [];
  let failed: RankExit | undefined;
  let stopping = false;
  let stoppedBy: LaunchSignal | undefined;
  const allDone = Promise.withResolvers<void>();

  const killAll = (signal: Deno.Signal): void => {
    for (const c of children) {
      try {
        c.child.kill(signal);
      } catch { /* already gone */ }
    }
  };
  const stopAll = (signal: LaunchSignal = "SIGTERM"): void => {
    if (stopping) return;
    stopping = true;
    killAll(signal);
    const timer = setTimeout(() => killAll("SIGKILL"), options.graceMs ?? 5000);
    Deno.unrefTimer(timer);
  };
  const signals: LaunchSignal[] = ["SIGINT", "SIGTERM"];
  const listeners = signals.map((signal) => ({
    signal,
    listener: (): void => {
      // A second signal (Ctrl-C again) does not wait for the grace period.
      if (stopping) return killAll("SIGKILL");
      stoppedBy = signal;
      write(`[launcher]: received ${signal}, forwarding it to ${children.length} ranks`, "stderr");
      stopAll(signal);
    },
  }));
  for (const { signal, listener } of listeners) Deno.addSignalListener(signal, listener);

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
        MASTER_ADDR: masterAddr,
        MASTER_PORT: String(masterPort),
        [STORE_SECRET_ENV]: secret,
        ...(hostStore ? { DCOMM_STORE_HOSTED: "1" } : {}),
      };
      if (!color && options.env?.NO_COLOR === undefined) env.NO_COLOR = "1";
      const [cmd, ...rest] = options.noDeno
        ? options.command
        : [Deno.execPath(), "run", ...(options.denoArgs ?? ["-A"]), ...options.command];
      const child = new Deno.Command(cmd, {
        args: rest,
        env,
        stdin: "null",
        stdout: "piped",
        stderr: "piped",
      })
        .spawn();
      const tail: string[] = [];
      const onLine = (stream: "stdout" | "stderr") => (line: string): void => {
        tail.push(line);
        if (tail.length > tailLines) tail.shift();
        write(`[rank${rank}]: ${line}`, stream);
      };
      const done = (async () => {
        const [status] = await Promise.all([
          child.status,
          pump(child.stdout, onLine("stdout")),
          pump(child.stderr, onLine("stderr")),
        ]);
        const exit: RankExit = {
          rank,
          code: status.code,
          signal: status.signal,
          stopped: stopping,
          tail,
        };
        exits.push(exit);
        if (status.code !== 0 && !failed && !stopping) {
          failed = exit;
          exit.stopped = false;
          stopAll();
        }
        if (exits.length === nproc) allDone.resolve();
      })();
      children.push({ rank, child, tail, done });
    }
    await allDone.promise;
  } finally {
    for (const { signal, listener } of listeners) Deno.removeSignalListener(signal, listener);
    await server?.[Symbol.asyncDispose]();
  }
  exits.sort((a, b) => a.rank - b.rank);
  if (stoppedBy) return { ranks: exits, code: 128 + SIGNAL_NUMBERS[stoppedBy], signal: stoppedBy };
  const firstFailure = failed ?? exits.find((e) => e.code !== 0);
  return { ranks: exits, code: firstFailure ? (firstFailure.code || 1) : 0 };
}

/** Options of {@linkcode summarize}. */
export interface SummarizeOptions {
  /** Keep ANSI escape sequences found in the ranks' last lines. @default false */
  color?: boolean;
}

/**
 * The summary the launcher prints when it exits non-zero: the signal that stopped it, or which rank
 * failed first, how, and its last lines; then how every rank ended.
 *
 * @param result What {@linkcode launch} returned.
 * @param options Whether to keep colours.
 * @returns The text, several lines.
 */
export function summarize(result: LaunchResult, options: SummarizeOptions = {}): string {
  const plain = options.color ? (l: string): string => l : stripAnsi;
  const ranks = [
    "Ranks:",
    ...result.ranks.map((r) =>
      `  rank ${r.rank}: ${r.signal ? `signal ${r.signal}` : `exit ${r.code}`}${
        r.stopped ? " (stopped)" : ""
      }`
    ),
  ];
  if (result.signal) {
    return [
      `Stopped by ${result.signal}: the launcher forwarded it to its ${result.ranks.length} ranks and ` +
      `exits with code ${result.code} (128 + ${SIGNAL_NUMBERS[result.signal]}).`,
      ...ranks,
    ].join("\n");
  }
  const first = result.ranks.find((r) => r.code !== 0 && !r.stopped);
  if (!first) {
    const bad = result.ranks.filter((r) => r.code !== 0).length;
    return bad === 0
      ? `All ${result.ranks.length} ranks exited with code 0`
      : [`${bad} of ${result.ranks.length} ranks exited non-zero while being stopped.`, ...ranks].join("\n");
  }
  const how = first.signal ? `was killed by ${first.signal}` : `exited with code ${first.code}`;
  return [
    `Rank ${first.rank} ${how}; the launcher stopped the other ranks.`,
    `Last lines of rank ${first.rank}:`,
    ...first.tail.map((l) => `  | ${plain(l)}`),
    ...ranks,
  ].join("\n");
}

const USAGE = `Usage: deno run -A jsr:@dcomm/dcomm/launch [options] script.ts [script args]

  --nproc-per-node N   processes on this node (required)
  --nnodes N           nodes in the job (default 1)
  --node-rank R        this node's index (default 0)
  --master-addr HOST   node 0's address (default 127.0.0.1)
  --master-port PORT   the store's port (default: a free one with one node, 29500 with several)
  --deno-args "ARGS"   flags for deno run before the script (default "-A")
  --no-deno            run the command as it is, not with deno run
  -h, --help           this text`;

if (import.meta.main) {
  // Our flags end at the script: everything after it belongs to the script.
  const args = [...Deno.args];
  const flagsWithValue = new Set([
    "--nproc-per-node",
    "--nproc_per_node",
    "--nnodes",
    "--node-rank",
    "--node_rank",
    "--master-addr",
    "--master_addr",
    "--master-port",
    "--master_port",
    "--deno-args",
  ]);
  let split = 0;
  while (split < args.length && args[split].startsWith("-")) {
    split += flagsWithValue.has(args[split]) ? 2 : 1;
  }
  const normalized = args.slice(0, split).map((a) => a.startsWith("--") ? a.replaceAll("_", "-") : a);
  const { values } = parseArgs({
    args: normalized,
    options: {
      "nproc-per-node": { type: "string" },
      nnodes: { type: "string", default: "1" },
      "node-rank": { type: "string", default: "0" },
      "master-addr": { type: "string", default: "127.0.0.1" },
      "master-port": { type: "string" },
      "deno-args": { type: "string" },
      "no-deno": { type: "boolean", default: false },
      help: { type: "boolean", short: "h", default: false },
    },
    strict: true,
  });
  if (values.help || values["nproc-per-node"] === undefined || split >= args.length) {
    console.log(USAGE);
    Deno.exit(values.help ? 0 : 2);
  }
  try {
    const color = colorEnabled();
    const result = await launch({
      nprocPerNode: Number(values["nproc-per-node"]),
      nnodes: Number(values.nnodes),
      nodeRank: Number(values["node-rank"]),
      masterAddr: values["master-addr"],
      masterPort: values["master-port"] === undefined ? undefined : Number(values["master-port"]),
      denoArgs: values["deno-args"]?.split(/\s+/).filter(Boolean),
      noDeno: values["no-deno"],
      command: args.slice(split),
      color,
    });
    if (result.code !== 0) console.error(summarize(result, { color }));
    Deno.exit(result.code);
  } catch (e) {
    console.error(`launch: ${(e as Error).message}`);
    Deno.exit(2);
  }
}
