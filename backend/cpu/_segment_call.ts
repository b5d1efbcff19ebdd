/**
 * A call through the host segment as either thread of a rank describes it: the collective, its tensors'
 * bytes as that thread reaches them, its plan (one-shot or two-phase, priced alike on every rank), and
 * what follows from it alone: its descriptor, the bytes it posts, the plan of chunks it runs.
 *
 * @module
 */
import { type DType, dtypeSize, type ReduceOp } from "../../core/dtype.ts";
import { UnsupportedError } from "../../core/errors.ts";
import { DEFAULT_SEGMENT_CONSTANTS, segmentPlan, type SegmentPlanName } from "../../sim/cost_model.ts";
import { SEGMENT_GROUPS, type SegmentLayout } from "../../transport/segment.ts";
import type { SegmentContext, SegmentPlan } from "../../collectives/segment_context.ts";
import { type Blocks, blocksOf } from "../../collectives/mod.ts";
import { segmentAllReduce, segmentAllReducePooled } from "../../collectives/segment_allreduce.ts";
import { segmentBroadcast } from "../../collectives/segment_broadcast.ts";
import { segmentReduce } from "../../collectives/segment_reduce.ts";
import { segmentAllGather } from "../../collectives/segment_allgather.ts";
import { segmentGather } from "../../collectives/segment_gather.ts";
import { segmentScatter } from "../../collectives/segment_scatter.ts";
import { segmentReduceScatter } from "../../collectives/segment_reduce_scatter.ts";
import { segmentAllToAll } from "../../collectives/segment_alltoall.ts";
import { segmentBarrier } from "../../collectives/segment_barrier.ts";
import { type CallDescriptor, countsMark } from "./_descriptor.ts";
import { type Collective, type OpRequest, rootedCollective } from "./_protocol.ts";

/** A call to run through the segment. */
export interface SegmentCall {
  /** The group id (below `SEGMENT_GROUPS`). */
  group: number;
  /** The group's members, as global ranks, in group order. */
  members: readonly number[];
  /** The collective (not send/recv). */
  collective: Exclude<Collective, "send" | "recv">;
  /** The element type. */
  dtype: DType;
  /** The reduction. */
  op: ReduceOp;
  /** The root (group rank), for broadcast and reduce. */
  root: number;
  /** Elements, as the descriptor counts them. */
  count: number;
  /** A v-form's blocks, in elements per member (`counts`). */
  counts?: readonly number[];
  /** The stage of a compressed all-reduce this call belongs to (0 for none), as the descriptor says. */
  stage: number;
  /** The two-phase plan of all-reduce and reduce. */
  twoPhase: boolean;
  /** The in-place tensor or the input. */
  input?: Uint8Array;
  /** The output of the out-of-place collectives. */
  output?: Uint8Array;
  /**
   * For an all-reduce on a tensor from this rank's pool: its byte offset there. Every member of the call
   * must pass a pool tensor or none (the descriptor says which).
   */
  pooled?: number;
}

/**
 * `DCOMM_SEGMENT_PLAN=one-shot|two-phase` runs every segment all-reduce and reduce with that plan instead
 * of the cost model's choice (for measuring one against the other; every rank must set the same).
 */
const FORCED_PLAN: SegmentPlanName | undefined = (() => {
  let v: string | undefined;
  try {
    v = Deno.env.get("DCOMM_SEGMENT_PLAN");
  } catch {
    return undefined; // no --allow-env: the model decides
  }
  if (v === undefined || v === "") return undefined;
  if (v !== "one-shot" && v !== "two-phase") {
    throw new RangeError(`Invalid DCOMM_SEGMENT_PLAN: expected one-shot or two-phase, found "${v}"`);
  }
  return v;
})();

/**
 * The segment call of a request: the plan (one-shot or two-phase, as the cost model prices them, the same
 * on every rank) and the tensors' bytes as this thread reaches them.
 *
 * @param op The request.
 * @param members The group's global ranks.
 * @param layout The segment's buffers.
 * @param input The input's bytes.
 * @param output The output's bytes.
 * @returns The call.
 */
export function segmentCallOf(
  op: Pick<
    OpRequest,
    "group" | "collective" | "dtype" | "op" | "root" | "count" | "input" | "stage" | "counts"
  >,
  members: readonly number[],
  layout: SegmentLayout,
  input: Uint8Array | undefined,
  output: Uint8Array | undefined,
): SegmentCall {
  // An all-reduce on a pool tensor runs in place there, with nothing copied in or out.
  const pooled = op.collective === "allReduce" && op.input !== undefined && "pool" in op.input
    ? op.input.pool
    : undefined;
  return newSegmentCall(
    op.group,
    members,
    op.collective,
    op.dtype,
    op.op,
    op.root,
    op.count,
    op.stage ?? 0,
    pooled,
    layout,
    input,
    output,
    op.counts,
  );
}

// The last plan priced, and its answer: a run of calls of one size prices it once.
let pricedSize = -1, pricedBytes = -1, pricedChunk = -1, pricedTwoPhase = false;

/** Whether `DCOMM_SEGMENT_PLAN` forces a plan (the paths that know only one-shot then stand aside). */
export function segmentPlanForced(): boolean {
  return FORCED_PLAN !== undefined;
}

/** Whether the cost model runs an all-reduce (or reduce) of `bytes` on `size` ranks in two phases. */
function twoPhaseOf(size: number, bytes: number, chunkBytes: number): boolean {
  if (FORCED_PLAN !== undefined) return FORCED_PLAN === "two-phase";
  if (size !== pricedSize || bytes !== pricedBytes || chunkBytes !== pricedChunk) {
    pricedTwoPhase = segmentPlan({ size, bytes, chunkBytes }, DEFAULT_SEGMENT_CONSTANTS) === "two-phase";
    pricedSize = size, pricedBytes = bytes, pricedChunk = chunkBytes;
  }
  return pricedTwoPhase;
}

/**
 * A segment call from its parts (the calling thread makes its calls from the front's record with this,
 * with no request in between).
 *
 * @param group The group id.
 * @param members The group's global ranks.
 * @param collective The collective.
 * @param dtype The element type.
 * @param op The reduction.
 * @param root The root (group rank).
 * @param count Elements, as the descriptor counts them.
 * @param stage The stage of a compressed all-reduce (0 for none).
 * @param pooled The byte offset in this rank's pool of an all-reduce's pool tensor, if it is one.
 * @param layout The segment's buffers.
 * @param input The input's bytes.
 * @param output The output's bytes.
 * @param counts A v-form's blocks, in elements per member.
 * @returns The call.
 * @throws {TypeError} For send and recv, which are messages.
 */
export function newSegmentCall(
  group: number,
  members: readonly number[],
  collective: Collective,
  dtype: DType,
  op: ReduceOp,
  root: number,
  count: number,
  stage: number,
  pooled: number | undefined,
  layout: SegmentLayout,
  input: Uint8Array | undefined,
  output: Uint8Array | undefined,
  counts?: readonly number[],
): SegmentCall {
  if (collective === "send" || collective === "recv") {
    throw new TypeError(`${collective} has no segment algorithm: it is a message`);
  }
  const twoPhase = (collective === "allReduce" || collective === "reduce") &&
    twoPhaseOf(members.length, count * dtypeSize(dtype), layout.bufferBytes);
  return {
    pooled: collective === "allReduce" ? pooled : undefined,
    group,
    members,
    collective,
    dtype,
    op,
    root,
    count,
    counts,
    stage,
    twoPhase,
    input,
    output,
  };
}

/**
 * Bytes a call copies into this rank's buffers, for its report's `bytesSent`: what the rank hands to its
 * peers (0 for a pool tensor, which they read in place).
 *
 * @param call The call.
 * @param index This rank within the group.
 * @returns Bytes.
 */
export function segmentBytesPosted(call: SegmentCall, index: number): number {
  // A pool tensor is read where it lies: nothing is copied for the peers.
  if (call.pooled !== undefined) return 0;
  switch (call.collective) {
    case "barrier":
      return 0;
    case "broadcast":
      return index === call.root ? call.input?.byteLength ?? 0 : 0;
    default:
      return call.input?.byteLength ?? 0;
  }
}

/**
 * The error of a call that asks for the segment where a group has none.
 *
 * @param collective The collective.
 * @param group The group id.
 * @param transport The transport the group runs over.
 * @returns The error to throw.
 */
export function segmentUnavailable(collective: string, group: number, transport: string): UnsupportedError {
  const why = transport !== "shm"
    ? `this world runs over ${transport}, not shared memory`
    : group >= SEGMENT_GROUPS
    ? `group ${group} has no block in it (only group ids below ${SEGMENT_GROUPS} do)`
    : "the segment is turned off (DCOMM_SEGMENT=0 or init({ segment: false }))";
  return new UnsupportedError(
    `Cannot run ${collective} with algorithm "segment": it needs the ranks' shared host segment, and ${why}`,
  );
}

/**
 * A segment call's descriptor: what its peers compare.
 *
 * @param call The call.
 * @param seq Its number in its group.
 * @returns The descriptor.
 */
export function segmentDescriptor(call: SegmentCall, seq: number): CallDescriptor {
  return {
    group: call.group,
    seq,
    collective: call.collective,
    dtype: call.dtype,
    op: call.op,
    algorithm: "segment",
    root: rootedCollective(call.collective) ? call.root : 0,
    count: call.count,
    servers: call.counts === undefined ? 0 : countsMark(call),
    stage: call.stage,
  };
}

function need(b: Uint8Array | undefined, what: string, collective: string): Uint8Array {
  if (b === undefined) throw new TypeError(`A ${collective} call needs ${what}`);
  return b;
}

/** A v-form's blocks in bytes (undefined for equal blocks). */
function layoutOf(ctx: SegmentContext, call: SegmentCall): Blocks | undefined {
  return call.counts === undefined ? undefined : blocksOf(call.counts, ctx.elemSize);
}

/**
 * The plan of chunks a segment call runs (`collectives/segment_*.ts`).
 *
 * @param ctx The call's context.
 * @param call The call.
 * @returns The plan.
 * @throws {TypeError} If the call lacks a tensor its collective needs.
 */
export function segmentPlanOf(ctx: SegmentContext, call: SegmentCall): SegmentPlan {
  const c = call.collective;
  switch (c) {
    case "allReduce":
      if (call.pooled !== undefined) return segmentAllReducePooled(ctx, call.count * ctx.elemSize);
      return segmentAllReduce(ctx, need(call.input, "a tensor", c), { twoPhase: call.twoPhase });
    case "broadcast":
      return segmentBroadcast(ctx, need(call.input, "a tensor", c), call.root);
    case "reduce":
      return segmentReduce(ctx, need(call.input, "a tensor", c), call.root, { twoPhase: call.twoPhase });
    case "allGather":
      return segmentAllGather(
        ctx,
        need(call.input, "an input", c),
        need(call.output, "an output", c),
        layoutOf(ctx, call),
      );
    case "reduceScatter":
      return segmentReduceScatter(
        ctx,
        need(call.input, "an input", c),
        need(call.output, "an output", c),
        layoutOf(ctx, call),
      );
    case "allToAll":
      return segmentAllToAll(ctx, need(call.input, "an input", c), need(call.output, "an output", c));
    case "barrier":
      return segmentBarrier(ctx);
    case "gather":
      return segmentGather(ctx, need(call.input, "an input", c), call.output, call.root, layoutOf(ctx, call));
    case "scatter":
      return segmentScatter(
        ctx,
        call.input,
        need(call.output, "an output", c),
        call.root,
        layoutOf(ctx, call),
      );
  }
}
