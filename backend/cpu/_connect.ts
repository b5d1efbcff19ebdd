/**
 * Chooses and connects the transport of a CPU rank: shared memory when every rank runs on this host, shared
 * memory within hosts and TCP between them when some host runs several ranks, TCP when none does, or
 * whatever the caller named. Every rank publishes its host identity, so every rank knows the world's
 * topology (which the hierarchical all-reduce and the cost model use) whatever the transport.
 *
 * @module
 */
import { StoreError, TimeoutError } from "../../core/errors.ts";
import type { Store } from "../../store/store.ts";
import type { Transport } from "../../transport/transport.ts";
import { TcpTransport } from "../../transport/tcp.ts";
import { ShmTransport } from "../../transport/shm.ts";
import { InprocTransport } from "../../transport/inproc.ts";
import { HybridTransport } from "../../transport/hybrid.ts";
import type { EngineConfig } from "./_protocol.ts";
import { rankList } from "../_rendezvous.ts";
import { hostIdentity } from "../../core/host.ts";

export { hostIdentity };

/** A connected transport and the world's topology. */
export interface Connected {
  /** The transport. */
  transport: Transport;
  /** The host index of every rank (hosts numbered in order of their first rank). */
  hosts: number[];
}

/**
 * Connects this rank to every other.
 *
 * @param store The world's store (already prefixed).
 * @param config The engine's configuration.
 * @returns The connected transport.
 * @throws {TypeError} If the transport named is unknown, or inproc was asked for without a mesh.
 */
export async function connectTransport(store: Store, config: EngineConfig): Promise<Connected> {
  const { rank, size, timeoutMs } = config;
  const names = await hostTable(store, rank, size, timeoutMs);
  const index = new Map<string, number>();
  const hosts = names.map((n) => index.get(n) ?? index.set(n, index.size).get(n) as number);
  let kind = config.transport;
  if (kind === "auto") {
    const perHost = hosts.reduce(
      (count, h) => count.set(h, (count.get(h) ?? 0) + 1),
      new Map<number, number>(),
    );
    kind = size === 1
      ? "tcp"
      : index.size === 1
      ? "shm"
      : [...perHost.values()].some((c) => c > 1)
      ? "hybrid"
      : "tcp";
  }
  return { transport: await connect(store, config, kind, hosts), hosts };
}

/** The store key of the world's host table, which rank 0 publishes. */
export const HOST_TABLE_KEY = "hosts";

/**
 * Every rank's host identity, in O(N) store requests for the world: each rank sets `host/<rank>`; rank 0
 * waits for them all (one request), reads them in one `multiGet` and publishes the table as one value
 * (`hosts`, a JSON array), which every other rank reads in one `get`. (Each rank reading every key was N²
 * requests: 40 s at 1,024 ranks on one store.)
 *
 * @returns The host identity of every rank.
 * @throws {TimeoutError} Naming the ranks that never published their host.
 * @throws {StoreError} If the store went away meanwhile.
 */
export async function hostTable(
  store: Store,
  rank: number,
  size: number,
  timeoutMs: number,
): Promise<string[]> {
  await store.set(`host/${rank}`, hostIdentity());
  const keys = Array.from({ length: size }, (_, r) => `host/${r}`);
  if (rank === 0) {
    await waitForHosts(store, keys, rank, () => store.wait(keys, { timeoutMs }), timeoutMs);
    const names = (await store.multiGet(keys, { timeoutMs })).map((b) => new TextDecoder().decode(b));
    await store.set(HOST_TABLE_KEY, encodeHostTable(names));
    return names;
  }
  let table: Uint8Array | undefined;
  await waitForHosts(store, keys, rank, async () => {
    table = await store.get(HOST_TABLE_KEY, { timeoutMs });
  }, timeoutMs);
  const names = decodeHostTable(table as Uint8Array, size);
  if (names === undefined) {
    throw new StoreError(
      `Cannot connect rank ${rank} of ${size}: store key "${HOST_TABLE_KEY}" holds no table of ${size} hosts: ` +
        "is another world using the same keys? Give each world its own prefix (storePrefix, DCOMM_STORE_PREFIX)",
    );
  }
  return names;
}

/**
 * The host table as one value: each distinct identity once, then each rank's index into them (every rank
 * reads the table, so its size times the world's is what the store sends: 4,096 ranks on one host make
 * 8 KiB each, where the identities written out would make 250 KiB each, a GiB in all).
 *
 * @param names Every rank's host identity.
 * @returns The JSON text `{"ids": [...], "of": [...]}`.
 */
export function encodeHostTable(names: readonly string[]): string {
  const index = new Map<string, number>();
  const of = names.map((n) => index.get(n) ?? index.set(n, index.size).get(n) as number);
  return JSON.stringify({ ids: [...index.keys()], of });
}

/**
 * Reads {@linkcode encodeHostTable}'s value back.
 *
 * @param bytes The value.
 * @param size The world's size.
 * @returns Every rank's identity, or `undefined` if the value is not a table of `size` ranks.
 */
export function decodeHostTable(bytes: Uint8Array, size: number): string[] | undefined {
  let table: { ids?: unknown; of?: unknown };
  try {
    table = JSON.parse(new TextDecoder().decode(bytes));
  } catch {
    return undefined;
  }
  const { ids, of } = table ?? {};
  if (!Array.isArray(ids) || !ids.every((id) => typeof id === "string")) return undefined;
  if (!Array.isArray(of) || of.length !== size) return undefined;
  if (!of.every((i) => Number.isInteger(i) && i >= 0 && i < ids.length)) return undefined;
  return of.map((i: number) => ids[i]);
}

/**
 * Runs `wait` (until every rank has published its host, or the table of them is there); a wait that runs
 * out names the ranks that did not publish theirs (they joined the rendezvous, then crashed or hung before
 * connecting), not the store's keys; looking which costs a request per rank, on this path only.
 *
 * @throws {TimeoutError} Naming the missing ranks.
 * @throws {StoreError} If the store went away meanwhile (its server gave up first, or died).
 */
async function waitForHosts(
  store: Store,
  keys: string[],
  rank: number,
  wait: () => Promise<void>,
  timeoutMs: number,
): Promise<void> {
  const size = keys.length;
  try {
    await wait();
  } catch (e) {
    if (e instanceof TimeoutError) {
      const seen = await Promise.all(keys.map((k) => store.check([k]))).catch(() => undefined);
      const missing = seen === undefined ? [] : keys.map((_, r) => r).filter((r) => !seen[r]);
      if (missing.length === 0) {
        if (rank === 0) throw e;
        throw new TimeoutError(
          `Cannot connect rank ${rank} of ${size} within ${timeoutMs} ms: every rank published its host, ` +
            `but rank 0 did not publish the table of them (store key "${HOST_TABLE_KEY}"): did rank 0 crash ` +
            "or hang in init()?",
          { cause: e },
        );
      }
      throw new TimeoutError(
        `Cannot connect rank ${rank} of ${size} within ${timeoutMs} ms: waiting for ${rankList(missing)} ` +
          `(${size - missing.length} of ${size} reached the connect phase): ` +
          `${missing.length === 1 ? "it" : "they"} joined the rendezvous but did not go on; did ` +
          `${missing.length === 1 ? "it" : "they"} crash or hang in init()?`,
        { cause: e },
      );
    }
    if (e instanceof StoreError) {
      throw new StoreError(
        `Cannot connect rank ${rank} of ${size}: lost the world's store while waiting for every rank to ` +
          "connect: the rank or launcher serving it gave up (its own error names the ranks it waited for) " +
          "or exited",
        { cause: e },
      );
    }
    throw e;
  }
}

async function connect(
  store: Store,
  config: EngineConfig,
  kind: string,
  hosts: number[],
): Promise<Transport> {
  const { rank, size, timeoutMs } = config;
  switch (kind) {
    case "hybrid":
      return await HybridTransport.connect(store, {
        rank,
        hosts,
        hostname: config.hostname,
        timeoutMs,
        socketsPerPeer: config.socketsPerPeer,
        prefix: "hybrid/",
        // Pairs within a host use shared memory: "auto" is lazy here at any size.
        connections: config.tcpConnections === "eager" ? "eager" : "lazy",
      });
    case "tcp":
      return await TcpTransport.connect(store, {
        rank,
        size,
        hostname: config.hostname,
        timeoutMs,
        socketsPerPeer: config.socketsPerPeer,
        prefix: "tcp",
        connections: config.tcpConnections,
      });
    case "shm":
      return await ShmTransport.connect(store, {
        rank,
        size,
        timeoutMs,
        prefix: "shm",
        segment: config.segment ?? undefined,
      });
    case "inproc":
      if (config.inprocMesh === undefined) {
        throw new TypeError(
          "Cannot use the inproc transport: expected an inproc mesh (spawnThreads makes one), found none",
        );
      }
      return InprocTransport.create(config.inprocMesh as Parameters<typeof InprocTransport.create>[0], rank);
    default:
      throw new TypeError(
        `Unknown transport: expected "auto", "tcp", "shm", "hybrid" or "inproc", found "${kind}"`,
      );
  }
}
