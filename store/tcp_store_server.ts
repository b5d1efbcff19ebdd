/**
 * {@linkcode TcpStoreServer}: the server side of the TCP store, run by rank 0 or by the launcher. One
 * event loop serves every client: each request runs to completion before the next, which makes every
 * operation atomic. Blocking `get`/`wait` requests park a waiter on their keys and are answered by the
 * `set` that completes them; a client that disconnects or cancels has its waiters dropped.
 *
 * A peer that breaks the protocol (oversized or truncated frame, unknown opcode, garbage) has its
 * connection closed and costs one log line; nothing a peer sends can stop the server or the other clients.
 * The wire format is described at the top of `tcp_store.ts`, next to the client.
 *
 * @module
 */
import { checkAnswer, hmacKey } from "./_auth.ts";
import { checkTimeout } from "./_checks.ts";
import {
  Cursor,
  DEFAULT_MAX_FRAME_BYTES,
  encodeFrame,
  type Field,
  type Frame,
  FrameReader,
  HANDSHAKE_MAX_FRAME_BYTES,
  hex,
  NONCE_BYTES,
  Op,
  PROTOCOL_VERSION,
  ProtocolError,
  Refused,
  Reply,
  str,
  writeAll,
} from "./_protocol.ts";
import { Acceptor, formatAddr } from "./_acceptor.ts";
import { KeyTable } from "./_table.ts";
import { looksLikeTorchValidate } from "./_torch_protocol.ts";
import { secretFromEnv } from "./secret.ts";

/**
 * Options of {@linkcode TcpStoreServer.listen}.
 *
 * @example A server for ranks on other hosts, with a secret and its own log
 * ```ts
 * import { generateSecret, TcpStore, TcpStoreServer, type TcpStoreServerOptions } from "@dcomm/dcomm/store";
 * import assert from "node:assert/strict";
 * const secret = generateSecret();
 * const options: TcpStoreServerOptions = {
 *   hostname: "0.0.0.0",
 *   port: 0, // a free port
 *   secret,
 *   handshakeTimeoutMs: 5_000,
 *   log: (line) => console.error(line), // refused clients and broken connections
 * };
 * await using server = await TcpStoreServer.listen(options);
 * await using store = await TcpStore.connect({ port: server.port, secret });
 * assert.equal(await store.add("joined", 1), 1);
 * ```
 */
export interface TcpStoreServerOptions {
  /**
   * The address to bind. The loopback default keeps the store private to this machine; use `"0.0.0.0"`
   * (with a secret) for runs across hosts.
   *
   * @default {"127.0.0.1"}
   */
  hostname?: string;
  /** The port to bind; 0 picks a free one (read it back from {@linkcode TcpStoreServer.port}). @default {0} */
  port?: number;
  /**
   * The shared secret clients must prove they know. An empty string means no authentication.
   *
   * @default {the `DCOMM_STORE_SECRET` environment variable when it is set and readable, otherwise none}
   */
  secret?: string;
  /** The largest frame a client may send, its 4-byte length prefix included. @default {67108864} */
  maxFrameBytes?: number;
  /** How long a new connection has to authenticate before it is closed. @default {10000} */
  handshakeTimeoutMs?: number;
  /** Receives one line per refused client and per connection closed for a protocol error. @default {console.warn} */
  log?: (message: string) => void;
}

/** The largest frame the u32 length prefix can describe, prefix included. */
const MAX_ENCODABLE_FRAME = 2 ** 32 - 1 + 4;

interface Session {
  readonly conn: Deno.TcpConn;
  readonly peer: string;
  readonly reader: FrameReader;
  readonly nonce: Uint8Array;
  /** Parked get/wait requests of this connection, by request id, with the function that drops them. */
  readonly waiters: Map<number, () => void>;
  authed: boolean;
  /** No more frames are processed: the connection is being closed. */
  closing: boolean;
  /** The connection is closed. */
  closed: boolean;
  writes: Promise<void>;
  timer?: ReturnType<typeof setTimeout>;
  done?: Promise<void>;
}

/**
 * The TCP store server. Clients connect with {@linkcode TcpStore.connect}, from this process or others.
 *
 * @example A server and a client in one process
 * ```ts
 * import { TcpStore, TcpStoreServer, type TcpStoreServerOptions } from "@dcomm/dcomm/store";
 * import assert from "node:assert/strict";
 *
 * const options: TcpStoreServerOptions = { secret: "s3cret", log: (line) => console.error(line) };
 * await using server = await TcpStoreServer.listen(options);
 * await using store = await TcpStore.connect({ port: server.port, secret: "s3cret" });
 * await store.set("world_size", "4");
 * assert.equal(await store.numKeys(), 1);
 * ```
 */
export class TcpStoreServer implements AsyncDisposable {
  #acceptor: Acceptor<Session>;
  #address: string;
  #key: CryptoKey | undefined;
  #maxFrameBytes: number;
  #handshakeTimeoutMs: number;
  #log: (message: string) => void;
  #table = new KeyTable();

  private constructor(
    bind: { hostname: string; port: number },
    key: CryptoKey | undefined,
    options: TcpStoreServerOptions,
  ) {
    this.#key = key;
    this.#maxFrameBytes = options.maxFrameBytes ?? DEFAULT_MAX_FRAME_BYTES;
    this.#handshakeTimeoutMs = options.handshakeTimeoutMs ?? 10_000;
    this.#log = options.log ?? console.warn;
    this.#acceptor = new Acceptor(bind, "store server", (conn) => this.#open(conn), (l) => this.#report(l));
    this.#address = formatAddr(this.#acceptor.addr);
  }

  /**
   * Binds the address and starts serving.
   *
   * @param options The address, the secret, the limits and the log.
   * @returns The running server.
   * @throws {TypeError | RangeError} If an option is invalid.
   * @throws {StoreError} If the address cannot be bound (in use, not permitted); the cause says why.
   */
  static async listen(options: TcpStoreServerOptions = {}): Promise<TcpStoreServer> {
    const hostname = options.hostname ?? "127.0.0.1";
    const port = options.port ?? 0;
    if (typeof hostname !== "string" || hostname.length === 0) {
      throw new TypeError(`Invalid hostname: expected a non-empty string, found ${String(hostname)}`);
    }
    if (!Number.isInteger(port) || port < 0 || port > 65535) {
      throw new RangeError(`Invalid port: expected an integer from 0 to 65535, found ${String(port)}`);
    }
    const max = options.maxFrameBytes ?? DEFAULT_MAX_FRAME_BYTES;
    if (!Number.isInteger(max) || max < HANDSHAKE_MAX_FRAME_BYTES || max > MAX_ENCODABLE_FRAME) {
      throw new RangeError(
        `Invalid maxFrameBytes: expected an integer from ${HANDSHAKE_MAX_FRAME_BYTES} to ${MAX_ENCODABLE_FRAME}, found ${
          String(max)
        }`,
      );
    }
    checkTimeout(options.handshakeTimeoutMs ?? 0, "handshakeTimeoutMs");
    if (options.log !== undefined && typeof options.log !== "function") {
      throw new TypeError(`Invalid log: expected a function, found ${typeof options.log}`);
    }
    const key = await hmacKey(options.secret ?? secretFromEnv());
    return new TcpStoreServer({ hostname, port }, key, options);
  }

  /** The address the server is bound to. */
  get hostname(): string {
    return this.#acceptor.addr.hostname;
  }

  /** The port the server is bound to (the one the system picked, for port 0). */
  get port(): number {
    return this.#acceptor.addr.port;
  }

  /** `hostname:port`, as clients and log lines name the server. */
  get address(): string {
    return this.#address;
  }

  /** Whether clients must prove they know a secret. */
  get authenticates(): boolean {
    return this.#key !== undefined;
  }

  /** The number of connections open now, authenticated or not. */
  get connections(): number {
    return this.#acceptor.sessions.size;
  }

  /** The number of keys with at least one parked request (for tests of cleanup). */
  get waitedKeys(): number {
    return this.#table.waitedKeys;
  }

  /**
   * Stops listening and closes every connection: the clients' pending calls fail with a StoreError. The
   * keys are dropped. Closing twice is a no-op.
   */
  async close(): Promise<void> {
    if (await this.#acceptor.close((session) => this.#closeConn(session))) this.#table.clear();
  }

  /**
   * Lets the process exit while the server idles: the listener and every connection (present and future)
   * stop keeping the event loop alive. A rank that serves the store calls it once the world has formed,
   * so a script that ends without closing its process group still ends.
   */
  unref(): void {
    this.#acceptor.unref();
  }

  /**
   * Undoes {@linkcode TcpStoreServer.unref}: the server keeps the event loop alive again (while the world
   * closes, so that waiting for the other ranks to check out is not the last thing pending when the loop
   * decides it has nothing left to do).
   */
  ref(): void {
    this.#acceptor.ref();
  }

  /** Same as {@linkcode TcpStoreServer.close}, for `await using`. */
  [Symbol.asyncDispose](): Promise<void> {
    return this.close();
  }

  #open(conn: Deno.TcpConn): Session {
    const session: Session = {
      conn,
      peer: formatAddr(conn.remoteAddr),
      reader: new FrameReader(HANDSHAKE_MAX_FRAME_BYTES),
      nonce: crypto.getRandomValues(new Uint8Array(NONCE_BYTES)),
      waiters: new Map(),
      authed: false,
      closing: false,
      closed: false,
      writes: Promise.resolve(),
    };
    if (this.#handshakeTimeoutMs <= 2 ** 31 - 1) {
      session.timer = setTimeout(() => {
        this.#refuse(session, `no authentication within ${this.#handshakeTimeoutMs} ms`);
      }, this.#handshakeTimeoutMs);
    }
    const flags = this.#key === undefined ? 0 : 1;
    this.#send(session, 0, Reply.HELLO, [{ u8: PROTOCOL_VERSION }, { u8: flags }, { raw: session.nonce }]);
    session.done = this.#serve(session);
    return session;
  }

  async #serve(session: Session): Promise<void> {
    const { conn, reader } = session;
    try {
      while (!session.closing) {
        let n: number | null;
        try {
          n = await conn.read(reader.space());
        } catch {
          break; // reset by the peer, or closed by us: nothing to report
        }
        if (n === null) {
          if (reader.buffered > 0) {
            throw new ProtocolError(
              `the peer closed the connection in the middle of a frame (${reader.buffered} of ${
                reader.expected ?? "at least 4"
              } bytes received)`,
            );
          }
          break;
        }
        reader.commit(n);
        for (let frame = reader.next(); frame !== null && !session.closing; frame = reader.next()) {
          if (session.authed) this.#handle(session, frame);
          else await this.#authenticate(session, frame);
        }
      }
    } catch (error) {
      if (!session.closed) {
        const why = !session.authed && looksLikeTorchValidate(session.reader.peek(5))
          ? "it opened with torch's TCPStore validation query: a client of torch's protocol (torch.distributed, " +
            "or dcomm's TorchStore); this server speaks dcomm's own protocol (serve torch's with TorchStoreServer, " +
            "or the launcher's --store-protocol torch)"
          : error instanceof ProtocolError
          ? error.message
          : `internal error: ${messageOf(error)}`;
        this.#report(`closed the connection from ${session.peer}: ${why}`);
      }
    } finally {
      session.closing = true;
      await session.writes; // a refusal's reply goes out before the connection closes
      this.#closeConn(session);
      this.#acceptor.sessions.delete(session);
    }
  }

  async #authenticate(session: Session, frame: Frame): Promise<void> {
    if (frame.op !== Op.AUTH) {
      throw new ProtocolError(
        `expected AUTH (${hex(Op.AUTH)}) as the first frame, found opcode ${hex(frame.op)}`,
      );
    }
    const body = new Cursor(frame.body);
    const version = body.u8();
    const answer = body.rest();
    if (version !== PROTOCOL_VERSION) {
      const why = `protocol version ${version}, but this server speaks version ${PROTOCOL_VERSION}`;
      return this.#refuse(session, why, frame.id, Refused.VERSION);
    }
    if (this.#key !== undefined) {
      if (answer.length === 0) return this.#refuse(session, "no secret given", frame.id, Refused.SECRET);
      if (!await checkAnswer(this.#key, session.nonce, answer)) {
        return this.#refuse(session, "wrong secret", frame.id, Refused.SECRET);
      }
    }
    session.authed = true;
    clearTimeout(session.timer);
    session.reader.maxFrameBytes = this.#maxFrameBytes;
    this.#send(session, frame.id, Reply.AUTH_OK);
  }

  /** Logs one line, tells the client why (when it asked), and closes once that reply is written. */
  #refuse(session: Session, why: string, id?: number, code?: number): void {
    if (session.closing) return; // already on its way out: one line per peer
    session.closing = true;
    this.#report(`refused ${session.peer}: ${why}`);
    if (id !== undefined && code !== undefined) {
      this.#send(session, id, Reply.AUTH_REFUSED, [{ u8: code }, str(why)]);
    }
    session.writes = session.writes.then(() => this.#closeConn(session));
  }

  #handle(session: Session, frame: Frame): void {
    const { id } = frame;
    const body = new Cursor(frame.body);
    const table = this.#table;
    switch (frame.op) {
      case Op.SET: {
        const key = body.key();
        const value = body.bytes();
        body.end();
        table.set(key, value);
        return this.#send(session, id, Reply.OK);
      }
      case Op.GET: {
        const key = body.key();
        body.end();
        return this.#park(
          session,
          id,
          [key],
          () => [{ bytes: table.get(key) ?? new Uint8Array() }],
          Reply.VALUE,
        );
      }
      case Op.WAIT: {
        const keys = body.keys();
        body.end();
        return this.#park(session, id, keys, () => [], Reply.OK);
      }
      case Op.ADD: {
        const key = body.key();
        const delta = body.i64();
        body.end();
        let sum: number;
        try {
          sum = table.add(key, delta);
        } catch (error) {
          return this.#send(session, id, Reply.ERROR, [str(messageOf(error))]);
        }
        return this.#send(session, id, Reply.INT, [{ i64: sum }]);
      }
      case Op.COMPARE_SET: {
        const key = body.key();
        const expected = body.bytes();
        const desired = body.bytes();
        body.end();
        return this.#send(session, id, Reply.VALUE, [{ bytes: table.compareSet(key, expected, desired) }]);
      }
      case Op.DELETE: {
        const key = body.key();
        body.end();
        return this.#send(session, id, Reply.BOOL, [{ u8: table.delete(key) ? 1 : 0 }]);
      }
      case Op.NUM_KEYS:
        body.end();
        return this.#send(session, id, Reply.INT, [{ i64: table.size }]);
      case Op.CHECK: {
        const keys = body.keys();
        body.end();
        return this.#send(session, id, Reply.BOOL, [{ u8: table.hasAll(keys) ? 1 : 0 }]);
      }
      case Op.CANCEL:
        body.end();
        session.waiters.get(id)?.();
        session.waiters.delete(id);
        return;
      case Op.AUTH:
        throw new ProtocolError("AUTH sent again after authentication");
      default:
        throw new ProtocolError(`unknown opcode ${hex(frame.op)}`);
    }
  }

  /** Answers `id` once every key exists: now, or from the set that completes them. */
  #park(session: Session, id: number, keys: string[], reply: () => Field[], op: number): void {
    if (session.waiters.has(id)) throw new ProtocolError(`request id ${id} is already waiting`);
    let fired = false;
    const drop = this.#table.whenAll(keys, () => {
      fired = true;
      session.waiters.delete(id);
      this.#send(session, id, op, reply());
    });
    if (!fired) session.waiters.set(id, drop);
  }

  #send(session: Session, id: number, op: number, fields: Field[] = []): void {
    if (session.closed) return;
    const frame = encodeFrame(id, op, fields);
    session.writes = session.writes
      .then(() => session.closed ? undefined : writeAll(session.conn, frame))
      .catch(() => this.#closeConn(session)); // the peer left; its read loop ends quietly
  }

  /** One log line, prefixed with this server's address; a throwing log callback cannot hurt the server. */
  #report(line: string): void {
    try {
      this.#log(`dcomm store server ${this.address}: ${line}`);
    } catch { /* the caller's logger failed; serving matters more */ }
  }

  #closeConn(session: Session): void {
    if (session.closed) return;
    session.closing = session.closed = true;
    clearTimeout(session.timer);
    for (const drop of session.waiters.values()) drop();
    session.waiters.clear();
    try {
      session.conn.close();
    } catch { /* already closed */ }
  }
}

function messageOf(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}
