/**
 * Messages between a rank's main thread (the process group) and its communication Worker (the engine).
 * Tensors cross as regions of SharedArrayBuffers, so the engine reads and writes them in place while the
 * main thread computes.
 *
 * @module
 */
import type { DType, ReduceOp } from "../../core/dtype.ts";
import type { SegmentState } from "../../collectives/segment_context.ts";
import type { SegmentAddress, SegmentLayout } from "../../transport/segment.ts";
import type { WorkReport } from "../work.ts";
import type { CheckedCompression } from "../_compression.ts";

export { type Collective, COLLECTIVES, rootedCollective } from "../_front.ts";
import type { Collective } from "../_front.ts";

/** A region of a SharedArrayBuffer. */
export interface Region {
  /** The buffer. */
  buffer: SharedArrayBuffer;
  /** Where the region starts. */
  byteOffset: number;
  /** Its length. */
  byteLength: number;
}

/**
 * A tensor the engine reaches by its address (same process, another thread): the caller's own memory,
 * used in place with no staging copy. The caller keeps the tensor alive and attached until the call
 * completes.
 */
export interface PointerRegion {
  /** The address of the first byte. */
  address: number;
  /** Its length. */
  byteLength: number;
}

/** A tensor in this rank's pool of the host segment (`pg.alloc`), by its offset there. */
export interface PoolRegion {
  /** The byte offset in the pool. */
  pool: number;
  /** Its length. */
  byteLength: number;
}

/** A call that the main thread began through the segment and hands over half-done. */
export interface SegmentResume {
  /** The call's number in its group. */
  number: number;
  /** Where its pipeline stands. */
  state: SegmentState;
}

/** One call, as the engine receives it. */
export interface OpRequest {
  /** Unique per engine. */
  id: number;
  /** The group it runs in (0 = world). */
  group: number;
  /** The collective. */
  collective: Collective;
  /** Element type. */
  dtype: DType;
  /** Reduction (sum for collectives without one). */
  op: ReduceOp;
  /** Root for broadcast/reduce, peer for send/recv (group ranks); 0 otherwise. */
  root: number;
  /** The algorithm asked for, or "auto". */
  algorithm: string;
  /** Parameter servers, for the `ps` all-reduce. */
  servers?: number;
  /** Elements of the tensor (input for allGather/reduceScatter/allToAll; a v-form's n-block buffer). */
  count: number;
  /** A v-form's blocks, elements per rank (an all-to-all's `sendCounts`). */
  counts?: readonly number[];
  /** An uneven all-to-all's `recvCounts`. */
  recvCounts?: readonly number[];
  /** Deterministic mode: a fold in rank order (the segment, or an `"ordered"` algorithm). */
  deterministic?: boolean;
  /** The input (or the in-place tensor). */
  input?: Region | PointerRegion | PoolRegion;
  /** The output, for out-of-place collectives. */
  output?: Region | PointerRegion | PoolRegion;
  /** Milliseconds before the call fails. */
  timeoutMs: number;
  /** A segment call the main thread began: the engine goes on with it instead of beginning it. */
  resume?: SegmentResume;
  /** All-reduce: the narrower dtype it travels and sums in (cast down and back on the communication thread). */
  commDtype?: DType;
  /** All-reduce of float32: the codec it is compressed with, run on the communication thread. */
  compression?: CompressionRequest;
  /** A collective that a compressed all-reduce runs: its descriptor's stage (`_descriptor.ts`). */
  stage?: number;
}

/** A compressed all-reduce's codec and the caller's arrays that hold its state across steps. */
export interface CompressionRequest extends Omit<CheckedCompression, "residual" | "serverResidual" | "q"> {
  /** The error feedback of this rank, by address. */
  residual?: PointerRegion;
  /** The sign codec's server-side error feedback, by address. */
  serverResidual?: PointerRegion;
  /** PowerSGD's Q, by address. */
  q?: PointerRegion;
}

/** How the engine connects. */
export interface EngineConfig {
  /** Global rank. */
  rank: number;
  /** World size. */
  size: number;
  /** The rendezvous store: where it is, its protocol and secret. */
  store: StoreAddress;
  /** Prefix of this world's keys in the store. */
  prefix: string;
  /** `"auto"`, `"tcp"`, `"shm"`, `"hybrid"` or `"inproc"`. */
  transport: string;
  /** For `"inproc"`: the mesh made by `createInprocMesh`. */
  inprocMesh?: unknown;
  /** The address this rank's TCP listener publishes. */
  hostname: string;
  /** TCP sockets per peer. */
  socketsPerPeer: number;
  /** When TCP pairs connect (`TcpTransportOptions.connections`; `DCOMM_TCP_CONNECTIONS`). @default "auto" */
  tcpConnections?: "eager" | "lazy" | "auto";
  /** Default timeout (ms) of calls and of connecting. */
  timeoutMs: number;
  /** The pipelining chunk (bytes). */
  chunkBytes: number;
  /** Whether every message carries its call's descriptor for the mismatch check. */
  checkCalls: boolean;
  /** The heartbeat's beat in ms (`_heartbeat.ts`), 0 for none. @default 500 */
  heartbeatMs?: number;
  /** The ring of completed calls (`_completions.ts`); without it, completions come as messages. */
  completions?: SharedArrayBuffer;
  /** The ring of calls (`_requests.ts`); without it, calls come as messages. */
  requests?: SharedArrayBuffer;
  /** The host segment's buffers when the transport is shared memory; null for none. */
  segment: SegmentLayout | null;
  /** Milliseconds the communication thread spins on the segment before it sleeps. */
  segmentSpinMs: number;
  /** Whether the engine measures where each call's time goes (`core/phases.ts`; on with the timeline). */
  phases?: boolean;
  /** Calls with at most this many input bytes may run on the main thread. @default 16 MiB */
  segmentInlineBytes?: number;
  /** Milliseconds a call on the main thread waits for its peers before the Worker takes it over. */
  segmentInlineSpinMs?: number;
}

import type { WireError } from "../../core/wire_error.ts";
import type { StoreAddress } from "../_rendezvous.ts";

/** A serialised error: its class, fields and cause survive the trip (`core/wire_error.ts`). */
export type { WireError } from "../../core/wire_error.ts";

/**
 * Main thread → engine. Calls (by their id), groups and close share one sequence, which the engine follows
 * whether an item came as a message or through the ring of calls; buffers and cancels act at once.
 */
export type ToEngine =
  | { type: "init"; config: EngineConfig }
  | { type: "op"; op: OpRequest }
  | { type: "buffer"; id: number; buffer: SharedArrayBuffer }
  | { type: "group"; seq: number; id: number; ranks: number[]; timeoutMs: number }
  | { type: "cancel"; id: number; reason: string }
  | { type: "abort"; error: WireError }
  | { type: "close"; seq: number };

/** Engine → main thread. */
export type FromEngine =
  | { type: "ready"; transport: string; hosts: number[]; segment?: SegmentAddress }
  | { type: "done"; id: number; report: WorkReport }
  | { type: "error"; id: number; error: WireError }
  | { type: "failed"; error: WireError }
  | { type: "closed" };
