/**
 * The launcher: `deno run -A jsr:@dcomm/dcomm/launch --nproc-per-node N script.ts [args]`, with torchrun's
 * flags and environment. It serves the rendezvous store (on node 0), starts one process per rank with
 * `RANK`, `WORLD_SIZE`, `LOCAL_RANK`, `LOCAL_WORLD_SIZE`, `GROUP_RANK`, `MASTER_ADDR`, `MASTER_PORT` and
 * the store's secret in its environment, and prefixes every line a rank prints with `[rankN]:`. If a rank
 * exits non-zero, the launcher stops the others, prints which rank failed, its exit code and its last
 * lines, and exits non-zero itself.
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
}

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
  /** The launcher's exit code: 0 if every rank exited 0, else the first failing rank's code. */
  code: number;
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
  const write = options.write ?? defaultWrite;
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
    const loopback = /^(127\.|localhost$|::1$)/.test(masterAddr);
    server = await TcpStoreServer.listen({
      hostname: loopback ? "127.0.0.1" : "0.0.0.0",
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
  const allDone = Promise.withResolvers<void>();

  const stopAll = (): void => {
    if (stopping) return;
    stopping = true;
    for (const c of children) {
      try {
        c.child.kill("SIGTERM");
      } catch { /* already gone */ }
    }
    const timer = setTimeout(() => {
      for (const c of children) {
        try {
          c.child.kill("SIGKILL");
        } catch { /* already gone */ }
      }
    }, options.graceMs ?? 5000);
    Deno.unrefTimer(timer);
  };
  const onSignal = (): void => stopAll();
  const signals: Deno.Signal[] = ["SIGINT", "SIGTERM"];
  for (const s of signals) Deno.addSignalListener(s, onSignal);

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
    for (const s of signals) Deno.removeSignalListener(s, onSignal);
    await server?.[Symbol.asyncDispose]();
  }
  exits.sort((a, b) => a.rank - b.rank);
  const firstFailure = failed ?? exits.find((e) => e.code !== 0);
  return { ranks: exits, code: firstFailure ? (firstFailure.code || 1) : 0 };
}

/**
 * The failure summary the launcher prints: which rank failed first, how, and its last lines, then how the
 * other ranks ended.
 */
export function summarize(result: LaunchResult): string {
  const first = result.ranks.find((r) => r.code !== 0 && !r.stopped);
  if (!first) return `All ${result.ranks.length} ranks exited with code 0`;
  const how = first.signal ? `was killed by ${first.signal}` : `exited with code ${first.code}`;
  const lines = [
    `Rank ${first.rank} ${how}; the launcher stopped the other ranks.`,
    `Last lines of rank ${first.rank}:`,
    ...first.tail.map((l) => `  | ${l}`),
    "Ranks:",
    ...result.ranks.map((r) =>
      `  rank ${r.rank}: ${r.signal ? `signal ${r.signal}` : `exit ${r.code}`}${
        r.stopped ? " (stopped)" : ""
      }`
    ),
  ];
  return lines.join("\n");
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
    const result = await launch({
      nprocPerNode: Number(values["nproc-per-node"]),
      nnodes: Number(values.nnodes),
      nodeRank: Number(values["node-rank"]),
      masterAddr: values["master-addr"],
      masterPort: values["master-port"] === undefined ? undefined : Number(values["master-port"]),
      denoArgs: values["deno-args"]?.split(/\s+/).filter(Boolean),
      noDeno: values["no-deno"],
      command: args.slice(split),
    });
    if (result.code !== 0) console.error(summarize(result));
    Deno.exit(result.code);
  } catch (e) {
    console.error(`launch: ${(e as Error).message}`);
    Deno.exit(2);
  }
}
