/**
 * The connect phase of the TCP transport: rendezvous through the store, then a full mesh of handshaken
 * sockets. For each pair the HIGHER rank connects and the lower rank accepts, so rank 0 (usually on the
 * master host, often started first) never dials and every rank dials only ranks already expected to be up.
 *
 * Store keys (under the caller's prefix): `token`, 16 random bytes set by rank 0, so that a connection from
 * another job or a stale process is refused; `addr/<rank>`, the `host:port` each rank listens on; `addrs`,
 * the table of them all (a JSON array), which rank 0 publishes once it read them in one `multiGet`, so that
 * a rank learns its peers' addresses in one request, not one per peer (O(N) requests for the world, not
 * N²). A dial that fails reads the peer's own key again: a rank that restarted publishes a new address.
 *
 * @module
 */
import { TimeoutError, TransportError } from "../core/errors.ts";
import type { Store } from "../store/store.ts";
import {
  closeQuietly,
  decodeHello,
  encodeHello,
  type Hello,
  HELLO_BYTES,
  readExact,
  sameToken,
  TOKEN_BYTES,
  tuneSocket,
  writeAll,
} from "./_tcp_wire.ts";

/** Everything the connect phase needs, already checked. */
export interface MeshOptions {
  /** This rank. */
  rank: number;
  /** The number of ranks. */
  size: number;
  /** The host published for peers to dial. */
  hostname: string;
  /** The address to listen on. */
  listenHostname: string;
  /** The whole phase's deadline. */
  timeoutMs: number;
  /** Sockets per pair. */
  socketsPerPeer: number;
  /** The store key prefix. */
  prefix: string;
}

/** Back-off between dial attempts: starts small (the peer is usually a moment late), capped. */
const FIRST_RETRY_MS = 10;
const MAX_RETRY_MS = 500;

/** How often a rank waiting for a higher rank to dial checks that the peer's port still takes connections. */
const GONE_PROBE_MS = 1000;

/** A fault that no retry can fix (a rank with other settings): it ends the phase at once. */
class Fatal extends Error {}

/**
 * Forms the full mesh.
 *
 * @param store Where addresses and the token are exchanged.
 * @param options The checked options.
 * @returns For each peer, its sockets in index order (empty for this rank).
 * @throws {TimeoutError} If some peer did not show up in time; the message names every missing rank.
 * @throws {TransportError} If a peer runs with other settings (world size, sockets per peer).
 */
export async function formMesh(store: Store, options: MeshOptions): Promise<Deno.TcpConn[][]> {
  const mesh = new Mesh(store, options);
  return await mesh.run();
}

/** The sockets of a lazily connected world: each pair's, made when the pair is first used. */
export interface LazyMesh {
  /**
   * The sockets to `peer`, in index order: dialled when `peer` is lower, else accepted from it (the higher
   * rank of a pair dials, as in the full mesh, so both ends agree without a race).
   *
   * @throws {TransportError} If the peer is gone (its port refuses connections) or runs other settings.
   * @throws {TimeoutError} If the peer does not connect or answer within the connect timeout.
   */
  link(peer: number): Promise<Deno.TcpConn[]>;
  /**
   * Called when a higher rank has connected all of a pair's sockets (it is about to talk): the transport
   * takes the pair up at once, so that it reads what comes and its failures reach that peer.
   */
  onAccepted: ((peer: number) => void) | undefined;
  /** Stops listening and every dial or wait under way. */
  close(): Promise<void>;
}

/**
 * The connect phase without the mesh: the token, this rank's address, and the table of every rank's
 * (so every rank is known to be up), with the listener kept open; pairs connect when first used.
 *
 * @param store Where addresses and the token are exchanged.
 * @param options The checked options.
 * @returns The lazy mesh.
 * @throws {TimeoutError} If some rank did not publish its address in time; the message names it.
 */
export async function formLazyMesh(store: Store, options: MeshOptions): Promise<LazyMesh> {
  const mesh = new Mesh(store, options);
  await mesh.runLazy();
  return mesh;
}

class Mesh implements LazyMesh {
  readonly #store: Store;
  readonly #o: MeshOptions;
  readonly #phase = new AbortController();
  /** Per peer, per socket index: the handshaken socket. */
  readonly #sockets: (Deno.TcpConn | undefined)[][];
  /** Addresses read from the store, for the timeout message. */
  readonly #addresses = new Map<number, string>();
  /** Sockets whose handshake is under way; closed when the phase ends. */
  readonly #handshaking = new Set<Deno.TcpConn>();
  readonly #tasks: Promise<unknown>[] = [];
  #token: Uint8Array | undefined;
  #tablePromise: Promise<readonly string[]> | undefined;
  /** Lazy mode: the listener kept for the transport's life, each pair's link, and the waits for dials. */
  #lazy = false;
  #listener: Deno.TcpListener | undefined;
  readonly #links = new Map<number, Promise<Deno.TcpConn[]>>();
  readonly #waiting = new Map<number, () => void>();
  /** See {@linkcode LazyMesh.onAccepted}. */
  onAccepted: ((peer: number) => void) | undefined;
  #tableArrived = false;
  /** At a timeout, the ranks whose address is in the store. */
  #published: Set<number> | undefined;
  #acceptedAll: () => void = () => {};

  constructor(store: Store, options: MeshOptions) {
    this.#store = store;
    this.#o = options;
    this.#sockets = Array.from(
      { length: options.size },
      () => new Array(options.socketsPerPeer).fill(undefined),
    );
  }

  async run(): Promise<Deno.TcpConn[][]> {
    const { rank, size, timeoutMs } = this.#o;
    if (size === 1) return [[]];
    const listener = this.#listen();
    // A peer that published its address and waits for the table of addresses is not the one missing.
    const timer = setTimeout(
      () => this.#lookPublished().then(() => this.#phase.abort(this.#timeoutError())),
      timeoutMs,
    );
    const failed = new Promise<never>((_, reject) => {
      this.#phase.signal.addEventListener("abort", () => reject(this.#phase.signal.reason), { once: true });
    });
    failed.catch(() => {});
    let formed = false;
    try {
      this.#token = await Promise.race([this.#worldToken(), failed]);
      const address = `${publishable(this.#o.hostname)}:${listener.addr.port}`;
      await Promise.race([this.#store.set(this.#key(`addr/${rank}`), address), failed]);
      if (rank === 0) this.#tasks.push(this.#publishTable().catch((error) => this.#phase.abort(error)));
      const accepted = new Promise<void>((resolve) => this.#acceptedAll = resolve);
      if (this.#acceptComplete()) this.#acceptedAll();
      const dials: Promise<void>[] = [];
      for (let peer = 0; peer < rank; peer++) dials.push(this.#dialPeer(peer));
      // `accepted` is not a task: it never settles when the phase fails, and nothing needs to wait for it.
      this.#tasks.push(this.#acceptLoop(listener), ...dials);
      for (const dial of dials) dial.catch((error) => this.#phase.abort(error));
      await Promise.race([Promise.all([accepted, ...dials]), failed]);
      formed = true;
      return this.#sockets.map((socks, peer) => peer === rank ? [] : socks.map((s) => s as Deno.TcpConn));
    } catch (error) {
      throw error instanceof Fatal ? new TransportError(error.message) : error;
    } finally {
      clearTimeout(timer);
      // Stops the accept loop, every dial still retrying and every handshake still waiting for bytes.
      if (!this.#phase.signal.aborted) this.#phase.abort(new Error("The connect phase is over"));
      closeQuietly(listener);
      for (const conn of this.#handshaking) closeQuietly(conn);
      await Promise.allSettled(this.#tasks);
      if (!formed) { for (const socks of this.#sockets) for (const s of socks) if (s) closeQuietly(s); }
    }
  }

  /** Lazy mode: the phase up to the table of addresses; the listener and its accept loop stay. */
  async runLazy(): Promise<void> {
    const { rank, size, timeoutMs } = this.#o;
    this.#lazy = true;
    if (size === 1) return;
    const listener = this.#listen();
    this.#listener = listener;
    const phase = new AbortController();
    const timer = setTimeout(
      () => this.#lookPublished().then(() => phase.abort(this.#lazyTimeout())),
      timeoutMs,
    );
    const failed = new Promise<never>((_, reject) => {
      const onAbort = (): void => reject(phase.signal.reason);
      phase.signal.addEventListener("abort", onAbort, { once: true });
      this.#phase.signal.addEventListener("abort", () => reject(this.#phase.signal.reason), { once: true });
    });
    failed.catch(() => {});
    try {
      this.#token = await Promise.race([this.#worldToken(), failed]);
      const address = `${publishable(this.#o.hostname)}:${listener.addr.port}`;
      await Promise.race([this.#store.set(this.#key(`addr/${rank}`), address), failed]);
      if (rank === 0) this.#tasks.push(this.#publishTable().catch((error) => phase.abort(error)));
      this.#tasks.push(this.#acceptLoop(listener));
      await Promise.race([this.#table(), failed]);
    } catch (error) {
      await this.close();
      throw error instanceof Fatal ? new TransportError(error.message) : error;
    } finally {
      clearTimeout(timer);
    }
  }

  /** The listener the peers dial. */
  #listen(): Deno.TcpListener {
    try {
      return Deno.listen({ hostname: unbracketed(this.#o.listenHostname), port: 0, transport: "tcp" });
    } catch (error) {
      throw new TransportError(
        `Cannot listen on ${this.#o.listenHostname} for rank ${this.#o.rank}'s peers: ${
          (error as Error).message
        }`,
        { cause: error },
      );
    }
  }

  /**
   * At a timeout: which ranks published their address (`#published`; a request per rank, on this path
   * only, for at most a second). Never rejects.
   */
  async #lookPublished(): Promise<void> {
    const keys = Array.from({ length: this.#o.size }, (_, r) => this.#key(`addr/${r}`));
    const looked = Promise.all(keys.map((k) => this.#store.check([k]))).then((seen) => {
      this.#published = new Set(seen.flatMap((s, r) => s ? [r] : []));
    });
    let bound: ReturnType<typeof setTimeout> | undefined;
    await Promise.race([looked, new Promise((r) => bound = setTimeout(r, 1000))]).catch(() => {});
    clearTimeout(bound);
  }

  /** Lazy mode's connect-phase timeout: the ranks whose address never came. */
  #lazyTimeout(): TimeoutError {
    const { rank, size, timeoutMs } = this.#o;
    const head = `Cannot connect rank ${rank} of ${size} within ${timeoutMs} ms: `;
    if (this.#token === undefined) {
      return new TimeoutError(
        `${head}rank 0 never published the world token (store key "${this.#key("token")}")`,
      );
    }
    const missing = Array.from({ length: size }, (_, r) => r).filter((r) =>
      this.#published?.has(r) === false
    );
    if (missing.length === 0) {
      return new TimeoutError(
        `${head}the table of addresses (store key "${this.#key("addrs")}") never came: rank 0 publishes it ` +
          `once every rank published its own ("${this.#key("addr/<rank>")}")`,
      );
    }
    return new TimeoutError(
      `${head}missing rank${missing.length > 1 ? "s" : ""} ${missing.join(", ")}: ` +
        missing.map((r) => `rank ${r} never published its address (store key "${this.#key(`addr/${r}`)}")`)
          .join("; "),
    );
  }

  link(peer: number): Promise<Deno.TcpConn[]> {
    const existing = this.#links.get(peer);
    if (existing) return existing;
    const made = this.#makeLink(peer);
    this.#links.set(peer, made);
    return made;
  }

  async #makeLink(peer: number): Promise<Deno.TcpConn[]> {
    const { rank, timeoutMs } = this.#o;
    const sockets = (): Deno.TcpConn[] => this.#sockets[peer].map((s) => s as Deno.TcpConn);
    let timer: ReturnType<typeof setTimeout> | undefined;
    try {
      if (peer < rank) {
        // A peer that takes connections but does not answer the handshake in time.
        const timedOut = new Promise<never>((_, reject) => {
          timer = setTimeout(() => {
            const at = this.#addresses.get(peer) ?? "its address";
            reject(
              new TimeoutError(
                `Cannot connect rank ${rank} to rank ${peer} within ${timeoutMs} ms: rank ${peer} did not answer at ${at}`,
              ),
            );
          }, Math.min(timeoutMs, 2 ** 31 - 1));
        });
        timedOut.catch(() => {});
        await Promise.race([this.#dialPeer(peer), timedOut]);
        return sockets();
      }
      // The higher rank dials, when it first uses the pair: however late that is (the calls' own deadlines
      // bound it), a bare connection to its port each second tells a rank that is gone (refused) from one
      // that has not needed this pair yet.
      const complete = new Promise<void>((resolve) => this.#waiting.set(peer, resolve));
      if (this.#pairComplete(peer)) return sockets();
      await Promise.race([complete, this.#watchGone(peer)]);
      return sockets();
    } catch (error) {
      throw error instanceof Fatal ? new TransportError(error.message) : error;
    } finally {
      clearTimeout(timer);
      this.#waiting.delete(peer);
    }
  }

  /** Rejects once `peer`'s port refuses a connection (its process is gone); never resolves. */
  async #watchGone(peer: number): Promise<never> {
    const signal = this.#phase.signal;
    const { hostname, port } = await this.#addressOf(peer, 0);
    while (true) {
      await sleep(GONE_PROBE_MS, signal);
      if (this.#pairComplete(peer)) return await new Promise<never>(() => {});
      try {
        // Connected and closed at once: the peer's accept loop reads no hello and drops it.
        const conn = await Deno.connect({ hostname, port, transport: "tcp", signal });
        closeQuietly(conn);
      } catch (error) {
        if (signal.aborted) throw signal.reason;
        throw new TransportError(
          `Rank ${peer} is gone: rank ${this.#o.rank} waited for it to connect, and its port ` +
            `${hostname}:${port} refuses connections (${(error as Error).message})`,
          { peer },
        );
      }
    }
  }

  #pairComplete(peer: number): boolean {
    return this.#sockets[peer].every((s) => s !== undefined);
  }

  async close(): Promise<void> {
    if (!this.#phase.signal.aborted) this.#phase.abort(new Error("The transport closed"));
    if (this.#listener) closeQuietly(this.#listener);
    for (const conn of this.#handshaking) closeQuietly(conn);
    await Promise.allSettled(this.#tasks);
  }

  #key(name: string): string {
    return `${this.#o.prefix}${name}`;
  }

  async #worldToken(): Promise<Uint8Array> {
    if (this.#o.rank === 0) {
      const token = crypto.getRandomValues(new Uint8Array(TOKEN_BYTES));
      await this.#store.set(this.#key("token"), token);
      return token;
    }
    const token = await this.#store.get(this.#key("token"), {
      timeoutMs: Infinity,
      signal: this.#phase.signal,
    });
    if (token.length !== TOKEN_BYTES) {
      throw new Fatal(
        `Cannot connect rank ${this.#o.rank}: store key "${
          this.#key("token")
        }" holds ${token.length} bytes, ` +
          `expected a ${TOKEN_BYTES}-byte world token: is another world using the same keys? Give each ` +
          "world on one store its own prefix (the transport's prefix; with init(), storePrefix or " +
          "DCOMM_STORE_PREFIX)",
      );
    }
    return token;
  }

  #hello(socketIndex: number): Uint8Array {
    const { rank, size, socketsPerPeer } = this.#o;
    return encodeHello({ rank, size, socketIndex, socketsPerPeer, token: this.#token as Uint8Array });
  }

  /** Checks that a peer that knows the token runs with our settings; a mismatch is fatal, not retried. */
  #checkSettings(hello: Hello): void {
    const { rank, size, socketsPerPeer } = this.#o;
    if (hello.size !== size) {
      throw new Fatal(`Rank ${hello.rank} runs with world size ${hello.size} but rank ${rank} with ${size}`);
    }
    if (hello.socketsPerPeer !== socketsPerPeer) {
      throw new Fatal(
        `Rank ${hello.rank} runs with socketsPerPeer ${hello.socketsPerPeer} but rank ${rank} with ${socketsPerPeer}`,
      );
    }
  }

  async #acceptLoop(listener: Deno.TcpListener): Promise<void> {
    // Handshakes under way (a lazy mesh accepts for the transport's whole life: done ones are dropped).
    const handshakes = new Set<Promise<void>>();
    try {
      while (!this.#phase.signal.aborted) {
        let conn: Deno.TcpConn;
        try {
          conn = await listener.accept();
        } catch {
          return; // The listener was closed: the phase is over.
        }
        const handshake = this.#acceptOne(conn).finally(() => handshakes.delete(handshake));
        handshakes.add(handshake);
      }
    } finally {
      await Promise.allSettled(handshakes);
    }
  }

  async #acceptOne(conn: Deno.TcpConn): Promise<void> {
    this.#handshaking.add(conn);
    let keep = false;
    try {
      tuneSocket(conn);
      const bytes = new Uint8Array(HELLO_BYTES);
      await readExact(conn, bytes);
      const hello = decodeHello(bytes);
      // A stray connection (a port scanner, another job, a stale rank of an earlier world) is refused by
      // closing it; it must not disturb the mesh.
      if (hello === undefined || !sameToken(hello.token, this.#token as Uint8Array)) return;
      if (hello.size !== this.#o.size || hello.socketsPerPeer !== this.#o.socketsPerPeer) {
        // Answer first, so that the dialler fails at once with the same finding instead of retrying.
        await writeAll(conn, this.#hello(hello.socketIndex)).catch(() => {});
        this.#checkSettings(hello);
      }
      const { rank, size, socketsPerPeer } = this.#o;
      if (hello.rank <= rank || hello.rank >= size || hello.socketIndex >= socketsPerPeer) {
        throw new Fatal(
          `Rank ${rank} was dialled by a peer claiming rank ${hello.rank}, socket ${hello.socketIndex}; ` +
            `only ranks ${rank + 1}..${size - 1} dial it, with socket indices 0..${socketsPerPeer - 1}`,
        );
      }
      await writeAll(conn, this.#hello(hello.socketIndex));
      if (this.#phase.signal.aborted) return;
      const slot = this.#sockets[hello.rank];
      // A retried dial replaces an earlier socket whose answer the dialler never saw.
      const old = slot[hello.socketIndex];
      if (old) closeQuietly(old);
      slot[hello.socketIndex] = conn;
      keep = true;
      if (this.#lazy) {
        if (this.#pairComplete(hello.rank)) {
          this.#waiting.get(hello.rank)?.();
          this.onAccepted?.(hello.rank);
        }
      } else if (this.#acceptComplete()) this.#acceptedAll();
    } catch (error) {
      if (error instanceof Fatal) this.#phase.abort(error);
    } finally {
      this.#handshaking.delete(conn);
      if (!keep) closeQuietly(conn);
    }
  }

  #acceptComplete(): boolean {
    for (let peer = this.#o.rank + 1; peer < this.#o.size; peer++) {
      if (this.#sockets[peer].some((s) => s === undefined)) return false;
    }
    return true;
  }

  async #dialPeer(peer: number): Promise<void> {
    await Promise.all(this.#sockets[peer].map((_, index) => this.#dialSocket(peer, index)));
  }

  /** Rank 0: reads every rank's address in one request and publishes them as one table. */
  async #publishTable(): Promise<void> {
    const keys = Array.from({ length: this.#o.size }, (_, r) => this.#key(`addr/${r}`));
    const values = await this.#store.multiGet(keys, { timeoutMs: Infinity, signal: this.#phase.signal });
    const table = values.map((v) => new TextDecoder().decode(v));
    await this.#store.set(this.#key("addrs"), JSON.stringify(table));
  }

  /** Every rank's address, from rank 0's table (read once). */
  #table(): Promise<readonly string[]> {
    return this.#tablePromise ??= (async () => {
      const key = this.#key("addrs");
      const bytes = await this.#store.get(key, { timeoutMs: Infinity, signal: this.#phase.signal });
      const table: unknown = JSON.parse(new TextDecoder().decode(bytes));
      if (
        !Array.isArray(table) || table.length !== this.#o.size || !table.every((a) => typeof a === "string")
      ) {
        throw new Fatal(
          `Store key "${key}" holds no table of ${this.#o.size} addresses: is another world using the same ` +
            "keys? Give each world on one store its own prefix",
        );
      }
      this.#tableArrived = true;
      return table as string[];
    })();
  }

  /**
   * The peer's address: from the table at the first attempt, then from the peer's own key, read again
   * before every retry (a rank that restarted publishes a new one).
   */
  async #addressOf(peer: number, attempt: number): Promise<{ hostname: string; port: number }> {
    const key = this.#key(`addr/${peer}`);
    const address = attempt === 0 ? (await this.#table())[peer] : new TextDecoder().decode(
      await this.#store.get(key, { timeoutMs: Infinity, signal: this.#phase.signal }),
    );
    this.#addresses.set(peer, address);
    const parsed = parseAddress(address);
    if (parsed === undefined) {
      throw new Fatal(
        `Store key "${key}" holds "${address}", expected host:port (an IPv6 host as [host]:port)`,
      );
    }
    return parsed;
  }

  async #dialSocket(peer: number, index: number): Promise<void> {
    const signal = this.#phase.signal;
    let wait = FIRST_RETRY_MS;
    for (let attempt = 0;; attempt++) {
      const { hostname, port } = await this.#addressOf(peer, attempt);
      signal.throwIfAborted();
      let conn: Deno.TcpConn | undefined;
      try {
        conn = await Deno.connect({ hostname, port, transport: "tcp", signal });
        this.#handshaking.add(conn);
        signal.throwIfAborted();
        tuneSocket(conn);
        await writeAll(conn, this.#hello(index));
        const bytes = new Uint8Array(HELLO_BYTES);
        await readExact(conn, bytes);
        signal.throwIfAborted();
        const answer = decodeHello(bytes);
        // Not our peer (a stale address, or a port reused by another process): try again until it is.
        if (answer !== undefined && sameToken(answer.token, this.#token as Uint8Array)) {
          this.#checkSettings(answer);
          if (answer.rank === peer && answer.socketIndex === index) {
            this.#handshaking.delete(conn);
            this.#sockets[peer][index] = conn;
            conn = undefined;
            return;
          }
        }
      } catch (error) {
        if (error instanceof Fatal) throw error;
        if (signal.aborted) throw signal.reason;
        // Lazily connected, every rank listened before the table of addresses existed, and listens until
        // it closes: a refusal means the peer is gone, not late.
        if (this.#lazy && error instanceof Deno.errors.ConnectionRefused) {
          throw new Fatal(
            `Cannot connect rank ${this.#o.rank} to rank ${peer}: it closed its transport or exited before ` +
              `rank ${this.#o.rank} connected to it (${hostname}:${port} refuses connections)`,
          );
        }
        // Refused, reset, or closed during the handshake: the peer is not listening yet.
      } finally {
        if (conn) {
          this.#handshaking.delete(conn);
          closeQuietly(conn);
        }
      }
      await sleep(wait, signal);
      wait = Math.min(wait * 2, MAX_RETRY_MS);
    }
  }

  #timeoutError(): TimeoutError {
    const { rank, size, timeoutMs } = this.#o;
    const missing: string[] = [];
    const ranks: number[] = [];
    const waiting: number[] = [];
    for (let peer = 0; peer < size; peer++) {
      if (peer === rank) continue;
      const socks = this.#sockets[peer];
      const have = socks.filter((s) => s !== undefined).length;
      if (have === socks.length) continue;
      if (!this.#tableArrived && this.#published?.has(peer) && have === 0) {
        // It is up and, like this rank, waits for the table, which waits for the ranks missing.
        waiting.push(peer);
        continue;
      }
      ranks.push(peer);
      const partly = have > 0 ? ` (${have} of ${socks.length} sockets)` : "";
      if (peer > rank) {
        missing.push(`rank ${peer} never connected${partly}`);
      } else if (this.#token === undefined && peer === 0) {
        missing.push(`rank 0 never published the world token (store key "${this.#key("token")}")`);
      } else if (!this.#addresses.has(peer) && !this.#tableArrived && this.#published === undefined) {
        missing.push(
          `rank ${peer}'s address never came: rank 0 publishes the table of addresses (store key ` +
            `"${this.#key("addrs")}") once every rank published its own ("${this.#key("addr/<rank>")}")`,
        );
      } else if (!this.#addresses.has(peer)) {
        missing.push(`rank ${peer} never published its address (store key "${this.#key(`addr/${peer}`)}")`);
      } else {
        missing.push(`rank ${peer} did not answer at ${this.#addresses.get(peer)}${partly}`);
      }
    }
    const also = waiting.length === 0
      ? ""
      : ` (${waiting.length === 1 ? "rank" : "ranks"} ${waiting.join(", ")} ` +
        `published ${
          waiting.length === 1 ? "its address and waits" : "their addresses and wait"
        } for the table ` +
        "of addresses, which needs every rank's)";
    if (ranks.length === 0) {
      return new TimeoutError(
        `Cannot connect rank ${rank} of ${size} within ${timeoutMs} ms: every rank published its address, but ` +
          `the table of them (store key "${this.#key("addrs")}") never came from rank 0${also}`,
      );
    }
    return new TimeoutError(
      `Cannot connect rank ${rank} of ${size} within ${timeoutMs} ms: missing rank${
        ranks.length > 1 ? "s" : ""
      } ` +
        `${ranks.join(", ")}: ${missing.join("; ")}${also}`,
    );
  }
}

/** `host` as it goes before `:port`: IPv6 literals in brackets. */
function publishable(hostname: string): string {
  return hostname.includes(":") && !hostname.startsWith("[") ? `[${hostname}]` : hostname;
}

/** `host` as a socket takes it: an IPv6 literal without its brackets. */
function unbracketed(hostname: string): string {
  return hostname.replace(/^\[(.*)\]$/, "$1");
}

/**
 * A published `host:port` (`[v6]:port` for IPv6) read back; `undefined` when malformed, as an IPv6 host
 * without brackets is (`::1:5` names no port for sure).
 */
function parseAddress(address: string): { hostname: string; port: number } | undefined {
  const m = /^\[([^\[\]]+)\]:(\d{1,5})$/.exec(address) ?? /^([^:\[\]]+):(\d{1,5})$/.exec(address);
  const port = Number(m?.[2]);
  if (!m || port <= 0 || port > 65535) return undefined;
  return { hostname: m[1], port };
}

/** Sleeps `ms`, or rejects with the signal's reason, leaving no timer behind either way. */
function sleep(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    const onAbort = (): void => {
      clearTimeout(timer);
      reject(signal.reason);
    };
    const timer = setTimeout(() => {
      signal.removeEventListener("abort", onAbort);
      resolve();
    }, ms);
    signal.addEventListener("abort", onAbort, { once: true });
  });
}
