/**
 * {@linkcode TcpTransport}: messages between processes and hosts over TCP, a full mesh of sockets with
 * one reader loop per pair. Big payloads go from the sender's view to the socket and from the socket into
 * the receiver's view without an intermediate copy; a pair may stripe big payloads over several sockets.
 *
 * ## Connect phase
 * Each rank listens on an ephemeral port and publishes `host:port` under `<prefix>addr/<rank>`; rank 0
 * publishes a random 16-byte world token under `<prefix>token`. For each pair the HIGHER rank dials the
 * lower one (retrying until the deadline) and opens `socketsPerPeer` sockets; each socket starts with a
 * handshake both ways, and a connection whose handshake lacks the token is closed (refused).
 *
 * ## Wire format (integers little-endian)
 * Handshake, 40 bytes, sent first by the dialling rank and answered by the accepting one:
 * ```
 *  0 u32 magic "DCTH"        4 u32 version (1)      8 u32 sender's rank     12 u32 world size
 * 16 u16 socket index       18 u16 sockets per pair 20 u32 reserved (0)     24 16 bytes world token
 * ```
 * Then frames, each a 48-byte header and a payload:
 * ```
 *  0 u32 magic "DCTF"        4 u32 kind: 1 DATA, 2 ABORT, 3 CLOSE
 *  8 32 bytes descriptor (zero for ABORT and CLOSE)
 * 40 u64 payload length     48 payload: DATA's message, ABORT's reason in UTF-8 (≤ 64 KiB), none for CLOSE
 * ```
 * Headers always travel on socket 0. A DATA payload of `n` bytes is split into
 * `k = clamp(floor(n / 1 MiB), 1, socketsPerPeer)` contiguous stripes; stripe `i` travels on socket `i`,
 * right after the header on socket 0 for stripe 0. Since every socket is FIFO and both ends compute the same
 * split from `n`, stripes of successive messages never mix up. CLOSE says the sender closed the transport:
 * the end of its stream that follows is not a failure (unless a receive was still waiting on it).
 *
 * ## Failure model
 * Any fault on any pair (end of stream or reset without CLOSE, a malformed header, an ABORT frame, a
 * receive check that throws, a length mismatch) fails the whole transport: `failed` resolves with the error,
 * every pending and later send and receive rejects with it, each peer is sent an ABORT frame with its
 * message (after the send under way on that pair, if any, for at most a second, since a frame cannot
 * interrupt a payload), and every socket is closed.
 *
 * @module
 */
import { openFileLimit } from "../core/os_limits.ts";
import { TransportError } from "../core/errors.ts";
import { copySmallBytes } from "../core/small_bytes.ts";
import type { Store } from "../store/store.ts";
import { Grace, Lifecycle } from "./_lifecycle.ts";
import { formLazyMesh, formMesh, type LazyMesh } from "./_tcp_mesh.ts";
import {
  closeQuietly,
  COALESCE_BYTES,
  decodeHeader,
  discardExact,
  encodeHeader,
  EndOfStream,
  FRAME_ABORT,
  FRAME_CLOSE,
  FRAME_DATA,
  type Header,
  HEADER_BYTES,
  readExact,
  SENT_REASON_BYTES,
  stripes,
  writeAll,
} from "./_tcp_wire.ts";
import { probeOf, ProbeSlot } from "./_probe.ts";
import {
  checkRank,
  DESC_BYTES,
  type MessageHeader,
  type Pair,
  pairOf,
  type RecvCheck,
  type Transport,
} from "./transport.ts";

/** Options of {@linkcode TcpTransport.connect}. */
export interface TcpTransportOptions {
  /** This rank, in `0..size-1`. */
  rank: number;
  /** The number of ranks. */
  size: number;
  /**
   * The address this rank listens on and publishes for its peers to dial: a host name or IP literal that
   * every other rank can reach (an IPv6 one with or without brackets, `::1` or `[::1]`: it is published as
   * `[::1]:port`).
   *
   * @default {"127.0.0.1"}
   */
  hostname?: string;
  /**
   * The address to listen on, when it differs from the published one (`"0.0.0.0"` behind NAT or in a
   * container).
   *
   * @default {hostname}
   */
  listenHostname?: string;
  /**
   * How long the connect phase may take, in milliseconds, before it throws a `TimeoutError` naming the
   * ranks that did not show up.
   *
   * @default {300000}
   */
  timeoutMs?: number;
  /**
   * Sockets per pair (1 to 64). Payloads of at least 2 MiB are striped over up to this many sockets, so
   * that one big message uses several streams (and several kernel send and receive buffers). Every rank
   * must use the same value.
   *
   * @default {1}
   */
  socketsPerPeer?: number;
  /**
   * When pairs connect: `"eager"`, the full mesh during `connect()` (N − 1 connections per rank);
   * `"lazy"`, a pair when it is first used (a ring all-reduce opens 2 per rank; the peers' addresses are
   * still all known, and every rank up, when `connect()` returns); `"auto"`, lazy above
   * {@linkcode LAZY_FROM_RANKS} ranks.
   *
   * @default {"auto"}
   */
  connections?: "eager" | "lazy" | "auto";
  /**
   * Prefix of this transport's keys in the store, so that several worlds (or groups) share one store. Each
   * world needs its own prefix, also when worlds follow each other in one store: a rank that read the
   * previous world's token would be refused by the new one until the deadline.
   *
   * @default {"tcp/"}
   */
  prefix?: string;
}

/**
 * How long a failed write waits for the reader of the same connection before it names the failure: a peer
 * that aborted wrote its reason before it closed, and that frame may still be on its way to the reader.
 */
const WRITE_FAILURE_GRACE_MS = 200;
/** Where payloads go that nobody wants anymore (after a failure), so the stream stays in step. */
const DISCARD_BYTES = 1 << 20;

/**
 * A rank's TCP connections to every other rank of a world.
 *
 * @example Two ranks in one process
 * ```ts
 * import { MemoryStore } from "../store/memory_store.ts";
 * import { TcpTransport, type TcpTransportOptions } from "./tcp.ts";
 * import assert from "node:assert/strict";
 *
 * await using store = new MemoryStore();
 * const options: TcpTransportOptions[] = [{ rank: 0, size: 2 }, { rank: 1, size: 2 }];
 * const [a, b] = await Promise.all(options.map((o) => TcpTransport.connect(store, o)));
 * const desc = new Uint8Array(32);
 * const got = new Uint8Array(3);
 * await Promise.all([a.pair(1).send(desc, new Uint8Array([1, 2, 3])), b.pair(0).recv(got)]);
 * assert.deepEqual([...got], [1, 2, 3]);
 * await Promise.all([a.close(), b.close()]);
 * ```
 */
/** Worlds of more ranks than this connect their pairs lazily under `connections: "auto"`. */
export const LAZY_FROM_RANKS = 16;

export class TcpTransport implements Transport {
  /** Always `"tcp"`. */
  readonly kind: string = "tcp";
  /** This rank. */
  readonly rank: number;
  /** The number of ranks. */
  readonly size: number;
  /** Sockets per pair. */
  readonly socketsPerPeer: number;
  /** Resolves with the error that failed the transport; never resolves if it only closes. */
  readonly failed: Promise<Error>;

  readonly #links: (TcpPair | undefined)[];
  readonly #life: Lifecycle;
  readonly #lazy: LazyMesh | undefined;
  #discard: Uint8Array | undefined;

  private constructor(
    rank: number,
    size: number,
    socketsPerPeer: number,
    sockets: Deno.TcpConn[][] | undefined,
    lazy?: LazyMesh,
  ) {
    this.rank = rank;
    this.size = size;
    this.socketsPerPeer = socketsPerPeer;
    this.#life = new Lifecycle({
      name: "TCP",
      rank,
      onFail: (error) => this.#onFail(error),
      onClose: (closed) => this.#farewell(FRAME_CLOSE, new Uint8Array(), closed),
    });
    this.failed = this.#life.failed;
    this.#lazy = lazy;
    this.#links = Array.from(
      { length: size },
      (_, peer) =>
        peer === rank
          ? undefined
          : new TcpPair(this.#host(), peer, sockets?.[peer], lazy && (() => lazy.link(peer))),
    );
    if (sockets) { for (const link of this.#links) link?.start(); }
    // A peer that connected a pair is about to talk: the pair reads from it at once.
    if (lazy) lazy.onAccepted = (peer) => this.#links[peer]?.adopt();
  }

  /** Whether pairs connect when first used. */
  get lazy(): boolean {
    return this.#lazy !== undefined;
  }

  /** The sockets this rank has open to its peers (a lazy transport's grow with the peers it used). */
  get connections(): number {
    return this.#links.reduce((n, link) => n + (link?.sockets ?? 0), 0);
  }

  /**
   * Connects this rank to every other rank of the world: rendezvous through `store`, then a full mesh of
   * sockets. Every rank of the world calls it with the same `size`, `socketsPerPeer` and `prefix`.
   *
   * @param store The rendezvous store shared by the world.
   * @param options This rank, the world size, addresses, deadline, sockets per pair and key prefix.
   * @returns The connected transport.
   * @throws {TypeError | RangeError} If an option is invalid.
   * @throws {TimeoutError} If some rank did not show up within `timeoutMs`; the message names each one.
   * @throws {TransportError} If a rank runs with another world size or `socketsPerPeer`.
   */
  static async connect(store: Store, options: TcpTransportOptions): Promise<TcpTransport> {
    const { rank, size } = options;
    checkRank(rank, size);
    const socketsPerPeer = options.socketsPerPeer ?? 1;
    if (!Number.isInteger(socketsPerPeer) || socketsPerPeer < 1 || socketsPerPeer > 64) {
      throw new RangeError(`Expected socketsPerPeer in 1..64, found ${socketsPerPeer}`);
    }
    const timeoutMs = options.timeoutMs ?? 300_000;
    if (!(timeoutMs > 0)) throw new RangeError(`Expected timeoutMs > 0, found ${timeoutMs}`);
    const hostname = options.hostname ?? "127.0.0.1";
    if (typeof hostname !== "string" || hostname === "") {
      throw new TypeError(`Expected a non-empty hostname, found ${JSON.stringify(hostname)}`);
    }
    const prefix = options.prefix ?? "tcp/";
    const connections = options.connections ?? "auto";
    if (!["eager", "lazy", "auto"].includes(connections)) {
      throw new TypeError(
        `Expected connections "eager", "lazy" or "auto", found ${JSON.stringify(connections)}`,
      );
    }
    const mesh = {
      rank,
      size,
      hostname,
      listenHostname: options.listenHostname ?? hostname,
      // setTimeout cannot wait longer than 2^31 - 1 ms; longer is "forever" in practice anyway.
      timeoutMs: Math.min(timeoutMs, 2 ** 31 - 1),
      socketsPerPeer,
      prefix,
    };
    if (connections === "lazy" || (connections === "auto" && size > LAZY_FROM_RANKS)) {
      return new TcpTransport(rank, size, socketsPerPeer, undefined, await formLazyMesh(store, mesh));
    }
    checkOpenFiles((size - 1) * socketsPerPeer, rank);
    return new TcpTransport(rank, size, socketsPerPeer, await formMesh(store, mesh));
  }

  /**
   * The pair with `peer`.
   *
   * @param peer Another rank.
   * @returns The pair.
   * @throws {RangeError} If `peer` is this rank or out of range.
   */
  pair(peer: number): Pair {
    return pairOf(this.#links, peer, this);
  }

  /**
   * Fails every pending and future operation with `error`, sends `error.message` to every peer (best
   * effort, at most about a second) and closes the sockets. Idempotent; {@linkcode TcpTransport.close}
   * waits until the sockets are closed.
   *
   * @param error Why; every peer fails with `Rank <this rank> aborted: <error.message>`.
   */
  abort(error: Error): void {
    this.#life.fail(error);
  }

  /**
   * Closes every connection. Peers learn that this rank closed on purpose, so they do not fail unless
   * they still wait for a message from it. Pending receives reject; sends made before `close()` are
   * written first (for at most a second). After a failure, waits for the sockets to be closed.
   */
  close(): Promise<void> {
    return this.#life.close();
  }

  /** Same as {@linkcode TcpTransport.close}, for `await using`. */
  [Symbol.asyncDispose](): Promise<void> {
    return this.close();
  }

  /** What the pairs may see of their transport. */
  #host(): Host {
    return {
      life: this.#life,
      socketsPerPeer: this.socketsPerPeer,
      openSockets: () => this.connections,
      discard: () => this.#discard ??= new Uint8Array(DISCARD_BYTES),
    };
  }

  /** The first failure: every operation rejects now, and the peers get an ABORT with its message. */
  #onFail(error: Error): Promise<void> {
    for (const link of this.#links) link?.rejectPending(error, true);
    const reason = new TextEncoder().encode(error.message).slice(0, SENT_REASON_BYTES);
    return this.#farewell(FRAME_ABORT, reason, error);
  }

  /** Tells every peer goodbye (ABORT or CLOSE), closes every socket and waits for the reader loops. */
  async #farewell(kind: number, payload: Uint8Array, error: Error): Promise<void> {
    const links = this.#links.filter((l): l is TcpPair => l !== undefined);
    // Receives cannot complete any more; sends under way may (a peer may still be reading them).
    for (const link of links) link.rejectPending(error, false);
    try {
      await new Grace().waitFor(Promise.allSettled(links.map((link) => link.sendFinal(kind, payload))));
    } finally {
      for (const link of links) {
        link.rejectPending(error, true);
        link.closeSockets();
      }
      await this.#lazy?.close();
      await Promise.allSettled(links.map((link) => link.done));
    }
  }
}

/** The transport as a pair sees it. */
interface Host {
  /** The transport's state, its failure, and the errors that name peers. */
  readonly life: Lifecycle;
  readonly socketsPerPeer: number;
  /** The sockets open to peers now. */
  openSockets(): number;
  /** Scratch for payloads nobody wants. */
  discard(): Uint8Array;
}

interface Posted {
  into: Uint8Array;
  check?: RecvCheck;
  resolve: (desc: Uint8Array) => void;
  reject: (error: unknown) => void;
}

interface Arrived {
  desc: Uint8Array;
  data: Uint8Array;
  /** When its header arrived (`performance.now()`). */
  at: number;
  /** Resolves once every byte of `data` has been read. */
  ready: Promise<void>;
}

/**
 * The largest early-message buffer a pair keeps (`TcpPair.#spare`), the engine's chunk: beyond it early
 * messages are rare, and a world of many ranks has many pairs (with the send buffer, at most about 1 MiB a
 * pair).
 */
const SPARE_MAX_BYTES = 1 << 20;

class TcpPair implements Pair {
  readonly peer: number;
  /** Resolves when the reader loop has ended. */
  done: Promise<void> = Promise.resolve();

  readonly #host: Host;
  readonly #life: Lifecycle;
  #conns: Deno.TcpConn[];
  #sendTail: Promise<void> = Promise.resolve();
  #posted: Posted[] = [];
  #arrived: Arrived[] = [];
  /**
   * The buffer of a message that arrived before its receive, kept once copied out for the next one: a fresh
   * 128 KiB buffer per early message costs page faults and garbage collection (on 4 emulated hosts × 2 at 1
   * Gb/s, where 3–13% of a 1 MiB ring's messages arrive early, a ring over this transport took 18.3 ms and
   * 35 ms of CPU per call with fresh buffers, 16.0–17.3 and 30–35 with kept ones; over bare sockets 15.6).
   */
  #spare: Uint8Array | undefined;
  /** Where a header and its payload are put together for one write (grown as needed, up to COALESCE_BYTES, kept). */
  #frame = new Uint8Array(0);
  /** Rejecters of sends under way. */
  readonly #sending = new Set<(error: Error) => void>();
  /** Rejecters of receives whose message is still arriving (the others are in `#posted`). */
  readonly #receiving = new Set<(error: Error) => void>();
  /** The peer sent CLOSE: the end of its stream that follows is expected. */
  #peerClosed = false;
  #socketsClosed = false;
  /** The probe waiting for the next early message. */
  readonly #probe = new ProbeSlot();
  /** A lazy pair's way to its sockets, and the connection under way. */
  readonly #link: (() => Promise<Deno.TcpConn[]>) | undefined;
  #connecting: Promise<void> | undefined;

  constructor(host: Host, peer: number, conns?: Deno.TcpConn[], link?: () => Promise<Deno.TcpConn[]>) {
    this.#host = host;
    this.#life = host.life;
    this.peer = peer;
    this.#conns = conns ?? [];
    this.#link = link;
  }

  start(): void {
    this.done = this.#readLoop();
  }

  /** The sockets open to the peer (none yet for a lazy pair not used so far). */
  get sockets(): number {
    return this.#socketsClosed ? 0 : this.#conns.length;
  }

  /** A lazy pair whose peer connected it: take it up now. */
  adopt(): void {
    if (this.#conns.length === 0) this.#connect().catch(() => {});
  }

  /** A lazy pair's connection, made once; its failure fails the transport. */
  #connect(): Promise<void> {
    return this.#connecting ??= (async () => {
      try {
        checkOpenFiles(this.#host.openSockets() + this.#host.socketsPerPeer, this.#life.rank);
        const conns = await (this.#link as () => Promise<Deno.TcpConn[]>)();
        if (this.#socketsClosed) {
          for (const conn of conns) closeQuietly(conn);
          throw this.#life.unusable() ?? new TransportError("The transport closed while it connected");
        }
        this.#conns = conns;
        this.start();
      } catch (error) {
        // After a close or a failure, the transport's own error is the one every caller gets.
        const settled = this.#life.unusable();
        if (settled) throw settled;
        const failure = error instanceof Error ? error : new TransportError(String(error));
        if (this.#posted.length > 0 || this.#sending.size > 0 || this.#probe.pending) {
          this.#life.fail(failure);
          throw this.#life.unusable() ?? failure;
        }
        // Nothing waits on the pair any more (a probe was withdrawn): the next use finds the peer gone.
        this.#connecting = undefined;
        throw failure;
      }
    })();
  }

  async send(desc: Uint8Array, payload: Uint8Array): Promise<void> {
    if (desc.length !== DESC_BYTES) {
      throw new RangeError(`Expected a descriptor of ${DESC_BYTES} bytes, found ${desc.length}`);
    }
    const unusable = this.#life.unusable();
    if (unusable) throw unusable;
    const gone = this.#closedByPeer("send to");
    if (gone) {
      this.#life.fail(gone);
      throw gone;
    }
    // Chained so that concurrent sends on one pair never interleave their bytes (a lazy pair connects in
    // the chain: a close() waits for the sends made before it, connection included).
    const write = this.#sendTail.then(async () => {
      if (this.#conns.length === 0) await this.#connect();
      await this.#writeData(desc, payload);
    });
    this.#sendTail = write.catch(() => {});
    // A failure releases the caller at once, even while the write that is under way finishes.
    await this.#guard(this.#sending, write);
  }

  recv(into: Uint8Array, check?: RecvCheck): Promise<Uint8Array> {
    const unusable = this.#life.unusable();
    if (unusable) return Promise.reject(unusable);
    const arrived = this.#arrived.shift();
    if (arrived !== undefined) return this.#takeArrived(arrived, into, check);
    const gone = this.#closedByPeer("receive from");
    if (gone) {
      this.#life.fail(gone);
      return Promise.reject(gone);
    }
    const posted = new Promise<Uint8Array>((resolve, reject) =>
      this.#posted.push({ into, check, resolve, reject })
    );
    // A lazy pair connects now; a failure rejects the receive through the transport's failure.
    if (this.#conns.length === 0) this.#connect().catch(() => {});
    return posted;
  }

  cancelProbe(): void {
    this.#probe.cancel();
  }

  probe(): Promise<MessageHeader> {
    const unusable = this.#life.unusable();
    if (unusable) return Promise.reject(unusable);
    const first = this.#arrived[0];
    const gone = first === undefined ? this.#closedByPeer("receive from") : undefined;
    if (gone) {
      this.#life.fail(gone);
      return Promise.reject(gone);
    }
    const probed = probeOf(
      this.#probe,
      first && { desc: first.desc, bytes: first.data.length, arrivedAt: first.at },
    );
    if (this.#conns.length === 0) this.#connect().catch(() => {});
    return probed;
  }

  async #takeArrived(arrived: Arrived, into: Uint8Array, check?: RecvCheck): Promise<Uint8Array> {
    this.#life.checkReceive(this.peer, { into, desc: arrived.desc, bytes: arrived.data.length, check });
    await this.#guard(this.#receiving, arrived.ready);
    into.set(arrived.data);
    if (this.#spare === undefined && arrived.data.buffer.byteLength <= SPARE_MAX_BYTES) {
      this.#spare = new Uint8Array(arrived.data.buffer);
    }
    return arrived.desc;
  }

  #closedByPeer(what: string): TransportError | undefined {
    return this.#peerClosed ? this.#life.peerClosed(what, this.peer) : undefined;
  }

  /** Rejects every receive waiting on this pair, and with `sends` every send too. */
  rejectPending(error: Error, sends: boolean): void {
    const waiting = [
      ...this.#posted.map((p) => p.reject),
      ...this.#receiving,
      ...(sends ? this.#sending : []),
    ];
    this.#posted = [];
    this.#arrived = [];
    this.#receiving.clear();
    this.#probe.reject(error);
    if (sends) this.#sending.clear();
    for (const reject of waiting) reject(error);
  }

  /**
   * `promise`, unless {@linkcode TcpPair.rejectPending} comes first. (Not a `Promise.race` with one
   * long-lived "failed" promise: every race would leave a reaction on it, a leak over millions of sends.)
   */
  #guard<T>(set: Set<(error: Error) => void>, promise: Promise<T>): Promise<T> {
    return new Promise<T>((resolve, reject) => {
      set.add(reject);
      promise.then(
        (value) => {
          set.delete(reject);
          resolve(value);
        },
        (error) => {
          set.delete(reject);
          reject(error);
        },
      );
    });
  }

  async #writeData(desc: Uint8Array, payload: Uint8Array): Promise<void> {
    // A send queued behind one that failed never starts: a frame cut in the middle cannot be resumed.
    // (Sends queued before close() still go: close() waits for them.)
    const unusable = this.#life.failure ?? this.#closedByPeer("send to");
    if (unusable) throw unusable;
    try {
      const bytes = payload.length;
      if (bytes <= COALESCE_BYTES) {
        // Sends on a pair run one at a time (#sendTail), so one buffer serves them all.
        if (this.#frame.length < HEADER_BYTES + bytes) {
          const grown = Math.max(HEADER_BYTES + bytes, 2 * this.#frame.length);
          this.#frame = new Uint8Array(Math.min(grown, HEADER_BYTES + COALESCE_BYTES));
        }
        const frame = this.#frame.subarray(0, HEADER_BYTES + bytes);
        encodeHeader(frame, { kind: FRAME_DATA, desc, bytes });
        frame.set(payload, HEADER_BYTES);
        await writeAll(this.#conns[0], frame);
        return;
      }
      const header = new Uint8Array(HEADER_BYTES);
      encodeHeader(header, { kind: FRAME_DATA, desc, bytes });
      const ranges = stripes(bytes, this.#host.socketsPerPeer);
      await Promise.all(ranges.map(async ([start, end], i) => {
        if (i === 0) await writeAll(this.#conns[0], header);
        await writeAll(this.#conns[i], payload.subarray(start, end));
      }));
    } catch (error) {
      // The peer's ABORT (with its reason) may be just behind this error: let the reader get to it first.
      await new Grace(WRITE_FAILURE_GRACE_MS).waitFor(this.done);
      throw this.#brokenStream(error, "send to");
    }
  }

  /** Writes one final frame (CLOSE or ABORT) once the send under way, if any, is done. */
  async sendFinal(kind: number, payload: Uint8Array): Promise<void> {
    // A lazy pair still connecting gets its goodbye once connected (the farewell's grace bounds the wait:
    // a higher peer that never dials gets none).
    if (this.#conns.length === 0 && this.#connecting) await this.#connecting.catch(() => {});
    await this.#sendTail;
    if (this.#socketsClosed || this.#conns.length === 0) return; // a lazy pair never used: no goodbye
    const frame = new Uint8Array(HEADER_BYTES + payload.length);
    encodeHeader(frame, { kind, desc: new Uint8Array(DESC_BYTES), bytes: payload.length });
    frame.set(payload, HEADER_BYTES);
    try {
      await writeAll(this.#conns[0], frame);
    } catch {
      // The peer is gone already; it needs no goodbye.
    }
  }

  closeSockets(): void {
    this.#socketsClosed = true;
    for (const conn of this.#conns) closeQuietly(conn);
  }

  /** Turns a socket error into the transport's failure (and fails the transport). */
  #brokenStream(error: unknown, what: string): Error {
    const settled = this.#life.unusable();
    if (settled) return settled;
    const peerClosed = this.#closedByPeer(what);
    const failure = peerClosed ?? new TransportError(
      `Rank ${this.peer} closed its connection to rank ${this.#life.rank} mid-collective` +
        (error instanceof EndOfStream ? "" : ` (${error instanceof Error ? error.message : String(error)})`),
      { peer: this.peer, cause: error },
    );
    this.#life.fail(failure);
    return failure;
  }

  async #readLoop(): Promise<void> {
    const headerBytes = new Uint8Array(HEADER_BYTES);
    let betweenFrames = true;
    try {
      while (true) {
        betweenFrames = true;
        await readExact(this.#conns[0], headerBytes);
        betweenFrames = false;
        const header = decodeHeader(headerBytes);
        if (typeof header === "string") {
          this.#life.fail(
            new TransportError(
              `Rank ${this.peer} sent rank ${this.#life.rank} a malformed frame: ${header}`,
              {
                peer: this.peer,
              },
            ),
          );
          return; // The stream is out of step; nothing after this can be parsed.
        }
        if (header.kind === FRAME_DATA) {
          await this.#onData(header);
        } else if (header.kind === FRAME_ABORT) {
          const reason = new Uint8Array(header.bytes);
          await readExact(this.#conns[0], reason);
          const message = new TextDecoder().decode(reason);
          this.#life.fail(this.#life.peerAborted(this.peer, message));
          return; // The peer closes its sockets next; nothing more will come.
        } else {
          this.#peerClosed = true;
          if (this.#posted.length > 0 || this.#probe.pending) {
            this.#life.fail(this.#closedByPeer("receive from") as TransportError);
          }
          return;
        }
      }
    } catch (error) {
      if (this.#socketsClosed) return;
      // The peer's process ended between two frames while nothing was expected from it (a script that never
      // closes its group ends once its calls are done, and its last message may be read before this rank's
      // own call has finished): not a failure yet. A receive posted from it after this fails, naming it.
      if (
        error instanceof EndOfStream && error.got === 0 && betweenFrames && this.#posted.length === 0 &&
        this.#receiving.size === 0 && !this.#probe.pending
      ) {
        this.#peerClosed = true;
        return;
      }
      this.#brokenStream(error, "receive from");
    }
  }

  async #onData(header: Header): Promise<void> {
    const posted = this.#life.failure === undefined ? this.#posted.shift() : undefined;
    if (posted !== undefined) {
      try {
        const { into, check } = posted;
        this.#life.checkReceive(this.peer, { into, desc: header.desc, bytes: header.bytes, check });
      } catch (error) {
        posted.reject(error);
        await this.#readPayload(undefined, header.bytes); // The transport failed: keep the stream in step.
        return;
      }
      const desc = copySmallBytes(header.desc, 0, DESC_BYTES);
      await this.#readPayload(posted.into, header.bytes);
      if (this.#life.failure === undefined) posted.resolve(desc);
      return;
    }
    if (this.#life.failure !== undefined) return await this.#readPayload(undefined, header.bytes);
    // Nobody waits yet: read into the kept buffer or a fresh one, so a peer that sends before receiving
    // never blocks.
    const spare = this.#spare;
    const reuse = spare !== undefined && spare.length >= header.bytes;
    if (reuse) this.#spare = undefined;
    const data = reuse ? spare.subarray(0, header.bytes) : new Uint8Array(header.bytes);
    let markReady: () => void = () => {};
    const at = performance.now();
    this.#arrived.push({
      desc: header.desc.slice(),
      data,
      at,
      ready: new Promise<void>((r) => markReady = r),
    });
    this.#probe.offer(header.desc, header.bytes, at);
    await this.#readPayload(data, header.bytes);
    markReady();
  }

  /**
   * Reads a payload of `bytes` into `into`, stripe by stripe, straight from the sockets; without `into`
   * (or once the transport failed) the bytes are discarded, so the stream stays in step with the frames.
   */
  async #readPayload(into: Uint8Array | undefined, bytes: number): Promise<void> {
    const redirect = (): Uint8Array | undefined =>
      this.#life.failure === undefined ? undefined : this.#host.discard();
    await Promise.all(
      stripes(bytes, this.#host.socketsPerPeer).map(([start, end], i) =>
        into === undefined
          ? discardExact(this.#conns[i], end - start, this.#host.discard())
          : readExact(this.#conns[i], into.subarray(start, end), redirect)
      ),
    );
  }
}

/** File descriptors a process keeps for everything but its peers' sockets (the store, files, the runtime). */
const SPARE_DESCRIPTORS = 64;

/**
 * Throws before this rank would hold more sockets than its open-file limit allows (`ulimit -n`), which
 * would otherwise fail at some later accept or dial with EMFILE (or crash the runtime).
 *
 * @param sockets The peer sockets this rank is about to hold.
 * @param rank This rank, for the message.
 * @throws {TransportError} Naming both numbers and what to do.
 */
export function checkOpenFiles(sockets: number, rank: number): void {
  const limit = openFileLimit();
  if (limit === undefined || sockets + SPARE_DESCRIPTORS <= limit) return;
  throw new TransportError(
    `Rank ${rank} needs ${sockets} sockets to its peers, more than its open-file limit of ${limit} allows ` +
      `(ulimit -n, less ${SPARE_DESCRIPTORS} kept for the rest): raise the limit (ulimit -n), use ` +
      'connections: "lazy" (DCOMM_TCP_CONNECTIONS=lazy: a pair connects when first used), or fewer ' +
      "socketsPerPeer",
  );
}
