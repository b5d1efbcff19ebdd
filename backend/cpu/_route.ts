/**
 * Where a call of the cpu backend runs, decided once, on the calling thread, before anything is sent: on
 * this thread through the host segment, or on the communication Worker, reaching the tensors by address
 * or through SharedArrayBuffer staging, or through a codec there. Which algorithm runs is not decided
 * here: a call asking for `"auto"` runs through the segment by `collectives/`' rule
 * (`runsOnSegment`, the rule `chooseAlgorithm` answers `"auto"` by); any other `"auto"` is priced by the
 * cost model on the Worker.
 *
 * @module
 */
import type { TypedArray } from "../../core/dtype.ts";
import { runsOnSegment, UNEVEN_ALGORITHMS } from "../../collectives/mod.ts";
import { UnsupportedError } from "../../core/errors.ts";
import { SEGMENT_GROUPS } from "../../transport/segment.ts";
import { type CallRecord, compressionUnsupported, narrowUnsupported, VERB } from "../_front.ts";
import { checkUneven } from "./_dispatch.ts";
import { segmentUnavailable } from "./_segment_call.ts";

/**
 * Where and how a call runs. `segment` says whether the call itself runs through the host segment (its
 * segment plan) rather than a message algorithm.
 *
 * - `inline`: through the segment on the calling thread, which spins for its peers; a call they leave
 *   waiting goes on on the Worker from where it stands.
 * - `pooled`: an all-reduce of a tensor from this rank's pool (`pg.alloc`), in place there, whatever its
 *   size: on the calling thread when it is `inline`, else on the Worker.
 * - `byAddress`: on the Worker, which reaches the caller's tensors by their address (FFI allowed).
 * - `staged`: on the Worker, on copies of the tensors in SharedArrayBuffers (FFI not allowed).
 * - `codec`: a compressed all-reduce, or one in a narrower `commDtype`, on the Worker, which casts or
 *   encodes the tensor it reaches by address; the collectives it runs are calls of the Worker's own.
 */
export type Route =
  | { readonly kind: "inline"; readonly segment: true }
  | { readonly kind: "pooled"; readonly segment: true; readonly inline: boolean }
  | { readonly kind: "byAddress"; readonly segment: boolean }
  | { readonly kind: "staged"; readonly segment: boolean }
  | { readonly kind: "codec"; readonly segment: false };

// One frozen object per route, so that routing a call allocates nothing.
const INLINE: Route = Object.freeze({ kind: "inline", segment: true });
const POOLED_INLINE: Route = Object.freeze({ kind: "pooled", segment: true, inline: true });
const POOLED: Route = Object.freeze({ kind: "pooled", segment: true, inline: false });
const BY_ADDRESS_SEGMENT: Route = Object.freeze({ kind: "byAddress", segment: true });
const BY_ADDRESS: Route = Object.freeze({ kind: "byAddress", segment: false });
const STAGED_SEGMENT: Route = Object.freeze({ kind: "staged", segment: true });
const STAGED: Route = Object.freeze({ kind: "staged", segment: false });
const CODEC: Route = Object.freeze({ kind: "codec", segment: false });

/** The group and the calling thread, as they stand when a call is routed. */
export interface RouteSite {
  /** The group id, for messages. */
  readonly group: number;
  /** Whether the group's calls may run through the host segment ({@linkcode groupUsesSegment}). */
  readonly segment: boolean;
  /** The transport's kind, for messages. */
  readonly transport: string;
  /** Whether this thread may run a call itself now: nothing pending on the Worker, nothing failed. */
  readonly idle: boolean;
  /** Calls with at most this many input bytes may run on this thread. */
  readonly inlineBytes: number;
  /** Whether the Worker may reach tensors by their address (FFI allowed). */
  readonly byAddress: boolean;
  /** The memory of this rank's pool in the host segment, as this thread maps it, if it has one. */
  readonly pool: ArrayBufferLike | undefined;
}

/** What of a call its route depends on. */
export type RoutedCall = Pick<
  CallRecord,
  | "collective"
  | "algorithm"
  | "tensor"
  | "input"
  | "output"
  | "compression"
  | "commDtype"
  | "counts"
  | "deterministic"
>;

/**
 * Whether a group's calls may run through the host segment: the world has one, and the group a block in
 * it. The same on both threads of a rank, and on every rank.
 *
 * @param segment Whether the world has a host segment.
 * @param group The group id.
 * @returns Whether it may.
 */
export function groupUsesSegment(segment: boolean, group: number): boolean {
  return segment && group < SEGMENT_GROUPS;
}

/**
 * The tensor a call reads (or changes in place): the in-place tensor, but for a recv, which only writes
 * it, or the input of an out-of-place collective.
 *
 * @param call The call.
 * @returns The tensor, or undefined.
 */
export function inputOf(call: RoutedCall): TypedArray | undefined {
  return call.collective === "recv" ? undefined : (call.tensor ?? call.input) as TypedArray | undefined;
}

/**
 * The tensor a call writes besides its input: the output of an out-of-place collective, or a recv's.
 *
 * @param call The call.
 * @returns The tensor, or undefined.
 */
export function outputOf(call: RoutedCall): TypedArray | undefined {
  return (call.collective === "recv" ? call.tensor : call.output) as TypedArray | undefined;
}

/**
 * Where a call runs.
 *
 * @param call The call, checked by the front.
 * @param site Its group and the calling thread, now.
 * @returns Its route.
 * @throws {UnsupportedError} If it asks for `"segment"` where the group has none, or for a codec
 *   without FFI.
 */
export function route(call: RoutedCall, site: RouteSite): Route {
  const collective = call.collective;
  const p2p = collective === "send" || collective === "recv";
  const usable = site.segment && !p2p;
  if (call.algorithm === "segment" && !usable) {
    throw segmentUnavailable(collective, site.group, site.transport);
  }
  if (call.compression !== undefined) {
    if (!site.byAddress) throw compressionUnsupported("cpu backend without FFI");
    return CODEC;
  }
  if (call.commDtype !== undefined) {
    if (!site.byAddress) throw narrowUnsupported("cpu backend without FFI");
    return CODEC;
  }
  if (
    call.counts !== undefined && (collective === "allToAll" || !usable || call.algorithm !== "auto" &&
        call.algorithm !== "segment")
  ) {
    // The uneven all-to-all runs over messages (no rank knows every rank's counts, which a plan of chunks
    // needs), and so does every v-form off the segment, by an algorithm that takes uneven blocks.
    if (call.algorithm === "segment") {
      throw new UnsupportedError(
        `Cannot ${VERB[collective]} with uneven counts through the host segment` +
          (usable ? "" : " (this group has none)") + `; expected "auto" or one of ` +
          UNEVEN_ALGORITHMS[collective as keyof typeof UNEVEN_ALGORITHMS].map((n) => `"${n}"`).join(", "),
      );
    }
    checkUneven(collective, call.algorithm);
    return site.byAddress ? BY_ADDRESS : STAGED;
  }
  if (call.deterministic && !["auto", "segment", "ordered"].includes(call.algorithm)) {
    // Only the segment's plans and the ordered algorithms fold in rank order.
    throw new UnsupportedError(
      `Cannot ${VERB[collective]} deterministically with algorithm "${call.algorithm}": expected "auto", ` +
        `"segment" or "ordered"`,
    );
  }
  const segment = runsOnSegment(call.algorithm, usable);
  const input = inputOf(call);
  const pool = site.pool;
  if (
    segment && collective === "allReduce" && pool !== undefined && input !== undefined &&
    input.buffer === pool
  ) {
    // Whatever its size: the plan copies nothing, so every step is the peers' reading of it.
    return site.idle ? POOLED_INLINE : POOLED;
  }
  if (segment && site.idle && (input?.byteLength ?? 0) <= site.inlineBytes) return INLINE;
  if (site.byAddress) return segment ? BY_ADDRESS_SEGMENT : BY_ADDRESS;
  return segment ? STAGED_SEGMENT : STAGED;
}
