/**
 * The rendezvous address from an MPI launcher: a client of MPICH's PMI-1 wire protocol over the socket that
 * Hydra's `mpiexec` passes each rank (`PMI_FD`), so that `mpiexec -n 3 deno run -A train.ts` needs no
 * MASTER_ADDR/MASTER_PORT. Rank 0 starts the store and puts its address in the job's key-value space,
 * every rank fences (`barrier_in`) and reads it back.
 *
 * The exchange, one text line each way (what Hydra 4.0 answers is on the right):
 *
 * ```
 * cmd=init pmi_version=1 pmi_subversion=1   cmd=response_to_init pmi_version=1 pmi_subversion=1 rc=0
 * cmd=get_maxes                             cmd=maxes kvsname_max=256 keylen_max=64 vallen_max=1024
 * cmd=get_my_kvsname                        cmd=my_kvsname kvsname=kvs_7575_0_395332276_vm
 * cmd=put kvsname=K key=dcomm-store-0 value=127.0.0.1:41234   (rank 0 only)
 *                                           cmd=put_result rc=0 msg=success
 * cmd=barrier_in                            cmd=barrier_out   (once every rank of the job is in)
 * cmd=get kvsname=K key=dcomm-store-0       cmd=get_result rc=0 msg=success value=127.0.0.1:41234
 * ...
 * cmd=finalize                              cmd=finalize_ack   (when the process exits)
 * ```
 *
 * Why the connection lives until the process exits: Hydra counts a process as a PMI client from its first
 * command on, and one whose socket closes without `cmd=finalize` is a failed rank, for which it kills the
 * whole job (a rank that finished early would kill the others). But after `cmd=finalize` Hydra closes its
 * end, and a later `MPI_Init` in the same process (the mpi backend) would die writing to it. So the
 * connection stays open, idle, and is finalised by an `unload` handler (normal end and `Deno.exit`), unless
 * MPI took it over meanwhile: `MPI_Init` sends its own `cmd=init` on the same socket (Hydra answers a second
 * init as the first) and `MPI_Finalize` finalises it and closes it, which the handler sees (the descriptor
 * no longer names the same socket) and then leaves it alone. A rank that dies of an uncaught error skips
 * `unload`: Hydra then ends the job, as it does for an MPI program that crashes.
 *
 * Every rank of the job must make the same calls in the same order (each is one barrier of the job), from
 * the main thread, and not while MPI is inside a call of its own on the socket (`MPI_Init`, spawning).
 *
 * @module
 */
import { isMainThread } from "node:worker_threads";
import { DistError, TimeoutError } from "../core/errors.ts";
import { LibcError, pollReadable, pollReadableSync, readSome, writeAll } from "../ffi/libc/libc.ts";
import { defaultHostname } from "./env.ts";
import { inspectFd } from "./_pmi_socket.ts";

/** Where the rendezvous store listens. */
export interface PmiStoreAddress {
  /** Its host. */
  hostname: string;
  /** Its port. */
  port: number;
  /** The store's secret, when rank 0 published one with the address. */
  secret?: string;
}

/** Options of {@linkcode pmiStoreAddress}. */
export interface PmiStoreAddressOptions {
  /** How long the whole exchange may take, the barrier (every rank's arrival) included. @default 300000 */
  timeoutMs?: number;
  /**
   * The address rank 0 publishes. @default "127.0.0.1" when every rank of the job is on this host
   * (`MPI_LOCALNRANKS` equals `PMI_SIZE`), else this host's first non-loopback IPv4 address
   */
  hostname?: string;
  /**
   * A secret rank 0 publishes with the address (its value is `secret@host:port`): the launcher's key-value
   * space reaches only the job's processes, so a store it guards is the job's alone. Hex digits only.
   */
  secret?: string;
}

type Env = Readonly<Record<string, string | undefined>>;

/** When an exchange gives up (`performance.now()` time), and the timeout it came from, for messages. */
interface Deadline {
  at: number;
  ms: number;
}

/** The longest wait for `cmd=finalize_ack` when the process exits. */
const FINALIZE_TIMEOUT_MS = 5_000;
/** The longest line accepted from the launcher (its values are at most 1024 bytes). */
const MAX_LINE = 65_536;
const ERROR_PREFIX = "error:";

/**
 * Under MPICH's `mpiexec` (Hydra: `PMI_FD`, `PMI_RANK`, `PMI_SIZE` set), finds the rendezvous store through
 * the launcher's key-value space: rank 0 calls `serve` (which starts the store) and publishes where it
 * listens; every rank waits at the job's barrier and reads it. Not under such a launcher (no `PMI_FD`, or
 * Open MPI's PMIx, see {@linkcode pmiUnavailableReason}) it returns `undefined` and sends nothing.
 *
 * Rank 0 publishes `options.hostname`, by default 127.0.0.1 when the whole job is on its host, else its first
 * non-loopback IPv4 address. If `serve` fails, rank 0 still joins the barrier and publishes the failure, so
 * the other ranks fail at once with its reason instead of waiting out the timeout.
 *
 * @param env The environment (`PMI_FD`, `PMI_RANK`, `PMI_SIZE`, `MPI_LOCALNRANKS`).
 * @param serve Called on rank 0 only, with the address to be published: starts the store so that it is
 *   reachable there (bound to 127.0.0.1 for a loopback address, else to 0.0.0.0) and returns its port. If
 *   the exchange fails after it (a rank never reaches the barrier), the store it started is the caller's
 *   to close.
 * @param options The timeout and the address to publish.
 * @returns The store's address, the same on every rank; `undefined` when there is no PMI-1 socket here.
 * @throws {RangeError} If `PMI_FD`, `PMI_RANK` or `PMI_SIZE` is not a non-negative integer.
 * @throws {DistError} If `PMI_FD` does not name the socket the launcher passed (code `"PMI"`), the launcher
 *   answers otherwise than PMI-1 or closes the socket, this is not the main thread, or rank 0 could not
 *   serve the store (the other ranks say so); whatever `serve` threw, on rank 0.
 * @throws {TimeoutError} If the launcher does not answer within `timeoutMs` (at the barrier: a rank of the
 *   job never got there). The connection is then out of step, and later calls throw a DistError.
 *
 * @example No MPI launcher here: nothing to ask
 * ```ts
 * import { pmiStoreAddress } from "./_pmi.ts";
 * import assert from "node:assert/strict";
 * const address = await pmiStoreAddress({ RANK: "0", WORLD_SIZE: "2" }, () => {
 *   throw new Error("not called without PMI");
 * });
 * assert.equal(address, undefined);
 * ```
 */
export async function pmiStoreAddress(
  env: Readonly<Record<string, string | undefined>>,
  serve: (hostname: string) => Promise<number>,
  options: PmiStoreAddressOptions = {},
): Promise<PmiStoreAddress | undefined> {
  if (env["PMI_FD"] === undefined || env["PMI_FD"] === "") return undefined;
  const rank = int(env, "PMI_RANK");
  const size = int(env, "PMI_SIZE");
  if (rank === undefined || size === undefined) return undefined;
  const fd = int(env, "PMI_FD") as number;
  const timeoutMs = options.timeoutMs ?? 300_000;
  const deadline: Deadline = { at: performance.now() + timeoutMs, ms: timeoutMs };
  if (!onMainThread()) {
    throw new DistError(
      `Cannot find the rendezvous through MPICH's PMI (PMI_FD=${fd}) from a worker thread: expected the ` +
        `main thread, which alone sees the process exit, where the PMI connection must be finalised; call ` +
        `init() on the main thread, or set MASTER_ADDR and MASTER_PORT`,
      { code: "PMI" },
    );
  }
  const pmi = await PmiConnection.get(fd, deadline);
  return await pmi.exclusive(async () => {
    const key = pmi.nextKey();
    let value = "";
    let failure: unknown;
    if (rank === 0) {
      const hostname = options.hostname ?? publishedHostname(env, size);
      try {
        const port = await serve(hostname);
        value = `${options.secret ? `${options.secret}@` : ""}${hostname}:${port}`;
      } catch (e) {
        failure = e;
        value = ERROR_PREFIX + encodeURIComponent(e instanceof Error ? e.message : String(e));
      }
      // The failure's text is cut to the launcher's limit: the other ranks need only its gist.
      value = value.slice(0, pmi.valueMax);
      await pmi.request(`cmd=put kvsname=${pmi.kvsname} key=${key} value=${value}`, "put_result", deadline);
    }
    await pmi.request("cmd=barrier_in", "barrier_out", deadline);
    if (failure !== undefined) throw failure;
    if (rank !== 0) {
      const got = await pmi.request(
        `cmd=get kvsname=${pmi.kvsname} key=${key}`,
        "get_result",
        deadline,
        `; rank 0 published no store under ${key}: the ranks' rendezvous are out of step (each rank must ` +
          `join as many as the others, in the same order), or rank 0 does not run dcomm's cpu or nccl backend`,
      );
      value = got["value"] ?? "";
    }
    return parseAddress(value, key, fd);
  });
}

/**
 * Why {@linkcode pmiStoreAddress} finds no rendezvous address in `env` although an MPI launcher started
 * this process, for the rendezvous's "expected MASTER_ADDR and MASTER_PORT" error; `undefined` when no
 * launcher's variables are there, or MPICH's PMI socket is (then `pmiStoreAddress` answers).
 *
 * @param env The environment.
 * @returns A clause naming the launcher seen and what dcomm would need.
 *
 * @example Open MPI's mpirun
 * ```ts
 * import { pmiUnavailableReason } from "./_pmi.ts";
 * import assert from "node:assert/strict";
 * const reason = pmiUnavailableReason({ OMPI_COMM_WORLD_RANK: "0", OMPI_COMM_WORLD_SIZE: "4" });
 * assert.match(reason ?? "", /^Open MPI's mpirun started this process \(OMPI_COMM_WORLD_SIZE=4\)/);
 * assert.equal(pmiUnavailableReason({ RANK: "0", WORLD_SIZE: "2" }), undefined);
 * ```
 */
export function pmiUnavailableReason(env: Readonly<Record<string, string | undefined>>): string | undefined {
  if (env["PMI_FD"]) return undefined;
  const mpich =
    "dcomm reads the store's address only from MPICH's PMI-1 socket (PMI_FD, as Hydra's mpiexec " +
    "passes it)";
  if (env["OMPI_COMM_WORLD_SIZE"] !== undefined) {
    return `Open MPI's mpirun started this process (OMPI_COMM_WORLD_SIZE=${env["OMPI_COMM_WORLD_SIZE"]}), ` +
      `and ${mpich}, not from Open MPI's PMIx`;
  }
  const pmix = Object.keys(env).find((name) => name.startsWith("PMIX_"));
  if (pmix !== undefined) {
    return `a PMIx launcher started this process (${pmix} is set), and ${mpich}, not from PMIx`;
  }
  if (env["PMI_RANK"] !== undefined) {
    const port = env["PMI_PORT"] ? ` (it has PMI_PORT=${env["PMI_PORT"]})` : "";
    return `an MPI launcher set PMI_RANK=${env["PMI_RANK"]} but passed no PMI_FD${port}, and ${mpich}`;
  }
  return undefined;
}

/** Whether this is the process's main thread (node:worker_threads and web Workers are not). */
function onMainThread(): boolean {
  return isMainThread && (globalThis as { WorkerGlobalScope?: unknown }).WorkerGlobalScope === undefined;
}

/** 127.0.0.1 when the whole job is on this host, else an address the other hosts can reach. */
function publishedHostname(env: Env, size: number): string {
  const local = env["MPI_LOCALNRANKS"];
  return local !== undefined && /^\d+$/.test(local) && Number(local) === size
    ? "127.0.0.1"
    : defaultHostname("0.0.0.0");
}

function parseAddress(value: string, key: string, fd: number): PmiStoreAddress {
  if (value.startsWith(ERROR_PREFIX)) {
    let reason = value.slice(ERROR_PREFIX.length);
    try {
      reason = decodeURIComponent(reason);
    } catch {
      // Cut in the middle of an escape by the launcher's length limit: the raw text says enough.
    }
    throw new DistError(`Cannot rendezvous: rank 0 could not start the store: ${reason}`, { code: "PMI" });
  }
  const at = /^[0-9a-f]+@/.exec(value);
  const secret = at === null ? undefined : at[0].slice(0, -1);
  const address = at === null ? value : value.slice(at[0].length);
  const colon = address.lastIndexOf(":");
  const port = Number(address.slice(colon + 1));
  if (colon <= 0 || !/^\d+$/.test(address.slice(colon + 1)) || port > 65535) {
    throw new DistError(
      `Cannot rendezvous through MPICH's PMI (PMI_FD=${fd}): expected "host:port" (or "secret@host:port") ` +
        `under ${key}, found "${secret === undefined ? value : `<secret>@${address}`}"`,
      { code: "PMI" },
    );
  }
  return secret === undefined ? { hostname: address.slice(0, colon), port } : {
    hostname: address.slice(0, colon),
    port,
    secret,
  };
}

function int(env: Env, name: string): number | undefined {
  const raw = env[name];
  if (raw === undefined || raw === "") return undefined;
  if (!/^\d+$/.test(raw.trim())) {
    throw new RangeError(`Invalid ${name}: expected a non-negative integer, found "${raw}"`);
  }
  return Number(raw.trim());
}

/** This process's connections, by descriptor (one in a launched rank; tests open more). */
const connections = new Map<number, PmiConnection>();
let finalizeAtExit = false;

/** One PMI-1 connection: the launcher's answers, one line per request, in order. */
class PmiConnection {
  readonly fd: number;
  /** What the descriptor named when it was first used (`socket:[N]`), to notice MPI closing it. */
  readonly socket: string;
  kvsname = "";
  /** The longest value the launcher keeps. */
  valueMax = 1024;
  #pending = "";
  #decoder = new TextDecoder();
  #buffer = new Uint8Array(4096);
  #queue: Promise<unknown> = Promise.resolve();
  #keys = 0;
  /** Whether the launcher has heard a command (it then expects `cmd=finalize` before the socket closes). */
  #spoke = false;
  #finalized = false;
  /** Why the connection cannot be used any more: an exchange that failed left it out of step. */
  #broken: Error | undefined;

  private constructor(fd: number, socket: string) {
    this.fd = fd;
    this.socket = socket;
  }

  /** The connection on `fd`: opened (`init`, `get_maxes`, `get_my_kvsname`) on first use. */
  static async get(fd: number, deadline: Deadline): Promise<PmiConnection> {
    const known = connections.get(fd);
    if (known) {
      known.#checkSocket();
      return known;
    }
    const socket = inheritedSocket(fd);
    const pmi = new PmiConnection(fd, socket);
    connections.set(fd, pmi);
    if (!finalizeAtExit) {
      finalizeAtExit = true;
      globalThis.addEventListener("unload", () => {
        for (const c of connections.values()) c.finalizeSync();
      });
    }
    await pmi.exclusive(async () => {
      const init = await pmi.request("cmd=init pmi_version=1 pmi_subversion=1", "response_to_init", deadline);
      if (init["rc"] !== "0" || init["pmi_version"] !== "1") {
        throw pmi.#break(
          `Cannot speak PMI with the launcher (PMI_FD=${fd}): expected PMI version 1 with rc=0, found ` +
            `"${init.line}"`,
        );
      }
      const maxes = await pmi.request("cmd=get_maxes", "maxes", deadline);
      pmi.valueMax = Number(maxes["vallen_max"]) || pmi.valueMax;
      const kvs = await pmi.request("cmd=get_my_kvsname", "my_kvsname", deadline);
      if (!kvs["kvsname"]) {
        throw pmi.#break(`Cannot speak PMI (PMI_FD=${fd}): expected a kvsname, found "${kvs.line}"`);
      }
      pmi.kvsname = kvs["kvsname"];
    });
    return pmi;
  }

  /** The key of the next rendezvous: every rank counts its calls alike. */
  nextKey(): string {
    return `dcomm-store-${this.#keys++}`;
  }

  /**
   * Runs `fn` after every exchange begun before it (one request at a time on the socket).
   *
   * @param fn The exchange.
   * @returns What `fn` returns.
   */
  exclusive<T>(fn: () => Promise<T>): Promise<T> {
    const run = this.#queue.then(fn);
    this.#queue = run.catch(() => {});
    return run;
  }

  /**
   * Sends one command and reads its answer.
   *
   * @param line The command, without its newline.
   * @param expect The `cmd=` of the answer.
   * @param deadline When to give up.
   * @param hint What a refusal (rc other than 0) means, for the message.
   * @returns The answer's fields, and the whole line as `line`.
   */
  async request(
    line: string,
    expect: string,
    deadline: Deadline,
    hint = "",
  ): Promise<Record<string, string>> {
    if (this.#broken) {
      throw new DistError(
        `Cannot use MPICH's PMI connection (PMI_FD=${this.fd}) again: an earlier exchange failed and left it ` +
          `out of step with the launcher (${this.#broken.message})`,
        { code: "PMI", cause: this.#broken },
      );
    }
    this.#checkSocket();
    const command = line.split(" ")[0];
    try {
      this.#spoke = true;
      writeAll(this.fd, new TextEncoder().encode(line + "\n"));
    } catch (e) {
      throw this.#break(
        `Cannot speak PMI with the launcher (PMI_FD=${this.fd}): sending "${command}" failed (${
          e instanceof Error ? e.message : e
        }); the launcher (mpiexec's hydra_pmi_proxy) is gone`,
        e,
      );
    }
    const answer = await this.#readLine(deadline, command, expect);
    const fields = parseLine(answer);
    // init's rc is checked with its version, by the caller.
    const rcFails = expect !== "response_to_init" && fields["rc"] !== undefined && fields["rc"] !== "0";
    if (fields["cmd"] !== expect || rcFails) {
      throw this.#break(
        `Cannot speak PMI with the launcher (PMI_FD=${this.fd}): expected "cmd=${expect}"${
          rcFails ? " with rc=0" : ""
        } in answer to "${command}", found "${answer}"${rcFails ? hint : ""}`,
      );
    }
    return fields;
  }

  async #readLine(deadline: Deadline, command: string, expect: string): Promise<string> {
    for (;;) {
      const newline = this.#pending.indexOf("\n");
      if (newline >= 0) {
        const line = this.#pending.slice(0, newline);
        this.#pending = this.#pending.slice(newline + 1);
        return line;
      }
      if (this.#pending.length > MAX_LINE) {
        throw this.#break(
          `Cannot speak PMI with the launcher (PMI_FD=${this.fd}): expected a line of at most ${MAX_LINE} ` +
            `bytes in answer to "${command}", found ${this.#pending.length} bytes without a newline`,
        );
      }
      const left = deadline.at - performance.now();
      if (left <= 0) {
        const why = command === "cmd=barrier_in"
          ? "; every rank of the job enters this barrier in init(), so a rank has not got there (it is slow " +
            "to start, stuck, or does not run dcomm's cpu or nccl backend)"
          : "";
        throw this.#break(
          `Cannot rendezvous through MPICH's PMI (PMI_FD=${this.fd}): expected "cmd=${expect}" in answer ` +
            `to "${command}", found no answer within ${deadline.ms} ms${why}`,
          undefined,
          true,
        );
      }
      if (!await pollReadable(this.fd, left)) continue;
      let n: number;
      try {
        n = readSome(this.fd, this.#buffer);
      } catch (e) {
        throw this.#break(
          `Cannot speak PMI with the launcher (PMI_FD=${this.fd}): reading the answer to "${command}" ` +
            `failed (${e instanceof Error ? e.message : e})`,
          e,
        );
      }
      if (n === 0) {
        throw this.#break(
          `Cannot rendezvous through MPICH's PMI (PMI_FD=${this.fd}): expected "cmd=${expect}" in answer to ` +
            `"${command}", found the socket closed by the launcher (mpiexec's hydra_pmi_proxy ended or died)`,
        );
      }
      this.#pending += this.#decoder.decode(this.#buffer.subarray(0, n), { stream: true });
    }
  }

  /** Marks the connection unusable, and returns the error to throw. */
  #break(message: string, cause?: unknown, timeout = false): Error {
    const error = timeout
      ? new TimeoutError(message)
      : new DistError(message, cause === undefined ? { code: "PMI" } : { code: "PMI", cause });
    this.#broken ??= error;
    return error;
  }

  /** Throws if the descriptor no longer names the socket of the first use (MPI_Finalize closed it). */
  #checkSocket(): void {
    const now = inspectFd(this.fd);
    if (now === undefined || now?.target === this.socket) return;
    const found = now === null ? "it closed" : now.target;
    throw new DistError(
      `Cannot rendezvous through MPICH's PMI: PMI_FD=${this.fd} should still name the launcher's socket ` +
        `(${this.socket}), found ${found}. MPI_Finalize closes it (the mpi backend's close), after which no ` +
        `rendezvous through PMI is possible in this process; set MASTER_ADDR and MASTER_PORT`,
      { code: "PMI" },
    );
  }

  /**
   * Says `cmd=finalize` and waits (at most 5 s, blocking) for the acknowledgement, unless the launcher
   * never heard from this process, or MPI finalised and closed the socket. Never throws: the process is
   * exiting.
   */
  finalizeSync(): void {
    if (this.#finalized || !this.#spoke) return;
    this.#finalized = true;
    const now = inspectFd(this.fd);
    // Unknowable (no /proc): finalise anyway, as an unfinalised rank that exits ends the whole job.
    if (now !== undefined && now?.target !== this.socket) return;
    try {
      // What is waiting is an answer nobody will read (an exchange cut short) or the launcher's end of
      // the stream (it finalised the socket for MPI, which left it open).
      while (pollReadableSync(this.fd, 0)) {
        if (readSome(this.fd, this.#buffer) === 0) return;
      }
      writeAll(this.fd, new TextEncoder().encode("cmd=finalize\n"));
      const end = performance.now() + FINALIZE_TIMEOUT_MS;
      let text = "";
      while (!/(^|\n)cmd=finalize_ack\n/.test(text)) {
        const left = end - performance.now();
        if (left <= 0 || !pollReadableSync(this.fd, left)) return;
        const n = readSome(this.fd, this.#buffer);
        if (n === 0) return;
        text += this.#decoder.decode(this.#buffer.subarray(0, n), { stream: true });
      }
    } catch (e) {
      if (!(e instanceof LibcError)) throw e;
    }
  }
}

/** `socket:[N]` for an inherited socket at `fd`; throws, naming what is there, for anything else. */
function inheritedSocket(fd: number): string {
  const info = inspectFd(fd);
  if (info === undefined) return "unknown";
  let found: string;
  if (info === null) found = `fd ${fd} is not open in this process (MPI_Finalize closes it, if it ran)`;
  else if (info.flags & O_CLOEXEC) {
    found = `fd ${fd} is ${info.target}, which this process opened itself (it is close-on-exec, so it was ` +
      `not inherited)`;
  } else if (!info.target.startsWith("socket:")) found = `fd ${fd} is ${info.target}, not a socket`;
  else return info.target;
  throw new DistError(
    `Cannot find the rendezvous through MPICH's PMI: PMI_FD=${fd} should name the socket mpiexec passed to ` +
      `this process, found ${found}. A program between mpiexec and deno (npx, npm or node) did not pass ` +
      `the socket on: run the deno binary itself under mpiexec, or set MASTER_ADDR and MASTER_PORT`,
    { code: "PMI" },
  );
}

const O_CLOEXEC = 0o2000000;

/** `cmd=get_result rc=0 value=x` → `{ cmd: "get_result", rc: "0", value: "x", line }`. */
function parseLine(line: string): Record<string, string> {
  const fields: Record<string, string> = { line };
  for (const token of line.split(" ")) {
    const eq = token.indexOf("=");
    if (eq > 0) fields[token.slice(0, eq)] = token.slice(eq + 1);
  }
  return fields;
}
