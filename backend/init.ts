/**
 * `init()`: joins this process to a world of ranks and returns its process group, like
 * `torch.distributed.init_process_group`. The rendezvous goes through a TCP store: `env://` reads
 * `MASTER_ADDR`/`MASTER_PORT` (and the rank from torchrun's, Slurm's or MPI's variables), `tcp://host:port`
 * names it directly. Rank 0 serves the store unless the launcher already does (`DCOMM_STORE_HOSTED=1`).
 *
 * @module
 */
import { UnsupportedError } from "../core/errors.ts";
import { TcpStoreServer } from "../store/tcp_store_server.ts";
import { TcpStore } from "../store/tcp_store.ts";
import { STORE_SECRET_ENV } from "../store/secret.ts";
import { parseInitMethod, rankInfo } from "./env.ts";
import type { ProcessGroup } from "./process_group.ts";
import { CpuProcessGroup, EngineHandle } from "./cpu/cpu_group.ts";
import { initMpi } from "./mpi.ts";
import { initNccl, type NcclOptions } from "./nccl/create.ts";
import { checkSegmentLayout, DEFAULT_SEGMENT_LAYOUT, type SegmentLayout } from "../transport/segment.ts";
import { SYS_MREMAP } from "../ffi/libc/libc.ts";

/**
 * How the ranks of one host share memory for collectives (the cpu backend over shared memory): every
 * rank owns `buffers` buffers of `bufferBytes` that the others read, and calls of at most `inlineBytes`
 * run on the calling thread when nothing else is pending.
 */
export interface SegmentOptions {
  /** Buffers per rank, a power of two. @default 4 */
  buffers?: number;
  /** Bytes per buffer, a multiple of 4096. @default 1048576 */
  bufferBytes?: number;
  /**
   * Bytes of each rank's pool, a multiple of 65536, for tensors from `pg.alloc()` that collectives use in
   * place (an all-reduce of pool tensors copies nothing). Reserved in /dev/shm up front. @default 0
   */
  poolBytes?: number;
  /** Calls whose input has at most this many bytes may run on the calling thread (when nothing else is pending; larger calls overlap with the caller's work on the communication thread). @default 16777216 */
  inlineBytes?: number;
  /** Milliseconds such a call spins for its peers before the communication thread takes it over. @default 4 */
  inlineSpinMs?: number;
  /** Milliseconds the communication thread spins on the segment before it sleeps. @default 0.2 */
  spinMs?: number;
}

/** Options of {@linkcode init}. */
export interface InitOptions {
  /** The backend. @default "cpu" */
  backend?: "cpu" | "nccl" | "mpi";
  /** `"env://"` or `"tcp://host:port"`. @default "env://" */
  initMethod?: string;
  /** This rank. @default from the environment */
  rank?: number;
  /** The number of ranks. @default from the environment */
  worldSize?: number;
  /** Default timeout of every wait: connecting, store calls and collectives. @default 300000 */
  timeoutMs?: number;
  /** The CPU transport: `"auto"` (shared memory when all ranks share this host, else TCP), `"tcp"`, `"shm"`, `"inproc"`. @default "auto" */
  transport?: "auto" | "tcp" | "shm" | "inproc";
  /** The mesh of an in-process world (see `spawnThreads`); implies transport `"inproc"`. */
  inprocMesh?: unknown;
  /** The store's shared secret. @default the DCOMM_STORE_SECRET environment variable */
  secret?: string;
  /** The address this rank's TCP listener publishes. @default DCOMM_HOSTNAME, else 127.0.0.1 for a loopback master, else this host's first non-loopback IPv4 */
  hostname?: string;
  /** TCP sockets per peer. @default 1 */
  socketsPerPeer?: number;
  /** The pipelining chunk of the algorithms, in bytes. @default 1048576 */
  chunkBytes?: number;
  /** Whether every message carries its call's descriptor, so mismatched calls across ranks are reported. @default true */
  checkCalls?: boolean;
  /** The environment to read. @default Deno.env.toObject() */
  env?: Readonly<Record<string, string | undefined>>;
  /** Options of the nccl backend: the CUDA device and NCCL's tuning. @default {} */
  nccl?: NcclOptions;
  /**
   * The host segment of the cpu backend over shared memory: `false` (or `DCOMM_SEGMENT=0`) runs every
   * collective over the transport's message rings instead. @default true
   */
  segment?: boolean | SegmentOptions;
}

function segmentConfig(
  option: boolean | SegmentOptions | undefined,
  vars: Readonly<Record<string, string | undefined>>,
): { layout: SegmentLayout | null; options: SegmentOptions } {
  // The segment's mappings need the mremap system call, known on x86_64 and aarch64.
  if (
    option === false || SYS_MREMAP === undefined || (option === undefined && vars["DCOMM_SEGMENT"] === "0")
  ) {
    return { layout: null, options: {} };
  }
  const options = typeof option === "object" ? option : {};
  const layout = checkSegmentLayout({
    buffers: options.buffers ?? DEFAULT_SEGMENT_LAYOUT.buffers,
    bufferBytes: options.bufferBytes ?? DEFAULT_SEGMENT_LAYOUT.bufferBytes,
    poolBytes: options.poolBytes ?? 0,
  });
  for (const key of ["inlineBytes", "inlineSpinMs", "spinMs"] as const) {
    const v = options[key];
    if (v !== undefined && !(v >= 0)) {
      throw new RangeError(`Invalid segment.${key}: expected a number >= 0, found ${v}`);
    }
  }
  return { layout, options };
}

const LOOPBACK = /^(127\.|localhost$|::1$)/;

function env(options: InitOptions): Readonly<Record<string, string | undefined>> {
  if (options.env) return options.env;
  try {
    return Deno.env.toObject();
  } catch {
    return {};
  }
}

function defaultHostname(master: string): string {
  if (LOOPBACK.test(master)) return "127.0.0.1";
  for (const nic of Deno.networkInterfaces()) {
    if (nic.family === "IPv4" && !nic.address.startsWith("127.")) return nic.address;
  }
  return "127.0.0.1";
}

/**
 * Joins this process to a world and returns the world's process group. Every rank calls it; it resolves
 * once every rank is connected.
 *
 * @param options Backend, rendezvous and tuning.
 * @returns The world group; close it (or `await using` it) when done.
 * @throws {RangeError} If the rank or world size is missing or invalid.
 * @throws {TimeoutError} If the other ranks do not show up in time.
 * @throws {UnsupportedError} For a backend this build cannot run.
 *
 * @example A one-rank world
 * ```ts
 * import { init } from "./init.ts";
 * await using pg = await init({ rank: 0, worldSize: 1, env: {} });
 * const grad = new Float32Array([1, 2, 3]);
 * await pg.allReduce(grad, { op: "avg" });
 * ```
 */
export async function init(options: InitOptions = {}): Promise<ProcessGroup> {
  const backend = options.backend ?? "cpu";
  if (backend === "mpi") {
    // MPI's launcher did the rendezvous: no store; rank and size come from MPI itself.
    const foreign = (["initMethod", "transport", "inprocMesh"] as const).filter((k) =>
      options[k] !== undefined && options[k] !== "env://" && options[k] !== "auto"
    );
    if (foreign.length > 0) {
      throw new UnsupportedError(
        `The mpi backend meets its peers through its launcher (mpiexec, srun) and moves bytes through MPI: ` +
          `expected no ${foreign.join(", ")}, found ${
            foreign.map((k) => `${k}=${String(options[k])}`).join(", ")
          }`,
      );
    }
    return await initMpi({
      timeoutMs: options.timeoutMs,
      rank: options.rank,
      worldSize: options.worldSize,
      env: options.env,
    });
  }
  if (backend === "nccl") {
    // One rank per GPU; the unique id travels through the same store rendezvous as the CPU backend's.
    return await initNccl(options);
  }
  if (backend !== "cpu") {
    throw new UnsupportedError(`The ${backend} backend is not available in this version of dcomm; use "cpu"`);
  }
  const vars = env(options);
  const info = rankInfo(vars, { rank: options.rank, worldSize: options.worldSize });
  const method = parseInitMethod(options.initMethod ?? "env://");
  const timeoutMs = options.timeoutMs ?? 300_000;
  const secret = options.secret ?? vars[STORE_SECRET_ENV];
  let hostname = method.hostname ?? info.masterAddr;
  let port = method.port ?? info.masterPort;
  const hosted = vars["DCOMM_STORE_HOSTED"] === "1";

  let server: TcpStoreServer | undefined;
  if (info.rank === 0 && !hosted) {
    if (hostname === undefined && port === undefined && info.worldSize > 1) {
      throw new RangeError(
        "Cannot rendezvous: expected MASTER_ADDR and MASTER_PORT in the environment or a tcp://host:port " +
          "init method, found neither",
      );
    }
    hostname ??= "127.0.0.1";
    server = await TcpStoreServer.listen({
      hostname: LOOPBACK.test(hostname) ? "127.0.0.1" : "0.0.0.0",
      port: port ?? 0,
      secret,
    });
    port = server.port;
  }
  if (hostname === undefined || port === undefined) {
    throw new RangeError(
      `Cannot rendezvous: expected MASTER_ADDR and MASTER_PORT (or tcp://host:port), found ${hostname}:${port}`,
    );
  }
  const segment = segmentConfig(options.segment, vars);
  const store = await TcpStore.connect({ hostname, port, secret, timeoutMs });
  const inproc = options.inprocMesh !== undefined;
  let engine: EngineHandle;
  try {
    engine = await EngineHandle.start({
      rank: info.rank,
      size: info.worldSize,
      store: { hostname, port, secret },
      prefix: "dcomm",
      transport: inproc ? "inproc" : options.transport ?? vars["DCOMM_TRANSPORT"] ?? "auto",
      inprocMesh: options.inprocMesh,
      hostname: options.hostname ?? vars["DCOMM_HOSTNAME"] ?? defaultHostname(hostname),
      socketsPerPeer: options.socketsPerPeer ?? 1,
      timeoutMs,
      chunkBytes: options.chunkBytes ?? 1 << 20,
      checkCalls: options.checkCalls ?? true,
      segment: segment.layout,
      segmentSpinMs: segment.options.spinMs ?? 0.2,
      segmentInlineBytes: segment.options.inlineBytes,
      segmentInlineSpinMs: segment.options.inlineSpinMs,
    });
  } catch (e) {
    await store[Symbol.asyncDispose]();
    await server?.[Symbol.asyncDispose]();
    throw e;
  }
  const world = Array.from({ length: info.worldSize }, (_, i) => i);
  // The world has formed: the store is needed again only to close, so it must not keep the process alive.
  store.unref();
  server?.unref();
  return new CpuProcessGroup(engine, {
    id: 0,
    ranks: world,
    globalRank: info.rank,
    timeoutMs,
    async onClose(failed: boolean): Promise<void> {
      // Rank 0's store must outlive every rank's use of it: each rank checks out, rank 0 waits for all
      // (unless the world failed: then a dead rank never checks out and nobody needs the store any more).
      store.ref();
      try {
        await store.set(`dcomm/closed/${info.rank}`, "1");
        if (server && !failed) {
          await store.wait(world.map((r) => `dcomm/closed/${r}`), { timeoutMs: Math.min(timeoutMs, 30_000) });
        }
      } catch {
        // A rank that died never checks out; closing must not fail because of it.
      } finally {
        await store[Symbol.asyncDispose]();
        await server?.[Symbol.asyncDispose]();
      }
    },
  });
}
