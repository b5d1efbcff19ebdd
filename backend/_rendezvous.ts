/**
 * The rendezvous of the backends whose ranks meet through a store (`cpu`, `nccl`; the `mpi` backend's
 * ranks meet through MPI's launcher): where this rank stands in the world (torchrun's, Slurm's or MPI
 * launchers' variables, or explicit options), which store the job meets in, the join (every rank checks
 * in, and waiting is visible), and the check-out when the world closes.
 *
 * The store, by launcher:
 * - **torchrun** (`TORCHELASTIC_USE_AGENT_STORE=True`): its elastic agent already serves torch's c10d
 *   `TCPStore` on `MASTER_ADDR:MASTER_PORT`; every rank joins it as a {@linkcode TorchStore} client and
 *   serves nothing. The agent keeps its store from one attempt to the next (`--max-restarts`), so keys go
 *   under `dcomm/<TORCHELASTIC_RUN_ID>/<TORCHELASTIC_RESTART_COUNT>`.
 * - **dcomm's launcher** (`DCOMM_STORE_HOSTED=1`): it serves the store (dcomm's protocol, or torch's with
 *   `DCOMM_STORE_PROTOCOL=torch`); keys go under `dcomm/<DCOMM_RUN_ID>/<DCOMM_RESTART_COUNT>` when those are set.
 * - otherwise rank 0 serves it on `MASTER_ADDR:MASTER_PORT` (or `tcp://host:port`): a dcomm
 *   {@linkcode TcpStoreServer}, or a {@linkcode TorchStoreServer} with `DCOMM_STORE_PROTOCOL=torch` (for
 *   jobs that mix Python and Deno ranks; it has no secret).
 *
 * The keys' base is `dcomm`, or `storePrefix` (`DCOMM_STORE_PREFIX`): two worlds that share one store (a
 * torchrun agent's, a store of the user's) each take their own.
 *
 * Joining: every rank first checks that the store is its job's: the first rank of a run records the run id
 * under `<base>/run`, the first rank of an attempt its world size under `<prefix>/world`, and a rank that
 * finds another run id or world size there (another job's store on the same port, as when two jobs on one
 * machine use the same `MASTER_PORT`) fails at once, as does a second process claiming a rank already
 * joined. Then every rank adds 1 to `<prefix>/joined/<rank>` and waits for all. While it waits, rank 0
 * (and any rank waiting over 30 s) prints a line every 10 s naming the ranks still missing; a rendezvous
 * that runs out of time names the ranks that never came and the store they were expected at, and one whose
 * store went away (its server gave up first) says so, naming the ranks it was waiting for.
 *
 * @module
 */
import { StoreError, TimeoutError } from "../core/errors.ts";
import { generateSecret, STORE_INSECURE_ENV, STORE_SECRET_ENV } from "../store/secret.ts";
import type { Store } from "../store/store.ts";
import { TcpStore } from "../store/tcp_store.ts";
import { TcpStoreServer } from "../store/tcp_store_server.ts";
import { TorchStore } from "../store/torch_store.ts";
import { TorchStoreServer } from "../store/torch_store_server.ts";
import { bindHostname, hostPort, parseInitMethod, type RankInfo, rankInfo } from "./env.ts";
import { pmiStoreAddress, pmiUnavailableReason } from "./_pmi.ts";

/** What a rendezvous needs (a subset of `init`'s options). */
export interface RendezvousOptions {
  /** `"env://"` or `"tcp://host:port"`. @default "env://" */
  initMethod?: string;
  /** This rank. @default from the environment */
  rank?: number;
  /** The number of ranks. @default from the environment */
  worldSize?: number;
  /** The store's shared secret. @default the DCOMM_STORE_SECRET environment variable */
  secret?: string;
  /** Default timeout of the store's waits, and of the join. @default 300000 */
  timeoutMs?: number;
  /** The environment to read. @default Deno.env.toObject() */
  env?: Readonly<Record<string, string | undefined>>;
  /** Where the lines about waiting go. @default console.error */
  log?: (line: string) => void;
  /** How often rank 0 says whom it waits for. @default 10000 */
  reportEveryMs?: number;
  /** How long other ranks wait before they say so too. @default 30000 */
  quietMs?: number;
  /**
   * The base of the world's keys in the store, for worlds that share one store.
   * @default the DCOMM_STORE_PREFIX environment variable, else "dcomm"
   */
  storePrefix?: string;
}

/** The protocol a job's store speaks: dcomm's own (with a secret) or torch's c10d `TCPStore`'s. */
export type StoreProtocol = "dcomm" | "torch";

/** Where a job's store is and how to speak to it: what a rank's communication thread connects with. */
export interface StoreAddress {
  /** The protocol. */
  protocol: StoreProtocol;
  /** The store's host. */
  hostname: string;
  /** The store's port. */
  port: number;
  /** The secret (dcomm's protocol only). */
  secret?: string;
}

/** A connected store the rendezvous keeps: it can stop keeping the process alive once the world formed. */
export type RendezvousStore = Store & { ref(): void; unref(): void };

/**
 * Connects to a job's store in its protocol.
 *
 * @param address Where the store is, its protocol and secret.
 * @param timeoutMs The default timeout of its waits (and of connecting).
 * @returns The connected store.
 */
export async function openStore(address: StoreAddress, timeoutMs: number): Promise<RendezvousStore> {
  const { hostname, port } = address;
  return address.protocol === "torch"
    ? await TorchStore.connect({ hostname, port, timeoutMs })
    : await TcpStore.connect({ hostname, port, secret: address.secret, timeoutMs });
}

/**
 * The environment `init` reads: the one given, or the process's (none without `--allow-env`).
 *
 * @param options The options.
 * @returns The variables.
 */
export function environment(options: { env?: Readonly<Record<string, string | undefined>> }): Readonly<
  Record<string, string | undefined>
> {
  if (options.env) return options.env;
  try {
    return Deno.env.toObject();
  } catch {
    return {};
  }
}

/** How this job's store is found: who serves it, its protocol, the keys' prefix, and how to name it. */
interface Plan {
  protocol: StoreProtocol;
  /** Whether a launcher serves the store (else rank 0 does). */
  hosted: boolean;
  /** The base of the keys (`dcomm` or the store prefix asked for). */
  base: string;
  /** The keys of this attempt of the job. */
  prefix: string;
  /** The job's run id, `""` for none. */
  run: string;
  /** Who set the address, for messages. */
  origin: string;
}

/**
 * Reads which store the job meets in from the launcher's variables.
 *
 * @param env The environment.
 * @param storePrefix The `storePrefix` option.
 * @returns The plan.
 * @throws {TypeError} If `DCOMM_STORE_PROTOCOL` names no protocol, or the store prefix is no non-empty
 *   string.
 */
function plan(env: Readonly<Record<string, string | undefined>>, storePrefix: unknown): Plan {
  const base = storeBase(storePrefix, env[STORE_PREFIX_ENV]);
  if (env["TORCHELASTIC_USE_AGENT_STORE"] === "True") {
    const run = env["TORCHELASTIC_RUN_ID"] || "none";
    const attempt = env["TORCHELASTIC_RESTART_COUNT"] || "0";
    return {
      protocol: "torch",
      hosted: true,
      base,
      prefix: `${base}/${run}/${attempt}`,
      run,
      origin: "torchrun's agent store",
    };
  }
  const named = env["DCOMM_STORE_PROTOCOL"];
  if (named !== undefined && named !== "" && named !== "dcomm" && named !== "torch") {
    throw new TypeError(`Invalid DCOMM_STORE_PROTOCOL: expected "dcomm" or "torch", found "${named}"`);
  }
  const protocol: StoreProtocol = named === "torch" ? "torch" : "dcomm";
  const hosted = env["DCOMM_STORE_HOSTED"] === "1";
  const run = env["DCOMM_RUN_ID"];
  const attempt = env["DCOMM_RESTART_COUNT"];
  const prefix = run || attempt ? `${base}/${run || "none"}/${attempt || "0"}` : base;
  return {
    protocol,
    hosted,
    base,
    prefix,
    run: run ?? "",
    origin: hosted ? "the launcher's store" : "the store rank 0 serves",
  };
}

/** The variable that sets the keys' base (`init`'s `storePrefix` wins). */
export const STORE_PREFIX_ENV = "DCOMM_STORE_PREFIX";

/**
 * The base of a world's keys: the option, else the variable, else `dcomm`.
 *
 * @param option The `storePrefix` option.
 * @param variable `DCOMM_STORE_PREFIX`.
 * @returns The base, without a trailing `/`.
 * @throws {TypeError} If the option is no non-empty string, or either ends with `/`.
 */
function storeBase(option: unknown, variable: string | undefined): string {
  if (option !== undefined && (typeof option !== "string" || option === "")) {
    throw new TypeError(
      `Invalid storePrefix: expected a non-empty string, found ${
        typeof option === "string" ? '""' : typeof option
      }`,
    );
  }
  const [name, value] = option !== undefined
    ? ["storePrefix", option as string]
    : [STORE_PREFIX_ENV, variable || "dcomm"];
  if (value.endsWith("/")) {
    throw new TypeError(`Invalid ${name}: expected a prefix without a trailing "/", found "${value}"`);
  }
  return value;
}

/** This rank's end of a world's store, from joining to checking out. */
export class Rendezvous {
  /** Where this rank stands in the world. */
  readonly info: RankInfo;
  /** Where the store is and how to speak to it. */
  readonly address: StoreAddress;
  /** The prefix of this job attempt's keys (`dcomm`, or `dcomm/<run id>/<attempt>`). */
  readonly prefix: string;
  /** The connection to the store. */
  readonly store: RendezvousStore;
  /** The store this rank serves (rank 0, unless a launcher serves it). */
  readonly server: TcpStoreServer | TorchStoreServer | undefined;
  /** The default timeout of waits. */
  readonly timeoutMs: number;
  /** The variables read. */
  readonly env: Readonly<Record<string, string | undefined>>;

  private constructor(fields: {
    info: RankInfo;
    address: StoreAddress;
    prefix: string;
    store: RendezvousStore;
    server: TcpStoreServer | TorchStoreServer | undefined;
    timeoutMs: number;
    env: Readonly<Record<string, string | undefined>>;
  }) {
    this.info = fields.info;
    this.address = fields.address;
    this.prefix = fields.prefix;
    this.store = fields.store;
    this.server = fields.server;
    this.timeoutMs = fields.timeoutMs;
    this.env = fields.env;
  }

  /** The store's host. */
  get hostname(): string {
    return this.address.hostname;
  }

  /**
   * Joins the world's store: serves it on rank 0 unless a launcher does, connects, and waits until every
   * rank has checked in.
   *
   * @param options The init method, rank, world size, secret, timeout, environment and log.
   * @returns The rendezvous.
   * @throws {RangeError} If the rank, world size or store address is missing or invalid.
   * @throws {TimeoutError} If the store cannot be reached in time, or some ranks never join; the message
   *   names them.
   * @throws {StoreError} If the store speaks another protocol, or refuses this rank.
   */
  static async join(options: RendezvousOptions): Promise<Rendezvous> {
    const env = environment(options);
    const info = rankInfo(env, { rank: options.rank, worldSize: options.worldSize });
    const method = parseInitMethod(options.initMethod ?? "env://");
    const timeoutMs = options.timeoutMs ?? 300_000;
    const how = plan(env, options.storePrefix);
    // A world of one rank meets nobody else: its store gets a secret of its own (no store open to others).
    const solo = info.worldSize === 1 && !how.hosted ? generateSecret() : undefined;
    let secret = how.protocol === "dcomm" ? options.secret ?? env[STORE_SECRET_ENV] ?? solo : undefined;
    let hostname = method.hostname ?? info.masterAddr;
    let port = method.port ?? info.masterPort;
    let server: TcpStoreServer | TorchStoreServer | undefined;
    // Under srun the address is derived (the step's first host, a port of the job and step ids): say so.
    const slurm = info.addressSource === "slurm"
      ? (what: string) =>
        ` (${what} derived from srun's variables: the first host of SLURM_STEP_NODELIST and a port of ` +
        "SLURM_JOB_ID and SLURM_STEP_ID; set MASTER_ADDR, or DCOMM_SLURM_PORT / MASTER_PORT, to choose)"
      : undefined;
    const serve = async (host: string, at: number): Promise<number> => {
      // Loopback for a loopback master (::1 for an IPv6 one), else every interface of its family.
      const bind = { hostname: bindHostname(host), port: at };
      try {
        server = how.protocol === "torch"
          ? await TorchStoreServer.listen(bind)
          : await TcpStoreServer.listen({
            ...bind,
            secret,
            // Under srun with nothing set there is no channel private to the job to pass a secret through:
            // serve anyway, with the server's warning naming DCOMM_STORE_SECRET (examples/slurm sets one).
            insecure: env[STORE_INSECURE_ENV] === "1" || (info.addressSource === "slurm" && !secret),
          });
      } catch (e) {
        if (!(e instanceof StoreError)) throw e;
        if (slurm) throw new StoreError(e.message + slurm("the port is"), { cause: e });
        if (e.cause instanceof Deno.errors.AddrInUse) {
          // Most often another job's store (two jobs on one machine with one MASTER_PORT): fail now, not
          // after the other ranks have waited for this job's store in the other job's.
          throw new StoreError(
            `${e.message}: the port is taken, most likely by another job's store (two jobs on one machine ` +
              `with the same MASTER_PORT). ${OWN_PORT}`,
            { cause: e },
          );
        }
        throw e;
      }
      return server.port;
    };
    if (hostname === undefined && port === undefined && info.worldSize > 1 && !how.hosted) {
      // Under MPICH's mpiexec the address comes from its PMI: rank 0 serves and publishes it there.
      try {
        // With no secret given, rank 0 makes one and publishes it with the address: MPICH's key-value
        // space reaches only the job's processes, so the store stays the job's alone.
        const own = how.protocol === "dcomm" && !secret && info.rank === 0 && env["PMI_FD"]
          ? generateSecret()
          : undefined;
        if (own !== undefined) secret = own;
        const found = await pmiStoreAddress(env, (host) => serve(host, 0), { timeoutMs, secret: own });
        if (found) {
          ({ hostname, port } = found);
          if (how.protocol === "dcomm" && !secret && found.secret !== undefined) secret = found.secret;
        }
      } catch (e) {
        await server?.[Symbol.asyncDispose]();
        throw e;
      }
      if (hostname === undefined) {
        const launcher = pmiUnavailableReason(env);
        throw new RangeError(
          "Cannot rendezvous: expected MASTER_ADDR and MASTER_PORT in the environment or a tcp://host:port " +
            `init method, found neither${
              launcher ? `; ${launcher}` : ""
            }. Set both for every rank, or launch ` +
            "with dcomm's launcher, torchrun, srun or MPICH's mpiexec",
        );
      }
    }
    if (info.rank === 0 && !how.hosted && server === undefined) {
      hostname ??= "127.0.0.1";
      port = await serve(hostname, port ?? 0);
    }
    if (hostname === undefined || port === undefined) {
      await server?.[Symbol.asyncDispose]();
      throw new RangeError(
        "Cannot rendezvous: expected MASTER_ADDR and MASTER_PORT (or tcp://host:port), found " +
          hostPort(hostname ?? "undefined", port),
      );
    }
    const address: StoreAddress = { protocol: how.protocol, hostname, port, secret };
    let store: RendezvousStore;
    try {
      store = await openStore(address, timeoutMs);
    } catch (e) {
      await server?.[Symbol.asyncDispose]();
      if (slurm && e instanceof TimeoutError) {
        throw new TimeoutError(e.message + slurm("the address is"), { cause: e });
      }
      if (server === undefined && e instanceof StoreError && /refused this client/.test(e.message)) {
        // Another secret: the store of another job that took this port first, or a secret not passed on.
        throw new StoreError(
          `${e.message}. If another job's store holds ${hostPort(hostname, port)} (two jobs on one ` +
            `machine with the same MASTER_PORT), ${OWN_PORT_LOWER}`,
          { cause: e },
        );
      }
      throw e;
    }
    const rendezvous = new Rendezvous({ info, address, prefix: how.prefix, store, server, timeoutMs, env });
    try {
      await rendezvous.#claim(how);
      await rendezvous.#gather(how, {
        log: options.log ?? ((line) => console.error(line)),
        every: options.reportEveryMs ?? 10_000,
        quiet: options.quietMs ?? 30_000,
      });
    } catch (e) {
      await rendezvous.abandon();
      throw e;
    }
    return rendezvous;
  }

  /**
   * Checks that the store is this job's before joining it, at the cost of one round trip: the first rank
   * records the run id under `<base>/run` and the attempt's world size under `<prefix>/world`; a rank that
   * finds others there is in another job's store (two jobs on one port), and fails now rather than wait
   * for ranks that are not coming.
   *
   * @throws {StoreError} If the store holds another run id or world size.
   */
  async #claim(how: Plan): Promise<void> {
    const { rank, worldSize } = this.info;
    const runKey = `${how.base}/run`, worldKey = `${this.prefix}/world`;
    const mine = { run: `run:${how.run}`, world: String(worldSize) };
    const decoder = new TextDecoder();
    const [run, world] = (await Promise.all([
      this.store.compareSet(runKey, "", mine.run),
      this.store.compareSet(worldKey, "", mine.world),
    ])).map((b) => decoder.decode(b));
    const where = `${how.origin} at ${hostPort(this.address.hostname, this.address.port)}`;
    const runName = (r: string): string => r === "run:" ? "no run id" : `run id "${r.slice(4)}"`;
    if (run !== mine.run) {
      throw new StoreError(
        `Cannot rendezvous: ${where} belongs to another job: key "${runKey}" holds ${
          runName(run)
        } but rank ${rank} runs with ${runName(mine.run)}. ${ANOTHER_JOB}`,
      );
    }
    if (world !== mine.world) {
      throw new StoreError(
        `Cannot rendezvous: ${where} holds a world of ${world} ranks (key "${worldKey}") but rank ${rank} ` +
          `runs with world size ${worldSize}: were the ranks started with different world sizes, or is it ` +
          `another job's store? ${ANOTHER_JOB}`,
      );
    }
  }

  /**
   * Checks in and waits for every rank, in slices of `every` ms (10 s): rank 0 reports after each slice,
   * any other rank once it has waited `quiet` ms (30 s).
   */
  async #gather(
    how: Plan,
    { log, every, quiet }: { log: (line: string) => void; every: number; quiet: number },
  ): Promise<void> {
    const { rank, worldSize } = this.info;
    const key = (r: number): string => `${this.prefix}/joined/${r}`;
    const where = `${how.origin} at ${hostPort(this.address.hostname, this.address.port)}`;
    // A count, not a flag: a second process claiming this rank (of another job) is found at once.
    const claims = await this.store.add(key(rank), 1);
    if (claims > 1) {
      throw new StoreError(
        `Cannot rendezvous: rank ${rank} already joined ${where} (key "${key(rank)}" counts ${claims} ` +
          `claims): another process runs as rank ${rank} (this job started twice, or another job), or an ` +
          `earlier world used the same keys in this store. ` +
          ANOTHER_JOB,
      );
    }
    const missing = new Set(Array.from({ length: worldSize }, (_, r) => r));
    missing.delete(rank);
    const started = Date.now();
    let checked = false;
    for (;;) {
      const elapsed = Date.now() - started;
      const left = this.timeoutMs - elapsed;
      try {
        try {
          await this.store.wait([...missing].map(key), { timeoutMs: Math.max(0, Math.min(every, left)) });
          return;
        } catch (e) {
          if (!(e instanceof TimeoutError)) throw e;
        }
        for (const r of [...missing]) if (await this.store.check([key(r)])) missing.delete(r);
        checked = true;
      } catch (e) {
        if (!(e instanceof StoreError)) throw e;
        // The store went away while this rank waited: its server gave up (its own timeout, usually a
        // moment before this rank's) or died. Say whom this rank was waiting for.
        const server = how.hosted
          ? "the launcher that serves it stopped"
          : "rank 0, which serves it, gave up";
        // Before its first look, all this rank knows is that the rank serving the store had joined.
        const unseen = [...missing].filter((r) => checked || how.hosted || r !== 0);
        const whom = unseen.length === 0
          ? "the other ranks"
          : `${rankList(unseen)}${checked ? ` (${worldSize - missing.size} of ${worldSize} joined)` : ""}`;
        throw new StoreError(
          `Cannot rendezvous: lost ${where} while rank ${rank} waited for ${whom}: ${server} (its own ` +
            `error names the ranks it waited for) or exited`,
          { cause: e },
        );
      }
      const seconds = Math.round((Date.now() - started) / 1000);
      const joined = `${worldSize - missing.size} of ${worldSize} joined`;
      if (Date.now() - started >= this.timeoutMs) {
        throw new TimeoutError(
          `Cannot rendezvous: ${rankList(missing)} never joined (${joined} within ${seconds} s) ${where}; ` +
            "were they started, with the same MASTER_ADDR/MASTER_PORT and world size?",
        );
      }
      if (missing.size === 0) return;
      if (rank === 0 || Date.now() - started >= quiet) {
        log(`dcomm: rank ${rank} waiting for ${rankList(missing)} (${joined}, ${seconds} s, ${where})`);
      }
    }
  }

  /** The world has formed: the store is needed again only to close, so it no longer keeps the process alive. */
  formed(): void {
    this.store.unref();
    this.server?.unref();
  }

  /**
   * Checks this rank out of the world and closes the store: every rank marks itself closed under `scope`
   * (within this attempt's prefix), and the rank that serves the store waits (at most 30 s) for every rank
   * before it stops serving it, unless the world failed (a dead rank never checks out). Never throws.
   *
   * @param scope The keys' scope within the prefix (`""` for the cpu backend, `nccl`).
   * @param failed Whether the world failed.
   */
  async checkOut(scope: string, failed: boolean): Promise<void> {
    this.store.ref();
    this.server?.ref();
    const base = scope ? `${this.prefix}/${scope}` : this.prefix;
    const world = Array.from({ length: this.info.worldSize }, (_, r) => `${base}/closed/${r}`);
    // Closing waits at most CLOSE_MS on the store (its host stopped, a partition): not the whole timeout.
    const bound = Math.min(this.timeoutMs, CLOSE_MS);
    let timer: ReturnType<typeof setTimeout> | undefined;
    const late = new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new TimeoutError(`checking out took over ${bound} ms`)), bound);
    });
    try {
      await Promise.race([this.store.set(`${base}/closed/${this.info.rank}`, "1"), late]);
      if (this.server && !failed) await this.store.wait(world, { timeoutMs: bound });
    } catch {
      // A rank that died never checks out; closing must not fail because of it.
    } finally {
      clearTimeout(timer);
      await this.abandon();
    }
  }

  /**
   * Closes the store (and stops serving it): for a world that failed to start.
   *
   * @param lingerMs How long a rank serving the store keeps serving it first, so that ranks whose waits
   *   end a moment after this rank's report their own findings. @default 0
   */
  async abandon(lingerMs = 0): Promise<void> {
    if (this.server && lingerMs > 0) await new Promise((resolve) => setTimeout(resolve, lingerMs));
    await this.store[Symbol.asyncDispose]();
    await this.server?.[Symbol.asyncDispose]();
  }
}

/** The longest a rank's close waits on the store. */
const CLOSE_MS = 30_000;

/** What to do when another job's store holds this job's port. */
const OWN_PORT = "Give each job its own MASTER_PORT, or let dcomm's launcher choose a free one " +
  "(--master-port 0, its default on one node)";
const OWN_PORT_LOWER = "give each job its own MASTER_PORT, or let dcomm's launcher choose a free one " +
  "(--master-port 0, its default on one node)";
const ANOTHER_JOB = `${OWN_PORT}; or, for worlds meant to share one store, give each its own store prefix ` +
  `(init({ storePrefix }) or ${STORE_PREFIX_ENV})`;

/**
 * `rank 3` or `ranks 1, 3`, at most 16 named.
 *
 * @param ranks The ranks.
 * @returns Their names.
 */
export function rankList(ranks: Iterable<number>): string {
  const sorted = [...ranks].sort((a, b) => a - b);
  const shown = sorted.slice(0, 16).join(", ");
  const more = sorted.length > 16 ? ` and ${sorted.length - 16} more` : "";
  return `${sorted.length === 1 ? "rank" : "ranks"} ${shown}${more}`;
}
