/**
 * The rendezvous of the backends whose ranks meet through dcomm's own store (`cpu`, `nccl`; the `mpi`
 * backend's ranks meet through MPI's launcher): where this rank stands in the world (torchrun's, Slurm's
 * or MPI launchers' variables, or explicit options), the TCP store that rank 0 serves unless a launcher
 * already does (`DCOMM_STORE_HOSTED=1`), the connection to it, and the check-out when the world closes:
 * every rank marks itself closed and rank 0, which serves the store, waits for all before it stops serving.
 *
 * @module
 */
import { STORE_SECRET_ENV } from "../store/secret.ts";
import { TcpStore } from "../store/tcp_store.ts";
import { TcpStoreServer } from "../store/tcp_store_server.ts";
import { isLoopback, parseInitMethod, type RankInfo, rankInfo } from "./env.ts";

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
  /** Default timeout of the store's waits. @default 300000 */
  timeoutMs?: number;
  /** The environment to read. @default Deno.env.toObject() */
  env?: Readonly<Record<string, string | undefined>>;
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

/** This rank's end of a world's store, from joining to checking out. */
export class Rendezvous {
  /** Where this rank stands in the world. */
  readonly info: RankInfo;
  /** The store's host. */
  readonly hostname: string;
  /** The store's port. */
  readonly port: number;
  /** The store's secret, if any. */
  readonly secret: string | undefined;
  /** The connection to the store. */
  readonly store: TcpStore;
  /** The store this rank serves (rank 0, unless a launcher serves it). */
  readonly server: TcpStoreServer | undefined;
  /** The default timeout of waits. */
  readonly timeoutMs: number;
  /** The variables read. */
  readonly env: Readonly<Record<string, string | undefined>>;

  private constructor(fields: {
    info: RankInfo;
    hostname: string;
    port: number;
    secret: string | undefined;
    store: TcpStore;
    server: TcpStoreServer | undefined;
    timeoutMs: number;
    env: Readonly<Record<string, string | undefined>>;
  }) {
    this.info = fields.info;
    this.hostname = fields.hostname;
    this.port = fields.port;
    this.secret = fields.secret;
    this.store = fields.store;
    this.server = fields.server;
    this.timeoutMs = fields.timeoutMs;
    this.env = fields.env;
  }

  /**
   * Joins the world's store: serves it on rank 0 unless a launcher does, and connects.
   *
   * @param options The init method, rank, world size, secret, timeout and environment.
   * @returns The rendezvous.
   * @throws {RangeError} If the rank, world size or store address is missing or invalid.
   * @throws {TimeoutError} If the store cannot be reached in time.
   */
  static async join(options: RendezvousOptions): Promise<Rendezvous> {
    const env = environment(options);
    const info = rankInfo(env, { rank: options.rank, worldSize: options.worldSize });
    const method = parseInitMethod(options.initMethod ?? "env://");
    const timeoutMs = options.timeoutMs ?? 300_000;
    const secret = options.secret ?? env[STORE_SECRET_ENV];
    let hostname = method.hostname ?? info.masterAddr;
    let port = method.port ?? info.masterPort;
    let server: TcpStoreServer | undefined;
    if (info.rank === 0 && env["DCOMM_STORE_HOSTED"] !== "1") {
      if (hostname === undefined && port === undefined && info.worldSize > 1) {
        throw new RangeError(
          "Cannot rendezvous: expected MASTER_ADDR and MASTER_PORT in the environment or a tcp://host:port " +
            "init method, found neither",
        );
      }
      hostname ??= "127.0.0.1";
      server = await TcpStoreServer.listen({
        hostname: isLoopback(hostname) ? "127.0.0.1" : "0.0.0.0",
        port: port ?? 0,
        secret,
      });
      port = server.port;
    }
    if (hostname === undefined || port === undefined) {
      await server?.[Symbol.asyncDispose]();
      throw new RangeError(
        `Cannot rendezvous: expected MASTER_ADDR and MASTER_PORT (or tcp://host:port), found ${hostname}:${port}`,
      );
    }
    let store: TcpStore;
    try {
      store = await TcpStore.connect({ hostname, port, secret, timeoutMs });
    } catch (e) {
      await server?.[Symbol.asyncDispose]();
      throw e;
    }
    return new Rendezvous({ info, hostname, port, secret, store, server, timeoutMs, env });
  }

  /** The world has formed: the store is needed again only to close, so it no longer keeps the process alive. */
  formed(): void {
    this.store.unref();
    this.server?.unref();
  }

  /**
   * Checks this rank out of the world and closes the store: every rank marks itself closed under `prefix`,
   * and the rank that serves the store waits (at most 30 s) for every rank before it stops serving it,
   * unless the world failed (a dead rank never checks out). Never throws.
   *
   * @param prefix The keys' prefix (`dcomm`, `dcomm/nccl`).
   * @param failed Whether the world failed.
   */
  async checkOut(prefix: string, failed: boolean): Promise<void> {
    this.store.ref();
    this.server?.ref();
    const world = Array.from({ length: this.info.worldSize }, (_, r) => `${prefix}/closed/${r}`);
    try {
      await this.store.set(`${prefix}/closed/${this.info.rank}`, "1");
      if (this.server && !failed) {
        await this.store.wait(world, { timeoutMs: Math.min(this.timeoutMs, 30_000) });
      }
    } catch {
      // A rank that died never checks out; closing must not fail because of it.
    } finally {
      await this.abandon();
    }
  }

  /** Closes the store (and stops serving it) at once: for a world that failed to start. */
  async abandon(): Promise<void> {
    await this.store[Symbol.asyncDispose]();
    await this.server?.[Symbol.asyncDispose]();
  }
}
