/**
 * The 32-byte descriptor stamped on every message of a call, so that a rank receiving a message from a
 * peer that is running a different call (another collective, size, dtype, op, root or algorithm, or the
 * same call at another sequence number) reports both calls instead of corrupting data or hanging.
 *
 * Layout (little-endian): group u32 @0 | seq u32 @4 | collective u8 @8 | dtype u8 @9 | op u8 @10 |
 * algorithm u8 @11 | root i32 @12 | count f64 @16 | servers u32 @24 | byte 28 (the host segment's: a
 * pool tensor or not) | stage u8 @29: for a collective run by a compressed all-reduce, the codec's code + 1
 * and 16 × its stage (1, 2, ...), 0 otherwise | reserved @30..31 (zero).
 *
 * @module
 */
import { type DType, DTYPES, REDUCE_OPS, type ReduceOp } from "../../core/dtype.ts";
import { DESC_BYTES } from "../../transport/transport.ts";
import { smallBytes } from "../../core/small_bytes.ts";
import { type Collective, COLLECTIVES, rootedCollective } from "./_protocol.ts";
import { CODECS } from "../../collectives/compressed_context.ts";

/** A call, as its descriptor records it. */
export interface CallDescriptor {
  /** Group id. */
  group: number;
  /** Sequence number of the call in its group (per pair for send/recv). */
  seq: number;
  /** The collective. */
  collective: Collective;
  /** The dtype. */
  dtype: DType;
  /** The op. */
  op: ReduceOp;
  /** The algorithm's name, or "" when it has none. */
  algorithm: string;
  /** Root or peer. */
  root: number;
  /** Element count. */
  count: number;
  /** Parameter servers of a `ps` all-reduce (0 otherwise). */
  servers: number;
  /** For a collective that a compressed all-reduce runs: codec code + 1 + 16 × stage. @default 0 */
  stage?: number;
}

/**
 * Encodes a descriptor.
 *
 * @param d The call.
 * @param algorithms Every algorithm name, indexed by its code.
 * @returns 32 bytes.
 */
export function encodeDescriptor(d: CallDescriptor, algorithms: readonly string[]): Uint8Array {
  // A view on a shared slab: a Uint8Array of its own costs a microsecond per call in Deno.
  const bytes = smallBytes(DESC_BYTES);
  encodeDescriptorInto(d, algorithms, new DataView(bytes.buffer, bytes.byteOffset, DESC_BYTES), 0);
  return bytes;
}

/**
 * Encodes a descriptor into memory already there (a log entry of the host segment), with no allocation.
 *
 * @param d The call.
 * @param algorithms Every algorithm name, indexed by its code.
 * @param v A view of the memory.
 * @param at Where the 32 bytes go.
 */
export function encodeDescriptorInto(
  d: CallDescriptor,
  algorithms: readonly string[],
  v: DataView,
  at: number,
): void {
  encodeCallInto(
    v,
    at,
    d.group,
    d.seq,
    d.collective,
    d.dtype,
    d.op,
    algorithms.indexOf(d.algorithm) + 1,
    d.root,
    d.count,
    d.servers,
    d.stage ?? 0,
  );
}

// The codes by name, so that encoding a call searches no list.
const COLLECTIVE_CODES: Readonly<Record<string, number>> = codes(COLLECTIVES, 1);
const DTYPE_CODES: Readonly<Record<string, number>> = codes(DTYPES, 0);
const OP_CODES: Readonly<Record<string, number>> = codes(REDUCE_OPS, 0);

function codes(names: readonly string[], first: number): Readonly<Record<string, number>> {
  return Object.freeze(Object.fromEntries(names.map((name, i) => [name, i + first])));
}

/**
 * {@linkcode encodeDescriptorInto} from the descriptor's fields, with the algorithm's code (its index in the
 * algorithm names + 1, 0 for none): what a call's begin writes into its log entry, with no descriptor made.
 *
 * @param v A view of the memory.
 * @param at Where the 32 bytes go.
 * @param group Group id.
 * @param seq Sequence number.
 * @param collective The collective.
 * @param dtype The dtype.
 * @param op The op.
 * @param algorithm The algorithm's code.
 * @param root Root or peer.
 * @param count Element count.
 * @param servers Parameter servers (0 but for `ps`).
 * @param stage The compressed all-reduce's stage (0 for none).
 */
export function encodeCallInto(
  v: DataView,
  at: number,
  group: number,
  seq: number,
  collective: Collective,
  dtype: DType,
  op: ReduceOp,
  algorithm: number,
  root: number,
  count: number,
  servers: number,
  stage: number,
): void {
  v.setUint32(at, group, true);
  v.setUint32(at + 4, seq >>> 0, true);
  v.setUint8(at + 8, COLLECTIVE_CODES[collective] ?? 0);
  v.setUint8(at + 9, DTYPE_CODES[dtype] ?? -1);
  v.setUint8(at + 10, OP_CODES[op] ?? -1);
  v.setUint8(at + 11, algorithm);
  v.setInt32(at + 12, root, true);
  v.setFloat64(at + 16, count, true);
  v.setUint32(at + 24, servers, true);
  v.setUint32(at + 28, stage << 8, true);
}

/**
 * Decodes a descriptor (unknown codes decode as `"?"` so that a garbled one still prints).
 *
 * @param bytes 32 bytes.
 * @param algorithms Every algorithm name, indexed by its code.
 * @returns The call.
 */
export function decodeDescriptor(bytes: Uint8Array, algorithms: readonly string[]): CallDescriptor {
  const v = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  return {
    group: v.getUint32(0, true),
    seq: v.getUint32(4, true),
    collective: (COLLECTIVES[v.getUint8(8) - 1] ?? "?") as Collective,
    dtype: (DTYPES[v.getUint8(9)] ?? "?") as DType,
    op: (REDUCE_OPS[v.getUint8(10)] ?? "?") as ReduceOp,
    algorithm: algorithms[v.getUint8(11) - 1] ?? "",
    root: v.getInt32(12, true),
    count: v.getFloat64(16, true),
    servers: v.getUint32(24, true),
    stage: v.getUint8(29),
  };
}

/** Whether two encoded descriptors are the same call. */
export function sameDescriptor(a: Uint8Array, b: Uint8Array): boolean {
  for (let i = 0; i < DESC_BYTES; i++) if (a[i] !== b[i]) return false;
  return true;
}

/** A call as a user would read it: `allReduce(1024 × float32, op sum, ring) #12 in group 0`. */
export function describeCall(d: CallDescriptor): string {
  const parts = [`${d.count} × ${d.dtype}`];
  if (d.collective === "allReduce" || d.collective === "reduce" || d.collective === "reduceScatter") {
    parts.push(`op ${d.op}`);
  }
  if (rootedCollective(d.collective)) parts.push(`root ${d.root}`);
  if (d.collective === "send" || d.collective === "recv") parts.push(`peer ${d.root}`);
  // A v-form carries its counts' mark in the servers word (`countsMark`): ps is the only all-reduce with servers.
  const uneven = d.servers !== 0 && d.collective !== "allReduce";
  if (uneven) {
    parts.push(d.collective === "allToAll" ? "uneven counts" : `counts #${d.servers.toString(16)}`);
  }
  if (d.algorithm) {
    parts.push(d.servers && !uneven ? `${d.algorithm} with ${d.servers} servers` : d.algorithm);
  }
  const stage = d.stage
    ? ` (stage ${d.stage >> 4} of a compressed allReduce, codec ${CODECS[(d.stage & 15) - 1] ?? "?"})`
    : "";
  return `${d.collective}(${parts.join(", ")}) #${d.seq} in group ${d.group}${stage}`;
}

/**
 * What a v-form's descriptor carries in its `servers` word, so that ranks passing different counts (or a
 * v-form against an even call) fail naming both: a hash of the counts (never 0), the same on every rank;
 * an uneven all-to-all, whose counts differ by rank, carries 1 (its lengths are checked message by
 * message).
 */
export function countsMark(op: { collective: Collective; counts?: readonly number[] }): number {
  if (op.collective === "allToAll") return 1;
  let h = 0x811c9dc5;
  for (const c of op.counts ?? []) {
    // FNV-1a over each count's low and high 32 bits.
    for (const word of [c >>> 0, Math.floor(c / 2 ** 32)]) {
      h = Math.imul(h ^ word, 0x01000193) >>> 0;
    }
  }
  return h <= 1 ? h + 2 : h;
}
