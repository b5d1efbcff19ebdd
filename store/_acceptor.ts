/**
 * The part every store server shares whatever protocol it speaks: a listener, the accept loop (an accept
 * that fails is retried; closing ends it), the open connections, keeping the process alive or not
 * (`unref`), and closing them all.
 *
 * @module
 */
import { StoreError } from "../core/errors.ts";
import { sleep } from "./_wait.ts";

/** One served connection: the server's own state for it, with what the acceptor needs. */
export interface Served {
  /** The client's connection. */
  readonly conn: Deno.TcpConn;
  /** Settles once the server is done with the connection. */
  done?: Promise<void>;
}

/** A listener and the connections it accepted. */
export class Acceptor<S extends Served> {
  /** The connections open now. */
  readonly sessions: Set<S> = new Set();
  readonly #listener: Deno.TcpListener;
  readonly #stop = new AbortController();
  readonly #accepting: Promise<void>;
  #unref = false;

  /**
   * Binds `hostname:port` and starts accepting.
   *
   * @param bind The address.
   * @param what The server's name, for the bind error (`store server`, `torch store server`).
   * @param open Makes a connection's session and starts serving it (its `done` settles when it ends); the
   *   acceptor adds it to {@linkcode Acceptor.sessions}, the server deletes it when it ends.
   * @param report Receives a line when an accept fails.
   * @throws {StoreError} If the address cannot be bound.
   */
  constructor(
    bind: { hostname: string; port: number },
    what: string,
    open: (conn: Deno.TcpConn) => S,
    report: (line: string) => void,
  ) {
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
      this.sessions.add(open(conn));
    }
  }
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
