/**
 * Where a call's time goes, for the timeline: per-thread running totals of the milliseconds spent asleep
 * waiting for a peer, reducing and running a codec, which the code doing each adds to. A call takes a
 * {@linkcode phaseMark} when it starts and {@linkcode phasesSince} when it ends (marks nest: a compressed
 * all-reduce's inner stages add to its totals); the rest of its time is moving bytes. One communication
 * thread runs one call at a time, so the totals between two marks are that call's.
 *
 * @module
 */

/** Index of the time asleep on a doorbell with nothing to do: waiting for a peer. */
export const PHASE_WAITING = 0;
/** Index of the time in reduction kernels. */
export const PHASE_REDUCING = 1;
/** Index of the time in codec kernels (quantize, sign, top-k, PowerSGD, fp16/bf16 narrowing). */
export const PHASE_CODEC = 2;

const totals = new Float64Array(3);

/**
 * Whether this thread measures phases (off by default: the timeline turns it on, so that the hot paths
 * pay one branch, not two clock reads, per kernel or sleep). Read it before timing anything.
 */
export let phasesOn = false;

/**
 * Turns the measuring on or off on this thread.
 *
 * @param on Whether to measure.
 */
export function setPhases(on: boolean): void {
  phasesOn = on;
}

/**
 * A call's phases, in milliseconds: together they make its time. A cpu call's `WorkReport.phases`, while
 * the timeline is on (`DCOMM_TIMELINE`).
 *
 * @example Where a call's time went
 * ```ts
 * import type { CallPhases } from "@dcomm/dcomm";
 * const share = (p: CallPhases, timeMs: number): string =>
 *   `${(100 * (p.waitingMs ?? 0) / timeMs).toFixed(0)}% waiting, ${(100 * p.reducingMs / timeMs).toFixed(0)}% reducing`;
 * console.log(share({ waitingMs: 1.5, movingMs: 0.3, reducingMs: 0.2, codecMs: 0 }, 2));
 * ```
 */
export interface CallPhases {
  /**
   * Asleep waiting for a peer to post (the host segment, the shared-memory and in-process rings); absent
   * where the transport does not measure it (TCP, RDMA, hybrid): there it is part of `movingMs`.
   */
  waitingMs?: number;
  /** Moving bytes: the call's time less the other phases. */
  movingMs: number;
  /** In the reduction kernels. */
  reducingMs: number;
  /** In the codec kernels. */
  codecMs: number;
}

/**
 * Adds `ms` to a phase's total.
 *
 * @param phase {@linkcode PHASE_WAITING}, {@linkcode PHASE_REDUCING} or {@linkcode PHASE_CODEC}.
 * @param ms Milliseconds.
 */
export function addPhase(phase: number, ms: number): void {
  totals[phase] += ms;
}

/** Runs `fn`, adding its time to `phase` (when {@linkcode phasesOn}). */
export function timePhase<T>(phase: number, fn: () => T): T {
  if (!phasesOn) return fn();
  const t0 = performance.now();
  try {
    return fn();
  } finally {
    totals[phase] += performance.now() - t0;
  }
}

/** The totals now, to pass to {@linkcode phasesSince} at the end of a call. */
export function phaseMark(): readonly number[] {
  return [totals[0], totals[1], totals[2]];
}

/**
 * A call's phases since `mark`.
 *
 * @param mark From {@linkcode phaseMark} at the call's start.
 * @param timeMs The call's time.
 * @param waitingMeasured Whether the transport measures waiting.
 * @returns The phases; `movingMs` is what the others leave of `timeMs` (never below 0).
 *
 * @example
 * ```ts
 * import { addPhase, PHASE_REDUCING, phaseMark, phasesSince } from "./phases.ts";
 * import assert from "node:assert/strict";
 * const mark = phaseMark();
 * addPhase(PHASE_REDUCING, 2);
 * assert.deepEqual(phasesSince(mark, 5, false), { movingMs: 3, reducingMs: 2, codecMs: 0 });
 * ```
 */
export function phasesSince(mark: readonly number[], timeMs: number, waitingMeasured: boolean): CallPhases {
  const waiting = totals[0] - mark[0], reducing = totals[1] - mark[1], codec = totals[2] - mark[2];
  const moving = Math.max(0, timeMs - (waitingMeasured ? waiting : 0) - reducing - codec);
  return waitingMeasured
    ? { waitingMs: waiting, movingMs: moving, reducingMs: reducing, codecMs: codec }
    : { movingMs: moving, reducingMs: reducing, codecMs: codec };
}
