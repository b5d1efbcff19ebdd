/**
 * Starting the `nccl` backend: {@linkcode createNcclGroup} makes a rank's world group from a store it is
 * given (rank 0 creates NCCL's unique id and sets it in the store, the others read it), and
 * {@linkcode initNccl} is what `init({ backend: "nccl" })` runs: the same rendezvous as the CPU backend
 * (a TCP store served by rank 0, or an in-memory one for a world of one), then `createNcclGroup`.
 *
 * Order of checks, each with its own error: the tuning is written into the environment before NCCL
 * loads; NCCL must be found (`LibraryNotFoundError` with every path tried); CUDA must see a GPU
 * (`UnsupportedError` carrying cudaGetDeviceCount's error); the device must exist (`RangeError`); then
 * the communicator is created with a non-blocking config and polled, with a timeout that aborts it.
 *
 * @module
 */
import { CudaError, DistError, UnsupportedError } from "../../core/errors.ts";
import { deviceCount, setDevice } from "../../ffi/cudart/cudart.ts";
import { NCCL_UNIQUE_ID_BYTES } from "../../ffi/nccl/constants.ts";
import { featureSupport } from "../../ffi/nccl/features.ts";
import { getUniqueId, nccl } from "../../ffi/nccl/nccl.ts";
import { MemoryStore } from "../../store/memory_store.ts";
import type { Store } from "../../store/store.ts";
import { environment, Rendezvous } from "../_rendezvous.ts";
import { rankInfo } from "../env.ts";
import type { InitOptions } from "../init.ts";
import { Communicator } from "./_communicator.ts";
import { NcclRank } from "./_rank.ts";
import { NcclProcessGroup } from "./nccl_group.ts";
import { applyTuning, type NcclTuning, tuningConfig } from "./tuning.ts";

/**
 * Options of the `nccl` backend, given to `init({ backend: "nccl", nccl: { ... } })`.
 *
 * @example GPU 1 with NCCL's ring algorithm (pass `options` to `init` on a host with GPUs)
 * ```ts
 * import type { NcclOptions } from "@dcomm/dcomm/nccl";
 * import type { InitOptions } from "@dcomm/dcomm";
 * import assert from "node:assert/strict";
 * const nccl: NcclOptions = { device: 1, tuning: { algo: "Ring", maxCTAs: 16 } };
 * const options: InitOptions = { backend: "nccl", nccl };
 * assert.equal(options.nccl?.tuning?.algo, "Ring");
 * ```
 */
export interface NcclOptions {
  /** The CUDA device of this rank. @default LOCAL_RANK modulo the number of GPUs */
  device?: number;
  /** NCCL's algorithm, protocol, buffer size and CTA counts. @default NCCL's choices */
  tuning?: NcclTuning;
}

/**
 * Options of {@linkcode createNcclGroup}.
 *
 * @example A world of one on GPU 0 that owns its store
 * ```ts
 * import { createNcclGroup, type CreateNcclGroupOptions, ncclBackendMissing } from "@dcomm/dcomm/nccl";
 * import { MemoryStore } from "@dcomm/dcomm/store";
 * import assert from "node:assert/strict";
 * const store = new MemoryStore();
 * const options: CreateNcclGroupOptions = {
 *   rank: 0,
 *   size: 1,
 *   store,
 *   device: 0,
 *   timeoutMs: 60_000,
 *   prefix: "job-7/nccl", // one prefix per world made on the same store
 *   onClose: () => store.close(), // closing the group closes the store
 * };
 * if (ncclBackendMissing() === undefined) {
 *   await using pg = await createNcclGroup(options);
 *   assert.equal(pg.device, 0);
 * } else {
 *   await store.close();
 * }
 * await assert.rejects(createNcclGroup({ ...options, rank: 1 }), RangeError); // checked before NCCL loads
 * ```
 */
export interface CreateNcclGroupOptions extends NcclOptions {
  /** This rank. */
  rank: number;
  /** The number of ranks. */
  size: number;
  /** The store the ranks share, to pass the unique id. */
  store: Store;
  /** The rank among the processes of this host, to pick the device. @default rank */
  localRank?: number;
  /** Default timeout of init and of every collective, in milliseconds. @default 300000 */
  timeoutMs?: number;
  /** The store keys' prefix; ranks that create several worlds on one store need one each. @default "dcomm/nccl" */
  prefix?: string;
  /** Runs when the world group closes, after NCCL and CUDA resources are released. @default none */
  onClose?: () => Promise<void>;
}

/**
 * Why the `nccl` backend cannot run here, or `undefined` when it can (NCCL found and new enough, and at
 * least one GPU). Never throws.
 *
 * @returns The reason.
 *
 * @example
 * ```ts
 * import { ncclBackendMissing } from "@dcomm/dcomm/nccl";
 * const missing = ncclBackendMissing(); // undefined, or why not: no NCCL, an NCCL older than 2.7, no GPU
 * console.log(missing === undefined ? "the nccl backend can run here" : `no nccl backend: ${missing}`);
 * ```
 */
export function ncclBackendMissing(): string | undefined {
  let lib;
  try {
    lib = nccl();
  } catch (e) {
    return (e as Error).message.split("\n")[0];
  }
  const p2p = featureSupport("sendRecv", lib.version, lib.symbols);
  if (!p2p.supported) return `NCCL ${lib.version.text} is too old: ${p2p.reason}`;
  try {
    if (deviceCount() === 0) return "CUDA found no GPU";
  } catch (e) {
    return `no usable GPU: ${(e as Error).message}`;
  }
  return undefined;
}

/**
 * Creates this rank's world group of the `nccl` backend. Every rank calls it with the same store, size and
 * prefix; it resolves once NCCL's communicator is up on every rank.
 *
 * @param options Rank, size, store, device, tuning and timeout.
 * @returns The world group; close it (or `await using` it) when done.
 * @throws {LibraryNotFoundError} If NCCL cannot be found.
 * @throws {UnsupportedError} If CUDA sees no GPU (the cause is CUDA's error).
 * @throws {RangeError} If the rank, size or device is invalid.
 * @throws {NcclError} If NCCL fails to create the communicator, with NCCL's own reason.
 * @throws {TimeoutError} If the other ranks do not join in time (the attempt is aborted).
 *
 * @example One rank on GPU 0, or the error that says why it cannot start
 * ```ts
 * import { createNcclGroup, ncclBackendMissing } from "@dcomm/dcomm/nccl";
 * import { MemoryStore } from "@dcomm/dcomm/store";
 * import { DeviceBuffer } from "@dcomm/dcomm/gpu";
 * import { DistError } from "@dcomm/dcomm";
 * import assert from "node:assert/strict";
 * await using store = new MemoryStore();
 * if (ncclBackendMissing() === undefined) {
 *   await using pg = await createNcclGroup({ rank: 0, size: 1, store });
 *   using grad = DeviceBuffer.from(new Float32Array([1, 2, 3]));
 *   await pg.allReduce(grad, { op: "avg" });
 *   assert.deepEqual(grad.toArray(), new Float32Array([1, 2, 3]));
 * } else {
 *   // LibraryNotFoundError without NCCL (every path tried), UnsupportedError without a GPU
 *   await assert.rejects(createNcclGroup({ rank: 0, size: 1, store }), DistError);
 * }
 * ```
 */
export async function createNcclGroup(options: CreateNcclGroupOptions): Promise<NcclProcessGroup> {
  const { rank, size } = options;
  if (!Number.isInteger(size) || size < 1) {
    throw new RangeError(`Invalid size: expected an integer >= 1, found ${size}`);
  }
  if (!Number.isInteger(rank) || rank < 0 || rank >= size) {
    throw new RangeError(`Invalid rank: expected an integer in 0..${size - 1}, found ${rank}`);
  }
  const timeoutMs = options.timeoutMs ?? 300_000;
  // NCCL reads its variables when it starts: they go into the environment before it loads.
  const tuning = applyTuning(options.tuning);
  const library = nccl();
  let count: number;
  try {
    count = deviceCount();
  } catch (e) {
    if (!(e instanceof CudaError)) throw e;
    throw new UnsupportedError(`Cannot start the nccl backend: no usable GPU (${e.message})`, { cause: e });
  }
  if (count === 0) throw new UnsupportedError("Cannot start the nccl backend: CUDA found no GPU");
  const device = options.device ?? (options.localRank ?? rank) % count;
  if (!Number.isInteger(device) || device < 0 || device >= count) {
    throw new RangeError(`Invalid device: expected an integer in 0..${count - 1}, found ${device}`);
  }
  setDevice(device);

  const key = `${options.prefix ?? "dcomm/nccl"}/world/unique-id`;
  let id: Uint8Array;
  if (rank === 0) {
    id = getUniqueId();
    await options.store.set(key, id);
  } else {
    id = await options.store.get(key, { timeoutMs });
  }
  if (id.length !== NCCL_UNIQUE_ID_BYTES) {
    throw new DistError(
      `The store's NCCL unique id at ${key} has ${id.length} bytes, expected ${NCCL_UNIQUE_ID_BYTES}`,
    );
  }
  const comm = await Communicator.init({ size, rank, id, config: tuningConfig(options.tuning), timeoutMs });
  const ctx = new NcclRank(device, library, tuning);
  return new NcclProcessGroup({
    rank: ctx,
    id: 0,
    ranks: Array.from({ length: size }, (_, i) => i),
    globalRank: rank,
    comm,
    timeoutMs,
    onClose: options.onClose,
    store: { store: options.store, prefix: options.prefix ?? "dcomm/nccl" },
  });
}

/**
 * What `init({ backend: "nccl" })` runs: finds this rank (torchrun, Slurm or MPI variables, or the
 * options), meets the others through the shared rendezvous (`../_rendezvous.ts`: a TCP store served by
 * rank 0; an in-memory store for a world of one), then {@linkcode createNcclGroup}.
 *
 * @param options `init`'s options; `nccl` holds the device and tuning.
 * @returns The world group.
 * @throws {RangeError} If the rank, world size or store address is missing or invalid.
 * @throws {LibraryNotFoundError | UnsupportedError | NcclError | TimeoutError} As `createNcclGroup`.
 *
 * @example A world of one, as `init` starts it
 * ```ts
 * import { initNccl, ncclBackendMissing } from "@dcomm/dcomm/nccl";
 * import { DistError } from "@dcomm/dcomm";
 * import assert from "node:assert/strict";
 * if (ncclBackendMissing() === undefined) {
 *   await using pg = await initNccl({ rank: 0, worldSize: 1, env: {}, nccl: { device: 0 } });
 *   console.log(`rank ${pg.rank} of ${pg.size} on GPU ${pg.device}, NCCL ${pg.ncclVersion}`);
 * } else {
 *   await assert.rejects(initNccl({ rank: 0, worldSize: 1, env: {} }), DistError);
 * }
 * ```
 */
export async function initNccl(
  options: InitOptions & { nccl?: NcclOptions } = {},
): Promise<NcclProcessGroup> {
  const vars = environment(options);
  const info = rankInfo(vars, { rank: options.rank, worldSize: options.worldSize });
  const timeoutMs = options.timeoutMs ?? 300_000;
  const base = {
    ...options.nccl,
    rank: info.rank,
    size: info.worldSize,
    localRank: info.localRank,
    timeoutMs,
  };
  if (info.worldSize === 1) {
    const store = new MemoryStore({ timeoutMs });
    try {
      return await createNcclGroup({ ...base, store, onClose: () => store.close() });
    } catch (e) {
      await store.close();
      throw e;
    }
  }
  const rendezvous = await Rendezvous.join({ ...options, env: vars });
  try {
    const group = await createNcclGroup({
      ...base,
      store: rendezvous.store,
      prefix: `${rendezvous.prefix}/nccl`,
      onClose: () => rendezvous.checkOut("nccl", false),
    });
    // The world has formed: the store is needed again only to close.
    rendezvous.formed();
    return group;
  } catch (e) {
    await rendezvous.abandon();
    throw e;
  }
}
