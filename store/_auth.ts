/**
 * The mutual proof of the store's secret, over HMAC-SHA256 with WebCrypto, and the rate limit on wrong
 * secrets.
 *
 * The server's HELLO carries a random nonce, the client's AUTH a random nonce of its own and its proof
 * HMAC(secret, "client" label ‖ server nonce ‖ client nonce); the server checks it in constant time and
 * answers AUTH_OK with its own proof HMAC(secret, "server" label ‖ server nonce ‖ client nonce), which the
 * client checks in turn. The secret never travels; the labels keep one side's proof from being replayed as
 * the other's, and each side's fresh nonce keeps a proof from being replayed on another connection.
 *
 * @module
 */

const encoder = new TextEncoder();
const CLIENT_LABEL = encoder.encode("dcomm store v2: client proof\0");
const SERVER_LABEL = encoder.encode("dcomm store v2: server proof\0");

/** The HMAC-SHA256 key of a secret; `undefined` for no secret. */
export async function hmacKey(secret: string | undefined): Promise<CryptoKey | undefined> {
  if (!secret) return undefined;
  return await crypto.subtle.importKey(
    "raw",
    encoder.encode(secret),
    { name: "HMAC", hash: "SHA-256" },
    false,
    ["sign", "verify"],
  );
}

/** Which side a proof is by. */
export type Prover = "client" | "server";

function transcript(by: Prover, serverNonce: Uint8Array, clientNonce: Uint8Array): Uint8Array<ArrayBuffer> {
  const label = by === "client" ? CLIENT_LABEL : SERVER_LABEL;
  const out = new Uint8Array(label.length + serverNonce.length + clientNonce.length);
  out.set(label);
  out.set(serverNonce, label.length);
  out.set(clientNonce, label.length + serverNonce.length);
  return out;
}

/** The proof that `by` knows the secret of `key`, for the connection of these two nonces. */
export async function prove(
  key: CryptoKey,
  by: Prover,
  serverNonce: Uint8Array,
  clientNonce: Uint8Array,
): Promise<Uint8Array> {
  return new Uint8Array(await crypto.subtle.sign("HMAC", key, transcript(by, serverNonce, clientNonce)));
}

/** Whether `proof` is `by`'s proof for these nonces, compared in constant time. */
export async function checkProof(
  key: CryptoKey,
  by: Prover,
  serverNonce: Uint8Array,
  clientNonce: Uint8Array,
  proof: Uint8Array,
): Promise<boolean> {
  return await crypto.subtle.verify(
    "HMAC",
    key,
    proof as Uint8Array<ArrayBuffer>,
    transcript(by, serverNonce, clientNonce),
  );
}

/** Options of {@linkcode AuthLimiter}. */
export interface AuthLimiterOptions {
  /** Failures within `windowMs` that block an address. */
  failures: number;
  /** The window failures are counted in. */
  windowMs: number;
  /** How long a blocked address stays blocked. */
  blockMs: number;
  /** The clock, in milliseconds. @default {Date.now} */
  now?: () => number;
  /** The most addresses remembered; beyond it the least recently failed is forgotten. @default {10000} */
  maxAddresses?: number;
}

interface AddressRecord {
  /** When the latest failures happened (at most `failures` of them), oldest first. */
  readonly times: number[];
  /** When the block ends; 0 when not blocked. */
  blockedUntil: number;
}

/**
 * Counts wrong secrets per client address: after `failures` of them within `windowMs`, the address is
 * blocked for `blockMs` (its connections are refused before any challenge, at the cost of one small
 * write). The table is bounded, so that a spray of addresses cannot grow it without limit.
 */
export class AuthLimiter {
  /** Failures within the window that block an address. */
  readonly failures: number;
  /** The window failures are counted in, in milliseconds. */
  readonly windowMs: number;
  /** How long a block lasts, in milliseconds. */
  readonly blockMs: number;
  readonly #now: () => number;
  readonly #max: number;
  readonly #records = new Map<string, AddressRecord>();

  /** @param options The limit and the clock. */
  constructor(options: AuthLimiterOptions) {
    this.failures = options.failures;
    this.windowMs = options.windowMs;
    this.blockMs = options.blockMs;
    this.#now = options.now ?? Date.now;
    this.#max = options.maxAddresses ?? 10_000;
  }

  /** The number of addresses remembered. */
  get size(): number {
    return this.#records.size;
  }

  /** Records a wrong (or missing) secret from `address`; blocks it once it has too many. */
  fail(address: string): void {
    const now = this.#now();
    const record = this.#records.get(address) ?? { times: [], blockedUntil: 0 };
    this.#records.delete(address); // re-inserted last: the map's order is the order of the latest failure
    while (record.times.length > 0 && now - record.times[0] > this.windowMs) record.times.shift();
    record.times.push(now);
    if (record.times.length > this.failures) record.times.shift();
    if (record.times.length >= this.failures && record.blockedUntil <= now) {
      record.blockedUntil = now + this.blockMs;
      record.times.length = 0;
    }
    this.#records.set(address, record);
    for (const oldest of this.#records.keys()) {
      if (this.#records.size <= this.#max) break;
      this.#records.delete(oldest);
    }
  }

  /** How much longer `address` is blocked, or `undefined` when it is not. */
  blocked(address: string): { remainingMs: number } | undefined {
    const record = this.#records.get(address);
    if (record === undefined) return undefined;
    const now = this.#now();
    if (record.blockedUntil > now) return { remainingMs: record.blockedUntil - now };
    record.blockedUntil = 0;
    if (record.times.length === 0 || now - record.times[record.times.length - 1] > this.windowMs) {
      this.#records.delete(address);
    }
    return undefined;
  }
}
