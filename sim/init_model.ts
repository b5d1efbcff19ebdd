/**
 * The cost of a world's start, for sizes no machine here can run: the store rendezvous (every request goes
 * through the one store server, one after another, and the server sends each rank the tables it reads)
 * and the TCP connections a rank sets up before its first collective. Three constants, fitted to
 * `bench:init`'s rows by {@linkcode fitInitConstants}:
 *
 * ```text
 * rendezvous = requests · r + bytes sent by the server · b
 * connect    = connections per rank · c        (eager: N − 1 at init; lazy: the peers the first call uses)
 * ```
 *
 * The requests and bytes of each pattern follow from the code: the one-table exchange (`hostTable` in
 * `backend/cpu/_connect.ts` and the TCP mesh's `addrs`: 5N + 3 requests; each rank reads a host table of
 * about 2 bytes a rank plus each host's identity once, and an address table of about 22 bytes a rank) and
 * the pattern it replaced (each rank read every rank's host key and each lower rank's address:
 * 1.5N² + 3.5N requests).
 *
 * @example 100,000 ranks: the tables' fan-out, not the requests, is what grows
 * ```ts
 * import { initCost } from "./init_model.ts";
 * import assert from "node:assert/strict";
 * const k = { requestS: 50e-6, byteS: 1e-9, connectS: 1e-3 };
 * const big = initCost({ ranks: 100_000, hosts: 12_500, pattern: "one-table", connections: "lazy" }, k);
 * assert.ok(big.bytes * k.byteS > big.requests * k.requestS);
 * ```
 *
 * @module
 */

/** The constants of {@linkcode initCost}. */
export interface InitConstants {
  /** Seconds the store server spends on one request (its throughput, inverted). */
  readonly requestS: number;
  /** Seconds per byte the store server sends (the tables each rank reads). */
  readonly byteS: number;
  /** Seconds to set up one TCP connection (dial, handshake), on a rank's path to its first call. */
  readonly connectS: number;
}

/** A world's start, as {@linkcode initCost} prices it. */
export interface InitShape {
  /** Ranks. */
  readonly ranks: number;
  /** Hosts (their identities are in the host table once each). @default 1 */
  readonly hosts?: number;
  /** The rendezvous: `"one-table"` (now) or `"per-key"` (each rank reading every key, before). */
  readonly pattern: "one-table" | "per-key";
  /** When TCP pairs connect: `"eager"` (the full mesh), `"lazy"` (the peers the first call uses). */
  readonly connections: "eager" | "lazy";
  /** Peers the first collective talks to, lazily connected. @default 2 (a ring) */
  readonly firstPeers?: number;
  /**
   * What is counted: `"world"`, the host exchange and the TCP mesh's; `"hosts"`, the host exchange alone
   * (what `bench:init`'s simulated ranks run). @default "world"
   */
  readonly scope?: "world" | "hosts";
}

/** What {@linkcode initCost} predicts. */
export interface InitCost {
  /** Store requests of the world. */
  readonly requests: number;
  /** Bytes the store server sends in all. */
  readonly bytes: number;
  /** Seconds of the store rendezvous. */
  readonly rendezvousS: number;
  /** Seconds a rank spends connecting to its peers before its first call completes. */
  readonly connectS: number;
  /** Their sum: init to the first collective. */
  readonly totalS: number;
}

/** Bytes of a host identity (a boot id and a network namespace) in the host table. */
const HOST_ID_BYTES = 64;
/** Bytes a rank takes in the host table (its host's index, as JSON). */
const HOST_INDEX_BYTES = 2;
/** Bytes a rank takes in the address table (`"host:port",` as JSON). */
const ADDRESS_BYTES = 22;

/**
 * The requests and bytes of a pattern.
 *
 * @param shape The world.
 * @returns Store requests and the bytes the server sends.
 */
export function initTraffic(shape: InitShape): { requests: number; bytes: number } {
  const n = shape.ranks, hosts = shape.hosts ?? 1;
  if (!(Number.isInteger(n) && n >= 1)) throw new RangeError(`Expected ranks ≥ 1, found ${n}`);
  const mesh = shape.scope !== "hosts";
  if (shape.pattern === "one-table") {
    const hostTable = hosts * HOST_ID_BYTES + n * HOST_INDEX_BYTES, addressTable = n * ADDRESS_BYTES;
    // Host exchange 2N + 2; the mesh's token, addresses and table 3N + 1.
    return {
      requests: 2 * n + 2 + (mesh ? 3 * n + 1 : 0),
      bytes: n * hostTable + (mesh ? n * addressTable : 0),
    };
  }
  // Every rank set its host, waited for all and read every host key; the mesh read each lower rank's address.
  return {
    requests: n * n + 2 * n + (mesh ? (n * (n - 1)) / 2 + 1.5 * n : 0),
    bytes: n * n * HOST_ID_BYTES + (mesh ? ((n * (n - 1)) / 2) * ADDRESS_BYTES : 0),
  };
}

/**
 * Predicted seconds of a world's start.
 *
 * @param shape The world.
 * @param constants The fitted constants.
 * @returns The prediction, with its parts.
 */
export function initCost(shape: InitShape, constants: InitConstants): InitCost {
  const { requests, bytes } = initTraffic(shape);
  const rendezvousS = requests * constants.requestS + bytes * constants.byteS;
  const peers = shape.connections === "eager"
    ? shape.ranks - 1
    : Math.min(shape.firstPeers ?? 2, shape.ranks - 1);
  const connectS = peers * constants.connectS;
  return { requests, bytes, rendezvousS, connectS, totalS: rendezvousS + connectS };
}

/**
 * Least-squares fit of `requestS` and `byteS` (rendezvous seconds against requests and bytes, through the
 * origin) and of `connectS` (the slope of init seconds against connections per rank: what each more
 * connection adds), from measured rows.
 *
 * @param rendezvous Rows of a rendezvous: its shape and measured seconds (at least two shapes).
 * @param connects Rows of `[connections per rank, init seconds]` (at least two counts).
 * @returns The constants.
 * @throws {RangeError} If the rows cannot determine them.
 */
export function fitInitConstants(
  rendezvous: readonly { shape: InitShape; seconds: number }[],
  connects: readonly (readonly [number, number])[],
): InitConstants {
  // Normal equations for s ≈ q·r + y·b.
  let qq = 0, qy = 0, yy = 0, qs = 0, ys = 0;
  for (const { shape, seconds } of rendezvous) {
    const { requests: q, bytes: y } = initTraffic(shape);
    qq += q * q, qy += q * y, yy += y * y, qs += q * seconds, ys += y * seconds;
  }
  const det = qq * yy - qy * qy;
  if (!(Math.abs(det) > 0)) {
    throw new RangeError("Cannot fit the rendezvous: the rows do not tell requests from bytes");
  }
  let requestS = (qs * yy - ys * qy) / det, byteS = (ys * qq - qs * qy) / det;
  // A negative share is noise: fit the other alone.
  if (requestS < 0) [requestS, byteS] = [0, ys / yy];
  if (byteS < 0) [requestS, byteS] = [qs / qq, 0];
  const mc = connects.reduce((a, [c]) => a + c, 0) / connects.length;
  const ms = connects.reduce((a, [, t]) => a + t, 0) / connects.length;
  let cc = 0, cs = 0;
  for (const [c, t] of connects) cc += (c - mc) ** 2, cs += (c - mc) * (t - ms);
  if (!(cc > 0)) throw new RangeError("Cannot fit connectS: expected rows of at least two connection counts");
  return { requestS, byteS, connectS: Math.max(0, cs / cc) };
}
