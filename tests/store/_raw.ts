/**
 * Speaking the stores' wire protocols by hand, for tests that play a misbehaving peer: raw connections to a
 * {@linkcode TcpStoreServer}, fake servers (one that authenticates and then goes silent, one that squats on
 * a port), and a bound on how long a test waits for a promise, so that a hang fails the test instead of
 * hanging it.
 *
 * @module
 */
import assert from "node:assert/strict";
import { encodeFrame, type Field, Op, PROTOCOL_VERSION, Reply } from "../../store/_protocol.ts";

/** One frame as read off the wire. */
export interface RawFrame {
  readonly id: number;
  readonly op: number;
  readonly body: Uint8Array;
}

/** Reads exactly `n` bytes. */
export async function readBytes(conn: Deno.Conn, n: number): Promise<Uint8Array> {
  const out = new Uint8Array(n);
  for (let at = 0; at < n;) {
    const got = await conn.read(out.subarray(at));
    if (got === null) throw new Error(`Connection closed after ${at} of ${n} bytes`);
    at += got;
  }
  return out;
}

/** Reads one whole frame (its length prefix says how long). */
export async function readFrame(conn: Deno.Conn): Promise<RawFrame> {
  const prefix = await readBytes(conn, 4);
  const length = new DataView(prefix.buffer).getUint32(0, true);
  const rest = await readBytes(conn, length);
  return { id: new DataView(rest.buffer).getUint32(0, true), op: rest[4], body: rest.subarray(5) };
}

/** A raw connection that has read the server's first frame (HELLO, or a refusal). */
export async function rawConnect(port: number): Promise<{ conn: Deno.TcpConn; first: RawFrame }> {
  const conn = await Deno.connect({ hostname: "127.0.0.1", port });
  return { conn, first: await readFrame(conn) };
}

/** A raw connection that has read HELLO. */
export async function rawHello(port: number): Promise<Deno.TcpConn> {
  const { conn, first } = await rawConnect(port);
  assert.equal(first.op, Reply.HELLO);
  return conn;
}

/** Authenticates a raw connection to a server without a secret (the AUTH of every protocol version since 2). */
export async function rawAuthenticate(conn: Deno.TcpConn): Promise<RawFrame> {
  const nonce = crypto.getRandomValues(new Uint8Array(32));
  await conn.write(encodeFrame(0, Op.AUTH, [{ u8: PROTOCOL_VERSION }, { raw: nonce }]));
  const reply = await readFrame(conn);
  assert.equal(reply.op, Reply.AUTH_OK);
  return reply;
}

/** Reads until the server closes the connection; true if it did within `ms`. The frames read come back too. */
export async function closedByPeer(conn: Deno.TcpConn, ms = 2_000): Promise<boolean> {
  const buffer = new Uint8Array(1024);
  const timer = setTimeout(() => conn.close(), ms);
  try {
    while (await conn.read(buffer) !== null) { /* drain */ }
    return true;
  } catch (error) {
    return !(error instanceof Deno.errors.BadResource || error instanceof Deno.errors.Interrupted);
  } finally {
    clearTimeout(timer);
    try {
      conn.close();
    } catch { /* closed by the timer */ }
  }
}

/** What {@linkcode settleWithin} saw. */
export type Settled<T> =
  | { settled: false }
  | { settled: true; ok: true; value: T; ms: number }
  | { settled: true; ok: false; error: unknown; ms: number };

/** Waits at most `ms` for `promise`; a promise still pending then is reported, not waited for. */
export async function settleWithin<T>(promise: Promise<T>, ms: number): Promise<Settled<T>> {
  const start = performance.now();
  let timer: ReturnType<typeof setTimeout> | undefined;
  const timeout = new Promise<Settled<T>>((resolve) =>
    timer = setTimeout(() => resolve({ settled: false }), ms)
  );
  try {
    return await Promise.race([
      promise.then(
        (value): Settled<T> => ({ settled: true, ok: true, value, ms: performance.now() - start }),
        (error): Settled<T> => ({ settled: true, ok: false, error, ms: performance.now() - start }),
      ),
      timeout,
    ]);
  } finally {
    clearTimeout(timer);
  }
}

/** The error `promise` rejects with within `ms`; fails the test when it resolves or is still pending. */
export async function rejectsWithin(promise: Promise<unknown>, ms: number, what: string): Promise<Error> {
  const outcome = await settleWithin(promise, ms);
  assert.ok(outcome.settled, `${what} still pending after ${ms} ms`);
  assert.ok(!outcome.ok, `${what} resolved: ${JSON.stringify(outcome.ok && outcome.value)}`);
  assert.ok(outcome.error instanceof Error, `${what} rejected with ${String(outcome.error)}`);
  return outcome.error;
}

/** A fake server on a free loopback port; closing it closes every connection it accepted. */
export interface FakeServer extends AsyncDisposable {
  readonly port: number;
  /** Connections accepted so far. */
  readonly accepted: number;
}

/**
 * A fake server: `serve` runs for each connection (it may return while the connection stays open: the
 * server keeps it until it closes).
 */
export function fakeServer(serve: (conn: Deno.TcpConn) => Promise<void>): FakeServer {
  const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const conns = new Set<Deno.TcpConn>();
  let accepted = 0;
  const loop = (async () => {
    for (;;) {
      let conn: Deno.TcpConn;
      try {
        conn = await listener.accept();
      } catch {
        return;
      }
      accepted++;
      conns.add(conn);
      serve(conn).catch(() => {});
    }
  })();
  return {
    port: listener.addr.port,
    get accepted() {
      return accepted;
    },
    async [Symbol.asyncDispose](): Promise<void> {
      listener.close();
      for (const conn of conns) {
        try {
          conn.close();
        } catch { /* closed already */ }
      }
      await loop;
    },
  };
}

/** Reads and drops everything a connection sends until it closes. */
export async function drain(conn: Deno.Conn): Promise<void> {
  const sink = new Uint8Array(64 * 1024);
  try {
    while (await conn.read(sink) !== null) { /* dropped */ }
  } catch { /* closed */ }
}

/** Options of {@linkcode fakeDcommServer}. */
export interface FakeDcommOptions {
  /** HELLO's flags (bit 0: "secret required"). @default {0} */
  flags?: number;
  /** The body of the AUTH_OK it answers with. @default {an idle timeout of 0 (none) and no proof} */
  authOk?: Field[];
  /** After AUTH_OK: keep reading (and never answer), or stop reading altogether. @default {"read"} */
  then?: "read" | "stop";
}

/**
 * A fake dcomm store server: it says HELLO, accepts any AUTH, then never answers another request (a
 * server whose host was stopped, or cut off, after the client connected).
 */
export function fakeDcommServer(options: FakeDcommOptions = {}): FakeServer {
  return fakeServer(async (conn) => {
    const nonce = crypto.getRandomValues(new Uint8Array(32));
    await conn.write(
      encodeFrame(0, Reply.HELLO, [{ u8: PROTOCOL_VERSION }, { u8: options.flags ?? 0 }, { raw: nonce }]),
    );
    const auth = await readFrame(conn);
    await conn.write(encodeFrame(auth.id, Reply.AUTH_OK, options.authOk ?? [{ raw: new Uint8Array(4) }]));
    if ((options.then ?? "read") === "read") await drain(conn);
  });
}
