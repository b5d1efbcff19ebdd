/**
 * The TCP transport's wire format (documented in full at the top of `tcp.ts`) and the two loops that move
 * bytes: {@linkcode writeAll} and {@linkcode readExact}. Nothing here knows about ranks' state; `tcp.ts`
 * and `_tcp_mesh.ts` build on it.
 *
 * @module
 */
import { DESC_BYTES } from "./transport.ts";

/** "DCTH" little-endian: the first word of every handshake. */
export const HELLO_MAGIC = 0x48544344;
/** "DCTF" little-endian: the first word of every frame header. */
export const FRAME_MAGIC = 0x46544344;
/** Bumped whenever the format changes, so mixed versions refuse each other instead of misreading. */
export const PROTOCOL_VERSION = 1;
/** Bytes of a handshake. */
export const HELLO_BYTES = 40;
/** Bytes of the world token inside a handshake. */
export const TOKEN_BYTES = 16;
/** Bytes of a frame header. */
export const HEADER_BYTES = 48;

/** A message for the layer above. */
export const FRAME_DATA = 1;
/** The sender failed; the payload is its reason in UTF-8. */
export const FRAME_ABORT = 2;
/** The sender closed the transport cleanly: its end of the stream follows, and is not a failure. */
export const FRAME_CLOSE = 3;

/** The longest ABORT reason a reader accepts; a longer one is a malformed frame. */
export const MAX_REASON_BYTES = 64 * 1024;
/** The longest ABORT reason a writer sends; longer messages are cut. */
export const SENT_REASON_BYTES = 4096;

/**
 * The smallest stripe: a message is split over `min(socketsPerPeer, floor(bytes / STRIPE_MIN_BYTES))`
 * sockets, so that a stripe is big enough to amortise a read loop on each socket.
 */
export const STRIPE_MIN_BYTES = 1 << 20;

/**
 * Payloads up to this size are copied behind their header, into a buffer each pair keeps, and sent with one
 * write: one syscall and one TCP segment instead of two, which matters more than a copy of a few KiB. (Up to
 * 1 MiB was tried: 0–5% faster per 1 MiB all-reduce on 4 emulated hosts × 2 at 1 Gb/s, within the noise, for
 * a buffer of up to 1 MiB per pair; not kept.)
 */
export const COALESCE_BYTES = 16 * 1024;

/** What a handshake says. */
export interface Hello {
  /** The sender's rank. */
  rank: number;
  /** The sender's world size. */
  size: number;
  /** Which of the pair's sockets this is. */
  socketIndex: number;
  /** The sender's sockets per pair. */
  socketsPerPeer: number;
  /** The world token. */
  token: Uint8Array;
}

/** Encodes a handshake. */
export function encodeHello(hello: Hello): Uint8Array {
  const bytes = new Uint8Array(HELLO_BYTES);
  const view = new DataView(bytes.buffer);
  view.setUint32(0, HELLO_MAGIC, true);
  view.setUint32(4, PROTOCOL_VERSION, true);
  view.setUint32(8, hello.rank, true);
  view.setUint32(12, hello.size, true);
  view.setUint16(16, hello.socketIndex, true);
  view.setUint16(18, hello.socketsPerPeer, true);
  bytes.set(hello.token, 24);
  return bytes;
}

/** Decodes a handshake; `undefined` when the magic or version is not ours (a stray connection). */
export function decodeHello(bytes: Uint8Array): Hello | undefined {
  const view = new DataView(bytes.buffer, bytes.byteOffset, HELLO_BYTES);
  if (view.getUint32(0, true) !== HELLO_MAGIC || view.getUint32(4, true) !== PROTOCOL_VERSION) {
    return undefined;
  }
  return {
    rank: view.getUint32(8, true),
    size: view.getUint32(12, true),
    socketIndex: view.getUint16(16, true),
    socketsPerPeer: view.getUint16(18, true),
    token: bytes.slice(24, 24 + TOKEN_BYTES),
  };
}

/** Compares two tokens; constant-time is not needed (the token guards against accidents, not attackers). */
export function sameToken(a: Uint8Array, b: Uint8Array): boolean {
  return a.length === b.length && a.every((byte, i) => byte === b[i]);
}

/** A decoded frame header. */
export interface Header {
  /** {@linkcode FRAME_DATA}, {@linkcode FRAME_ABORT} or {@linkcode FRAME_CLOSE}. */
  kind: number;
  /** The descriptor (a view into the header buffer: copy it to keep it). */
  desc: Uint8Array;
  /** The payload length. */
  bytes: number;
}

/**
 * Writes a frame header into `into` (at least {@linkcode HEADER_BYTES} long).
 *
 * @param into Where the header goes.
 * @param header The kind, descriptor and payload length.
 */
export function encodeHeader(into: Uint8Array, header: Header): void {
  const view = new DataView(into.buffer, into.byteOffset, HEADER_BYTES);
  view.setUint32(0, FRAME_MAGIC, true);
  view.setUint32(4, header.kind, true);
  into.set(header.desc.subarray(0, DESC_BYTES), 8);
  view.setBigUint64(40, BigInt(header.bytes), true);
}

/** Decodes a frame header; a string says what is wrong with a malformed one. */
export function decodeHeader(bytes: Uint8Array): Header | string {
  const view = new DataView(bytes.buffer, bytes.byteOffset, HEADER_BYTES);
  const magic = view.getUint32(0, true);
  if (magic !== FRAME_MAGIC) return `magic 0x${hex(magic)} instead of 0x${hex(FRAME_MAGIC)}`;
  const kind = view.getUint32(4, true);
  if (kind !== FRAME_DATA && kind !== FRAME_ABORT && kind !== FRAME_CLOSE) {
    return `unknown frame kind ${kind}`;
  }
  const bytes64 = view.getBigUint64(40, true);
  if (bytes64 > BigInt(Number.MAX_SAFE_INTEGER)) return `payload length ${bytes64} above 2^53`;
  const length = Number(bytes64);
  if (kind === FRAME_ABORT && length > MAX_REASON_BYTES) {
    return `abort reason of ${length} bytes (at most ${MAX_REASON_BYTES})`;
  }
  if (kind === FRAME_CLOSE && length !== 0) return `close frame with a ${length}-byte payload`;
  return { kind, desc: bytes.subarray(8, 8 + DESC_BYTES), bytes: length };
}

function hex(n: number): string {
  return n.toString(16).padStart(8, "0");
}

/**
 * The byte ranges `[start, end)` a payload of `bytes` is split into over `socketsPerPeer` sockets: range
 * `i` travels on socket `i`. Both ends compute the same split from the length alone.
 */
export function stripes(bytes: number, socketsPerPeer: number): Array<[number, number]> {
  const n = Math.max(1, Math.min(socketsPerPeer, Math.floor(bytes / STRIPE_MIN_BYTES)));
  const ranges: Array<[number, number]> = [];
  for (let i = 0; i < n; i++) ranges.push([Math.floor((i * bytes) / n), Math.floor(((i + 1) * bytes) / n)]);
  return ranges;
}

/**
 * Writes every byte of `data`: `conn.write` may take only part of a buffer.
 *
 * @param conn The socket.
 * @param data The bytes.
 */
export async function writeAll(conn: Deno.Conn, data: Uint8Array): Promise<void> {
  let off = 0;
  while (off < data.length) off += await conn.write(data.subarray(off));
}

/** The stream ended before a read was complete. */
export class EndOfStream extends Error {
  /** Bytes read before the end. */
  readonly got: number;
  /** @param got Bytes read before the end. */
  constructor(got: number) {
    super(`The stream ended after ${got} bytes of a read`);
    this.got = got;
  }
}

/**
 * Fills `into` from `conn`, reading straight into it. `redirect` is asked before every read whether the
 * bytes should go elsewhere (into a scratch buffer, once the caller gave up the destination) so that the
 * stream stays in step with the frames even when nobody wants the payload anymore.
 *
 * @param conn The socket.
 * @param into Where the bytes go.
 * @param redirect Returns a scratch buffer to read into instead, or `undefined` to keep reading into `into`.
 * @throws {EndOfStream} If the stream ends first.
 */
export async function readExact(
  conn: Deno.Conn,
  into: Uint8Array,
  redirect?: () => Uint8Array | undefined,
): Promise<void> {
  let off = 0;
  while (off < into.length) {
    const scratch = redirect?.();
    const target = scratch === undefined
      ? into.subarray(off)
      : scratch.subarray(0, Math.min(scratch.length, into.length - off));
    const n = await conn.read(target);
    if (n === null) throw new EndOfStream(off);
    off += n;
  }
}

/**
 * Reads and drops `bytes` bytes from `conn`.
 *
 * @param conn The socket.
 * @param bytes How many bytes to drop.
 * @param scratch Where they land meanwhile.
 * @throws {EndOfStream} If the stream ends first.
 */
export async function discardExact(conn: Deno.Conn, bytes: number, scratch: Uint8Array): Promise<void> {
  let off = 0;
  while (off < bytes) {
    const n = await conn.read(scratch.subarray(0, Math.min(scratch.length, bytes - off)));
    if (n === null) throw new EndOfStream(off);
    off += n;
  }
}

/** Closes a socket or listener that may already be closed. */
export function closeQuietly(resource: { close(): void }): void {
  try {
    resource.close();
  } catch {
    // Already closed: closing is idempotent for us.
  }
}

/** Sets the options every socket of the transport needs. */
export function tuneSocket(conn: Deno.TcpConn): void {
  // Without TCP_NODELAY a small message after a big one waits for an ACK (Nagle + delayed ACK: 40 ms).
  conn.setNoDelay(true);
  // Keepalive lets the kernel notice a peer host that vanished without a FIN (power loss, cable).
  conn.setKeepAlive(true);
}
