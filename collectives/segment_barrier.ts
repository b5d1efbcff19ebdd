/**
 * Barrier through the shared segment: one empty chunk; a member finishes it once every member posted
 * it. Cost `α` (one counter store seen by every spinning member).
 *
 * @module
 */
import type { SegmentContext, SegmentPlan } from "./segment_context.ts";

/**
 * The plan of a barrier.
 *
 * @param _ctx The group's segment.
 * @returns The plan.
 */
export function segmentBarrier(_ctx: SegmentContext): SegmentPlan {
  return { chunks: 1, post(): void {}, finish(): void {} };
}
