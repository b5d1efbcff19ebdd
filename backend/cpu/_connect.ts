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

/**
 * An identity shared by the processes of one host: one booted machine (its boot id) and one network
 * namespace (processes in different namespaces reach each other only over a network, as different hosts
 * do; the emulated cluster of `bench/cluster.ts` is such namespaces). `DCOMM_HOST_ID` overrides it, as
 * `NCCL_HOSTID` does NCCL's: ranks with different values count as different hosts (and talk over TCP).
 */
export function hostIdentity(): string {
  try {
    const forced = Deno.env.get("DCOMM_HOST_ID");
    if (forced) return `forced/${forced}`;
  } catch {
    // no --allow-env: the machine's identity
  }
  let boot: string;
  try {
    boot = Deno.readTextFileSync("/proc/sys/kernel/random/boot_id").trim();
  } catch {
    boot = Deno.hostname();
  }
  try {
    return `${boot}/${Deno.readLinkSync("/proc/self/ns/net")}`;
  } catch {
    return boot; // no /proc (or no read permission): the boot id alone
  }
}

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
  // Every rank publishes its host, and learns every other's.
  await store.set(`host/${rank}`, hostIdentity());
  const keys = Array.from({ length: size }, (_, r) => `host/${r}`);
  await waitForHosts(store, keys, rank, timeoutMs);
  const names = (await Promise.all(keys.map((k) => store.get(k, { timeoutMs })))).map((b) =>
    new TextDecoder().decode(b)
  );
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

/**
 * Waits until every rank has published its host; a wait that runs out names the ranks that did not (they
 * joined the rendezvous, then crashed or hung before connecting), not the store's keys.
 *
 * @throws {TimeoutError} Naming the missing ranks.
 * @throws {StoreError} If the store went away meanwhile (its server gave up first, or died).
 */
async function waitForHosts(store: Store, keys: string[], rank: number, timeoutMs: number): Promise<void> {
  const size = keys.length;
  try {
    await store.wait(keys, { timeoutMs });
  } catch (e) {
    if (e instanceof TimeoutError) {
      const seen = await Promise.all(keys.map((k) => store.check([k]))).catch(() => undefined);
      const missing = seen === undefined ? [] : keys.map((_, r) => r).filter((r) => !seen[r]);
      if (missing.length === 0) throw e;
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
      });
    case "tcp":
      return await TcpTransport.connect(store, {
        rank,
        size,
        hostname: config.hostname,
        timeoutMs,
        socketsPerPeer: config.socketsPerPeer,
        prefix: "tcp",
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
