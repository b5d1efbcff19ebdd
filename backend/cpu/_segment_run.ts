/**
 * One call under way through the host segment, on the thread that drives it: the main thread spins on it
 * for a few milliseconds ({@linkcode SegmentRun.spin}), the communication Worker drives it to its end,
 * spinning, then sleeping on its doorbell ({@linkcode SegmentRun.drive}); both watch the peers and the
 * deadline, and either can hand it to the other by its state.
 *
 * @module
 */
import { addPhase, PHASE_WAITING, phaseMark, phasesOn, phasesSince } from "../../core/phases.ts";
import { dtypeSize } from "../../core/dtype.ts";
import { DistError, TimeoutError, TransportError } from "../../core/errors.ts";
import { schedYield } from "../../ffi/libc/libc.ts";
import type { SegmentPipeline, SegmentState } from "../../collectives/segment_context.ts";
import { type WorkReport, workReport } from "../work.ts";
import { segmentBytesPosted, type SegmentCall } from "./_segment_call.ts";
import type { SegmentExecutor } from "./_segment_exec.ts";
import { reached } from "../../transport/segment.ts";
import { silentRanksText } from "./_heartbeat.ts";

/** What a rank waits on the segment for, at most, between looks at the clock and the peers. */
const LOOK_EVERY = 64;
/** How often a waiting rank checks that its peers are alive. */
const LIVENESS_MS = 100;
/** The longest sleep on the communication thread between looks at the deadline and the peers. */
const SLEEP_SLICE_MS = 10;
/** How long a call on the communication thread may keep its event loop blocked. */
const YIELD_MS = 50;

/** `performance.timeOrigin`, read once (it does not change). */
const TIME_ORIGIN = performance.timeOrigin;

/** One call under way: its pipeline and the context it runs in. */
export class SegmentRun {
  /** The call's number in its group. */
  readonly call: number;
  /** `performance.now()` when this thread began or resumed it. */
  readonly began: number;
  readonly #exec: SegmentExecutor;
  readonly #segmentCall: SegmentCall;
  readonly #pipeline: SegmentPipeline;
  readonly #members: readonly number[];
  readonly #named: { readonly description: string; readonly rank: number };
  readonly #mark: readonly number[] | undefined;

  /** @internal */
  constructor(
    exec: SegmentExecutor,
    call: SegmentCall,
    pipeline: SegmentPipeline,
    named: { readonly description: string; readonly rank: number; readonly call: number },
  ) {
    // One clock read per end of the call (each costs about 0.1 µs in Deno); the epoch follows from it.
    this.began = performance.now();
    this.#mark = phasesOn ? phaseMark() : undefined;
    this.#exec = exec;
    this.#segmentCall = call;
    this.call = named.call;
    this.#pipeline = pipeline;
    this.#members = call.members;
    this.#named = named;
  }

  /**
   * The report of the call, done now on this thread.
   *
   * @param transport The transport's kind, as reports name it.
   * @returns The report.
   */
  report(transport: string): WorkReport {
    const t1 = performance.now(), call = this.#segmentCall;
    return workReport({
      collective: call.collective,
      algorithm: "segment",
      transport,
      bytes: call.count * dtypeSize(call.dtype),
      bytesSent: segmentBytesPosted(call, this.#named.rank),
      timeMs: t1 - this.began,
      startedAt: TIME_ORIGIN + this.began,
      finishedAt: TIME_ORIGIN + t1,
      phases: this.#mark && phasesSince(this.#mark, t1 - this.began, true),
    });
  }

  /** Whether the call is done on this rank. */
  get done(): boolean {
    return this.#pipeline.done;
  }

  /** Where it stands, to hand it to another thread. */
  get state(): SegmentState {
    return this.#pipeline.state;
  }

  /** The call, as error messages name it. */
  get description(): string {
    return this.#named.description;
  }

  /**
   * Does what the peers allow now.
   *
   * @returns Whether anything moved.
   * @throws {MismatchError} If a member runs another call.
   */
  progress(): boolean {
    return this.#pipeline.progress();
  }

  /** The global ranks this rank last waited for. */
  waitingOn(): number[] {
    return this.#pipeline.waitingOn().map((q) => this.#members[q]);
  }

  /**
   * A failure among the members: one this call waits for that closed its group, one that marked itself
   * aborted (or this rank, failed by its other thread), or, when `liveness` is asked for, one whose
   * process is gone.
   *
   * @param liveness Also check that the members' processes exist.
   * @returns The error to fail with, or `undefined`.
   */
  peerFailure(liveness: boolean): Error | undefined {
    const seg = this.#exec.segment;
    // A member that closed its group has published all it ever will: read the marks before the counters
    // (waitingOn), so a member that published and then closed is not taken for one that never came.
    const closed = this.#members.filter((r) => r !== seg.rank && seg.hasClosed(r));
    if (closed.length > 0) {
      const gone = this.waitingOn().find((r) => closed.includes(r));
      if (gone !== undefined) {
        return new TransportError(
          `Rank ${gone} closed its process group while rank ${seg.rank} waits for it in ${this.#named.description}`,
          { peer: gone },
        );
      }
    }
    for (const r of this.#members) {
      const reason = seg.abortReason(r);
      if (reason !== undefined) {
        return r === seg.rank
          ? new DistError(reason)
          : new TransportError(`Rank ${r} aborted: ${reason}`, { peer: r });
      }
      if (liveness && r !== seg.rank && seg.exited(r)) {
        return new TransportError(`Rank ${r} died (pid ${seg.pid(r)}) during ${this.#named.description}`, {
          peer: r,
        });
      }
    }
    return undefined;
  }

  /**
   * Spins on the call on this thread (nothing else runs meanwhile) until it is done or the peers have not
   * let it move for `budgetMs`.
   *
   * @param budgetMs How long to wait for peers that do not move.
   * @returns Whether the call is done.
   * @throws The call's failure (a mismatch, an aborted peer).
   */
  spin(budgetMs: number): boolean {
    let idle = 0;
    let until = -1;
    while (!this.#pipeline.done) {
      // In an idle streak, the time before this look is waiting (what progress() does next is work).
      const looked = until >= 0 && phasesOn ? performance.now() : -1;
      if (this.#pipeline.progress()) {
        // The budget is for waiting on peers that do not move, not for the call's own work.
        if (looked >= 0) addPhase(PHASE_WAITING, looked - (until - budgetMs));
        idle = 0;
        until = -1;
        continue;
      }
      if (++idle % LOOK_EVERY !== 0) continue;
      const now = performance.now();
      if (until < 0) until = now + budgetMs;
      else if (now >= until) {
        if (phasesOn) addPhase(PHASE_WAITING, now - (until - budgetMs));
        return false;
      }
      const failure = this.peerFailure(false);
      if (failure) throw failure;
      // Polite: where ranks outnumber cores, the peer being waited for may need this one.
      schedYield();
    }
    // Done here, but a member may have given the call up (timed out, failed) after posting its part: a
    // late rank must fail as the others did, not succeed (see drive, which marks the abort first). A
    // member that failed in a later call had finished this one: then it happened on every rank.
    const failure = this.#failureInThisCall();
    if (failure) throw failure;
    return true;
  }

  /**
   * {@linkcode SegmentRun.peerFailure} for a call done on this rank: only members that failed in this
   * call count, not those that began a later call of the group (they finished this one) and failed there.
   */
  #failureInThisCall(): Error | undefined {
    const failure = this.peerFailure(false);
    if (failure === undefined) return undefined;
    const seg = this.#exec.segment, called = seg.counterIndex(this.#segmentCall.group, "called");
    for (const r of this.#members) {
      if (seg.abortReason(r) === undefined) continue;
      if (r === seg.rank || !reached(Atomics.load(seg.words(r), called), (this.call + 1) | 0)) return failure;
    }
    return undefined;
  }

  /**
   * Drives the call to its end: spins for `spinMs` whenever it cannot move, then sleeps on this rank's
   * doorbell (peers ring it when they publish) while the event loop runs on; checks the deadline and
   * the peers all along.
   *
   * @param deadline `performance.now()` time past which the call fails.
   * @param spinMs How long to spin before sleeping.
   * @param timeoutMs The call's timeout, for the message.
   * @throws {TimeoutError} Past the deadline, naming the ranks waited for.
   * @throws {TransportError} If a member aborted or died.
   * @throws {MismatchError} If a member runs another call.
   */
  async drive(deadline: number, spinMs: number, timeoutMs: number): Promise<void> {
    const seg = this.#exec.segment;
    let lastLiveness = performance.now();
    let lastYield = lastLiveness;
    while (!this.spin(spinMs)) {
      const now = performance.now();
      const liveness = now - lastLiveness >= LIVENESS_MS;
      if (liveness) lastLiveness = now;
      const failure = this.peerFailure(liveness);
      if (failure) {
        // The peers may have posted their parts before one of them failed in a later call: finish then.
        if (this.spin(0)) return;
        throw failure;
      }
      if (now >= deadline) {
        // One last look: a peer that posted just now lets the call finish rather than fail.
        if (this.spin(0)) return;
        const peers = this.waitingOn();
        const waiting = peers.length ? `, waiting for rank ${peers.join(", rank ")}` : "";
        const error = new TimeoutError(
          `Timed out after ${timeoutMs} ms in ${this.#named.description} on rank ${seg.rank}${waiting}` +
            silentRanksText(),
        );
        // Marked in the segment before anything else: a late peer that completes the call from now on
        // sees it given up and fails too (the engine's abort after this keeps this first reason).
        seg.abort(error.message);
        throw error;
      }
      // Its own time (a peer's post reduced on the spot) is the call's work, not waiting.
      let inside = 0;
      const stillWaiting = (): boolean => {
        if (!phasesOn) return !this.#pipeline.progress();
        const t0 = performance.now();
        const waiting = !this.#pipeline.progress();
        inside += performance.now() - t0;
        return waiting;
      };
      if (now - lastYield < YIELD_MS) {
        // Asleep on this thread: a peer's ring wakes it within microseconds.
        seg.sleepSync(Math.min(SLEEP_SLICE_MS, Math.max(0.01, deadline - now)), stillWaiting);
      } else {
        // Now and then through the event loop, so that cancels and the engine's messages get in.
        lastYield = now;
        await seg.sleep(1, stillWaiting);
      }
      if (phasesOn) addPhase(PHASE_WAITING, performance.now() - now - inside);
    }
  }
}
