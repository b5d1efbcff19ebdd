/**
 * {@linkcode TcpStoreServer}: the server side of the TCP store, run by rank 0 or by the launcher. One
 * event loop serves every client: each request runs to completion before the next, which makes every
 * operation atomic. Blocking `get`/`wait` requests park a waiter on their keys and are answered by the
 * `set` that completes them; a client that disconnects or cancels has its waiters dropped.
 *
 * A peer that breaks the protocol (oversized or truncated frame, unknown opcode, garbage) has its
 * connection closed (an authenticated one is told why first, in a GOODBYE frame) and costs one log line;
 * nothing a peer sends can stop the server or the other clients. Every resource a client can make the
 * server hold is bounded, and a client that hits a bound is told which: connections (`maxConnections`),
 * parked requests (`maxWaitersPerConnection`, `maxWaiters`), the frame buffer (`maxFrameBytes`; it grows
 * with the bytes that arrive), connections idle after AUTH (`idleTimeoutMs`), wrong secrets per address
 * (`maxAuthFailures`); the log lines about clients are rate-limited. Without a secret the server warns, and
 * refuses to bind beyond loopback unless told it may (`insecure`). The security model: `docs/store.md`. The
 * wire format is described at the top of `tcp_store.ts`, next to the client.
 *
 * @module
 */
import { StoreError } from "../core/errors.ts";
import { AuthLimiter, checkProof, hmacKey, prove } from "./_auth.ts";
import { checkTimeout, nameKeys } from "./_checks.ts";
import {
  Cursor,
  DEFAULT_MAX_FRAME_BYTES,
  encodeFrame,
  type Field,
  type Frame,
  FrameReader,
  FrameTooLarge,
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
import { Acceptor, defaultMaxConnections, formatAddr, isLoopbackHost } from "./_acceptor.ts";
import { LogLimiter } from "./_log.ts";
import { KeyTable } from "./_table.ts";
import { looksLikeTorchValidate } from "./_torch_protocol.ts";
import { insecureFromEnv, secretFromEnv } from "./secret.ts";

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
   * (with a secret) for runs across hosts. Without a secret, only a loopback address may be bound, unless
   * `insecure` is set.
   *
   * @default {"127.0.0.1"}
   */
  hostname?: string;
  /** The port to bind; 0 picks a free one (read it back from {@linkcode TcpStoreServer.port}). @default {0} */
  port?: number;
  /**
   * The shared secret clients must prove they know (and this server proves to them). An empty string means
   * no authentication: the server then warns, once, when it starts.
   *
   * @default {the `DCOMM_STORE_SECRET` environment variable when it is set and readable, otherwise none}
   */
  secret?: string;
  /**
   * Serve without a secret on an address beyond loopback (a network only the job's hosts reach). Without
   * it, such a server refuses to start: anyone who reaches the port could read, change and delete every key.
   *
   * @default {whether the `DCOMM_STORE_INSECURE` environment variable is `1`}
   */
  insecure?: boolean;
  /** The largest frame a client may send, its 4-byte length prefix included. @default {67108864} */
  maxFrameBytes?: number;
  /** How long a new connection has to authenticate before it is closed. @default {10000} */
  handshakeTimeoutMs?: number;
  /**
   * How long an authenticated connection may send nothing before it is closed (one with a parked `get` or
   * `wait` is never idle). {@linkcode TcpStore} keeps its connection alive below it by itself. `Infinity`
   * never closes one.
   *
   * @default {600000}
   */
  idleTimeoutMs?: number;
  /**
   * The most connections served at once, authenticated or not; one more is told so and closed.
   *
   * @default {half this process's limit on open files, between 16 and 4096 (512 where it cannot be read)}
   */
  maxConnections?: number;
  /** The most `get`/`wait` requests one connection may have parked; one more fails. @default {4096} */
  maxWaitersPerConnection?: number;
  /** The most `get`/`wait` requests parked on the server in all; one more fails. @default {65536} */
  maxWaiters?: number;
  /**
   * Wrong (or missing) secrets from one client address, within `authFailureWindowMs`, after which the
   * address's connections are refused at once for `authBlockMs`. `Infinity` never blocks.
   *
   * @default {5}
   */
  maxAuthFailures?: number;
  /** The window wrong secrets are counted in. @default {10000} */
  authFailureWindowMs?: number;
  /** How long an address that sent too many wrong secrets stays refused. @default {30000} */
  authBlockMs?: number;
  /**
   * Receives the warning of a server without a secret, and one line per refused client and per connection
   * closed for a protocol error or a limit (at most 5 such lines a second, then one line counting the ones
   * left out).
   *
   * @default {console.warn}
   */
  log?: (message: string) => void;
}

/** The largest frame the u32 length prefix can describe, prefix included. */
const MAX_ENCODABLE_FRAME = 2 ** 32 - 1 + 4;
/** The largest idle timeout AUTH_OK can announce (a u32 of milliseconds); longer ones announce 0, "none". */
const MAX_ANNOUNCED_IDLE_MS = 2 ** 32 - 1;

interface Session {
  readonly conn: Deno.TcpConn;
  readonly peer: string;
  /** The peer's address without its port: what wrong secrets are counted by. */
  readonly host: string;
  readonly reader: FrameReader;
  readonly nonce: Uint8Array;
  /** Parked get/wait requests of this connection, by request id, with the function that drops them. */
  readonly waiters: Map<number, () => void>;
  authed: boolean;
  /** No more frames are processed: the connection is being closed. */
  closing: boolean;
  /** The connection is closed. */
  closed: boolean;
  /** When the peer last sent anything (`performance.now()`). */
  lastActive: number;
  writes: Promise<void>;
  timer?: ReturnType<typeof setTimeout>;
  done?: Promise<void>;
}

/** The limits of a server, validated. */
interface Limits {
  maxFrameBytes: number;
  handshakeTimeoutMs: number;
  idleTimeoutMs: number;
  maxConnections: number;
  maxWaitersPerConnection: number;
  maxWaiters: number;
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
  #limits: Limits;
  #auth: AuthLimiter;
  #log: LogLimiter;
  #table = new KeyTable();
  /** Requests parked on every connection together. */
  #parked = 0;
  #sweep: ReturnType<typeof setInterval> | undefined;

  private constructor(
    bind: { hostname: string; port: number },
    key: CryptoKey | undefined,
    limits: Limits,
    auth: AuthLimiter,
    log: (message: string) => void,
  ) {
    this.#key = key;
    this.#limits = limits;
    this.#auth = auth;
    this.#address = `${bind.hostname}:${bind.port}`;
    this.#log = new LogLimiter((line) => log(`dcomm store server ${this.#address}: ${line}`));
    this.#acceptor = new Acceptor(bind, "store server", (conn) => this.#open(conn), (l) => this.#report(l), {
      maxSessions: limits.maxConnections,
      refuse: (conn, open) => this.#refuseBusy(conn, open),
    });
    this.#address = formatAddr(this.#acceptor.addr);
    if (limits.idleTimeoutMs <= MAX_ANNOUNCED_IDLE_MS) {
      const every = Math.max(10, Math.min(limits.idleTimeoutMs / 4, 5_000));
      this.#sweep = setInterval(() => this.#closeIdle(), every);
      Deno.unrefTimer(this.#sweep);
    }
  }

  /**
   * Binds the address and starts serving.
   *
   * @param options The address, the secret, the limits and the log.
   * @returns The running server.
   * @throws {TypeError | RangeError} If an option is invalid.
   * @throws {StoreError} If the address cannot be bound (in use, not permitted; the cause says why), or it is
   *   beyond loopback and the server has no secret and no `insecure` opt-in.
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
    if (options.log !== undefined && typeof options.log !== "function") {
      throw new TypeError(`Invalid log: expected a function, found ${typeof options.log}`);
    }
    const limits: Limits = {
      maxFrameBytes: max,
      handshakeTimeoutMs: checkTimeout(options.handshakeTimeoutMs ?? 10_000, "handshakeTimeoutMs"),
      idleTimeoutMs: checkTimeout(options.idleTimeoutMs ?? 600_000, "idleTimeoutMs"),
      maxConnections: checkCount(options.maxConnections ?? defaultMaxConnections(), "maxConnections"),
      maxWaitersPerConnection: checkCount(options.maxWaitersPerConnection ?? 4096, "maxWaitersPerConnection"),
      maxWaiters: checkCount(options.maxWaiters ?? 65_536, "maxWaiters"),
    };
    const failures = options.maxAuthFailures ?? 5;
    if (failures !== Infinity) checkCount(failures, "maxAuthFailures");
    const auth = new AuthLimiter({
      failures,
      windowMs: checkTimeout(options.authFailureWindowMs ?? 10_000, "authFailureWindowMs"),
      blockMs: checkTimeout(options.authBlockMs ?? 30_000, "authBlockMs"),
    });
    const key = await hmacKey(options.secret ?? secretFromEnv());
    const insecure = options.insecure ?? insecureFromEnv();
    const loopback = isLoopbackHost(hostname);
    if (key === undefined && !loopback && !insecure) {
      throw new StoreError(
        `Refusing to serve the store on ${hostname}:${port} without a secret: anyone who can reach that address ` +
          "could read, change and delete every key (the world's addresses and tokens) and pose as any rank. " +
          "Either set DCOMM_STORE_SECRET to the same value on every rank (dcomm's launcher generates one), or " +
          "bind a loopback address, or, on a network only the job's hosts reach, opt in with `insecure: true` " +
          "or DCOMM_STORE_INSECURE=1",
      );
    }
    const server = new TcpStoreServer({ hostname, port }, key, limits, auth, options.log ?? console.warn);
    if (key === undefined) server.#warnNoSecret(loopback);
    return server;
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

  /** The most connections served at once (the `maxConnections` option, or its default). */
  get maxConnections(): number {
    return this.#limits.maxConnections;
  }

  /** The number of `get`/`wait` requests parked now, on every connection together. */
  get parked(): number {
    return this.#parked;
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
    clearInterval(this.#sweep);
    if (await this.#acceptor.close((session) => this.#closeConn(session))) this.#table.clear();
    this.#log.close();
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

  #warnNoSecret(loopback: boolean): void {
    const fix = "set DCOMM_STORE_SECRET to the same value on every rank, or launch with dcomm's launcher " +
      "(it generates one); see docs/store.md";
    this.#log.always(
      loopback
        ? "WARNING: serving without a secret: any process on this machine can read, change and delete every key " +
          `(the world's addresses and tokens) and clients cannot tell this server from an impostor; ${fix}`
        : `WARNING: serving without a secret on ${this.#address}, beyond loopback (insecure opt-in): anyone ` +
          "who can reach this port can read, change and delete every key (the world's addresses and tokens) " +
          `and clients cannot tell this server from an impostor; ${fix}`,
    );
  }

  #open(conn: Deno.TcpConn): Session {
    const remote = conn.remoteAddr as Deno.NetAddr;
    const session: Session = {
      conn,
      peer: formatAddr(remote),
      host: remote.hostname,
      reader: new FrameReader(HANDSHAKE_MAX_FRAME_BYTES),
      nonce: crypto.getRandomValues(new Uint8Array(NONCE_BYTES)),
      waiters: new Map(),
      authed: false,
      closing: false,
      closed: false,
      lastActive: performance.now(),
      writes: Promise.resolve(),
    };
    const blocked = this.#key === undefined ? undefined : this.#auth.blocked(session.host);
    if (blocked !== undefined) {
      // Refused before any challenge: no HMAC, no timer, one small write.
      const { failures, windowMs } = this.#auth;
      this.#refuse(
        session,
        `too many failed attempts from ${session.host} (${failures} wrong secrets within ${
          windowMs / 1000
        } s); ` +
          `try again in ${(blocked.remainingMs / 1000).toFixed(1)} s`,
        0,
        Refused.RATE_LIMITED,
      );
      session.done = session.writes.then(() => void this.#acceptor.sessions.delete(session));
      return session;
    }
    const { handshakeTimeoutMs } = this.#limits;
    if (handshakeTimeoutMs <= 2 ** 31 - 1) {
      session.timer = setTimeout(() => {
        this.#refuse(session, `no authentication within ${handshakeTimeoutMs} ms`);
      }, handshakeTimeoutMs);
    }
    const flags = this.#key === undefined ? 0 : 1;
    this.#send(session, 0, Reply.HELLO, [{ u8: PROTOCOL_VERSION }, { u8: flags }, { raw: session.nonce }]);
    session.done = this.#serve(session);
    return session;
  }

  /** Tells a connection over the cap why it is refused; the acceptor closes it. */
  async #refuseBusy(conn: Deno.TcpConn, open: number): Promise<void> {
    const peer = formatAddr(conn.remoteAddr);
    this.#report(`refused ${peer}: ${open} connections open, the limit (maxConnections)`);
    const why = `the server has ${open} connections open, its limit (maxConnections); try again later`;
    await writeAll(conn, encodeFrame(0, Reply.AUTH_REFUSED, [{ u8: Refused.BUSY }, str(why)]));
  }

  async #serve(session: Session): Promise<void> {
    const { conn, reader } = session;
    try {
      while (!session.closing) {
        const space = reader.space();
        let n: number | null;
        try {
          n = await conn.read(space);
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
        session.lastActive = performance.now();
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
          : error instanceof FrameTooLarge && session.authed
          ? `${error.message} (maxFrameBytes)`
          : error instanceof ProtocolError
          ? error.message
          : `internal error: ${messageOf(error)}`;
        this.#report(`closed the connection from ${session.peer}: ${why}`);
        // An authenticated client is told why; a peer that never authenticated is not worth the words.
        if (session.authed) this.#send(session, 0, Reply.GOODBYE, [str(why)]);
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
    if (version !== PROTOCOL_VERSION) {
      const why = `protocol version ${version}, but this server speaks version ${PROTOCOL_VERSION}`;
      return this.#refuse(session, why, frame.id, Refused.VERSION);
    }
    const clientNonce = body.fixed(NONCE_BYTES);
    const proof = body.rest();
    if (this.#key !== undefined) {
      const why = proof.length === 0
        ? "no secret given"
        : await checkProof(this.#key, "client", session.nonce, clientNonce, proof)
        ? undefined
        : "wrong secret";
      if (session.closing) return; // the handshake timed out meanwhile
      if (why !== undefined) {
        this.#auth.fail(session.host);
        return this.#refuse(session, why, frame.id, Refused.SECRET);
      }
    }
    session.authed = true;
    session.lastActive = performance.now();
    clearTimeout(session.timer);
    session.reader.maxFrameBytes = this.#limits.maxFrameBytes;
    const idle = this.#limits.idleTimeoutMs <= MAX_ANNOUNCED_IDLE_MS ? this.#limits.idleTimeoutMs : 0;
    const fields: Field[] = [{ u32: idle }];
    if (this.#key !== undefined) {
      fields.push({ raw: await prove(this.#key, "server", session.nonce, clientNonce) });
    }
    this.#send(session, frame.id, Reply.AUTH_OK, fields);
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

  /** Closes an authenticated connection for a limit: logs one line, tells the client why, closes. */
  #goodbye(session: Session, why: string): void {
    if (session.closing) return;
    session.closing = true;
    this.#report(`closed the connection from ${session.peer}: ${why}`);
    this.#send(session, 0, Reply.GOODBYE, [str(why)]);
    session.writes = session.writes.then(() => this.#closeConn(session));
  }

  /** Closes the authenticated connections that sent nothing for the idle timeout and have nothing parked. */
  #closeIdle(): void {
    const now = performance.now();
    const { idleTimeoutMs } = this.#limits;
    for (const session of this.#acceptor.sessions) {
      if (!session.authed || session.closing) continue;
      if (session.waiters.size > 0) {
        session.lastActive = now; // waiting is not idling: the clock starts once nothing is parked
      } else if (now - session.lastActive >= idleTimeoutMs) {
        this.#goodbye(session, `idle for ${idleTimeoutMs} ms after authentication (idleTimeoutMs)`);
      }
    }
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
      case Op.MULTI_GET: {
        const keys = body.keys();
        body.end();
        return this.#park(
          session,
          id,
          keys,
          () => [{ list: keys.map((k) => table.get(k) ?? new Uint8Array()) }],
          Reply.VALUES,
        );
      }
      case Op.MULTI_SET: {
        const keys = body.keys();
        const values = body.list();
        body.end();
        if (values.length !== keys.length) {
          throw new ProtocolError(`a multi-set of ${keys.length} keys carries ${values.length} values`);
        }
        for (let i = 0; i < keys.length; i++) table.set(keys[i], values[i]);
        return this.#send(session, id, Reply.OK);
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
      case Op.CANCEL: {
        body.end();
        const drop = session.waiters.get(id);
        if (drop !== undefined) {
          drop();
          session.waiters.delete(id);
          this.#parked--;
        }
        return;
      }
      case Op.PING:
        body.end();
        return this.#send(session, id, Reply.OK);
      case Op.AUTH:
        throw new ProtocolError("AUTH sent again after authentication");
      default:
        throw new ProtocolError(`unknown opcode ${hex(frame.op)}`);
    }
  }

  /** Answers `id` once every key exists: now, or from the set that completes them. */
  #park(session: Session, id: number, keys: string[], reply: () => Field[], op: number): void {
    if (session.waiters.has(id)) throw new ProtocolError(`request id ${id} is already waiting`);
    if (!this.#table.hasAll(keys)) {
      const { maxWaitersPerConnection, maxWaiters } = this.#limits;
      const full = session.waiters.size >= maxWaitersPerConnection
        ? `this connection has ${session.waiters.size} requests parked, the limit (maxWaitersPerConnection)`
        : this.#parked >= maxWaiters
        ? `the server has ${this.#parked} requests parked, its limit (maxWaiters)`
        : undefined;
      if (full !== undefined) {
        this.#report(`refused a parked request from ${session.peer}: ${full}`);
        const why = `Cannot wait for ${nameKeys(keys)} in the store at ${this.#address}: ${full}`;
        return this.#send(session, id, Reply.ERROR, [str(why)]);
      }
    }
    let fired = false;
    const drop = this.#table.whenAll(keys, () => {
      fired = true;
      if (session.waiters.delete(id)) this.#parked--;
      this.#send(session, id, op, reply());
    });
    if (!fired) {
      session.waiters.set(id, drop);
      this.#parked++;
    }
  }

  #send(session: Session, id: number, op: number, fields: Field[] = []): void {
    if (session.closed) return;
    const frame = encodeFrame(id, op, fields);
    session.writes = session.writes
      .then(() => session.closed ? undefined : writeAll(session.conn, frame))
      .catch(() => this.#closeConn(session)); // the peer left; its read loop ends quietly
  }

  /** One log line about a client, rate-limited, prefixed with this server's address. */
  #report(line: string): void {
    this.#log.line(line);
  }

  #closeConn(session: Session): void {
    if (session.closed) return;
    session.closing = session.closed = true;
    clearTimeout(session.timer);
    this.#parked -= session.waiters.size;
    for (const drop of session.waiters.values()) drop();
    session.waiters.clear();
    try {
      session.conn.close();
    } catch { /* already closed */ }
  }
}

/** Throws unless `n` is a positive integer. */
function checkCount(n: unknown, name: string): number {
  if (typeof n !== "number" || !Number.isInteger(n) || n < 1) {
    throw new RangeError(`Invalid ${name}: expected a positive integer, found ${String(n)}`);
  }
  return n;
}

function messageOf(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}
