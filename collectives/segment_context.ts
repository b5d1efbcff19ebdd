/**
 * What the shared-segment algorithms (`segment_*.ts`) see, and the pipeline that runs them. The ranks of
 * a group share memory: each member owns `buffers` data buffers of `bufferBytes` that every other member
 * can read, and four counters per group that every member can load (see `transport/segment.ts`). An
 * algorithm is a plan of chunks, each in two or three steps:
 *
 * - **post** (`c`): the member writes its part of chunk `c` into its own buffer `b`, then publishes
 *   `posted`; it may post a chunk once every member has consumed the chunk that used `b` before;
 * - **mid** (`c`, two-phase plans only): once every member posted `c`, the member reduces its shard of
 *   the chunk from every member's buffer into its own, in place, and publishes `reduced`;
 * - **finish** (`c`): once every member posted (or reduced) `c`, the member reads what it needs from the
 *   buffers into its output, then publishes `consumed`.
 *
 * A member posts up to `buffers` chunks ahead of the slowest reader, so copying in, reducing and copying
 * out overlap across ranks. Steps never wait: {@linkcode SegmentPipeline.progress} does whatever it can
 * and says whether it did anything, and whoever drives it (a spin on the caller's thread, or the
 * communication thread with spins and sleeps) decides how to wait. Its whole state is a few counters
 * ({@linkcode SegmentState}), so one thread can hand a half-done call to another.
 *
 * Algorithms never see a transport, a dtype or a WebAssembly address: the context reduces byte ranges of
 * buffers for them.
 *
 * @module
 */

/** The group's shared buffers and counters, as one member sees them. */
export interface SegmentContext {
  /** This member, within the group. */
  readonly rank: number;
  /** Members in the group. */
  readonly size: number;
  /** Bytes per element; offsets and lengths given to the reductions are multiples of it. */
  readonly elemSize: number;
  /** Data buffers per member (a power of two). */
  readonly buffers: number;
  /** Bytes per data buffer. */
  readonly bufferBytes: number;
  /** The call's number in the group (the `called` counter each member publishes when it begins it). */
  readonly call: number;
  /**
   * A member's data buffer.
   *
   * @param member A member, in `0..size-1`.
   * @param b The buffer, in `0..buffers-1`.
   */
  buffer(member: number, b: number): Uint8Array;
  /**
   * `buffer(rank, b)[offset, offset+bytes) = op(buffer(0, b)[...], ..., buffer(size-1, b)[...])` over the
   * same range of every member's buffer `b`, in member order (so every member reducing the same range
   * gets the same bits). In place: this member's own range is one of the inputs.
   */
  reduceToBuffer(b: number, offset: number, bytes: number): void;
  /**
   * `out = op(buffer(0, b)[offset, offset+out.length), ..., buffer(size-1, b)[...])`, in member order.
   */
  reduceToOutput(out: Uint8Array, b: number, offset: number): void;
  /**
   * The reduction, in member order, of this member's `own` bytes and the same range of every other
   * member's buffer `b` (from `offset`), written into this member's buffer `b` at `offset` and into
   * `out` (which may be `own`): this member's bytes go into the reduction without being posted first.
   */
  reduceWithOwn(out: Uint8Array, own: Uint8Array, b: number, offset: number): void;
  /** The value of a member's counter. */
  counter(member: number, name: "called" | "posted" | "reduced" | "consumed"): number;
  /** Stores this member's counter and wakes members that sleep. */
  publish(name: "posted" | "reduced" | "consumed", value: number): void;
  /**
   * A member's tensor, when the call runs on tensors from the members' pools (`SegmentPlan.lends`): the
   * member's bytes where they lie, which every member may read.
   *
   * @param member A member.
   */
  tensor(member: number): Uint8Array;
  /**
   * `tensor(rank)[offset, offset+bytes) = op(tensor(0)[...], ..., tensor(size-1)[...])`, in member order,
   * in place: for calls on pool tensors.
   */
  reduceTensors(offset: number, bytes: number): void;
  /**
   * Checks the call's descriptor against every member that has begun it; throws the mismatch.
   *
   * @returns Whether every member has begun this call and agrees.
   */
  checkCall(): boolean;
}

/** The chunks of one call and what each step does; made by an algorithm of `segment_*.ts`. */
export interface SegmentPlan {
  /** How many chunks (at least 1, so that every call synchronises its members once). */
  readonly chunks: number;
  /** Writes this member's part of chunk `c` into its buffer `b`. */
  post(c: number, b: number): void;
  /** Two-phase plans: reduces this member's shard of chunk `c` into its buffer `b`, in place. */
  mid?(c: number, b: number): void;
  /** Reads chunk `c` from the buffers `b` of the members into the output. */
  finish(c: number, b: number): void;
  /**
   * Whether the plan lends this member's own tensor to the others (a call on pool tensors): then it is
   * done only once every member has consumed every chunk, since until then a peer may still read it.
   */
  readonly lends?: boolean;
}

/** Where a call's pipeline stands: enough for another thread to go on with it. */
export interface SegmentState {
  /** The value of this member's `posted` (and `consumed`) counter when the call began. */
  readonly base: number;
  /** Chunks posted. */
  readonly posted: number;
  /** Chunks reduced (two-phase plans). */
  readonly reduced: number;
  /** Chunks finished. */
  readonly finished: number;
  /** Whether every member's descriptor has been checked. */
  readonly checked: boolean;
}

/** Runs a plan's steps on a context, as far as the other members allow. */
export class SegmentPipeline {
  readonly #ctx: SegmentContext;
  readonly #plan: SegmentPlan;
  readonly #base: number;
  #posted: number;
  #reduced: number;
  #finished: number;
  #checked: boolean;
  /** What the last progress() that moved nothing was waiting for (two fields: a spin allocates nothing). */
  #blockedOn: "called" | "posted" | "reduced" | "consumed" | undefined;
  #blockedAt = 0;

  /**
   * @param ctx The group's buffers and counters.
   * @param plan The call's chunks.
   * @param state Where the call stands: a new call at `base`, or one another thread began.
   */
  constructor(ctx: SegmentContext, plan: SegmentPlan, state: SegmentState) {
    this.#ctx = ctx;
    this.#plan = plan;
    this.#base = state.base;
    this.#posted = state.posted;
    this.#reduced = state.reduced;
    this.#finished = state.finished;
    this.#checked = state.checked;
  }

  /** Whether every chunk is finished and every member's descriptor checked (and, for a plan that lends
   * this member's tensor, every member has consumed every chunk). */
  get done(): boolean {
    if (!this.#checked || this.#finished !== this.#plan.chunks) return false;
    return !this.#plan.lends || this.#all("consumed", (this.#base + this.#plan.chunks) | 0);
  }

  /** Where the call stands. */
  get state(): SegmentState {
    return {
      base: this.#base,
      posted: this.#posted,
      reduced: this.#reduced,
      finished: this.#finished,
      checked: this.#checked,
    };
  }

  /** The counter the pipeline last waited on (`"called"`: a member has not begun the call). */
  get waitingFor(): "called" | "posted" | "reduced" | "consumed" | undefined {
    return this.#blockedOn;
  }

  /** The members whose counters the pipeline waited for when it last could not move. */
  waitingOn(): number[] {
    const counter = this.#blockedOn, target = this.#blockedAt;
    if (counter === undefined) return [];
    const out: number[] = [];
    for (let q = 0; q < this.#ctx.size; q++) {
      if (((this.#ctx.counter(q, counter) - target) | 0) < 0) out.push(q);
    }
    return out;
  }

  /**
   * Does every step the members' counters allow now.
   *
   * @returns Whether it did anything.
   * @throws {Error} The context's mismatch error, if a member runs another call.
   */
  progress(): boolean {
    const ctx = this.#ctx, plan = this.#plan, k = ctx.buffers, mask = k - 1;
    let moved = false;
    if (!this.#checked) {
      if (ctx.checkCall()) {
        this.#checked = true;
        moved = true;
      } else {
        this.#blockedOn = "called";
        this.#blockedAt = ctx.call;
      }
    }
    while (this.#posted < plan.chunks && this.#posted - this.#finished < k) {
      const seq = (this.#base + this.#posted + 1) | 0;
      // The buffer is free once every member consumed the chunk that used it last.
      if (!this.#all("consumed", (seq - k) | 0)) break;
      plan.post(this.#posted, seq & mask);
      ctx.publish("posted", seq);
      this.#posted++;
      moved = true;
    }
    // Reading a peer's buffers is safe only once its descriptor says it runs this same call.
    if (!this.#checked) return moved;
    if (plan.mid !== undefined) {
      while (this.#reduced < this.#posted) {
        const seq = (this.#base + this.#reduced + 1) | 0;
        if (!this.#all("posted", seq)) break;
        plan.mid(this.#reduced, seq & mask);
        ctx.publish("reduced", seq);
        this.#reduced++;
        moved = true;
      }
    }
    const ready = plan.mid !== undefined ? this.#reduced : this.#posted;
    const counter = plan.mid !== undefined ? "reduced" : "posted";
    while (this.#finished < ready) {
      const seq = (this.#base + this.#finished + 1) | 0;
      if (!this.#all(counter, seq)) break;
      plan.finish(this.#finished, seq & mask);
      ctx.publish("consumed", seq);
      this.#finished++;
      moved = true;
    }
    return moved;
  }

  #all(counter: "posted" | "reduced" | "consumed", target: number): boolean {
    const ctx = this.#ctx;
    for (let q = 0; q < ctx.size; q++) {
      if (((ctx.counter(q, counter) - target) | 0) < 0) {
        this.#blockedOn = counter;
        this.#blockedAt = target;
        return false;
      }
    }
    return true;
  }
}

/**
 * The element range `[start, end)` of member `q`'s shard when `elements` are split among `size`
 * members as evenly as whole elements allow.
 *
 * @param elements Elements in the range being split.
 * @param size Members.
 * @param q The member.
 * @returns Its first element and the one past its last.
 */
export function shardOf(elements: number, size: number, q: number): [number, number] {
  return [Math.floor((q * elements) / size), Math.floor(((q + 1) * elements) / size)];
}
