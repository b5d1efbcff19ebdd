/**
 * The object collectives (torch's `broadcast_object_list`, `all_gather_object`, `gather_object`,
 * `scatter_object_list`), once for every backend, over the group's own collectives: each object is
 * serialised by the structured-clone algorithm (`node:v8`'s `serialize`: plain objects, arrays, strings,
 * numbers, bigints, Maps, Sets, Dates, TypedArrays, ... — not functions or class instances' prototypes),
 * its length travels first (a float64 per rank, -1 when it could not be serialised, so that every rank
 * fails alike instead of waiting), then the bytes, in one call of the collective's v-form.
 *
 * @module
 */
import { deserialize, serialize } from "node:v8";
import { DistError } from "../core/errors.ts";
import type { CallOptions, ObjectRootOptions, ProcessGroup } from "./process_group.ts";

/** The length sent for an object that could not be serialised. */
const UNSERIALISABLE = -1;

/** An object's bytes, or the reason it has none. */
function encode(what: string, value: unknown): Uint8Array | Error {
  try {
    const b = serialize(value);
    return new Uint8Array(b.buffer, b.byteOffset, b.byteLength);
  } catch (e) {
    return new TypeError(
      `Cannot ${what}: the object cannot be serialised (structured clone): ${(e as Error).message}`,
      { cause: e },
    );
  }
}

function decode(what: string, bytes: Uint8Array, from: number): unknown {
  try {
    return deserialize(bytes);
  } catch (e) {
    throw new DistError(
      `Cannot ${what}: the bytes from rank ${from} do not deserialise: ${(e as Error).message}`,
      {
        cause: e,
      },
    );
  }
}

/** The options every call of an object collective passes on (its timeout and signal). */
function callOptions(options: CallOptions): CallOptions {
  return { timeoutMs: options.timeoutMs, signal: options.signal };
}

/** Fails every rank alike when a rank's object had no bytes. */
function checkLengths(what: string, lengths: Float64Array, mine: Error | undefined): void {
  if (mine) throw mine;
  const bad = [...lengths].findIndex((n) => n === UNSERIALISABLE);
  if (bad >= 0) throw new TypeError(`Cannot ${what}: rank ${bad}'s object cannot be serialised`);
}

/**
 * The root's object on every rank.
 *
 * @param pg The group.
 * @param value The object (read on the root only; `null` elsewhere).
 * @param options The root, timeout and signal.
 * @returns The root's object, deserialised (on the root too: a copy).
 */
export async function broadcastObject<T>(
  pg: ProcessGroup,
  value: T | null,
  options: ObjectRootOptions = {},
): Promise<T> {
  const what = "broadcastObject", root = options.root ?? 0, o = callOptions(options);
  const bytes = pg.rank === root ? encode(what, value) : undefined;
  const length = new Float64Array([bytes instanceof Uint8Array ? bytes.length : UNSERIALISABLE]);
  await pg.broadcast(length, { ...o, root });
  if (length[0] === UNSERIALISABLE) {
    if (bytes instanceof Error) throw bytes;
    throw new TypeError(`Cannot ${what}: rank ${root}'s object cannot be serialised`);
  }
  const buf = bytes instanceof Uint8Array ? bytes.slice() : new Uint8Array(length[0]);
  await pg.broadcast(buf, { ...o, root });
  return decode(what, buf, root) as T;
}

/**
 * Every rank's object on every rank, in rank order.
 *
 * @param pg The group.
 * @param value This rank's object.
 * @param options Timeout and signal.
 * @returns The objects.
 */
export async function allGatherObject<T>(
  pg: ProcessGroup,
  value: T,
  options: CallOptions = {},
): Promise<T[]> {
  const what = "allGatherObject", o = callOptions(options);
  const bytes = encode(what, value);
  const lengths = new Float64Array(pg.size);
  await pg.allGather(
    lengths,
    new Float64Array([bytes instanceof Uint8Array ? bytes.length : UNSERIALISABLE]),
    o,
  );
  checkLengths(what, lengths, bytes instanceof Error ? bytes : undefined);
  const counts = [...lengths];
  const all = new Uint8Array(counts.reduce((a, b) => a + b, 0));
  await pg.allGather(all, bytes as Uint8Array, { ...o, counts });
  return split(what, all, counts) as T[];
}

/**
 * Every rank's object on the root, in rank order; `null` elsewhere.
 *
 * @param pg The group.
 * @param value This rank's object.
 * @param options The root, timeout and signal.
 * @returns The objects on the root, `null` elsewhere.
 */
export async function gatherObject<T>(
  pg: ProcessGroup,
  value: T,
  options: ObjectRootOptions = {},
): Promise<T[] | null> {
  const what = "gatherObject", root = options.root ?? 0, o = callOptions(options);
  const bytes = encode(what, value);
  // Every rank needs every length: the gather's counts are the same list everywhere.
  const lengths = new Float64Array(pg.size);
  await pg.allGather(
    lengths,
    new Float64Array([bytes instanceof Uint8Array ? bytes.length : UNSERIALISABLE]),
    o,
  );
  checkLengths(what, lengths, bytes instanceof Error ? bytes : undefined);
  const counts = [...lengths];
  const atRoot = pg.rank === root;
  const all = atRoot ? new Uint8Array(counts.reduce((a, b) => a + b, 0)) : null;
  await pg.gather(all, bytes as Uint8Array, { ...o, root, counts });
  return all ? split(what, all, counts) as T[] : null;
}

/**
 * Object r of the root's list on rank r.
 *
 * @param pg The group.
 * @param values On the root, one object per rank; `null` elsewhere.
 * @param options The root, timeout and signal.
 * @returns This rank's object.
 * @throws {TypeError} On the root, if `values` is not one object per rank (before anything is sent).
 */
export async function scatterObject<T>(
  pg: ProcessGroup,
  values: readonly T[] | null,
  options: ObjectRootOptions = {},
): Promise<T> {
  const what = "scatterObject", root = options.root ?? 0, o = callOptions(options);
  const atRoot = pg.rank === root;
  if (atRoot && (!Array.isArray(values) || values.length !== pg.size)) {
    throw new TypeError(
      `Cannot ${what}: the root needs one object per rank (${pg.size}), found ${
        Array.isArray(values) ? `${values.length}` : String(values)
      }`,
    );
  }
  if (!atRoot && values !== null && values !== undefined) {
    throw new TypeError(
      `Cannot ${what}: only the root (rank ${root}) takes the objects; pass null elsewhere`,
    );
  }
  const parts = atRoot ? (values as readonly T[]).map((v) => encode(what, v)) : [];
  const failed = parts.find((p): p is Error => p instanceof Error);
  const lengths = new Float64Array(pg.size);
  if (atRoot) parts.forEach((p, r) => lengths[r] = p instanceof Uint8Array ? p.length : UNSERIALISABLE);
  await pg.broadcast(lengths, { ...o, root });
  checkLengths(what, lengths, failed);
  const counts = [...lengths];
  const all = atRoot ? new Uint8Array(counts.reduce((a, b) => a + b, 0)) : null;
  if (all) {
    let at = 0;
    for (const p of parts as Uint8Array[]) {
      all.set(p, at);
      at += p.length;
    }
  }
  const mine = new Uint8Array(counts[pg.rank]);
  await pg.scatter(mine, all, { ...o, root, counts });
  return decode(what, mine, root) as T;
}

function split(what: string, all: Uint8Array, counts: readonly number[]): unknown[] {
  let at = 0;
  return counts.map((n, r) => {
    const value = decode(what, all.subarray(at, at + n), r);
    at += n;
    return value;
  });
}

/**
 * Sends an object to `peer` (torch's `send_object_list`): its length, then its bytes.
 *
 * @param pg The group.
 * @param value The object.
 * @param peer The receiving rank, within the group.
 * @param options Timeout and signal.
 * @throws {TypeError} If the object cannot be serialised (the peer is told, and fails alike).
 */
export async function sendObject(
  pg: ProcessGroup,
  value: unknown,
  peer: number,
  options: CallOptions = {},
): Promise<void> {
  const what = "sendObject", o = callOptions(options);
  const bytes = encode(what, value);
  await pg.send(new Float64Array([bytes instanceof Uint8Array ? bytes.length : UNSERIALISABLE]), peer, o);
  if (bytes instanceof Error) throw bytes;
  await pg.send(bytes, peer, o);
}

/**
 * Receives an object from `peer` (torch's `recv_object_list`).
 *
 * @param pg The group.
 * @param peer The sending rank, within the group.
 * @param options Timeout and signal.
 * @returns The object.
 */
export async function recvObject<T>(pg: ProcessGroup, peer: number, options: CallOptions = {}): Promise<T> {
  const what = "recvObject", o = callOptions(options);
  const length = new Float64Array(1);
  await pg.recv(length, peer, o);
  if (length[0] === UNSERIALISABLE) {
    throw new TypeError(`Cannot ${what}: rank ${peer}'s object cannot be serialised`);
  }
  const bytes = new Uint8Array(length[0]);
  await pg.recv(bytes, peer, o);
  return decode(what, bytes, peer) as T;
}
