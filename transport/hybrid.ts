/**
 * {@linkcode HybridTransport}: the transport of a world spread over several hosts with several ranks on
 * some of them: shared-memory rings between the ranks of one host, TCP between hosts (torch's Gloo and NCCL
 * do the same, with their own intra-node paths). It is two transports under one `pair()`: a
 * {@linkcode ShmTransport} with this host's ranks as its peers and a {@linkcode TcpTransport} over the whole
 * world, whose connections to same-host ranks stay idle; both number ranks globally, so every error names
 * the world's rank. A failure of either fails both, so
 * every peer, near or far, learns of it.
 *
 * @example Two ranks of one "host" and one of another, in one process
 * ```ts
 * import { HybridTransport } from "./hybrid.ts";
 * import { MemoryStore } from "../store/memory_store.ts";
 * import assert from "node:assert/strict";
 * const store = new MemoryStore();
 * const hosts = [0, 0, 1];
 * const t = await Promise.all(hosts.map((_, rank) => HybridTransport.connect(store, { rank, hosts })));
 * const desc = new Uint8Array(32);
 * const got = [new Uint8Array(3), new Uint8Array(3)];
 * await Promise.all([
 *   t[0].pair(1).send(desc, new Uint8Array([1, 2, 3])), // shared memory
 *   t[0].pair(2).send(desc, new Uint8Array([4, 5, 6])), // TCP
 *   t[1].pair(0).recv(got[0]),
 *   t[2].pair(0).recv(got[1]),
 * ]);
 * assert.deepEqual(got.map((g) => [...g]), [[1, 2, 3], [4, 5, 6]]);
 * await Promise.all(t.map((x) => x.close()));
 * ```
 *
 * @module
 */
import type { Store } from "../store/store.ts";
import { ShmTransport } from "./shm.ts";
import { TcpTransport } from "./tcp.ts";
import { checkRank, type Pair, type Transport } from "./transport.ts";

/** How a {@linkcode HybridTransport} connects. */
export interface HybridTransportOptions {
  /** This rank. */
  rank: number;
  /** The host index of every rank of the world (ranks with equal indices share a host). */
  hosts: readonly number[];
  /** The address this rank's TCP listener publishes. @default "127.0.0.1" */
  hostname?: string;
  /** TCP sockets per peer. @default 1 */
  socketsPerPeer?: number;
  /** How long connecting may take (ms). @default 300000 */
  timeoutMs?: number;
  /** The prefix of this transport's keys in the store. @default "hybrid/" */
  prefix?: string;
  /**
   * When the TCP pairs connect (`TcpTransportOptions.connections`). Lazily by default: the TCP transport
   * spans the world, but pairs within a host talk over shared memory, so an eager mesh would open sockets
   * to every rank of this host for nothing. @default "lazy"
   */
  connections?: "eager" | "lazy" | "auto";
}

/** Shared memory within a host, TCP between hosts. */
export class HybridTransport implements Transport {
  /** `"shm+tcp"`. */
  readonly kind = "shm+tcp";
  /** This rank. */
  readonly rank: number;
  /** The world size. */
  readonly size: number;
  /** Resolves when either transport fails. */
  readonly failed: Promise<Error>;
  readonly #local: Set<number>;
  readonly #shm: ShmTransport | undefined;
  readonly #tcp: TcpTransport;

  private constructor(
    rank: number,
    size: number,
    local: Set<number>,
    shm: ShmTransport | undefined,
    tcp: TcpTransport,
  ) {
    this.rank = rank;
    this.size = size;
    this.#local = local;
    this.#shm = shm;
    this.#tcp = tcp;
    this.failed = shm === undefined ? tcp.failed : Promise.race([shm.failed, tcp.failed]);
    // One failing fails the other, so the peers on both sides learn why.
    this.failed.then((e) => this.abort(e));
  }

  /**
   * Connects this rank: the shared-memory rings of its host (if it shares one) and the TCP mesh.
   *
   * @param store The world's store.
   * @param options This rank, the host map, TCP's address and sockets.
   * @returns The transport.
   * @throws {RangeError} If the host map does not cover the world or the rank.
   */
  static async connect(store: Store, options: HybridTransportOptions): Promise<HybridTransport> {
    const { rank, hosts } = options;
    const size = hosts.length;
    checkRank(rank, size);
    const prefix = options.prefix ?? "hybrid/";
    const members = hosts.flatMap((h, r) => (h === hosts[rank] ? [r] : []));
    const local = new Set(members);
    const timeoutMs = options.timeoutMs ?? 300_000;
    const [shm, tcp] = await Promise.all([
      members.length > 1
        ? ShmTransport.connect(store, { rank, size, peers: members, timeoutMs, prefix: `${prefix}shm/` })
        : Promise.resolve(undefined),
      TcpTransport.connect(store, {
        rank,
        size,
        hostname: options.hostname,
        socketsPerPeer: options.socketsPerPeer,
        timeoutMs,
        prefix: `${prefix}tcp/`,
        connections: options.connections ?? "lazy",
      }),
    ]);
    return new HybridTransport(rank, size, local, shm, tcp);
  }

  /**
   * The pair with `peer`: shared memory on this host, TCP otherwise.
   *
   * @param peer A global rank other than this one.
   * @returns The pair.
   */
  pair(peer: number): Pair {
    return this.#shm !== undefined && this.#local.has(peer) && peer !== this.rank
      ? this.#shm.pair(peer)
      : this.#tcp.pair(peer);
  }

  /**
   * Aborts both transports.
   *
   * @param error Why.
   */
  abort(error: Error): void {
    this.#shm?.abort(error);
    this.#tcp.abort(error);
  }

  /** Closes both. */
  async close(): Promise<void> {
    await Promise.all([this.#shm?.close(), this.#tcp.close()]);
  }

  /** Closes both. */
  async [Symbol.asyncDispose](): Promise<void> {
    await this.close();
  }
}
