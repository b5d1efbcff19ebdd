/**
 * The part every store server shares whatever protocol it speaks: a listener, the accept loop (an accept
 * that fails is retried; closing ends it), the open connections and their cap (a connection over it is
 * refused: told why where the protocol can say it, and closed), keeping the process alive or not
 * (`unref`), and closing them all; and what counts as loopback.
 *
 * @module
 */
import { openFileLimit } from "../core/os_limits.ts";
import { StoreError } from "../core/errors.ts";
import { sleep } from "./_wait.ts";

/** One served connection: the server's own state for it, with what the acceptor needs. */
export interface Served {
  /** The client's connection. */
  readonly conn: Deno.TcpConn;
  /** Settles once the server is done with the connection. */
  done?: Promise<void>;
}

/** Connections being refused at once, beyond which one more is closed without a word. */
const MAX_REFUSING = 64;
/** How long a refusal's write may take before its connection is closed anyway. */
const REFUSAL_MS = 1_000;

/** The cap on an {@linkcode Acceptor}'s connections, and how one over it is refused. */
export interface AcceptorLimits {
  /** The most connections served at once. */
  maxSessions: number;
  /**
   * Tells a connection over the cap why it is refused (and logs it); the acceptor closes it afterwards.
   *
   * @param conn The connection.
   * @param open The number of connections open.
   */
  refuse: (conn: Deno.TcpConn, open: number) => Promise<void>;
}

/** A listener and the connections it accepted. */
export class Acceptor<S extends Served> {
  /** The connections open now. */
  readonly sessions: Set<S> = new Set();
  readonly #listener: Deno.TcpListener;
  readonly #stop = new AbortController();
  readonly #accepting: Promise<void>;
  readonly #limits: AcceptorLimits;
  /** Connections over the cap being told so, with the promise that ends when they are closed. */
  readonly #refusing = new Map<Deno.TcpConn, Promise<void>>();
  #unref = false;

  /**
   * Binds `hostname:port` and starts accepting.
   *
   * @param bind The address.
   * @param what The server's name, for the bind error (`store server`, `torch store server`).
   * @param open Makes a connection's session and starts serving it (its `done` settles when it ends); the
   *   acceptor adds it to {@linkcode Acceptor.sessions}, the server deletes it when it ends.
   * @param report Receives a line when an accept fails.
   * @param limits The cap on connections, and how one over it is refused.
   * @throws {StoreError} If the address cannot be bound.
   */
  constructor(
    bind: { hostname: string; port: number },
    what: string,
    open: (conn: Deno.TcpConn) => S,
    report: (line: string) => void,
    limits: AcceptorLimits,
  ) {
    this.#limits = limits;
    try {
      this.#listener = Deno.listen({ ...bind, transport: "tcp" });
    } catch (error) {
      const why = error instanceof Error ? error.message : String(error);
      throw new StoreError(`Cannot start the ${what} on ${bind.hostname}:${bind.port}: ${why}`, {
        cause: error,
      });
    }
    this.#accepting = this.#loop(open, report);
  }

  /** The address bound. */
  get addr(): Deno.NetAddr {
    return this.#listener.addr;
  }

  /** Whether {@linkcode Acceptor.close} was called. */
  get stopped(): boolean {
    return this.#stop.signal.aborted;
  }

  /**
   * Stops accepting, closes every connection with `closeSession` and waits until each is done. Once only.
   *
   * @returns Whether this call closed it (false when it was closed already).
   */
  async close(closeSession: (session: S) => void): Promise<boolean> {
    if (this.#stop.signal.aborted) return false;
    this.#stop.abort();
    try {
      this.#listener.close();
    } catch { /* already closed */ }
    await this.#accepting;
    for (const conn of this.#refusing.keys()) closeQuietly(conn);
    await Promise.all(this.#refusing.values());
    const sessions = [...this.sessions];
    for (const session of sessions) closeSession(session);
    await Promise.all(sessions.map((session) => session.done));
    return true;
  }

  /** The listener and every connection, present and future, stop keeping the event loop alive. */
  unref(): void {
    this.#unref = true;
    this.#listener.unref();
    for (const session of this.sessions) session.conn.unref();
  }

  /** Undoes {@linkcode Acceptor.unref}. */
  ref(): void {
    this.#unref = false;
    this.#listener.ref();
    for (const session of this.sessions) session.conn.ref();
  }

  async #loop(open: (conn: Deno.TcpConn) => S, report: (line: string) => void): Promise<void> {
    while (!this.#stop.signal.aborted) {
      let conn: Deno.TcpConn;
      try {
        conn = await this.#listener.accept();
      } catch (error) {
        if (this.#stop.signal.aborted || error instanceof Deno.errors.BadResource) return;
        report(`accept failed, retrying: ${error instanceof Error ? error.message : String(error)}`);
        await sleep(100, this.#stop.signal);
        continue;
      }
      if (this.#stop.signal.aborted) {
        conn.close();
        return;
      }
      try {
        conn.setNoDelay(true);
        conn.setKeepAlive(true);
        if (this.#unref) conn.unref();
      } catch { /* the peer already left; its read loop finds out */ }
      if (this.sessions.size >= this.#limits.maxSessions) this.#refuse(conn);
      else this.sessions.add(open(conn));
    }
  }

  /** Refuses a connection over the cap: the server tells it why (bounded in time), then it is closed. */
  #refuse(conn: Deno.TcpConn): void {
    if (this.#refusing.size >= MAX_REFUSING) return closeQuietly(conn);
    const timer = setTimeout(() => closeQuietly(conn), REFUSAL_MS);
    const done = this.#limits.refuse(conn, this.sessions.size)
      .catch(() => {})
      .finally(() => {
        clearTimeout(timer);
        closeQuietly(conn);
        this.#refusing.delete(conn);
      });
    this.#refusing.set(conn, done);
  }
}

function closeQuietly(conn: Deno.Conn): void {
  try {
    conn.close();
  } catch { /* already closed */ }
}

/**
 * Whether `hostname` names the loopback interface only: `localhost`, `127.0.0.0/8`, `::1` (bracketed or
 * not), or an IPv4-mapped `127.x.y.z`. Anything else, the wildcard addresses and other names included,
 * may be reachable from other machines.
 *
 * @param hostname An address or a name to bind.
 * @returns Whether it is loopback.
 */
export function isLoopbackHost(hostname: string): boolean {
  const host = hostname.replace(/^\[(.*)\]$/, "$1").toLowerCase();
  return host === "localhost" || host === "::1" || host === "0:0:0:0:0:0:0:1" ||
    /^(::ffff:)?127\.\d{1,3}\.\d{1,3}\.\d{1,3}$/.test(host);
}

/**
 * The default cap on a server's connections: half this process's limit on open files (the rest is left
 * to the process's other files and sockets), between 16 and 4096; 512 where the limit cannot be read
 * (no `/proc`, or no permission to read it: the cap is then below the usual limit of 1024).
 *
 * @returns The cap.
 */
export function defaultMaxConnections(): number {
  const soft = openFileLimit();
  return soft === undefined ? 512 : Math.max(16, Math.min(4096, Math.floor(soft / 2)));
}

/**
 * An address as log lines name it, `host:port` (`[v6]:port`).
 *
 * @param addr The address.
 * @returns The name.
 */
export function formatAddr(addr: Deno.Addr): string {
  if (addr.transport !== "tcp" && addr.transport !== "udp") return addr.transport;
  return addr.hostname.includes(":") ? `[${addr.hostname}]:${addr.port}` : `${addr.hostname}:${addr.port}`;
}
