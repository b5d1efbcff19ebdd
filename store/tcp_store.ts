/**
 * {@linkcode TcpStore}: the {@linkcode Store} every rank of a multi-process job uses, a client of one
 * {@linkcode TcpStoreServer} (in `tcp_store_server.ts`) run by rank 0 or the launcher, like c10d's
 * `TCPStore`.
 *
 * ## Wire format (version 3)
 *
 * Every message in both directions is one frame; integers are little-endian.
 *
 * ```text
 * frame  = length:u32  id:u32  op:u8  body       length counts id, op and body (so frame size = 4 + length)
 * bytes  = n:u32  n bytes                         keys and values; keys are non-empty UTF-8
 * keys   = count:u32  count × bytes
 * ```
 *
 * A reply carries the id of its request, so a client may have many requests in flight on one connection
 * and replies may come in any order (a parked `get` is answered after later requests). A frame over the
 * limit (64 MiB by default, 1 KiB before authentication), shorter than its 5-byte header, cut short by the
 * end of the connection, with an unknown opcode, a body that overruns or underruns its fields, or a key
 * that is empty or not UTF-8 is a protocol error: the receiver closes the connection (the server logs one
 * line naming the peer and the reason).
 *
 * | op   | request (client → server)       | body                              | reply                        |
 * |------|---------------------------------|-----------------------------------|------------------------------|
 * | 0x01 | AUTH (first frame, always)      | version:u8, nonce:32, proof (rest)| AUTH_OK or AUTH_REFUSED      |
 * | 0x10 | SET                             | key:bytes, value:bytes            | OK                           |
 * | 0x11 | GET (parks until the key is set)| key:bytes                         | VALUE                        |
 * | 0x12 | WAIT (parks until all are set)  | keys                              | OK                           |
 * | 0x13 | ADD                             | key:bytes, delta:i64              | INT (new value) or ERROR     |
 * | 0x14 | COMPARE_SET                     | key:bytes, expected, desired      | VALUE (value after the call) |
 * | 0x15 | DELETE                          | key:bytes                         | BOOL (whether it existed)    |
 * | 0x16 | NUM_KEYS                        | (empty)                           | INT                          |
 * | 0x17 | CHECK                           | keys                              | BOOL                         |
 * | 0x18 | CANCEL (id = the parked request)| (empty)                           | none                         |
 * | 0x19 | PING (keeps the connection live)| (empty)                           | OK                           |
 * | 0x1a | MULTI_GET (parks until all set) | keys                              | VALUES                       |
 * | 0x1b | MULTI_SET                       | keys, values (count × bytes)      | OK                           |
 *
 * Replies (server → client): 0x80 HELLO (id 0, sent on accept: version:u8, flags:u8 with bit 0 "secret
 * required", nonce: 32 bytes), 0x81 AUTH_OK (idleTimeoutMs:u32, 0 for none; then the server's proof, 32
 * bytes, when it has a secret), 0x82 AUTH_REFUSED (code:u8 1 = secret, 2 = version, 3 = too many wrong
 * secrets from this address, 4 = too many connections; reason:bytes; then the server closes. Codes 3 and 4
 * come with id 0 instead of HELLO), 0x83 OK, 0x84 VALUE (value:bytes), 0x85 INT (i64), 0x86 BOOL (u8),
 * 0x87 ERROR (message:bytes; the connection stays open: a failed `add`, a parked request over a limit),
 * 0x88 GOODBYE (id 0, reason:bytes: the server closes the connection, for a limit or a protocol error),
 * 0x89 VALUES (count:u32, count × bytes, in the order of the request's keys).
 *
 * Authentication is mutual challenge–response (`_auth.ts`): the client answers HELLO's nonce with a nonce
 * of its own and HMAC-SHA256(secret, "client" label ‖ server nonce ‖ client nonce); the server checks it and
 * answers with HMAC-SHA256(secret, "server" label ‖ both nonces), which the client checks. The secret never
 * travels. A server without a secret accepts any proof; a client with a secret refuses a server without one
 * (HELLO's flag) or one whose proof is missing or wrong. Version 1 (the client's proof only) is refused, and
 * so is version 2 (without MULTI_GET and MULTI_SET), by either side, naming both versions.
 *
 * Every request has a deadline (the store's `timeoutMs`, or a blocking call's own): a server that stops
 * answering fails each call with a TimeoutError. Timeouts and aborts are the client's: it stops waiting,
 * sends CANCEL for a parked request so the server drops it, and ignores a reply that arrives late. A client
 * that sends nothing for a third of the server's idle timeout sends a PING.
 *
 * @module
 */
import { StoreError } from "../core/errors.ts";
import { checkProof, hmacKey, prove } from "./_auth.ts";
import {
  checkDelta,
  checkEntries,
  checkKey,
  checkKeys,
  checkTimeout,
  DEFAULT_STORE_TIMEOUT_MS,
  nameKeys,
  valueBytes,
} from "./_checks.ts";
import {
  Cursor,
  DEFAULT_MAX_FRAME_BYTES,
  encodeFrame,
  type Field,
  type Frame,
  FrameReader,
  frameSize,
  HANDSHAKE_MAX_FRAME_BYTES,
  hex,
  NONCE_BYTES,
  Op,
  PROTOCOL_VERSION,
  ProtocolError,
  Refused,
  Reply,
  str,
  strs,
  writeAll,
} from "./_protocol.ts";
import { TorchOp, TorchWriter, VALIDATION_MAGIC } from "./_torch_protocol.ts";
import { retryUntil, Unreachable } from "./_retry.ts";
import { waitWithDeadline } from "./_wait.ts";
import { secretFromEnv, STORE_SECRET_ENV } from "./secret.ts";
import type { Store, StoreOptions, StoreValue, StoreWaitOptions } from "./store.ts";

/**
 * Options of {@linkcode TcpStore.connect}.
 *
 * @example A wrong secret is refused; a server that never answers times out
 * ```ts
 * import { TcpStore, type TcpStoreConnectOptions, TcpStoreServer } from "@dcomm/dcomm/store";
 * import { StoreError, TimeoutError } from "@dcomm/dcomm";
 * import assert from "node:assert/strict";
 * await using server = await TcpStoreServer.listen({ secret: "s3cret", log: () => {} });
 * const options: TcpStoreConnectOptions = { port: server.port, secret: "wrong", connectTimeoutMs: 1_000 };
 * await assert.rejects(TcpStore.connect(options), StoreError);
 * const probe = Deno.listen({ hostname: "127.0.0.1", port: 0 }); // a port nobody listens on
 * const port = probe.addr.port;
 * probe.close();
 * await assert.rejects(TcpStore.connect({ port, connectTimeoutMs: 100 }), TimeoutError);
 * ```
 */
export interface TcpStoreConnectOptions extends StoreOptions {
  /** The server's address. @default {"127.0.0.1"} */
  hostname?: string;
  /** The server's port. */
  port: number;
  /**
   * The shared secret to prove to the server. An empty string means none.
   *
   * @default {the `DCOMM_STORE_SECRET` environment variable when it is set and readable, otherwise none}
   */
  secret?: string;
  /**
   * How long to keep trying to reach the server: ranks may start before the server listens, so refused
   * connections are retried (with back-off up to 250 ms) until this runs out.
   *
   * @default {the `timeoutMs` option}
   */
  connectTimeoutMs?: number;
  /** The largest frame the server may send, its 4-byte length prefix included. @default {67108864} */
  maxFrameBytes?: number;
  /** Stops connecting: `connect` rejects with the signal's reason. @default {none} */
  signal?: AbortSignal;
}

interface Pending {
  /** The call, as `get key "a"`, for messages. */
  readonly what: string;
  /** Turns the reply into the call's result; a {@linkcode ProtocolError} means the server is broken. */
  readonly decode: (frame: Frame) => unknown;
  readonly resolve: (value: unknown) => void;
  readonly reject: (error: unknown) => void;
}

/** How long `close()` waits for the read loop and the writes to end once the connection is closed. */
const CLOSE_WAIT_MS = 1_000;

/**
 * A client of a {@linkcode TcpStoreServer}. One connection carries every call, many at once; blocking
 * calls hold no resources on the client but a pending entry, and the server answers them when the keys
 * are set. If the server goes away, every pending call fails at once with a StoreError; if it stops
 * answering, each call fails with a TimeoutError at its deadline (the store's `timeoutMs`). A call that
 * timed out may still take effect on the server, if its request reached it.
 *
 * @example Rendezvous through rank 0's server
 * ```ts
 * import { TcpStore, type TcpStoreConnectOptions, TcpStoreServer } from "@dcomm/dcomm/store";
 * import assert from "node:assert/strict";
 *
 * await using server = await TcpStoreServer.listen(); // in rank 0 (or the launcher)
 * const options: TcpStoreConnectOptions = { port: server.port, timeoutMs: 10_000 };
 * await using rank0 = await TcpStore.connect(options);
 * await using rank1 = await TcpStore.connect(options);
 *
 * const address = rank1.get("rank0/address"); // waits
 * await rank0.set("rank0/address", "10.0.0.1:29400");
 * assert.equal(new TextDecoder().decode(await address), "10.0.0.1:29400");
 * ```
 */
export class TcpStore implements Store {
  #conn: Deno.TcpConn;
  #reader: FrameReader;
  #address: string;
  #timeoutMs: number;
  #maxFrameBytes: number;
  #pending = new Map<number, Pending>();
  #nextId = 1;
  #writes: Promise<void> = Promise.resolve();
  /** Why calls fail now (client closed or connection lost); `undefined` while the connection is up. */
  #down: { reason: string; cause?: unknown } | undefined;
  #reading: Promise<void>;
  /** When a frame was last sent (`performance.now()`), for the keep-alive. */
  #lastSent = performance.now();
  #keepAlive: ReturnType<typeof setInterval> | undefined;

  private constructor(
    conn: Deno.TcpConn,
    reader: FrameReader,
    address: string,
    timeoutMs: number,
    idleTimeoutMs: number,
  ) {
    this.#conn = conn;
    this.#reader = reader;
    this.#address = address;
    this.#timeoutMs = timeoutMs;
    this.#maxFrameBytes = reader.maxFrameBytes;
    this.#reading = this.#readLoop();
    if (idleTimeoutMs > 0) {
      // The server closes a connection that sends nothing for its idle timeout: say something well before.
      const every = Math.max(5, Math.floor(idleTimeoutMs / 3));
      this.#keepAlive = setInterval(() => {
        if (performance.now() - this.#lastSent >= every) this.#send(encodeFrame(0, Op.PING));
      }, every);
      Deno.unrefTimer(this.#keepAlive);
    }
  }

  /**
   * Connects to a store server, retrying until it is up, and authenticates.
   *
   * @param options The server's address, the secret, the timeouts.
   * @returns The connected client.
   * @throws {TypeError | RangeError} If an option is invalid.
   * @throws {TimeoutError} If no server answered within `connectTimeoutMs`; the cause is the last error.
   * @throws {StoreError} If the server refused this client (wrong or missing secret, other protocol
   *   version, too many wrong secrets from this address, too many connections), the server could not prove
   *   it knows this client's secret (it has none, or another process squats on its port), or the peer is not
   *   a dcomm store.
   */
  static async connect(options: TcpStoreConnectOptions): Promise<TcpStore> {
    const hostname = options.hostname ?? "127.0.0.1";
    const { port, signal } = options;
    if (typeof hostname !== "string" || hostname.length === 0) {
      throw new TypeError(`Invalid hostname: expected a non-empty string, found ${String(hostname)}`);
    }
    if (!Number.isInteger(port) || port < 1 || port > 65535) {
      throw new RangeError(`Invalid port: expected an integer from 1 to 65535, found ${String(port)}`);
    }
    const timeoutMs = checkTimeout(options.timeoutMs ?? DEFAULT_STORE_TIMEOUT_MS);
    const connectTimeoutMs = checkTimeout(options.connectTimeoutMs ?? timeoutMs, "connectTimeoutMs");
    const maxFrameBytes = options.maxFrameBytes ?? DEFAULT_MAX_FRAME_BYTES;
    if (!Number.isInteger(maxFrameBytes) || maxFrameBytes < HANDSHAKE_MAX_FRAME_BYTES) {
      throw new RangeError(
        `Invalid maxFrameBytes: expected an integer of at least ${HANDSHAKE_MAX_FRAME_BYTES}, found ${
          String(maxFrameBytes)
        }`,
      );
    }
    if (signal?.aborted) throw signal.reason;
    const key = await hmacKey(options.secret ?? secretFromEnv());
    const address = hostname.includes(":") ? `[${hostname}]:${port}` : `${hostname}:${port}`;

    return await retryUntil(async (stop) => {
      const conn = await connectOnce(hostname, port, stop);
      const reader = new FrameReader(maxFrameBytes);
      const { idleTimeoutMs } = await handshake(conn, reader, key, address, stop);
      return new TcpStore(conn, reader, address, timeoutMs, idleTimeoutMs);
    }, {
      timeoutMs: connectTimeoutMs,
      signal,
      timeout: (last) =>
        `Cannot connect to the store at ${address}: no store answered within ${connectTimeoutMs} ms ` +
        `(last error: ${last}); is rank 0 (or the launcher) running its TcpStoreServer on that address?`,
    });
  }

  /** The default timeout of blocking calls, in milliseconds. */
  get timeoutMs(): number {
    return this.#timeoutMs;
  }

  /** The server's `hostname:port`. */
  get address(): string {
    return this.#address;
  }

  /** Whether the client was closed or lost its connection: every call now fails with a StoreError. */
  get closed(): boolean {
    return this.#down !== undefined;
  }

  /** {@inheritDoc Store.set} */
  async set(key: string, value: StoreValue): Promise<void> {
    checkKey(key);
    const fields = [str(key), { bytes: valueBytes(value) }];
    await this.#request(`set key ${JSON.stringify(key)}`, Op.SET, fields, replyOk);
  }

  /** {@inheritDoc Store.get} */
  async get(key: string, options: StoreWaitOptions = {}): Promise<Uint8Array> {
    checkKey(key);
    const what = `get key ${JSON.stringify(key)}`;
    return await this.#park(what, nameKeys([key]), Op.GET, [str(key)], replyValue, options);
  }

  /** {@inheritDoc Store.wait} */
  async wait(keys: readonly string[], options: StoreWaitOptions = {}): Promise<void> {
    checkKeys(keys);
    if (keys.length === 0) return;
    await this.#park(`wait for ${nameKeys(keys)}`, nameKeys(keys), Op.WAIT, [strs(keys)], replyOk, options);
  }

  /** {@inheritDoc Store.multiGet} */
  async multiGet(keys: readonly string[], options: StoreWaitOptions = {}): Promise<Uint8Array[]> {
    checkKeys(keys);
    if (keys.length === 0) return [];
    const what = `get ${nameKeys(keys)}`;
    const values = await this.#park(what, nameKeys(keys), Op.MULTI_GET, [strs(keys)], replyValues, options);
    if (values.length !== keys.length) {
      throw new StoreError(`The store answered ${values.length} values to a get of ${keys.length} keys`);
    }
    return values;
  }

  /** {@inheritDoc Store.multiSet} */
  async multiSet(entries: readonly (readonly [string, StoreValue])[]): Promise<void> {
    const checked = checkEntries(entries);
    const keys = checked.map(([k]) => checkKey(k));
    const values = checked.map(([, v]) => valueBytes(v));
    if (keys.length === 0) return;
    const fields = [strs(keys), { list: values }];
    await this.#request(`set ${nameKeys(keys)}`, Op.MULTI_SET, fields, replyOk);
  }

  /** {@inheritDoc Store.add} */
  async add(key: string, delta: number): Promise<number> {
    checkKey(key);
    checkDelta(delta);
    const fields = [str(key), { i64: delta }];
    return await this.#request(`add to key ${JSON.stringify(key)}`, Op.ADD, fields, replyInt);
  }

  /** {@inheritDoc Store.compareSet} */
  async compareSet(key: string, expected: StoreValue, desired: StoreValue): Promise<Uint8Array> {
    checkKey(key);
    const fields = [str(key), { bytes: valueBytes(expected) }, { bytes: valueBytes(desired) }];
    return await this.#request(
      `compare-and-set key ${JSON.stringify(key)}`,
      Op.COMPARE_SET,
      fields,
      replyValue,
    );
  }

  /** {@inheritDoc Store.delete} */
  async delete(key: string): Promise<boolean> {
    checkKey(key);
    return await this.#request(`delete key ${JSON.stringify(key)}`, Op.DELETE, [str(key)], replyBool);
  }

  /** {@inheritDoc Store.numKeys} */
  async numKeys(): Promise<number> {
    return await this.#request("count the keys", Op.NUM_KEYS, [], replyInt);
  }

  /** {@inheritDoc Store.check} */
  async check(keys: readonly string[]): Promise<boolean> {
    checkKeys(keys);
    return await this.#request(`check ${nameKeys(keys)}`, Op.CHECK, [strs(keys)], replyBool);
  }

  /**
   * Closes the connection: pending calls reject with a StoreError, and so do later calls. It returns within
   * a second even when the server stopped answering (a write stuck on a peer that reads nothing is dropped).
   */
  async close(): Promise<void> {
    this.#shutDown("the TcpStore client was closed");
    let timer: ReturnType<typeof setTimeout> | undefined;
    await Promise.race([
      Promise.all([this.#reading, this.#writes]),
      new Promise<void>((resolve) => timer = setTimeout(resolve, CLOSE_WAIT_MS)),
    ]);
    clearTimeout(timer);
  }

  /**
   * Lets the process exit while no call is pending: the connection stops keeping the event loop alive
   * (calls made later still work; call {@linkcode TcpStore.ref} first to wait on one).
   */
  unref(): void {
    this.#conn.unref();
  }

  /** Undoes {@linkcode TcpStore.unref}: the connection keeps the process alive again. */
  ref(): void {
    this.#conn.ref();
  }

  /** Same as {@linkcode TcpStore.close}, for `await using`. */
  [Symbol.asyncDispose](): Promise<void> {
    return this.close();
  }

  /**
   * Sends a request and resolves with its decoded reply (an ERROR reply rejects with a StoreError), or
   * rejects with a TimeoutError when no reply came within the store's `timeoutMs` (a late reply is ignored).
   */
  #request<T>(what: string, op: number, fields: Field[], decode: (frame: Frame) => T): Promise<T> {
    return waitWithDeadline<T>((resolve, reject) => {
      const id = this.#enqueue(
        { what, decode, resolve: resolve as (value: unknown) => void, reject },
        op,
        fields,
      );
      return () => void this.#pending.delete(id);
    }, {
      timeoutMs: this.#timeoutMs,
      what: `the store at ${this.#address} to answer ${what}`,
      where: "",
      timeoutDetail: () =>
        " (the server accepted the connection but stopped answering: is its host up, running and reachable?)",
    });
  }

  /** Sends a blocking request under the call's deadline; giving up sends CANCEL. */
  #park<T>(
    what: string,
    keys: string,
    op: number,
    fields: Field[],
    decode: (frame: Frame) => T,
    options: StoreWaitOptions,
  ): Promise<T> {
    const timeoutMs = checkTimeout(options.timeoutMs ?? this.#timeoutMs);
    return waitWithDeadline<T>((resolve, reject) => {
      const id = this.#enqueue(
        { what, decode, resolve: resolve as (value: unknown) => void, reject },
        op,
        fields,
      );
      return () => {
        if (this.#pending.delete(id)) this.#send(encodeFrame(id, Op.CANCEL));
      };
    }, { timeoutMs, signal: options.signal, what: keys, where: ` in the store at ${this.#address}` });
  }

  /** Registers `pending` under a fresh id and sends the request; returns the id. */
  #enqueue(pending: Pending, op: number, fields: Field[]): number {
    if (this.#down !== undefined) {
      pending.reject(
        new StoreError(`Cannot ${pending.what}: ${this.#down.reason}`, { cause: this.#down.cause }),
      );
      return 0;
    }
    const size = frameSize(fields);
    if (size > this.#maxFrameBytes) {
      pending.reject(
        new RangeError(
          `Cannot ${pending.what}: the request takes ${size} bytes, over the frame limit of ${this.#maxFrameBytes} bytes (maxFrameBytes)`,
        ),
      );
      return 0;
    }
    let id = this.#nextId;
    while (this.#pending.has(id)) id = id % 0xffff_ffff + 1;
    this.#nextId = id % 0xffff_ffff + 1;
    this.#pending.set(id, pending);
    this.#send(encodeFrame(id, op, fields));
    return id;
  }

  #send(frame: Uint8Array): void {
    this.#lastSent = performance.now();
    this.#writes = this.#writes
      .then(() => this.#down === undefined ? writeAll(this.#conn, frame) : undefined)
      .catch((error) => this.#lose(`a write failed (${messageOf(error)})`, error));
  }

  async #readLoop(): Promise<void> {
    try {
      while (this.#down === undefined) {
        for (let frame = this.#reader.next(); frame !== null; frame = this.#reader.next()) {
          this.#dispatch(frame);
        }
        const n = await this.#conn.read(this.#reader.space());
        if (n === null) return this.#lose("the server closed the connection");
        this.#reader.commit(n);
      }
    } catch (error) {
      if (error instanceof ProtocolError) {
        this.#lose(`the server broke the protocol (${error.message})`, error);
      } else this.#lose(`the connection failed (${messageOf(error)})`, error);
    }
  }

  #dispatch(frame: Frame): void {
    if (frame.op === Reply.GOODBYE) {
      const body = new Cursor(frame.body);
      const reason = body.str();
      body.end();
      return this.#lose(`the server closed the connection: ${reason}`);
    }
    const pending = this.#pending.get(frame.id);
    if (pending === undefined) return; // the reply to a request we cancelled
    // Decode before settling: a ProtocolError leaves the call pending, and losing the connection fails it.
    if (frame.op === Reply.ERROR) {
      const body = new Cursor(frame.body);
      const message = body.str();
      body.end();
      this.#pending.delete(frame.id);
      return pending.reject(new StoreError(message));
    }
    const value = pending.decode(frame);
    this.#pending.delete(frame.id);
    pending.resolve(value);
  }

  #lose(reason: string, cause?: unknown): void {
    this.#shutDown(`lost the connection to the store at ${this.#address}: ${reason}`, cause);
  }

  #shutDown(reason: string, cause?: unknown): void {
    if (this.#down !== undefined) return;
    this.#down = { reason, cause };
    clearInterval(this.#keepAlive);
    try {
      this.#conn.close();
    } catch { /* already closed */ }
    const pending = [...this.#pending.values()];
    this.#pending.clear();
    for (const { what, reject } of pending) reject(new StoreError(`Cannot ${what}: ${reason}`, { cause }));
  }
}

/** One attempt at a TCP connection, abandoned when `stop` aborts. */
async function connectOnce(hostname: string, port: number, stop: AbortSignal): Promise<Deno.TcpConn> {
  // The connect signal also closes an established connection, so it must not be `stop` itself.
  const attempt = new AbortController();
  const onStop = (): void => attempt.abort(stop.reason);
  stop.addEventListener("abort", onStop, { once: true });
  try {
    const conn = await Deno.connect({ hostname, port, transport: "tcp", signal: attempt.signal });
    conn.setNoDelay(true);
    conn.setKeepAlive(true);
    return conn;
  } finally {
    stop.removeEventListener("abort", onStop);
  }
}

/**
 * Reads HELLO, proves the secret, reads the verdict and checks the server's own proof. Closes `conn` on any
 * failure.
 *
 * @returns The server's idle timeout (0: none).
 */
async function handshake(
  conn: Deno.TcpConn,
  reader: FrameReader,
  key: CryptoKey | undefined,
  address: string,
  stop: AbortSignal,
): Promise<{ idleTimeoutMs: number }> {
  const onStop = (): void => conn.close();
  stop.addEventListener("abort", onStop, { once: true });
  let ok = false;
  try {
    const hello = await readHello(conn, reader, address);
    if (hello.op === Reply.AUTH_REFUSED) throw refusal(hello, address); // refused before HELLO
    if (hello.op !== Reply.HELLO) {
      throw new StoreError(
        `The peer at ${address} is not a dcomm store: it opened with opcode ${hex(hello.op)}`,
      );
    }
    const body = new Cursor(hello.body);
    const version = body.u8();
    if (version !== PROTOCOL_VERSION) {
      throw new StoreError(
        `The store at ${address} speaks protocol version ${version}, but this client speaks ${PROTOCOL_VERSION}: ` +
          "run the same dcomm version on every rank",
      );
    }
    const flags = body.u8();
    const serverNonce = body.fixed(NONCE_BYTES);
    body.end();
    if (key !== undefined && (flags & 1) === 0) {
      throw new StoreError(
        `The store at ${address} has no secret, but this client has one: refusing it. Either the server was ` +
          `started without ${STORE_SECRET_ENV} (start it with the same secret as the ranks), or another process ` +
          "listening on its port is posing as the job's store",
      );
    }
    const clientNonce = crypto.getRandomValues(new Uint8Array(NONCE_BYTES));
    const proof = key === undefined ? new Uint8Array() : await prove(key, "client", serverNonce, clientNonce);
    await writeAll(
      conn,
      encodeFrame(0, Op.AUTH, [{ u8: PROTOCOL_VERSION }, { raw: clientNonce }, { raw: proof }]),
    );
    const verdict = await readFrame(conn, reader, HANDSHAKE_MAX_FRAME_BYTES, address);
    if (verdict.op === Reply.AUTH_REFUSED) throw refusal(verdict, address);
    if (verdict.op !== Reply.AUTH_OK) {
      throw new StoreError(
        `The peer at ${address} is not a dcomm store: it answered AUTH with ${hex(verdict.op)}`,
      );
    }
    const granted = new Cursor(verdict.body);
    const idleTimeoutMs = granted.u32();
    const serverProof = granted.rest();
    if (
      key !== undefined &&
      (serverProof.length === 0 || !await checkProof(key, "server", serverNonce, clientNonce, serverProof))
    ) {
      throw new StoreError(
        `The store at ${address} did not prove it knows the secret (its answer to this client's challenge was ` +
          `${
            serverProof.length === 0 ? "missing" : "wrong"
          }): another process may be listening on its port ` +
          "posing as the job's store; refusing it",
      );
    }
    ok = true;
    return { idleTimeoutMs };
  } catch (error) {
    if (error instanceof ProtocolError) {
      throw new StoreError(`The peer at ${address} is not a dcomm store: ${error.message}`, { cause: error });
    }
    throw error;
  } finally {
    stop.removeEventListener("abort", onStop);
    if (!ok) {
      try {
        conn.close();
      } catch { /* closed by onStop */ }
    }
  }
}

/** The StoreError of an AUTH_REFUSED frame. */
function refusal(frame: Frame, address: string): StoreError {
  const why = new Cursor(frame.body);
  const code = why.u8();
  const reason = why.str();
  if (code === Refused.SECRET) {
    return new StoreError(
      `The store at ${address} refused this client: wrong or missing secret (set ${STORE_SECRET_ENV} ` +
        "to the secret the launcher generated, or pass `secret` to TcpStore.connect())",
    );
  }
  return new StoreError(`The store at ${address} refused this client: ${reason}`);
}

/** How long a server gets to send HELLO before the client asks whether it is torch's store instead. */
const HELLO_PROBE_MS = 2_000;

/**
 * Reads the server's HELLO. A server silent for {@linkcode HELLO_PROBE_MS} may be torch's TCPStore, which
 * waits for its client to speak first: the client then sends torch's validation query and a PING, and a
 * server that echoes the PING's nonce is named as torch's store.
 */
async function readHello(conn: Deno.TcpConn, reader: FrameReader, address: string): Promise<Frame> {
  const nonce = crypto.getRandomValues(new Uint32Array(1))[0];
  let probed = false;
  const timer = setTimeout(() => {
    probed = true;
    const probe = new TorchWriter().u8(TorchOp.VALIDATE).u32(VALIDATION_MAGIC).u8(TorchOp.PING).u32(nonce);
    writeAll(conn, probe.finish()).catch(() => {}); // a failed write shows up as a failed read
  }, HELLO_PROBE_MS);
  try {
    return await readFrame(conn, reader, HANDSHAKE_MAX_FRAME_BYTES, address, () => {
      const head = reader.peek(4);
      if (
        probed && head.length === 4 &&
        new DataView(head.buffer, head.byteOffset, 4).getUint32(0, true) === nonce
      ) {
        throw new StoreError(
          `The store at ${address} is torch's TCPStore (it answered torch's validation handshake), not a dcomm ` +
            "store: connect with TorchStore, or set DCOMM_STORE_PROTOCOL=torch (under torchrun, init() finds " +
            "the agent's store by itself)",
        );
      }
      // A dcomm server that was only slow has been sent torch's bytes: this connection is spoilt, try another.
      if (probed && reader.buffered > 0) {
        throw new Unreachable(`the store at ${address} was slow to say HELLO`);
      }
    });
  } finally {
    clearTimeout(timer);
  }
}

/** Reads one frame during the handshake; the end of the connection means "try again". */
async function readFrame(
  conn: Deno.TcpConn,
  reader: FrameReader,
  limit: number,
  address: string,
  onBytes?: () => void,
): Promise<Frame> {
  const max = reader.maxFrameBytes;
  reader.maxFrameBytes = limit;
  try {
    for (;;) {
      const frame = reader.next();
      if (frame !== null) return frame;
      let n: number | null;
      try {
        n = await conn.read(reader.space());
      } catch (error) {
        throw new Unreachable(
          `the connection to ${address} failed during the handshake (${messageOf(error)})`,
          {
            cause: error,
          },
        );
      }
      if (n === null) {
        throw new Unreachable(`the peer at ${address} closed the connection during the handshake`);
      }
      reader.commit(n);
      onBytes?.();
    }
  } finally {
    reader.maxFrameBytes = max;
  }
}

function replyOk(frame: Frame): void {
  expect(frame, Reply.OK).end();
}

function replyValue(frame: Frame): Uint8Array {
  const body = expect(frame, Reply.VALUE);
  const value = body.bytes().slice();
  body.end();
  return value;
}

function replyValues(frame: Frame): Uint8Array[] {
  const body = expect(frame, Reply.VALUES);
  const values = body.list().map((v) => v.slice());
  body.end();
  return values;
}

function replyInt(frame: Frame): number {
  const body = expect(frame, Reply.INT);
  const value = body.i64();
  body.end();
  return value;
}

function replyBool(frame: Frame): boolean {
  const body = expect(frame, Reply.BOOL);
  const value = body.u8() !== 0;
  body.end();
  return value;
}

function expect(frame: Frame, op: number): Cursor {
  if (frame.op !== op) throw new ProtocolError(`reply opcode ${hex(frame.op)} where ${hex(op)} was expected`);
  return new Cursor(frame.body);
}

function messageOf(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}
