/**
 * {@linkcode TorchStoreServer}: a server of PyTorch's c10d `TCPStore` protocol (`_torch_protocol.ts`), so
 * that torch's own clients — `torch.distributed.TCPStore(is_master=False)`, `init_process_group` with
 * `tcp://` or `env://` — and dcomm's {@linkcode TorchStore} can share one store in a job that mixes Python
 * and Deno ranks. The launcher serves it with `--store-protocol torch`.
 *
 * It has **no secret**, as torch's store has none: anyone who reaches its port can read and write every
 * key. Bind it to loopback, or to a network only the job's hosts reach (bound beyond loopback, it says so
 * in one warning line when it starts). dcomm's own {@linkcode TcpStoreServer} (mutual challenge–response
 * secret) is the default for dcomm-only jobs; the security model is in `docs/store.md`.
 *
 * One event loop serves every client, one request at a time, which makes every operation atomic. A WAIT
 * parks until its keys are set; a client that breaks the protocol or a limit (keys over 8 KiB, values over
 * 8 MiB, as torch's libuv server) has its connection closed and costs one log line (at most 5 such lines a
 * second, then one counting the ones left out). Connections are capped (`maxConnections`): torch's protocol
 * cannot say why, so one over the cap is closed at once, with a log line.
 *
 * @module
 */
import { StoreError } from "../core/errors.ts";
import { Acceptor, defaultMaxConnections, formatAddr, isLoopbackHost } from "./_acceptor.ts";
import { LogLimiter } from "./_log.ts";
import { KeyTable } from "./_table.ts";
import {
  ByteQueue,
  CheckReply,
  INCOMPLETE,
  MAX_VALUE_BYTES,
  TorchOp,
  TorchProtocolError,
  TorchWriter,
  VALIDATION_MAGIC,
  WaitReply,
} from "./_torch_protocol.ts";

/**
 * Options of {@linkcode TorchStoreServer.listen}.
 *
 * @example The store of a job with Python ranks, on a free port (torch's protocol has no secret)
 * ```ts
 * import { TorchStoreServer, type TorchStoreServerOptions } from "@dcomm/dcomm/store";
 * import assert from "node:assert/strict";
 * const options: TorchStoreServerOptions = {
 *   hostname: "127.0.0.1",
 *   port: 0,
 *   log: (line) => console.error(line),
 * };
 * await using server = await TorchStoreServer.listen(options);
 * assert.ok(server.port > 0); // MASTER_PORT for `torch.distributed.init_process_group("gloo")`
 * ```
 */
export interface TorchStoreServerOptions {
  /** The address to bind; `"0.0.0.0"` for jobs across hosts (there is no secret). @default {"127.0.0.1"} */
  hostname?: string;
  /** The port to bind; 0 picks a free one. @default {0} */
  port?: number;
  /**
   * The most connections served at once; one more is closed at once (torch's protocol has no way to say
   * why: the log line does).
   *
   * @default {half this process's limit on open files, between 16 and 4096 (512 where it cannot be read)}
   */
  maxConnections?: number;
  /**
   * Receives the warning of a server bound beyond loopback, and one line per connection closed for breaking
   * the protocol or over the cap (at most 5 such lines a second, then one counting the ones left out).
   *
   * @default {console.warn}
   */
  log?: (message: string) => void;
}

interface Session {
  readonly conn: Deno.TcpConn;
  readonly peer: string;
  readonly queue: ByteQueue;
  validated: boolean;
  /** Drops this connection's parked WAIT, if one is parked. */
  waiting: (() => void) | undefined;
  closed: boolean;
  writes: Promise<void>;
  done?: Promise<void>;
}

/** Unsupported torch queries, named in the log line of the connection they close. */
const UNSUPPORTED: Readonly<Record<number, string>> = {
  14: "QUEUE_PUSH",
  15: "QUEUE_POP",
  16: "QUEUE_LEN",
};

/**
 * A server of torch's TCPStore protocol.
 *
 * @example torch's protocol on both ends, in one process
 * ```ts
 * import { TorchStore, TorchStoreServer, type TorchStoreServerOptions } from "@dcomm/dcomm/store";
 * import assert from "node:assert/strict";
 *
 * const options: TorchStoreServerOptions = { hostname: "127.0.0.1", port: 0 };
 * await using server = await TorchStoreServer.listen(options);
 * await using store = await TorchStore.connect({ port: server.port, timeoutMs: 10_000 });
 * await store.set("world_size", "4");
 * assert.equal(await store.numKeys(), 1);
 * ```
 */
export class TorchStoreServer implements AsyncDisposable {
  #acceptor: Acceptor<Session>;
  #log: LogLimiter;
  #table = new KeyTable();

  private constructor(
    bind: { hostname: string; port: number },
    maxConnections: number,
    options: TorchStoreServerOptions,
  ) {
    const log = options.log ?? console.warn;
    let address = `${bind.hostname}:${bind.port}`;
    this.#log = new LogLimiter((line) => log(`torch store server ${address}: ${line}`));
    this.#acceptor = new Acceptor(
      bind,
      "torch store server",
      (conn) => this.#open(conn),
      (l) => this.#report(l),
      {
        maxSessions: maxConnections,
        refuse: (conn, open) => {
          this.#report(
            `refused ${formatAddr(conn.remoteAddr)}: ${open} connections open, the limit (maxConnections)`,
          );
          return Promise.resolve();
        },
      },
    );
    address = this.address;
    if (!isLoopbackHost(bind.hostname)) {
      this.#log.always(
        "WARNING: torch's TCPStore protocol has no secret: anyone who reaches this port can read, change and " +
          "delete every key (the world's addresses and tokens); bind loopback or a network only the job's hosts " +
          "reach, or use dcomm's protocol with DCOMM_STORE_SECRET (see docs/store.md)",
      );
    }
  }

  /**
   * Binds the address and starts serving.
   *
   * @param options The address and the log.
   * @returns The running server.
   * @throws {TypeError | RangeError} If an option is invalid.
   * @throws {StoreError} If the address cannot be bound; the cause says why.
   */
  static listen(options: TorchStoreServerOptions = {}): Promise<TorchStoreServer> {
    try {
      return Promise.resolve(TorchStoreServer.#bind(options));
    } catch (error) {
      return Promise.reject(error);
    }
  }

  static #bind(options: TorchStoreServerOptions): TorchStoreServer {
    const hostname = options.hostname ?? "127.0.0.1";
    const port = options.port ?? 0;
    if (typeof hostname !== "string" || hostname.length === 0) {
      throw new TypeError(`Invalid hostname: expected a non-empty string, found ${String(hostname)}`);
    }
    if (!Number.isInteger(port) || port < 0 || port > 65535) {
      throw new RangeError(`Invalid port: expected an integer from 0 to 65535, found ${String(port)}`);
    }
    if (options.log !== undefined && typeof options.log !== "function") {
      throw new TypeError(`Invalid log: expected a function, found ${typeof options.log}`);
    }
    const maxConnections = options.maxConnections ?? defaultMaxConnections();
    if (!Number.isInteger(maxConnections) || maxConnections < 1) {
      throw new RangeError(
        `Invalid maxConnections: expected a positive integer, found ${String(maxConnections)}`,
      );
    }
    return new TorchStoreServer({ hostname, port }, maxConnections, options);
  }

  /** The address the server is bound to. */
  get hostname(): string {
    return this.#acceptor.addr.hostname;
  }

  /** The port the server is bound to. */
  get port(): number {
    return this.#acceptor.addr.port;
  }

  /** `hostname:port`. */
  get address(): string {
    return formatAddr(this.#acceptor.addr);
  }

  /** The number of connections open now. */
  get connections(): number {
    return this.#acceptor.sessions.size;
  }

  /** The number of keys with a parked WAIT (for tests of cleanup). */
  get waitedKeys(): number {
    return this.#table.waitedKeys;
  }

  /** Stops listening and closes every connection; the keys are dropped. Closing twice is a no-op. */
  async close(): Promise<void> {
    if (await this.#acceptor.close((session) => this.#closeConn(session))) this.#table.clear();
    this.#log.close();
  }

  /** Lets the process exit while the server idles (see `TcpStoreServer.unref`). */
  unref(): void {
    this.#acceptor.unref();
  }

  /** Undoes {@linkcode TorchStoreServer.unref}. */
  ref(): void {
    this.#acceptor.ref();
  }

  /** Same as {@linkcode TorchStoreServer.close}, for `await using`. */
  [Symbol.asyncDispose](): Promise<void> {
    return this.close();
  }

  #open(conn: Deno.TcpConn): Session {
    const session: Session = {
      conn,
      peer: formatAddr(conn.remoteAddr),
      queue: new ByteQueue(),
      validated: false,
      waiting: undefined,
      closed: false,
      writes: Promise.resolve(),
    };
    session.done = this.#serve(session);
    return session;
  }

  async #serve(session: Session): Promise<void> {
    const { conn, queue } = session;
    try {
      for (;;) {
        let n: number | null;
        try {
          n = await conn.read(queue.space());
        } catch {
          break; // reset by the peer, or closed by us
        }
        if (n === null) break;
        queue.wrote(n);
        while (!session.closed && queue.available > 0) {
          try {
            this.#handle(session);
            queue.commit();
          } catch (error) {
            queue.rollback();
            if (error === INCOMPLETE) break;
            throw error;
          }
        }
        if (session.closed) break;
      }
    } catch (error) {
      if (!session.closed) {
        const why = error instanceof TorchProtocolError || error instanceof StoreError
          ? error.message
          : `internal error: ${messageOf(error)}`;
        this.#report(`closed the connection from ${session.peer}: ${why}`);
      }
    } finally {
      await session.writes;
      this.#closeConn(session);
      this.#acceptor.sessions.delete(session);
    }
  }

  /** Parses and runs one query; throws INCOMPLETE (nothing done yet) until all of it has arrived. */
  #handle(session: Session): void {
    const q = session.queue;
    const op = q.u8();
    if (!session.validated) {
      if (op !== TorchOp.VALIDATE) {
        throw new TorchProtocolError(
          `expected torch's VALIDATE query (0) first, found byte ${op}`,
        );
      }
      const magic = q.u32();
      if (magic !== VALIDATION_MAGIC) {
        throw new TorchProtocolError(
          `expected torch's validation magic 0x${VALIDATION_MAGIC.toString(16)}, found 0x${
            magic.toString(16)
          }`,
        );
      }
      session.validated = true;
      return;
    }
    const table = this.#table;
    switch (op) {
      case TorchOp.PING:
        return this.#send(session, new TorchWriter().u32(q.u32()));
      case TorchOp.SET: {
        const key = q.key();
        table.set(key, q.bytes(MAX_VALUE_BYTES, "value"));
        return;
      }
      case TorchOp.COMPARE_SET: {
        const key = q.key();
        const expected = q.bytes(MAX_VALUE_BYTES, "value");
        const desired = q.bytes(MAX_VALUE_BYTES, "value");
        return this.#send(session, new TorchWriter().bytes(table.compareSet(key, expected, desired)));
      }
      case TorchOp.GET: {
        const key = q.key();
        return this.#send(session, new TorchWriter().bytes(table.get(key) ?? new Uint8Array()));
      }
      case TorchOp.ADD: {
        const key = q.key();
        const delta = q.i64();
        // torch's server closes the connection on a value that is not an integer; so does this one (the
        // protocol has no error reply), with the reason in its log line.
        return this.#send(session, new TorchWriter().i64(table.add(key, delta)));
      }
      case TorchOp.CHECK: {
        const keys = this.#keys(q);
        return this.#send(
          session,
          new TorchWriter().u8(table.hasAll(keys) ? CheckReply.READY : CheckReply.NOT_READY),
        );
      }
      case TorchOp.WAIT: {
        const keys = this.#keys(q);
        if (session.waiting !== undefined) throw new TorchProtocolError("a second WAIT while one is parked");
        let fired = false;
        const drop = table.whenAll(keys, () => {
          fired = true;
          session.waiting = undefined;
          this.#send(session, new TorchWriter().u8(WaitReply.STOP_WAITING));
        });
        if (!fired) session.waiting = drop;
        return;
      }
      case TorchOp.CANCEL_WAIT:
        session.waiting?.();
        session.waiting = undefined;
        return this.#send(session, new TorchWriter().u8(WaitReply.WAIT_CANCELED));
      case TorchOp.GETNUMKEYS:
        return this.#send(session, new TorchWriter().i64(table.size));
      case TorchOp.DELETE_KEY:
        return this.#send(session, new TorchWriter().i64(table.delete(q.key()) ? 1 : 0));
      case TorchOp.APPEND: {
        const key = q.key();
        const tail = q.bytes(MAX_VALUE_BYTES, "value");
        const head = table.get(key);
        if (head === undefined) return table.set(key, tail);
        const joined = new Uint8Array(head.length + tail.length);
        joined.set(head);
        joined.set(tail, head.length);
        return table.set(key, joined);
      }
      case TorchOp.MULTI_GET: {
        const keys = this.#keys(q);
        const w = new TorchWriter();
        for (const key of keys) w.bytes(table.get(key) ?? new Uint8Array());
        return this.#send(session, w);
      }
      case TorchOp.MULTI_SET: {
        const n = q.count();
        const entries: [string, Uint8Array][] = [];
        for (let i = 0; i < n; i++) entries.push([q.key(), q.bytes(MAX_VALUE_BYTES, "value")]);
        for (const [key, value] of entries) table.set(key, value);
        return;
      }
      case TorchOp.VALIDATE:
        throw new TorchProtocolError("VALIDATE sent again");
      default:
        throw new TorchProtocolError(
          UNSUPPORTED[op]
            ? `torch's ${UNSUPPORTED[op]} query is not supported by this server`
            : `unknown query ${op}`,
        );
    }
  }

  #keys(q: ByteQueue): string[] {
    const n = q.count();
    const keys: string[] = [];
    for (let i = 0; i < n; i++) keys.push(q.key());
    return keys;
  }

  #send(session: Session, writer: TorchWriter): void {
    if (session.closed) return;
    const bytes = writer.finish();
    session.writes = session.writes
      .then(async () => {
        for (let off = 0; off < bytes.length && !session.closed;) {
          off += await session.conn.write(bytes.subarray(off));
        }
      })
      .catch(() => this.#closeConn(session));
  }

  /** One log line about a client, rate-limited (a throwing logger cannot hurt the server). */
  #report(line: string): void {
    this.#log.line(line);
  }

  #closeConn(session: Session): void {
    if (session.closed) return;
    session.closed = true;
    session.waiting?.();
    session.waiting = undefined;
    try {
      session.conn.close();
    } catch { /* already closed */ }
  }
}

function messageOf(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}
