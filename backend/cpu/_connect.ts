/**
 * Chooses and connects the transport of a CPU rank: shared memory when every rank runs on this host,
 * TCP otherwise, or whatever the caller named.
 *
 * @module
 */
import type { Store } from "../../store/store.ts";
import type { Transport } from "../../transport/transport.ts";
import { TcpTransport } from "../../transport/tcp.ts";
import { ShmTransport } from "../../transport/shm.ts";
import { InprocTransport } from "../../transport/inproc.ts";
import type { EngineConfig } from "./_protocol.ts";

/** An identity shared by the processes of one booted machine. */
export function hostIdentity(): string {
  try {
    return Deno.readTextFileSync("/proc/sys/kernel/random/boot_id").trim();
  } catch {
    return Deno.hostname();
  }
}

/**
 * Connects this rank to every other.
 *
 * @param store The world's store (already prefixed).
 * @param config The engine's configuration.
 * @returns The connected transport.
 * @throws {TypeError} If the transport named is unknown, or inproc was asked for without a mesh.
 */
export async function connectTransport(store: Store, config: EngineConfig): Promise<Transport> {
  const { rank, size, timeoutMs } = config;
  let kind = config.transport;
  if (kind === "auto") {
    // Every rank publishes its host; shared memory only if all of them share this one.
    await store.set(`host/${rank}`, hostIdentity());
    const keys = Array.from({ length: size }, (_, r) => `host/${r}`);
    await store.wait(keys, { timeoutMs });
    const hosts = await Promise.all(keys.map((k) => store.get(k, { timeoutMs })));
    const mine = new TextEncoder().encode(hostIdentity());
    const sameHost = hosts.every((h) => h.length === mine.length && h.every((b, i) => b === mine[i]));
    kind = sameHost && size > 1 ? "shm" : "tcp";
  }
  switch (kind) {
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
      throw new TypeError(`Unknown transport: expected "auto", "tcp", "shm" or "inproc", found "${kind}"`);
  }
}
