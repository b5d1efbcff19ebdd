/**
 * The wire format of PyTorch's c10d `TCPStore` (torch 2.x, both its libuv and its classic server), as
 * {@linkcode TorchStore} and {@linkcode TorchStoreServer} speak it. Written from the protocol's
 * description in torch's `TCPStore.cpp`, `TCPStoreBackend.hpp` and `TCPStoreLibUvBackend.cpp`, and
 * checked against torch 2.13's own client and server (`tests/store/torch_store_test.ts`).
 *
 * ```text
 * every integer is little-endian; there are no frames and no request ids: a connection carries one
 * request at a time, and the reply (if any) is the next bytes the server sends on it.
 *
 * string  = len:u64  len bytes          (keys ≤ 8 KiB and values ≤ 8 MiB on torch's libuv server)
 * count   = u64
 *
 * query byte | request body                          | reply
 * -----------|---------------------------------------|--------------------------------------------
 * 0 VALIDATE | magic:u32 = 0x3C85F7CE (first, always) | none
 * 1 SET      | key, value                             | none
 * 2 COMPARE  | key, expected, desired                 | value after the call: string
 * 3 GET      | key (the client WAITs for it first)    | value: string (empty for a missing key)
 * 4 ADD      | key, delta:i64                         | the new value: i64
 * 5 CHECK    | count, count × key                     | u8: 0 READY, 1 NOT_READY
 * 6 WAIT     | count, count × key                     | u8 0 STOP_WAITING, once every key is set
 * 7 NUMKEYS  | (nothing)                              | i64
 * 8 DELETE   | key                                    | i64: number of keys deleted (0 or 1)
 * 9 APPEND   | key, value                             | none
 * 10 MULTIGET| count, count × key (WAITed for first)  | count × string
 * 11 MULTISET| count, count × (key, value)            | none
 * 12 CANCEL  | (nothing): drops this connection's WAIT| u8 1 WAIT_CANCELED (after a STOP_WAITING
 *            |                                        | that crossed it, if one did)
 * 13 PING    | nonce:u32                              | the nonce: u32
 * ```
 *
 * The server closes a connection that breaks a limit or sends an unknown query; torch's client adds the
 * prefix `/` to every key.
 *
 * @module
 */

/** The magic number of the VALIDATE query a client sends first. */
export const VALIDATION_MAGIC = 0x3C85F7CE;

/** The query bytes of torch's `QueryType`, in its order. */
export const TorchOp = {
  VALIDATE: 0,
  SET: 1,
  COMPARE_SET: 2,
  GET: 3,
  ADD: 4,
  CHECK: 5,
  WAIT: 6,
  GETNUMKEYS: 7,
  DELETE_KEY: 8,
  APPEND: 9,
  MULTI_GET: 10,
  MULTI_SET: 11,
  CANCEL_WAIT: 12,
  PING: 13,
} as const;

/** The reply byte of CHECK. */
export const CheckReply = { READY: 0, NOT_READY: 1 } as const;
/** The reply bytes of WAIT and CANCEL_WAIT. */
export const WaitReply = { STOP_WAITING: 0, WAIT_CANCELED: 1 } as const;

/** The longest key torch's libuv server takes, in UTF-8 bytes. */
export const MAX_KEY_BYTES = 8 * 1024;
/** The largest value torch's libuv server takes. */
export const MAX_VALUE_BYTES = 8 * 1024 * 1024;
/** The most keys one CHECK, WAIT, MULTI_GET or MULTI_SET may name on torch's libuv server. */
export const MAX_KEY_COUNT = 128 * 1024;

/** The bytes a dcomm store server sends first (its HELLO frame: length, id 0, opcode 0x80), to tell it apart. */
export function looksLikeDcommHello(bytes: Uint8Array): boolean {
  return bytes.length >= 9 && bytes[4] === 0 && bytes[5] === 0 && bytes[6] === 0 && bytes[7] === 0 &&
    bytes[8] === 0x80;
}

/**
 * Whether `bytes` open with torch's VALIDATE query (what a torch client sends first), so that a dcomm
 * server can name the protocol of a client it cannot serve.
 */
export function looksLikeTorchValidate(bytes: Uint8Array): boolean {
  return bytes.length >= 5 && bytes[0] === TorchOp.VALIDATE &&
    new DataView(bytes.buffer, bytes.byteOffset, 5).getUint32(1, true) === VALIDATION_MAGIC;
}

const encoder = new TextEncoder();
const decoder = new TextDecoder("utf-8", { fatal: true });

/** Builds one request or reply. */
export class TorchWriter {
  #bytes = new Uint8Array(64);
  #view = new DataView(this.#bytes.buffer);
  #length = 0;

  /** Appends one byte. */
  u8(value: number): this {
    this.#reserve(1);
    this.#bytes[this.#length++] = value;
    return this;
  }

  /** Appends a u32. */
  u32(value: number): this {
    this.#reserve(4);
    this.#view.setUint32(this.#length, value, true);
    this.#length += 4;
    return this;
  }

  /** Appends a u64 (a count or a length). */
  u64(value: number): this {
    this.#reserve(8);
    this.#view.setBigUint64(this.#length, BigInt(value), true);
    this.#length += 8;
    return this;
  }

  /** Appends an i64. */
  i64(value: number): this {
    this.#reserve(8);
    this.#view.setBigInt64(this.#length, BigInt(value), true);
    this.#length += 8;
    return this;
  }

  /** Appends a length-prefixed byte string. */
  bytes(value: Uint8Array): this {
    this.u64(value.length);
    this.#reserve(value.length);
    this.#bytes.set(value, this.#length);
    this.#length += value.length;
    return this;
  }

  /** Appends a length-prefixed UTF-8 string. */
  string(value: string): this {
    return this.bytes(encoder.encode(value));
  }

  /** The bytes written (a view of the writer's buffer). */
  finish(): Uint8Array {
    return this.#bytes.subarray(0, this.#length);
  }

  #reserve(n: number): void {
    if (this.#length + n <= this.#bytes.length) return;
    let size = this.#bytes.length * 2;
    while (size < this.#length + n) size *= 2;
    const grown = new Uint8Array(size);
    grown.set(this.#bytes.subarray(0, this.#length));
    this.#bytes = grown;
    this.#view = new DataView(grown.buffer);
  }
}

/** A message broke the protocol or one of its limits; the connection must be closed. */
export class TorchProtocolError extends Error {
  /** @param message What was wrong, in lower case. */
  constructor(message: string) {
    super(message);
    this.name = "TorchProtocolError";
  }
}

/** Not enough bytes have arrived yet for what is being read: the reader rolls back and waits for more. */
export const INCOMPLETE: unique symbol = Symbol("incomplete");

/**
 * The bytes received on a connection, read field by field. A read that runs past the bytes received
 * throws {@linkcode INCOMPLETE}; {@linkcode ByteQueue.rollback} then returns to the last
 * {@linkcode ByteQueue.commit}, so a message is parsed again from its start once more bytes arrive.
 */
export class ByteQueue {
  #bytes = new Uint8Array(4096);
  #start = 0;
  #read = 0;
  #end = 0;

  /** Bytes received and not yet read. */
  get available(): number {
    return this.#end - this.#read;
  }

  /** Appends received bytes. */
  push(chunk: Uint8Array): void {
    if (this.#bytes.length - this.#end < chunk.length) this.#make(chunk.length);
    this.#bytes.set(chunk, this.#end);
    this.#end += chunk.length;
  }

  /** Space to read into directly (at least `min` bytes); {@linkcode ByteQueue.wrote} records what was read. */
  space(min = 4096): Uint8Array {
    if (this.#bytes.length - this.#end < min) this.#make(min);
    return this.#bytes.subarray(this.#end);
  }

  /** Records `n` bytes read into {@linkcode ByteQueue.space}. */
  wrote(n: number): void {
    this.#end += n;
  }

  /**
   * Forgets the bytes read so far: the message is complete. (The space they took is reclaimed by the next
   * {@linkcode ByteQueue.space}, never here: a read into the last space may still be under way.)
   */
  commit(): void {
    this.#start = this.#read;
  }

  /** Returns to the last commit. */
  rollback(): void {
    this.#read = this.#start;
  }

  /** Reads one byte. */
  u8(): number {
    this.#need(1);
    return this.#bytes[this.#read++];
  }

  /** Reads a u32. */
  u32(): number {
    this.#need(4);
    const value = new DataView(this.#bytes.buffer, this.#read, 4).getUint32(0, true);
    this.#read += 4;
    return value;
  }

  /** Reads a u64 as a number (a count or a length); one past 2^53 is a protocol error. */
  u64(what: string): number {
    this.#need(8);
    const value = new DataView(this.#bytes.buffer, this.#read, 8).getBigUint64(0, true);
    this.#read += 8;
    if (value > BigInt(Number.MAX_SAFE_INTEGER)) {
      throw new TorchProtocolError(`${what} ${value} is too large`);
    }
    return Number(value);
  }

  /** Reads an i64; one outside the safe integers is a protocol error. */
  i64(): number {
    this.#need(8);
    const value = new DataView(this.#bytes.buffer, this.#read, 8).getBigInt64(0, true);
    this.#read += 8;
    if (value > BigInt(Number.MAX_SAFE_INTEGER) || value < BigInt(Number.MIN_SAFE_INTEGER)) {
      throw new TorchProtocolError(`integer ${value} is outside the safe integers`);
    }
    return Number(value);
  }

  /** Reads a length-prefixed byte string of at most `max` bytes (a copy). */
  bytes(max: number, what: string): Uint8Array {
    const length = this.u64(`${what} length`);
    if (length > max) throw new TorchProtocolError(`${what} of ${length} bytes is over the limit of ${max}`);
    this.#need(length);
    const value = this.#bytes.slice(this.#read, this.#read + length);
    this.#read += length;
    return value;
  }

  /** Reads a key: a length-prefixed UTF-8 string of at most 8 KiB. */
  key(): string {
    const bytes = this.bytes(MAX_KEY_BYTES, "key");
    try {
      return decoder.decode(bytes);
    } catch {
      throw new TorchProtocolError("a key is not valid UTF-8");
    }
  }

  /** Reads a count of keys, at most {@linkcode MAX_KEY_COUNT}. */
  count(): number {
    const n = this.u64("key count");
    if (n > MAX_KEY_COUNT) {
      throw new TorchProtocolError(`${n} keys in one query, over the limit of ${MAX_KEY_COUNT}`);
    }
    return n;
  }

  /** Looks at the next bytes without reading them (fewer if fewer arrived). */
  peek(n: number): Uint8Array {
    return this.#bytes.subarray(this.#read, Math.min(this.#read + n, this.#end));
  }

  #need(n: number): void {
    if (this.#end - this.#read < n) throw INCOMPLETE;
  }

  /** Makes room for `extra` more bytes: moves the uncommitted bytes to the front, growing if needed. */
  #make(extra: number): void {
    const kept = this.#end - this.#start;
    if (kept === 0 && this.#bytes.length > 1 << 20 && extra <= 4096) this.#bytes = new Uint8Array(4096);
    let size = this.#bytes.length;
    while (size - kept < extra) size *= 2;
    if (size === this.#bytes.length) this.#bytes.copyWithin(0, this.#start, this.#end);
    else {
      const grown = new Uint8Array(size);
      grown.set(this.#bytes.subarray(this.#start, this.#end));
      this.#bytes = grown;
    }
    this.#read -= this.#start;
    this.#end = kept;
    this.#start = 0;
  }
}
