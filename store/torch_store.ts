/**
 * {@linkcode TorchStore}: a {@linkcode Store} that is a client of PyTorch's c10d `TCPStore`, speaking
 * torch's own wire protocol (described in `_torch_protocol.ts`): the store torchrun's elastic agent
 * serves its workers (`TORCHELASTIC_USE_AGENT_STORE=True`), a `torch.distributed.TCPStore(is_master=True)`
 * of a Python job, or a {@linkcode TorchStoreServer}. Keys carry torch's client prefix `/`, so a key set
 * here is the key a Python `store.get()` reads.
 *
 * torch's protocol has no request ids: a connection carries one request at a time. Calls that return at
 * once share one connection, in order; a blocking call (`get`, `wait`, `multiGet`) takes a connection of
 * its own while it waits (kept for the next one afterwards), so that waits never hold up the `set` that
 * would release them. A wait that times out or is aborted sends torch's CANCEL_WAIT, as torch's client
 * does. There is no secret: torch's store has none.
 *
 * Every call has a deadline, the store's `timeoutMs` (or a blocking call's own): a server that stops
 * answering fails each call with a TimeoutError naming the call and the server. As torch's protocol has no
 * request ids, a call that times out while its request is on the wire closes that connection (a late reply
 * would be read as the next call's), and the next call opens another. (SET, APPEND and MULTI_SET have no
 * reply in torch's protocol: only their write has a deadline.)
 *
 * @module
 */
import { StoreError, TimeoutError } from "../core/errors.ts";
import {
  checkDelta,
  checkKey,
  checkKeys,
  checkTimeout,
  DEFAULT_STORE_TIMEOUT_MS,
  nameKeys,
  valueBytes,
} from "./_checks.ts";
import {
  ByteQueue,
  CheckReply,
  INCOMPLETE,
  looksLikeDcommHello,
  MAX_KEY_BYTES,
  MAX_KEY_COUNT,
  MAX_VALUE_BYTES,
  TorchOp,
  TorchProtocolError,
  TorchWriter,
  VALIDATION_MAGIC,
  WaitReply,
} from "./_torch_protocol.ts";
import { retryUntil, Unreachable } from "./_retry.ts";
import { waitWithDeadline } from "./_wait.ts";
import type { Store, StoreOptions, StoreValue, StoreWaitOptions } from "./store.ts";

/**
 * Options of {@linkcode TorchStore.connect}.
 *
 * @example Keys under another prefix on the wire
 * ```ts
 * import { TorchStore, type TorchStoreConnectOptions, TorchStoreServer } from "@dcomm/dcomm/store";
 * import assert from "node:assert/strict";
 * await using server = await TorchStoreServer.listen({ port: 0 });
 * const options: TorchStoreConnectOptions = { port: server.port, keyPrefix: "/job7/", timeoutMs: 10_000 };
 * await using job = await TorchStore.connect(options);
 * await using plain = await TorchStore.connect({ port: server.port }); // keyPrefix "/", as torch's clients
 * await job.set("epoch", "3"); // "/job7/epoch" on the wire
 * assert.equal(new TextDecoder().decode(await plain.get("job7/epoch")), "3");
 * ```
 */
export interface TorchStoreConnectOptions extends StoreOptions {
  /** The server's address. @default {"127.0.0.1"} */
  hostname?: string;
  /** The server's port. */
  port: number;
  /**
   * How long to keep trying to reach the server (refused connections are retried with back-off up to
   * 250 ms, as workers may start before the store listens).
   *
   * @default {the `timeoutMs` option}
   */
  connectTimeoutMs?: number;
  /**
   * What every key is prefixed with on the wire. torch's `TCPStore` client uses `/`; keep it to share keys
   * with Python clients.
   *
   * @default {"/"}
   */
  keyPrefix?: string;
  /** Stops connecting: `connect` rejects with the signal's reason. @default {none} */
  signal?: AbortSignal;
}

/** How long a server gets to answer the PING of the validation handshake. */
const VALIDATE_REPLY_MS = 5_000;
/** Connections kept for later blocking calls. */
const MAX_IDLE = 8;
/** How long the server gets to confirm a CANCEL_WAIT before the connection is closed instead. */
const CANCEL_REPLY_MS = 5_000;

const encoder = new TextEncoder();

/** One connection to a torch store: its bytes, read by a loop of its own into a {@linkcode ByteQueue}. */
class TorchConn {
  readonly #conn: Deno.TcpConn;
  readonly #queue = new ByteQueue();
  readonly #address: string;
  #more: PromiseWithResolvers<void> | undefined;
  /** Why the connection is unusable; `undefined` while it is up. */
  down: Error | undefined;

  constructor(conn: Deno.TcpConn, address: string) {
    this.#conn = conn;
    this.#address = address;
    this.#readLoop();
  }

  /** Opens and validates a connection: VALIDATE with torch's magic number, then a PING it must echo. */
  static async open(hostname: string, port: number, address: string, stop: AbortSignal): Promise<TorchConn> {
    const attempt = new AbortController();
    const onStop = (): void => attempt.abort(stop.reason);
    stop.addEventListener("abort", onStop, { once: true });
    let conn: Deno.TcpConn;
    try {
      conn = await Deno.connect({ hostname, port, transport: "tcp", signal: attempt.signal });
    } finally {
      stop.removeEventListener("abort", onStop);
    }
    conn.setNoDelay(true);
    conn.setKeepAlive(true);
    const c = new TorchConn(conn, address);
    const nonce = crypto.getRandomValues(new Uint32Array(1))[0];
    const onAbort = (): void => c.close(new Unreachable("stopped"));
    stop.addEventListener("abort", onAbort, { once: true });
    const timer = setTimeout(
      () =>
        c.close(
          new Unreachable(
            `the peer at ${address} did not answer torch's PING within ${VALIDATE_REPLY_MS} ms`,
          ),
        ),
      VALIDATE_REPLY_MS,
    );
    try {
      await c.send(
        new TorchWriter().u8(TorchOp.VALIDATE).u32(VALIDATION_MAGIC).u8(TorchOp.PING).u32(nonce).finish(),
      );
      let echoed: number;
      try {
        echoed = await c.reply((q) => q.u32());
      } catch (error) {
        const first = c.#queue.peek(9);
        if (looksLikeDcommHello(first)) throw dcommStoreError(address);
        if (error instanceof StoreError && /closed the connection/.test(error.message)) {
          throw new Unreachable(
            `the peer at ${address} closed the connection after torch's validation handshake (a torch store of ` +
              "another protocol version, without PING, closes it so)",
            { cause: error },
          );
        }
        throw error instanceof StoreError ? new Unreachable(error.message, { cause: error }) : error;
      }
      if (echoed !== nonce) {
        // A dcomm server speaks first: its HELLO frame's length, then request id 0 and opcode 0x80.
        const head = new Uint8Array(9);
        new DataView(head.buffer).setUint32(0, echoed, true);
        head.set(c.#queue.peek(5), 4);
        if (looksLikeDcommHello(head)) throw dcommStoreError(address);
        throw new StoreError(
          `The peer at ${address} is not a torch TCPStore of a known protocol version: it answered PING ` +
            `${nonce} with ${echoed}`,
        );
      }
      return c;
    } catch (error) {
      c.close(error instanceof Error ? error : new Error(String(error)));
      throw error;
    } finally {
      clearTimeout(timer);
      stop.removeEventListener("abort", onAbort);
    }
  }

  /** Writes a whole request. */
  async send(bytes: Uint8Array): Promise<void> {
    if (this.down) throw this.#lost();
    try {
      for (let off = 0; off < bytes.length;) off += await this.#conn.write(bytes.subarray(off));
    } catch (error) {
      this.close(new Error(`a write failed (${messageOf(error)})`, { cause: error }));
      throw this.#lost();
    }
  }

  /** Reads one reply with `parse`, waiting for its bytes; a lost connection rejects with a StoreError. */
  async reply<T>(parse: (queue: ByteQueue) => T): Promise<T> {
    for (;;) {
      try {
        const value = parse(this.#queue);
        this.#queue.commit();
        return value;
      } catch (error) {
        this.#queue.rollback();
        if (error !== INCOMPLETE) {
          const broken = new TorchProtocolError(messageOf(error));
          this.close(new Error(`the server broke torch's protocol (${broken.message})`, { cause: error }));
          throw this.#lost();
        }
      }
      if (this.down) throw this.#lost();
      this.#more = Promise.withResolvers<void>();
      await this.#more.promise;
    }
  }

  unref(): void {
    this.#conn.unref();
  }

  ref(): void {
    this.#conn.ref();
  }

  /** Closes the connection; a pending {@linkcode TorchConn.reply} rejects. */
  close(why: Error): void {
    if (this.down) return;
    this.down = why;
    try {
      this.#conn.close();
    } catch { /* already closed */ }
    this.#more?.resolve();
  }

  #lost(): StoreError {
    const why = this.down ?? new Error("the connection is closed");
    return new StoreError(`lost the connection to the store at ${this.#address}: ${why.message}`, {
      cause: why,
    });
  }

  async #readLoop(): Promise<void> {
    try {
      for (;;) {
        const n = await this.#conn.read(this.#queue.space());
        if (n === null) return this.close(new Error("the server closed the connection"));
        this.#queue.wrote(n);
        this.#more?.resolve();
      }
    } catch (error) {
      this.close(this.down ?? new Error(`the connection failed (${messageOf(error)})`, { cause: error }));
    }
  }
}

function dcommStoreError(address: string): StoreError {
  return new StoreError(
    `The store at ${address} is a dcomm store (TcpStoreServer, dcomm's own protocol), not torch's TCPStore: ` +
      "connect with TcpStore, or set DCOMM_STORE_PROTOCOL=dcomm",
  );
}

/**
 * A client of torch's c10d `TCPStore`.
 *
 * @example Sharing keys with a torch store (here a {@linkcode TorchStoreServer} stands for torch's)
 * ```ts
 * import { TorchStore, type TorchStoreConnectOptions, TorchStoreServer } from "@dcomm/dcomm/store";
 * import assert from "node:assert/strict";
 *
 * await using server = await TorchStoreServer.listen({ hostname: "127.0.0.1", port: 0 });
 * const options: TorchStoreConnectOptions = { hostname: "127.0.0.1", port: server.port, timeoutMs: 10_000 };
 * await using a = await TorchStore.connect(options);
 * await using b = await TorchStore.connect(options);
 * const address = b.get("rank0/address"); // waits on a connection of its own
 * await a.set("rank0/address", "10.0.0.1:29400");
 * assert.equal(new TextDecoder().decode(await address), "10.0.0.1:29400");
 * assert.equal(await a.add("joined", 2), 2);
 * ```
 */
export class TorchStore implements Store {
  readonly #hostname: string;
  readonly #port: number;
  readonly #address: string;
  readonly #timeoutMs: number;
  readonly #prefix: string;
  #main: TorchConn;
  /** The main connection was closed because a call on it timed out: the next call opens another. */
  #mainTimedOut = false;
  /** The calls on the main connection, in order. */
  #chain: Promise<unknown> = Promise.resolve();
  readonly #idle: TorchConn[] = [];
  readonly #busy = new Set<TorchConn>();
  readonly #closed = new AbortController();
  #unref = false;

  private constructor(
    main: TorchConn,
    fields: { hostname: string; port: number; address: string; timeoutMs: number; prefix: string },
  ) {
    this.#main = main;
    this.#hostname = fields.hostname;
    this.#port = fields.port;
    this.#address = fields.address;
    this.#timeoutMs = fields.timeoutMs;
    this.#prefix = fields.prefix;
  }

  /**
   * Connects to a torch store, retrying until it is up, and validates it with torch's handshake.
   *
   * @param options The server's address, the timeouts, the key prefix.
   * @returns The connected client.
   * @throws {TypeError | RangeError} If an option is invalid.
   * @throws {TimeoutError} If no torch store answered within `connectTimeoutMs`; the cause is the last error.
   * @throws {StoreError} If the peer is a dcomm store, or a server of another protocol.
   */
  static async connect(options: TorchStoreConnectOptions): Promise<TorchStore> {
    const hostname = options.hostname ?? "127.0.0.1";
    const { port, signal } = options;
    if (typeof hostname !== "string" || hostname.length === 0) {
      throw new TypeError(`Invalid hostname: expected a non-empty string, found ${String(hostname)}`);
    }
    if (!Number.isInteger(port) || port < 1 || port > 65535) {
      throw new RangeError(`Invalid port: expected an integer from 1 to 65535, found ${String(port)}`);
    }
    const prefix = options.keyPrefix ?? "/";
    if (typeof prefix !== "string") {
      throw new TypeError(`Invalid keyPrefix: expected a string, found ${typeof prefix}`);
    }
    const timeoutMs = checkTimeout(options.timeoutMs ?? DEFAULT_STORE_TIMEOUT_MS);
    const connectTimeoutMs = checkTimeout(options.connectTimeoutMs ?? timeoutMs, "connectTimeoutMs");
    if (signal?.aborted) throw signal.reason;
    const address = hostname.includes(":") ? `[${hostname}]:${port}` : `${hostname}:${port}`;
    const main = await openWithRetry(hostname, port, address, connectTimeoutMs, signal);
    return new TorchStore(main, { hostname, port, address, timeoutMs, prefix });
  }

  /** The default timeout of blocking calls, in milliseconds. */
  get timeoutMs(): number {
    return this.#timeoutMs;
  }

  /** The server's `hostname:port`. */
  get address(): string {
    return this.#address;
  }

  /** Whether the client was closed or lost its connection (one closed after a timeout is reopened). */
  get closed(): boolean {
    return this.#closed.signal.aborted || (this.#main.down !== undefined && !this.#mainTimedOut);
  }

  /** {@inheritDoc Store.set} */
  async set(key: string, value: StoreValue): Promise<void> {
    const k = this.#key(key);
    const v = checkValue(value);
    await this.#serial(
      `set key ${JSON.stringify(key)}`,
      (c) => c.send(new TorchWriter().u8(TorchOp.SET).bytes(k).bytes(v).finish()),
    );
  }

  /** {@inheritDoc Store.get} */
  async get(key: string, options: StoreWaitOptions = {}): Promise<Uint8Array> {
    const k = this.#key(key);
    return await this.#blocking(`get key ${JSON.stringify(key)}`, [key], [k], options, async (c) => {
      await c.send(new TorchWriter().u8(TorchOp.GET).bytes(k).finish());
      return await c.reply((q) => q.bytes(Number.MAX_SAFE_INTEGER, "value"));
    });
  }

  /** {@inheritDoc Store.wait} */
  async wait(keys: readonly string[], options: StoreWaitOptions = {}): Promise<void> {
    const ks = this.#keys(keys);
    if (ks.length === 0) return;
    await this.#blocking(`wait for ${nameKeys(keys)}`, keys, ks, options, () => Promise.resolve());
  }

  /**
   * Returns the values of `keys`, waiting until every one is set (torch's `multi_get`: one WAIT, then one
   * request for them all).
   *
   * @param keys Non-empty strings.
   * @param options The timeout and an abort signal.
   * @returns One copy of each value, in the order of `keys`.
   * @throws {TimeoutError} If a key was still missing when the timeout ran out.
   * @throws {StoreError} If the store is closed or unreachable.
   */
  async multiGet(keys: readonly string[], options: StoreWaitOptions = {}): Promise<Uint8Array[]> {
    const ks = this.#keys(keys);
    if (ks.length === 0) return [];
    return await this.#blocking(`get ${nameKeys(keys)}`, keys, ks, options, async (c) => {
      const w = new TorchWriter().u8(TorchOp.MULTI_GET).u64(ks.length);
      for (const k of ks) w.bytes(k);
      await c.send(w.finish());
      return await c.reply((q) => ks.map(() => q.bytes(Number.MAX_SAFE_INTEGER, "value")));
    });
  }

  /**
   * Sets every key to its value in one request (torch's `multi_set`), releasing the calls waiting for them.
   *
   * @param entries Pairs of a non-empty key and a value.
   * @throws {TypeError | RangeError} If a key or value is not valid.
   * @throws {StoreError} If the store is closed or unreachable.
   */
  async multiSet(entries: readonly (readonly [string, StoreValue])[]): Promise<void> {
    if (!Array.isArray(entries)) {
      throw new TypeError(
        `Invalid multiSet entries: expected an array of [key, value] pairs, found ${typeof entries}`,
      );
    }
    if (entries.length > MAX_KEY_COUNT) {
      throw new RangeError(
        `Cannot multi-set: torch's store takes at most ${MAX_KEY_COUNT} keys per call, found ${entries.length}`,
      );
    }
    const w = new TorchWriter().u8(TorchOp.MULTI_SET).u64(entries.length);
    for (const [key, value] of entries) w.bytes(this.#key(key)).bytes(checkValue(value));
    const bytes = w.finish().slice();
    await this.#serial(`set ${entries.length} keys`, (c) => c.send(bytes));
  }

  /**
   * Appends `value` to the value of `key` (a missing key is set to it), as torch's `append`.
   *
   * @param key A non-empty string.
   * @param value The bytes, or a string stored as UTF-8.
   * @throws {StoreError} If the store is closed or unreachable.
   */
  async append(key: string, value: StoreValue): Promise<void> {
    const k = this.#key(key);
    const v = checkValue(value);
    await this.#serial(
      `append to key ${JSON.stringify(key)}`,
      (c) => c.send(new TorchWriter().u8(TorchOp.APPEND).bytes(k).bytes(v).finish()),
    );
  }

  /** {@inheritDoc Store.add} */
  async add(key: string, delta: number): Promise<number> {
    const k = this.#key(key);
    checkDelta(delta);
    return await this.#serial(`add to key ${JSON.stringify(key)}`, async (c) => {
      await c.send(new TorchWriter().u8(TorchOp.ADD).bytes(k).i64(delta).finish());
      return await c.reply((q) => q.i64());
    }, " (torch's server closes the connection when add() finds a value that is not a decimal integer)");
  }

  /** {@inheritDoc Store.compareSet} */
  async compareSet(key: string, expected: StoreValue, desired: StoreValue): Promise<Uint8Array> {
    const k = this.#key(key);
    const e = checkValue(expected);
    const d = checkValue(desired);
    return await this.#serial(`compare-and-set key ${JSON.stringify(key)}`, async (c) => {
      await c.send(new TorchWriter().u8(TorchOp.COMPARE_SET).bytes(k).bytes(e).bytes(d).finish());
      return await c.reply((q) => q.bytes(Number.MAX_SAFE_INTEGER, "value"));
    });
  }

  /** {@inheritDoc Store.delete} */
  async delete(key: string): Promise<boolean> {
    const k = this.#key(key);
    return await this.#serial(`delete key ${JSON.stringify(key)}`, async (c) => {
      await c.send(new TorchWriter().u8(TorchOp.DELETE_KEY).bytes(k).finish());
      return await c.reply((q) => q.i64()) === 1;
    });
  }

  /** {@inheritDoc Store.numKeys} */
  async numKeys(): Promise<number> {
    return await this.#serial("count the keys", async (c) => {
      await c.send(new TorchWriter().u8(TorchOp.GETNUMKEYS).finish());
      return await c.reply((q) => q.i64());
    });
  }

  /** {@inheritDoc Store.check} */
  async check(keys: readonly string[]): Promise<boolean> {
    const ks = this.#keys(keys);
    if (ks.length === 0) return true;
    return await this.#serial(`check ${nameKeys(keys)}`, async (c) => {
      const w = new TorchWriter().u8(TorchOp.CHECK).u64(ks.length);
      for (const k of ks) w.bytes(k);
      await c.send(w.finish());
      const reply = await c.reply((q) => q.u8());
      if (reply !== CheckReply.READY && reply !== CheckReply.NOT_READY) {
        throw new StoreError(`The store at ${this.#address} answered CHECK with ${reply}, expected 0 or 1`);
      }
      return reply === CheckReply.READY;
    });
  }

  /** Closes every connection: pending calls reject with a StoreError, and so do later calls. */
  close(): Promise<void> {
    if (!this.#closed.signal.aborted) {
      const why = new Error("the TorchStore client was closed");
      this.#closed.abort(new StoreError(`Cannot use the store at ${this.#address}: ${why.message}`));
      for (const c of [this.#main, ...this.#idle, ...this.#busy]) c.close(why);
      this.#idle.length = 0;
    }
    return Promise.resolve();
  }

  /** Lets the process exit while no call is pending (calls made later still work). */
  unref(): void {
    this.#unref = true;
    for (const c of [this.#main, ...this.#idle, ...this.#busy]) c.unref();
  }

  /** Undoes {@linkcode TorchStore.unref}. */
  ref(): void {
    this.#unref = false;
    for (const c of [this.#main, ...this.#idle, ...this.#busy]) c.ref();
  }

  /** Same as {@linkcode TorchStore.close}, for `await using`. */
  [Symbol.asyncDispose](): Promise<void> {
    return this.close();
  }

  #key(key: string): Uint8Array {
    checkKey(key);
    const bytes = encoder.encode(this.#prefix + key);
    if (bytes.length > MAX_KEY_BYTES) {
      throw new RangeError(
        `Invalid store key: torch's store takes keys of at most ${MAX_KEY_BYTES} bytes (with the prefix ` +
          `${JSON.stringify(this.#prefix)}), found ${bytes.length}`,
      );
    }
    return bytes;
  }

  #keys(keys: readonly string[]): Uint8Array[] {
    checkKeys(keys);
    if (keys.length > MAX_KEY_COUNT) {
      throw new RangeError(
        `Invalid store keys: torch's store takes at most ${MAX_KEY_COUNT} keys per call, found ${keys.length}`,
      );
    }
    return keys.map((k) => this.#key(k));
  }

  /**
   * Runs `run` on the main connection after every call before it, within the store's `timeoutMs` counted
   * from now: a call still queued then is never sent, one under way closes the connection.
   */
  #serial<T>(what: string, run: (c: TorchConn) => Promise<T>, hint = ""): Promise<T> {
    const timeoutMs = this.#timeoutMs;
    const started = performance.now();
    return waitWithDeadline<T>((resolve, reject) => {
      let abandoned = false;
      let running: TorchConn | undefined;
      const stop = new AbortController();
      const result = this.#chain.then(async () => {
        if (abandoned) return undefined as T; // timed out while queued: never sent
        if (this.#closed.signal.aborted) {
          throw new StoreError(`Cannot ${what}: the TorchStore client was closed`);
        }
        const c = await this.#mainConn(
          what,
          timeoutMs,
          timeoutMs - (performance.now() - started),
          stop.signal,
        );
        running = c;
        try {
          return await run(c);
        } catch (error) {
          if (error instanceof StoreError && c.down) {
            throw new StoreError(`Cannot ${what}: ${error.message}${hint}`, { cause: error });
          }
          throw error;
        } finally {
          running = undefined;
        }
      });
      result.then(resolve, reject);
      this.#chain = result.catch(() => {});
      return () => {
        abandoned = true;
        stop.abort(new Error("timed out"));
        if (running !== undefined) {
          // No request ids in torch's protocol: a reply that comes later would be read as the next call's.
          this.#mainTimedOut = true;
          running.close(new Error(`the server did not answer ${what} within ${timeoutMs} ms`));
        }
      };
    }, {
      timeoutMs,
      what: `the store at ${this.#address} to answer ${what}`,
      where: "",
      timeoutDetail: () =>
        " (the server accepted the connection but stopped answering: is its host up, running and reachable?)",
    });
  }

  /** The main connection; one closed by a timeout is replaced, within what is left of the call's time. */
  async #mainConn(
    what: string,
    timeoutMs: number,
    remainingMs: number,
    stop: AbortSignal,
  ): Promise<TorchConn> {
    if (this.#main.down === undefined || !this.#mainTimedOut) return this.#main; // a lost one fails the call
    let c: TorchConn;
    try {
      c = await openWithRetry(this.#hostname, this.#port, this.#address, Math.max(0, remainingMs), stop);
    } catch (error) {
      if (error instanceof TimeoutError) {
        throw new TimeoutError(
          `Timed out after ${timeoutMs} ms waiting for the store at ${this.#address} to answer ${what}: ` +
            `cannot open another connection (${error.message})`,
          { cause: error },
        );
      }
      throw error;
    }
    if (this.#closed.signal.aborted) {
      c.close(new Error("the TorchStore client was closed"));
      throw new StoreError(`Cannot ${what}: the TorchStore client was closed`);
    }
    if (this.#unref) c.unref();
    this.#main = c;
    this.#mainTimedOut = false;
    return c;
  }

  /**
   * Awaits `step` on `c` until `deadline` (`performance.now()` time): past it, `c` is closed (its state is
   * unknown) and a TimeoutError names the call.
   */
  async #within<T>(
    c: TorchConn,
    what: string,
    timeoutMs: number,
    deadline: number,
    step: Promise<T>,
  ): Promise<T> {
    step.catch(() => {}); // (its rejection once `c` is closed is expected)
    const left = Math.max(0, deadline - performance.now());
    if (left > 2 ** 31 - 1) return await step; // no deadline (setTimeout would fire at once)
    let timer: ReturnType<typeof setTimeout> | undefined;
    const late = new Promise<never>((_, reject) => {
      timer = setTimeout(() => {
        c.close(new Error(`the server did not answer ${what} within ${timeoutMs} ms`));
        reject(
          new TimeoutError(
            `Timed out after ${timeoutMs} ms waiting for the store at ${this.#address} to answer ${what} (the ` +
              "server accepted the connection but stopped answering: is its host up, running and reachable?)",
          ),
        );
      }, left);
    });
    try {
      return await Promise.race([step, late]);
    } finally {
      clearTimeout(timer);
    }
  }

  /** WAITs for `wire` keys on a connection of its own, then runs `after` on it. */
  async #blocking<T>(
    what: string,
    keys: readonly string[],
    wire: Uint8Array[],
    options: StoreWaitOptions,
    after: (c: TorchConn) => Promise<T>,
  ): Promise<T> {
    const timeoutMs = checkTimeout(options.timeoutMs ?? this.#timeoutMs);
    if (this.#closed.signal.aborted) throw new StoreError(`Cannot ${what}: the TorchStore client was closed`);
    if (options.signal?.aborted) throw options.signal.reason;
    const started = performance.now();
    const deadline = started + timeoutMs;
    const c = await this.#borrow(what, timeoutMs, options.signal);
    let healthy = true;
    try {
      const w = new TorchWriter().u8(TorchOp.WAIT).u64(wire.length);
      for (const k of wire) w.bytes(k);
      await this.#within(c, what, timeoutMs, deadline, c.send(w.finish()));
      const remaining = Math.max(0, deadline - performance.now());
      await waitWithDeadline<void>((resolve, reject) => {
        const answer = c.reply((q) => q.u8());
        answer.then((b) => {
          if (b === WaitReply.STOP_WAITING) resolve();
          else {reject(
              new StoreError(
                `The store at ${this.#address} answered WAIT with ${b}, expected 0 (STOP_WAITING)`,
              ),
            );}
        }, reject);
        return () => {
          healthy = false;
          this.#cancel(c, answer);
        };
      }, {
        timeoutMs: remaining,
        reportMs: timeoutMs,
        signal: options.signal,
        closed: this.#closed.signal,
        what: nameKeys(keys),
        where: ` in the store at ${this.#address}`,
      });
      // Released: the value (of a get) follows at once, unless the server stopped answering meanwhile.
      return await this.#within(c, what, timeoutMs, deadline, after(c));
    } catch (error) {
      if (c.down) healthy = false;
      if (error instanceof StoreError && c.down && !this.#closed.signal.aborted) {
        throw new StoreError(`Cannot ${what}: ${error.message}`, { cause: error });
      }
      throw error;
    } finally {
      this.#busy.delete(c);
      if (healthy) this.#giveBack(c);
    }
  }

  /** An idle connection, or a new one. */
  async #borrow(what: string, timeoutMs: number, signal?: AbortSignal): Promise<TorchConn> {
    let c = this.#idle.pop();
    while (c !== undefined && c.down) c = this.#idle.pop();
    if (c === undefined) {
      try {
        c = await openWithRetry(
          this.#hostname,
          this.#port,
          this.#address,
          Math.min(timeoutMs, 30_000),
          signal,
        );
      } catch (error) {
        if (error instanceof TimeoutError || error instanceof StoreError) {
          throw new StoreError(
            `Cannot ${what}: cannot open another connection to the store at ${this.#address} (${error.message})`,
            { cause: error },
          );
        }
        throw error;
      }
      if (this.#closed.signal.aborted) {
        c.close(new Error("the TorchStore client was closed"));
        throw new StoreError(`Cannot ${what}: the TorchStore client was closed`);
      }
      if (this.#unref) c.unref();
    }
    this.#busy.add(c);
    return c;
  }

  #giveBack(c: TorchConn): void {
    if (c.down) return;
    if (this.#closed.signal.aborted || this.#idle.length >= MAX_IDLE) c.close(new Error("no longer needed"));
    else this.#idle.push(c);
  }

  /** Cancels the WAIT pending on `c`; `c` goes back to the pool once the server confirmed it. */
  #cancel(c: TorchConn, answer: Promise<number>): void {
    this.#busy.add(c);
    const timer = setTimeout(
      () => c.close(new Error(`the server did not confirm CANCEL_WAIT within ${CANCEL_REPLY_MS} ms`)),
      CANCEL_REPLY_MS,
    );
    Deno.unrefTimer(timer);
    (async () => {
      await c.send(new TorchWriter().u8(TorchOp.CANCEL_WAIT).finish());
      // A STOP_WAITING may have crossed the cancel: then WAIT_CANCELED follows it.
      let b = await answer;
      if (b === WaitReply.STOP_WAITING) b = await c.reply((q) => q.u8());
      if (b !== WaitReply.WAIT_CANCELED) throw new Error(`CANCEL_WAIT answered with ${b}`);
    })().then(
      () => {
        clearTimeout(timer);
        this.#busy.delete(c);
        this.#giveBack(c);
      },
      (error) => {
        clearTimeout(timer);
        this.#busy.delete(c);
        c.close(error instanceof Error ? error : new Error(String(error)));
      },
    );
  }
}

/** Opens a validated connection, retrying refused ones until `timeoutMs`. */
function openWithRetry(
  hostname: string,
  port: number,
  address: string,
  timeoutMs: number,
  signal: AbortSignal | undefined,
): Promise<TorchConn> {
  return retryUntil((stop) => TorchConn.open(hostname, port, address, stop), {
    timeoutMs,
    signal,
    timeout: (last) =>
      `Cannot connect to the torch store at ${address}: no torch TCPStore answered within ${timeoutMs} ms ` +
      `(last error: ${last})`,
  });
}

function checkValue(value: StoreValue): Uint8Array {
  const bytes = valueBytes(value);
  if (bytes.length > MAX_VALUE_BYTES) {
    throw new RangeError(
      `Invalid store value: torch's store takes values of at most ${MAX_VALUE_BYTES} bytes (its libuv server ` +
        `closes the connection on a larger one), found ${bytes.length}`,
    );
  }
  return bytes;
}

function messageOf(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}
