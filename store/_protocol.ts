/**
 * The wire format of the TCP store: frame encoding, an incremental frame reader with a size limit, and a
 * strict body parser. The format itself is described at the top of `tcp_store.ts`.
 *
 * @module
 */

/**
 * The version carried by HELLO and AUTH; a peer with another version is refused. Version 2 made the proof
 * of the secret mutual (the client sends a nonce of its own, AUTH_OK carries the server's proof and its
 * idle timeout), and added PING, GOODBYE and the refusals before HELLO. Version 3 added MULTI_GET and
 * MULTI_SET (the one-table rendezvous reads a world's records in one request).
 */
export const PROTOCOL_VERSION = 3;
/** Bytes of the length prefix. */
export const LENGTH_BYTES = 4;
/** Bytes of a frame after the length prefix, before the body: request id (u32) and opcode (u8). */
export const HEAD_BYTES = 5;
/** The default limit on one frame, length prefix included: 64 MiB. */
export const DEFAULT_MAX_FRAME_BYTES = 64 * 1024 * 1024;
/** The limit before a peer has authenticated: an AUTH frame is far smaller. */
export const HANDSHAKE_MAX_FRAME_BYTES = 1024;
/** Bytes of the nonce the server sends in HELLO, and the client in AUTH. */
export const NONCE_BYTES = 32;

/** Request opcodes, client to server. */
export const Op = {
  AUTH: 0x01,
  SET: 0x10,
  GET: 0x11,
  WAIT: 0x12,
  ADD: 0x13,
  COMPARE_SET: 0x14,
  DELETE: 0x15,
  NUM_KEYS: 0x16,
  CHECK: 0x17,
  CANCEL: 0x18,
  PING: 0x19,
  MULTI_GET: 0x1a,
  MULTI_SET: 0x1b,
} as const;

/** Reply opcodes, server to client. */
export const Reply = {
  HELLO: 0x80,
  AUTH_OK: 0x81,
  AUTH_REFUSED: 0x82,
  OK: 0x83,
  VALUE: 0x84,
  INT: 0x85,
  BOOL: 0x86,
  ERROR: 0x87,
  GOODBYE: 0x88,
  VALUES: 0x89,
} as const;

/** The first byte of an AUTH_REFUSED body: why the client was refused. */
export const Refused = {
  SECRET: 1,
  VERSION: 2,
  /** Too many wrong secrets from the client's address: sent instead of HELLO. */
  RATE_LIMITED: 3,
  /** The server has as many connections as it takes: sent instead of HELLO. */
  BUSY: 4,
} as const;

/** The peer broke the protocol; the connection must be closed. */
export class ProtocolError extends Error {
  /**
   * @param message What was wrong, in lower case (it follows the peer's address in log lines).
   */
  constructor(message: string) {
    super(message);
    this.name = "ProtocolError";
  }
}

/** A length prefix announced a frame over the receiver's limit. */
export class FrameTooLarge extends ProtocolError {
  /**
   * @param size The frame's size, length prefix included.
   * @param limit The receiver's limit.
   */
  constructor(readonly size: number, readonly limit: number) {
    super(`frame of ${size} bytes exceeds the limit of ${limit} bytes`);
    this.name = "FrameTooLarge";
  }
}

/** One decoded frame. */
export interface Frame {
  /** The request id the reply echoes. */
  readonly id: number;
  /** An {@linkcode Op} or {@linkcode Reply}. */
  readonly op: number;
  /** The bytes after the opcode (a copy: the frame owns them). */
  readonly body: Uint8Array;
}

/** One field of a frame body. */
export type Field =
  | { readonly u8: number }
  | { readonly u32: number }
  | { readonly i64: number }
  | { readonly bytes: Uint8Array }
  | { readonly list: readonly Uint8Array[] }
  | { readonly raw: Uint8Array };

const encoder = new TextEncoder();
const strictDecoder = new TextDecoder("utf-8", { fatal: true });

/** A string field: its UTF-8 bytes, length-prefixed. */
export function str(text: string): Field {
  return { bytes: encoder.encode(text) };
}

/** A list of strings, count-prefixed, each length-prefixed. */
export function strs(texts: readonly string[]): Field {
  return { list: texts.map((text) => encoder.encode(text)) };
}

/** The size in bytes of a frame with these fields, length prefix included. */
export function frameSize(fields: readonly Field[]): number {
  let size = LENGTH_BYTES + HEAD_BYTES;
  for (const field of fields) {
    if ("u8" in field) size += 1;
    else if ("u32" in field) size += 4;
    else if ("i64" in field) size += 8;
    else if ("bytes" in field) size += 4 + field.bytes.length;
    else if ("raw" in field) size += field.raw.length;
    else size += 4 + field.list.reduce((sum, item) => sum + 4 + item.length, 0);
  }
  return size;
}

/** Encodes one frame: u32 length, u32 id, u8 op, then the fields (all little-endian). */
export function encodeFrame(id: number, op: number, fields: readonly Field[] = []): Uint8Array {
  const out = new Uint8Array(frameSize(fields));
  const view = new DataView(out.buffer);
  view.setUint32(0, out.length - LENGTH_BYTES, true);
  view.setUint32(4, id, true);
  out[8] = op;
  let at = LENGTH_BYTES + HEAD_BYTES;
  const putBytes = (bytes: Uint8Array): void => {
    view.setUint32(at, bytes.length, true);
    out.set(bytes, at + 4);
    at += 4 + bytes.length;
  };
  for (const field of fields) {
    if ("u8" in field) {
      out[at++] = field.u8;
    } else if ("u32" in field) {
      view.setUint32(at, field.u32, true);
      at += 4;
    } else if ("i64" in field) {
      view.setBigInt64(at, BigInt(field.i64), true);
      at += 8;
    } else if ("bytes" in field) {
      putBytes(field.bytes);
    } else if ("raw" in field) {
      out.set(field.raw, at);
      at += field.raw.length;
    } else {
      view.setUint32(at, field.list.length, true);
      at += 4;
      for (const item of field.list) putBytes(item);
    }
  }
  return out;
}

/** Reads the fields of one body in order; any overrun or leftover is a {@linkcode ProtocolError}. */
export class Cursor {
  #body: Uint8Array;
  #view: DataView;
  #at = 0;

  /** @param body A frame's body. */
  constructor(body: Uint8Array) {
    this.#body = body;
    this.#view = new DataView(body.buffer, body.byteOffset, body.byteLength);
  }

  /** One unsigned byte. */
  u8(): number {
    this.#need(1, "a byte");
    return this.#body[this.#at++];
  }

  /** An unsigned 32-bit integer. */
  u32(): number {
    this.#need(4, "a 32-bit integer");
    const value = this.#view.getUint32(this.#at, true);
    this.#at += 4;
    return value;
  }

  /** Exactly `n` bytes (a view into the body). */
  fixed(n: number): Uint8Array {
    this.#need(n, `${n} bytes`);
    const out = this.#body.subarray(this.#at, this.#at + n);
    this.#at += n;
    return out;
  }

  /** A signed 64-bit integer that must be a safe JavaScript integer. */
  i64(): number {
    this.#need(8, "a 64-bit integer");
    const value = this.#view.getBigInt64(this.#at, true);
    this.#at += 8;
    if (value > BigInt(Number.MAX_SAFE_INTEGER) || value < BigInt(Number.MIN_SAFE_INTEGER)) {
      throw new ProtocolError(`integer ${value} is outside the safe range`);
    }
    return Number(value);
  }

  /** Length-prefixed bytes (a view into the body). */
  bytes(): Uint8Array {
    this.#need(4, "a length");
    const length = this.#view.getUint32(this.#at, true);
    this.#at += 4;
    this.#need(length, `${length} bytes`);
    const out = this.#body.subarray(this.#at, this.#at + length);
    this.#at += length;
    return out;
  }

  /** A length-prefixed UTF-8 string. */
  str(): string {
    try {
      return strictDecoder.decode(this.bytes());
    } catch (error) {
      if (error instanceof ProtocolError) throw error;
      throw new ProtocolError("a string is not valid UTF-8");
    }
  }

  /** A key: a non-empty string. */
  key(): string {
    const key = this.str();
    if (key.length === 0) throw new ProtocolError("a key is empty");
    return key;
  }

  /** A count-prefixed list of keys. */
  keys(): string[] {
    this.#need(4, "a count");
    const count = this.#view.getUint32(this.#at, true);
    this.#at += 4;
    const keys: string[] = [];
    for (let i = 0; i < count; i++) keys.push(this.key());
    return keys;
  }

  /** A count-prefixed list of length-prefixed byte strings (views into the body). */
  list(): Uint8Array[] {
    this.#need(4, "a count");
    const count = this.#view.getUint32(this.#at, true);
    this.#at += 4;
    const out: Uint8Array[] = [];
    for (let i = 0; i < count; i++) out.push(this.bytes());
    return out;
  }

  /** Everything left. */
  rest(): Uint8Array {
    const out = this.#body.subarray(this.#at);
    this.#at = this.#body.length;
    return out;
  }

  /** Throws unless the whole body was read. */
  end(): void {
    const left = this.#body.length - this.#at;
    if (left !== 0) throw new ProtocolError(`${left} unexpected trailing bytes in a frame`);
  }

  #need(bytes: number, what: string): void {
    if (this.#at + bytes > this.#body.length) {
      throw new ProtocolError(
        `truncated frame body: expected ${what} at offset ${this.#at} of ${this.#body.length}`,
      );
    }
  }
}

const INITIAL_READ_BUFFER = 4 * 1024;
const SHRINK_ABOVE = 1024 * 1024;

/**
 * Splits a byte stream into frames. Reads go straight into its buffer ({@linkcode FrameReader.space},
 * {@linkcode FrameReader.commit}). The size limit applies as soon as a length prefix arrives, and the
 * buffer grows with the bytes that actually arrive (it at most doubles per read, up to the frame's size),
 * never with the length a prefix announces: a peer that announces 64 MiB and sends 1 KiB costs 4 KiB.
 */
export class FrameReader {
  #buffer = new Uint8Array(INITIAL_READ_BUFFER);
  #start = 0;
  #end = 0;
  /** The largest frame accepted, length prefix included. */
  maxFrameBytes: number;

  /** @param maxFrameBytes The largest frame accepted, length prefix included. */
  constructor(maxFrameBytes: number) {
    this.maxFrameBytes = maxFrameBytes;
  }

  /** Bytes received that do not yet form a whole frame. */
  get buffered(): number {
    return this.#end - this.#start;
  }

  /** The bytes the buffer holds now, used or not (for tests of the memory a connection costs). */
  get capacity(): number {
    return this.#buffer.length;
  }

  /** The size of the frame being received, when its length prefix has arrived. */
  get expected(): number | undefined {
    if (this.buffered < LENGTH_BYTES) return undefined;
    const view = new DataView(this.#buffer.buffer, this.#start, LENGTH_BYTES);
    return LENGTH_BYTES + view.getUint32(0, true);
  }

  /** The first `n` bytes received and not yet taken as a frame (fewer if fewer arrived), without taking them. */
  peek(n: number): Uint8Array {
    return this.#buffer.subarray(this.#start, Math.min(this.#start + n, this.#end));
  }

  /**
   * Free space to read into; it is never empty. Call it after {@linkcode FrameReader.next} has taken every
   * whole frame.
   *
   * @throws {ProtocolError} If the frame being received announces more than the limit (nothing is reserved).
   */
  space(): Uint8Array {
    const size = this.expected;
    if (size !== undefined && size > this.maxFrameBytes) throw this.#overLimit(size);
    if (this.#end < this.#buffer.length) return this.#buffer.subarray(this.#end);
    if (this.#start > 0) {
      // Full, with frames already taken at the front: move the partial frame there.
      this.#buffer.copyWithin(0, this.#start, this.#end);
      this.#end -= this.#start;
      this.#start = 0;
      return this.#buffer.subarray(this.#end);
    }
    // Full of one partial frame: double, but never past the frame's announced size.
    const length = this.#buffer.length;
    const grown = new Uint8Array(
      size !== undefined && size > length ? Math.min(2 * length, size) : 2 * length,
    );
    grown.set(this.#buffer.subarray(0, this.#end));
    this.#buffer = grown;
    return this.#buffer.subarray(this.#end);
  }

  /** Records that `n` bytes were read into the last {@linkcode FrameReader.space}. */
  commit(n: number): void {
    this.#end += n;
  }

  /**
   * The next whole frame, or `null` if more bytes are needed.
   *
   * @throws {ProtocolError} If the length prefix announces a frame over the limit or under the header size.
   */
  next(): Frame | null {
    const size = this.expected;
    if (size === undefined) return null;
    if (size > this.maxFrameBytes) throw this.#overLimit(size);
    if (size < LENGTH_BYTES + HEAD_BYTES) {
      throw new ProtocolError(
        `frame of ${size} bytes is shorter than its ${LENGTH_BYTES + HEAD_BYTES}-byte header`,
      );
    }
    if (this.buffered < size) return null;
    const at = this.#start;
    const view = new DataView(this.#buffer.buffer, at, size);
    const frame: Frame = {
      id: view.getUint32(LENGTH_BYTES, true),
      op: this.#buffer[at + LENGTH_BYTES + 4],
      body: this.#buffer.slice(at + LENGTH_BYTES + HEAD_BYTES, at + size),
    };
    this.#start += size;
    if (this.#start === this.#end) {
      this.#start = this.#end = 0;
      // A connection that once carried a 64 MiB value should not hold 64 MiB for the rest of the job.
      if (this.#buffer.length > SHRINK_ABOVE) this.#buffer = new Uint8Array(INITIAL_READ_BUFFER);
    }
    return frame;
  }

  #overLimit(size: number): FrameTooLarge {
    return new FrameTooLarge(size, this.maxFrameBytes);
  }
}

/** Writes all of `bytes`: `Deno.Conn.write` may write only part. */
export async function writeAll(conn: Deno.Conn, bytes: Uint8Array): Promise<void> {
  let at = 0;
  while (at < bytes.length) at += await conn.write(bytes.subarray(at));
}

/** The name of an opcode for log lines, such as `0xee`. */
export function hex(op: number): string {
  return `0x${op.toString(16).padStart(2, "0")}`;
}
