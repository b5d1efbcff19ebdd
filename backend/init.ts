/**
 * `init()`: joins this process to a world of ranks and returns its process group, like
 * `torch.distributed.init_process_group`. It only picks the backend; each backend's `create.ts` starts it
 * (`cpu/create.ts`, `nccl/create.ts`, `mpi/create.ts`). The cpu and nccl backends meet through a TCP store
 * (`_rendezvous.ts`): `env://` reads `MASTER_ADDR`/`MASTER_PORT` (and the rank from torchrun's, Slurm's or
 * MPI's variables), `tcp://host:port` names it directly, and rank 0 serves the store unless the launcher
 * already does (`DCOMM_STORE_HOSTED=1`). The mpi backend meets through MPI's launcher.
 *
 * @module
 */
import { setPhases } from "../core/phases.ts";
import { UnsupportedError } from "../core/errors.ts";
import type { ProcessGroup } from "./process_group.ts";
import { initCpu, type SegmentOptions } from "./cpu/create.ts";
import { initMpiBackend } from "./mpi/create.ts";
import { deterministicUnsupported } from "./_front.ts";
import { initNccl, type NcclOptions } from "./nccl/create.ts";
import { recordErrors } from "./_error_file.ts";
import { environment } from "./_rendezvous.ts";
import { watchLauncher } from "./env.ts";
import { setDebugLevel } from "./_debug.ts";
import { setTimeline, writeTimeline } from "./_timeline.ts";

export type { SegmentOptions };

/**
 * Options of {@linkcode init}.
 *
 * @example A one-rank world over TCP, without the host segment
 * ```ts
 * import { init, type InitOptions } from "@dcomm/dcomm";
 * import assert from "node:assert/strict";
 * const options: InitOptions = { rank: 0, worldSize: 1, env: {}, transport: "tcp", segment: false };
 * await using pg = await init({ ...options, timeoutMs: 30_000 });
 * assert.equal(pg.backend, "cpu");
 * assert.equal(pg.size, 1);
 * ```
 */
export interface InitOptions {
  /** The backend. @default "cpu" */
  backend?: "cpu" | "nccl" | "mpi";
  /** `"env://"` or `"tcp://host:port"` (an IPv6 host in brackets: `"tcp://[::1]:29500"`). @default "env://" */
  initMethod?: string;
  /** This rank. @default from the environment */
  rank?: number;
  /** The number of ranks. @default from the environment */
  worldSize?: number;
  /** Default timeout of every wait: connecting, store calls and collectives. @default 300000 */
  timeoutMs?: number;
  /**
   * The CPU transport: `"auto"` (shared memory when all ranks share this host; shared memory within hosts
   * and TCP between them, `"hybrid"`, when some host runs several ranks; else TCP), `"tcp"`, `"shm"`,
   * `"hybrid"`, `"inproc"`. @default "auto"
   */
  transport?: "auto" | "tcp" | "shm" | "hybrid" | "inproc";
  /** The mesh of an in-process world (see `spawnThreads`); implies transport `"inproc"`. */
  inprocMesh?: unknown;
  /** The store's shared secret. @default the DCOMM_STORE_SECRET environment variable */
  secret?: string;
  /**
   * The base of this world's keys in the store (`<storePrefix>/joined/<rank>`, ...): worlds that share one
   * store (a torchrun agent's, or two jobs given the same one) each need their own.
   * @default the DCOMM_STORE_PREFIX environment variable, else "dcomm"
   */
  storePrefix?: string;
  /**
   * The address this rank's TCP listener publishes (an IPv6 one as `::1` or `[::1]`).
   * @default DCOMM_HOSTNAME, else loopback for a loopback master (::1 for an IPv6 one, else 127.0.0.1), else
   * this host's first IPv6 address that is not link-local for an IPv6 master, else its first non-loopback IPv4
   */
  hostname?: string;
  /** TCP sockets per peer. @default 1 */
  socketsPerPeer?: number;
  /** The pipelining chunk of the algorithms, in bytes. @default 1048576 */
  chunkBytes?: number;
  /**
   * Whether calls that disagree across ranks (collective, count, dtype, op, root, algorithm) are reported
   * on every rank, naming both calls: every message carries its call's descriptor, and a broadcast or
   * reduce over messages first agrees on it in ⌈log2 n⌉ empty messages (the host segment checks its log
   * instead, at no cost). @default true
   */
  checkCalls?: boolean;
  /**
   * Deterministic mode for every reducing call of the world and its sub-groups (a call's own
   * `deterministic` wins): sums of floats fold in rank order (see `ReduceOptions.deterministic`). The cpu
   * backend only. @default false
   */
  deterministic?: boolean;
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

/**
 * Joins this process to a world and returns the world's process group. Every rank calls it; it resolves
 * once every rank is connected. Under dcomm's launcher (`DCOMM_LAUNCHER_PID` set) it also starts a watch
 * that makes this rank exit when the launcher is gone, killed before it could stop its ranks: once a
 * second it checks the parent pid (and `/proc/<launcher pid>` where readable); it neither keeps the
 * process alive nor reads stdin.
 *
 * @param options Backend, rendezvous and tuning.
 * @returns The world group; close it (or `await using` it) when done.
 * @throws {RangeError} If the rank or world size is missing or invalid.
 * @throws {TimeoutError} If the other ranks do not show up in time.
 * @throws {UnsupportedError} For a backend this build cannot run.
 *
 * @example A one-rank world
 * ```ts
 * import { init } from "@dcomm/dcomm";
 * await using pg = await init({ rank: 0, worldSize: 1, env: {} });
 * const grad = new Float32Array([1, 2, 3]);
 * await pg.allReduce(grad, { op: "avg" });
 * ```
 */
export async function init(options: InitOptions = {}): Promise<ProcessGroup> {
  const backend = options.backend ?? "cpu";
  const env = environment(options);
  // Under torchrun a failing rank leaves its error where the agent's summary finds it.
  recordErrors(env);
  // DCOMM_DEBUG=info|detail: what init chose, and (detail) every call.
  setDebugLevel(env);
  // Under dcomm's launcher (DCOMM_LAUNCHER_PID) a rank exits when the launcher is gone (see watchLauncher).
  watchLauncher(env);
  // Each backend's create.ts does its own rendezvous: cpu and nccl through dcomm's store
  // (`_rendezvous.ts`), mpi through MPI's launcher.
  if (options.deterministic !== undefined && typeof options.deterministic !== "boolean") {
    throw new TypeError(`Invalid deterministic: expected a boolean, found ${typeof options.deterministic}`);
  }
  if (options.deterministic && backend !== "cpu") throw deterministicUnsupported(backend, "init");
  // DCOMM_TIMELINE=out.json: every call kept, written when the world closes.
  const timeline = setTimeline(env) !== undefined;
  // The calls that run on this thread (small ones on the host segment) measure their phases too.
  if (timeline) setPhases(true);
  let pg: ProcessGroup;
  if (backend === "mpi") pg = await initMpiBackend(options);
  else if (backend === "nccl") {
    // One rank per GPU; the unique id travels through the same store rendezvous as the CPU backend's.
    pg = await initNccl(options);
  } else if (backend !== "cpu") {
    throw new UnsupportedError(`The ${backend} backend is not available in this version of dcomm; use "cpu"`);
  } else pg = await initCpu(options);
  if (timeline) writeTimelineOnClose(pg);
  return pg;
}

/** Makes the world group write the timeline (gathered on rank 0) before it closes. */
function writeTimelineOnClose(pg: ProcessGroup): void {
  const close = pg.close.bind(pg);
  let closing: Promise<void> | undefined;
  Object.defineProperty(pg, "close", {
    value: () =>
      closing ??= (async () => {
        try {
          await writeTimeline(pg);
        } finally {
          await close();
        }
      })(),
  });
}
