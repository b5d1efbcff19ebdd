/**
 * Runs collectives through the host segment (`transport/segment.ts`) on the thread that holds this
 * executor: the rank's main thread, for calls that can finish before returning, or its communication
 * Worker. Each thread maps every rank's area once more into its own WebAssembly memory, so the kernels
 * reduce the peers' buffers where they are; copies in and out are `TypedArray.set` between the tensor
 * and the mapped buffers.
 *
 * A call begins by writing its descriptor into this rank's log in the group's block and bumping the
 * group's `called` counter; before any member's buffer is read, that member's descriptor for the same
 * call is compared with ours (a member running another call fails every rank with a `MismatchError`
 * naming both calls). Calls of every path (segment or transport) in a group with a block count in that
 * one sequence, so whichever thread of a rank runs a call, all ranks number it alike.
 *
 * @module
 */
import { type DType, dtypeSize, type ReduceOp } from "../../core/dtype.ts";
import {
  DistError,
  MismatchError,
  TimeoutError,
  TransportError,
  UnsupportedError,
} from "../../core/errors.ts";
import { DEFAULT_SEGMENT_CONSTANTS, segmentPlan, type SegmentPlanName } from "../../sim/cost_model.ts";
import { duplicateMapping, mapAnonymousAt, schedYield, type SharedMapping } from "../../ffi/libc/libc.ts";
import {
  type HostSegment,
  poolOffset,
  reached,
  SEGMENT_GROUPS,
  SEGMENT_HEADER_BYTES,
  type SegmentLayout,
} from "../../transport/segment.ts";
import type { Kernels } from "../../wasm/kernels.ts";
import {
  type SegmentContext,
  SegmentPipeline,
  type SegmentPlan,
  type SegmentState,
} from "../../collectives/segment_context.ts";
import { segmentAllReduce, segmentAllReducePooled } from "../../collectives/segment_allreduce.ts";
import { segmentBroadcast } from "../../collectives/segment_broadcast.ts";
import { segmentReduce } from "../../collectives/segment_reduce.ts";
import { segmentAllGather } from "../../collectives/segment_allgather.ts";
import { segmentReduceScatter } from "../../collectives/segment_reduce_scatter.ts";
import { segmentAllToAll } from "../../collectives/segment_alltoall.ts";
import { segmentBarrier } from "../../collectives/segment_barrier.ts";
import { type CallDescriptor, decodeDescriptor, describeCall, encodeDescriptorInto } from "./_descriptor.ts";
import { ALGORITHM_NAMES } from "./_dispatch.ts";
import type { Collective, OpRequest } from "./_protocol.ts";

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
  op: Pick<OpRequest, "group" | "collective" | "dtype" | "op" | "root" | "count" | "input" | "stage">,
  members: readonly number[],
  layout: SegmentLayout,
  input: Uint8Array | undefined,
  output: Uint8Array | undefined,
): SegmentCall {
  const collective = op.collective;
  if (collective === "send" || collective === "recv") {
    throw new TypeError(`${collective} has no segment algorithm: it is a message`);
  }
  const twoPhase = (collective === "allReduce" || collective === "reduce") &&
    (FORCED_PLAN ?? segmentPlan(
        { size: members.length, bytes: op.count * dtypeSize(op.dtype), chunkBytes: layout.bufferBytes },
        DEFAULT_SEGMENT_CONSTANTS,
      )) === "two-phase";
  // An all-reduce on a pool tensor runs in place there, with nothing copied in or out.
  const pooled = collective === "allReduce" && op.input !== undefined && "pool" in op.input
    ? op.input.pool
    : undefined;
  return {
    pooled,
    group: op.group,
    members,
    collective,
    dtype: op.dtype,
    op: op.op,
    root: op.root,
    count: op.count,
    stage: op.stage ?? 0,
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

/** What a rank waits on the segment for, at most, between looks at the clock and the peers. */
const LOOK_EVERY = 64;
/** How often a waiting rank checks that its peers are alive. */
const LIVENESS_MS = 100;
/** The longest sleep on the communication thread between looks at the deadline and the peers. */
const SLEEP_SLICE_MS = 10;
/** How long a call on the communication thread may keep its event loop blocked. */
const YIELD_MS = 50;
/** Bytes reduced at once into the scratch buffer before they are copied out (stays in L2). */
const SCRATCH_BYTES = 64 * 1024;

/** One call under way: its pipeline and the context it runs in. */
export class SegmentRun {
  /** The call's number in its group. */
  readonly call: number;
  readonly #exec: SegmentExecutor;
  readonly #pipeline: SegmentPipeline;
  readonly #members: readonly number[];
  readonly #named: { readonly description: string };

  /** @internal */
  constructor(
    exec: SegmentExecutor,
    call: number,
    pipeline: SegmentPipeline,
    members: readonly number[],
    named: { readonly description: string },
  ) {
    this.#exec = exec;
    this.call = call;
    this.#pipeline = pipeline;
    this.#members = members;
    this.#named = named;
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
   * A failure among the members: one that marked itself aborted (or this rank, failed by its other
   * thread), or, when `liveness` is asked for, one whose process is gone.
   *
   * @param liveness Also check that the members' processes exist.
   * @returns The error to fail with, or `undefined`.
   */
  peerFailure(liveness: boolean): Error | undefined {
    const seg = this.#exec.segment;
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
      if (this.#pipeline.progress()) {
        // The budget is for waiting on peers that do not move, not for the call's own work.
        idle = 0;
        until = -1;
        continue;
      }
      if (++idle % LOOK_EVERY !== 0) continue;
      const now = performance.now();
      if (until < 0) until = now + budgetMs;
      else if (now >= until) return false;
      const failure = this.peerFailure(false);
      if (failure) throw failure;
      // Polite: where ranks outnumber cores, the peer being waited for may need this one.
      schedYield();
    }
    return true;
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
      if (failure) throw failure;
      if (now >= deadline) {
        const peers = this.waitingOn();
        const waiting = peers.length ? `, waiting for rank ${peers.join(", rank ")}` : "";
        throw new TimeoutError(
          `Timed out after ${timeoutMs} ms in ${this.#named.description} on rank ${seg.rank}${waiting}`,
        );
      }
      const stillWaiting = (): boolean => !this.#pipeline.progress();
      if (now - lastYield < YIELD_MS) {
        // Asleep on this thread: a peer's ring wakes it within microseconds.
        seg.sleepSync(Math.min(SLEEP_SLICE_MS, Math.max(0.01, deadline - now)), stillWaiting);
      } else {
        // Now and then through the event loop, so that cancels and the engine's messages get in.
        lastYield = now;
        await seg.sleep(1, stillWaiting);
      }
    }
  }
}

/** The segment as one thread runs collectives on it. */
export class SegmentExecutor {
  /** The areas, mapped for this thread. */
  readonly segment: HostSegment;
  readonly #kernels: Kernels;
  /** Each rank's area in this thread's wasm memory. */
  readonly #wasm: number[];
  readonly #wasmBase: number;
  readonly #wasmBytes: number;
  readonly #maps: SharedMapping[];
  readonly #scratch: number;
  readonly #memoryAddress: bigint;
  #memoryBuffer: ArrayBufferLike;
  readonly #groups = new Map<number, GroupMemory>();
  #closed = false;

  /**
   * Maps every rank's area into this thread's wasm memory.
   *
   * @param segment The areas, mapped for this thread.
   * @param kernels This thread's kernels.
   * @throws {LibcError} If a mapping fails.
   */
  constructor(segment: HostSegment, kernels: Kernels) {
    this.segment = segment;
    this.#kernels = kernels;
    const heap = kernels.heap;
    const area = segment.areaBytes;
    this.#scratch = heap.alloc(SCRATCH_BYTES, 64);
    this.#wasmBytes = area * segment.size;
    this.#wasmBase = heap.alloc(this.#wasmBytes, 65536);
    this.#memoryAddress = memoryAddress(heap.memory);
    this.#memoryBuffer = heap.memory.buffer;
    this.#maps = [];
    this.#wasm = [];
    for (let r = 0; r < segment.size; r++) {
      const at = this.#wasmBase + r * area;
      const target = Deno.UnsafePointer.create(this.#memoryAddress + BigInt(at)) as Deno.PointerObject;
      this.#maps.push(duplicateMapping(segment.pointer(r), area, target));
      this.#wasm.push(at);
    }
  }

  /** Whether a group can run its calls through the segment. */
  static groupFits(group: number): boolean {
    return group < SEGMENT_GROUPS;
  }

  /**
   * Starts a call: logs its descriptor, bumps the group's call counter, and builds its pipeline.
   *
   * @param call The call and its tensors' bytes.
   * @returns The run.
   */
  begin(call: SegmentCall): SegmentRun {
    const number = this.beginCall(call.group, (seq) => descriptorOf(call, seq), call.pooled ?? -1);
    const words = this.segment.words(this.segment.rank);
    const base = Atomics.load(words, this.segment.counterIndex(call.group, "posted"));
    return this.#run(call, number, { base, posted: 0, reduced: 0, finished: 0, checked: false });
  }

  /**
   * Goes on with a call another thread of this rank began.
   *
   * @param call The call and its tensors' bytes (as this thread sees them).
   * @param number The call's number.
   * @param state Where it stands.
   * @returns The run.
   */
  resume(call: SegmentCall, number: number, state: SegmentState): SegmentRun {
    return this.#run(call, number, state);
  }

  /**
   * Counts a call of a group in its sequence and logs its descriptor, for calls of any path (a
   * transport algorithm's call is numbered in the same sequence, so a rank that runs another path is
   * caught by the descriptor check).
   *
   * @param group The group id.
   * @param describe The descriptor, given the call's number.
   * @returns The call's number.
   */
  beginCall(group: number, describe: (seq: number) => CallDescriptor, pooled = -1): number {
    const seg = this.segment, me = seg.rank;
    const words = seg.words(me);
    const index = seg.counterIndex(group, "called");
    const number = (Atomics.load(words, index) + 1) | 0;
    const at = seg.logOffset(group, number);
    encodeDescriptorInto(describe(number >>> 0), ALGORITHM_NAMES, seg.view(me), at);
    // Byte 28 (reserved in the descriptor) says whether the call is on pool tensors; its offset follows.
    seg.area(me)[at + 28] = pooled >= 0 ? 1 : 0;
    seg.setLogPool(me, group, number, pooled);
    Atomics.store(words, index, number);
    // Peers asleep waiting for this rank to begin wake now.
    seg.ringAll();
    return number;
  }

  /** Gives this thread's wasm memory back (fresh pages over the mapped range). Idempotent. */
  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    const target = Deno.UnsafePointer.create(
      this.#memoryAddress + BigInt(this.#wasmBase),
    ) as Deno.PointerObject;
    mapAnonymousAt(target, this.#wasmBytes);
  }

  #run(call: SegmentCall, number: number, state: SegmentState): SegmentRun {
    if (this.#closed) throw new DistError("The process group is closed");
    const memory = this.#kernels.heap.memory;
    if (memory.buffer !== this.#memoryBuffer) {
      // Memory grew: it must have grown in place, or the mapping is lost.
      if (memoryAddress(memory) !== this.#memoryAddress) {
        throw new DistError("WebAssembly memory moved; the segment mapping is lost (grow it before mapping)");
      }
      this.#memoryBuffer = memory.buffer;
    }
    const ctx = new CallContext(this.#groupOf(call), call, number, this.#kernels, this.#scratch);
    const plan = planOf(ctx, call);
    return new SegmentRun(this, number, new SegmentPipeline(ctx, plan, state), call.members, ctx);
  }

  /** What a group's calls share (the members' words, the counters' indices), made once per group. */
  #groupOf(call: SegmentCall): GroupMemory {
    const known = this.#groups.get(call.group);
    if (known !== undefined && known.members === call.members) return known;
    const seg = this.segment, group = call.group, members = call.members;
    const made: GroupMemory = {
      seg,
      group,
      members,
      me: members.indexOf(seg.rank),
      wasm: members.map((r) => this.#wasm[r]),
      words: members.map((r) => seg.words(r)),
      called: seg.counterIndex(group, "called"),
      posted: seg.counterIndex(group, "posted"),
      reduced: seg.counterIndex(group, "reduced"),
      consumed: seg.counterIndex(group, "consumed"),
      sources: new Array<number>(members.length),
      pool: poolOffset(seg.layout),
    };
    this.#groups.set(group, made);
    return made;
  }
}

/** A group's memory as its calls reach it (made once per group by the executor). */
interface GroupMemory {
  readonly seg: HostSegment;
  readonly group: number;
  readonly members: readonly number[];
  /** This rank's index in `members`. */
  readonly me: number;
  /** Each member's area in this thread's wasm memory. */
  readonly wasm: readonly number[];
  /** Each member's area as words. */
  readonly words: readonly Int32Array[];
  readonly called: number;
  readonly posted: number;
  readonly reduced: number;
  readonly consumed: number;
  /** The kernels' source addresses, reused call after call. */
  readonly sources: number[];
  /** Where the pool starts in an area. */
  readonly pool: number;
}

/** One call's {@linkcode SegmentContext}: its methods on the prototype, so a call allocates little. */
class CallContext implements SegmentContext {
  readonly rank: number;
  readonly size: number;
  readonly elemSize: number;
  readonly buffers: number;
  readonly bufferBytes: number;
  readonly call: number;
  readonly #g: GroupMemory;
  readonly #c: SegmentCall;
  readonly #kernels: Kernels;
  readonly #scratch: number;
  readonly #bytes: number;
  #checkedBits = 0;
  #checkedMany: boolean[] | undefined;
  #tensorOffsets: number[] | undefined;

  constructor(g: GroupMemory, call: SegmentCall, number: number, kernels: Kernels, scratch: number) {
    this.#g = g;
    this.#c = call;
    this.#kernels = kernels;
    this.#scratch = scratch;
    this.rank = g.me;
    this.size = g.members.length;
    this.elemSize = dtypeSize(call.dtype);
    this.buffers = g.seg.layout.buffers;
    this.bufferBytes = g.seg.layout.bufferBytes;
    this.call = number;
    this.#bytes = call.count * this.elemSize;
  }

  /** The call as error messages name it (made only when one is needed). */
  get description(): string {
    return describeCall(descriptorOf(this.#c, this.call >>> 0));
  }

  buffer(q: number, b: number): Uint8Array {
    return this.#g.seg.buffer(this.#g.members[q], b);
  }

  #address(q: number, b: number, offset: number): number {
    return this.#g.wasm[q] + SEGMENT_HEADER_BYTES + b * this.bufferBytes + offset;
  }

  reduceToBuffer(b: number, offset: number, bytes: number): void {
    const sources = this.#g.sources;
    for (let q = 0; q < sources.length; q++) sources[q] = this.#address(q, b, offset);
    const c = this.#c;
    this.#kernels.reduceManyPtr(
      c.dtype,
      c.op,
      this.#address(this.rank, b, offset),
      sources,
      bytes / this.elemSize,
    );
  }

  reduceToOutput(out: Uint8Array, b: number, offset: number): void {
    const sources = this.#g.sources, c = this.#c, k = this.#kernels, scratch = this.#scratch;
    for (let done = 0; done < out.byteLength; done += SCRATCH_BYTES) {
      const len = Math.min(SCRATCH_BYTES, out.byteLength - done);
      for (let q = 0; q < sources.length; q++) sources[q] = this.#address(q, b, offset + done);
      k.reduceManyPtr(c.dtype, c.op, scratch, sources, len / this.elemSize);
      out.set(k.heap.bytes().subarray(scratch, scratch + len), done);
    }
  }

  reduceWithOwn(out: Uint8Array, own: Uint8Array, b: number, offset: number): void {
    const sources = this.#g.sources, c = this.#c, k = this.#kernels, scratch = this.#scratch;
    const mine = this.buffer(this.rank, b);
    for (let done = 0; done < own.byteLength; done += SCRATCH_BYTES) {
      const len = Math.min(SCRATCH_BYTES, own.byteLength - done);
      // This rank's bytes are outside wasm memory: through the scratch, a sub-block at a time (in L1/L2).
      k.heap.bytes().set(own.subarray(done, done + len), scratch);
      for (let q = 0; q < sources.length; q++) {
        sources[q] = q === this.rank ? scratch : this.#address(q, b, offset + done);
      }
      k.reduceManyPtr(
        c.dtype,
        c.op,
        this.#address(this.rank, b, offset + done),
        sources,
        len / this.elemSize,
      );
      out.set(mine.subarray(offset + done, offset + done + len), done);
    }
  }

  #tensorOffset(q: number): number {
    const offsets = this.#tensorOffsets ??= [];
    if (offsets[q] === undefined) {
      const g = this.#g;
      offsets[q] = q === this.rank ? this.#c.pooled ?? -1 : g.seg.logPool(g.members[q], g.group, this.call);
      if (!(offsets[q] >= 0 && offsets[q] + this.#bytes <= (g.seg.layout.poolBytes ?? 0))) {
        throw new MismatchError(
          `Rank ${g.members[q]} logged no pool tensor of ${this.#bytes} bytes for call #${this.call} in ` +
            `group ${g.group}`,
        );
      }
    }
    return offsets[q];
  }

  tensor(q: number): Uint8Array {
    const at = this.#tensorOffset(q);
    return this.#g.seg.pool(this.#g.members[q]).subarray(at, at + this.#bytes);
  }

  reduceTensors(offset: number, n: number): void {
    const g = this.#g, sources = g.sources, c = this.#c;
    for (let q = 0; q < sources.length; q++) sources[q] = g.wasm[q] + g.pool + this.#tensorOffset(q) + offset;
    this.#kernels.reduceManyPtr(c.dtype, c.op, sources[this.rank], sources, n / this.elemSize);
  }

  counter(q: number, name: "called" | "posted" | "reduced" | "consumed"): number {
    return Atomics.load(this.#g.words[q], this.#g[name]);
  }

  publish(name: "posted" | "reduced" | "consumed", value: number): void {
    const g = this.#g;
    Atomics.store(g.words[g.me], g[name], value);
    g.seg.ring(g.members);
  }

  checkCall(): boolean {
    const g = this.#g, number = this.call, size = this.size;
    // Members checked so far (this rank's own from the start): one bit each up to 31 members.
    let checked = this.#checkedBits;
    if (checked === 0) checked = 1 << this.rank;
    let all = true;
    const at = g.seg.logOffset(g.group, number);
    const mine = g.seg.area(g.seg.rank);
    for (let q = 0; q < size; q++) {
      if (q < 31 ? (checked >>> q) & 1 : this.#checkedMany?.[q]) continue;
      if (!reached(Atomics.load(g.words[q], g.called), number)) {
        all = false;
        continue;
      }
      const theirs = g.seg.area(g.members[q]);
      // A member far ahead may have logged over this call; its seq field then says so.
      const seq = theirs[at + 4] | theirs[at + 5] << 8 | theirs[at + 6] << 16 | theirs[at + 7] << 24;
      if ((seq | 0) === number) {
        if (theirs[at + 28] !== mine[at + 28]) {
          const [p, n] = theirs[at + 28] ? [g.members[q], g.seg.rank] : [g.seg.rank, g.members[q]];
          throw new MismatchError(
            `Mismatched calls: rank ${p} passed a tensor from pg.alloc() (its pool) to ${this.description} ` +
              `but rank ${n} an ordinary one: either every rank of a call passes a pool tensor or none does`,
          );
        }
        for (let i = 0; i < 32; i++) {
          if (theirs[at + i] !== mine[at + i]) {
            const d = decodeDescriptor(theirs.slice(at, at + 32), ALGORITHM_NAMES);
            throw new MismatchError(
              `Mismatched calls: rank ${g.members[q]} called ${describeCall(d)} but rank ${g.seg.rank} ` +
                `called ${this.description}`,
            );
          }
        }
      }
      if (q < 31) checked |= 1 << q;
      else (this.#checkedMany ??= [])[q] = true;
    }
    this.#checkedBits = checked;
    return all;
  }
}

/** A segment call's descriptor: what its peers compare. */
function descriptorOf(call: SegmentCall, seq: number): CallDescriptor {
  return {
    group: call.group,
    seq,
    collective: call.collective,
    dtype: call.dtype,
    op: call.op,
    algorithm: "segment",
    root: call.collective === "broadcast" || call.collective === "reduce" ? call.root : 0,
    count: call.count,
    servers: 0,
    stage: call.stage,
  };
}

function memoryAddress(memory: WebAssembly.Memory): bigint {
  return Deno.UnsafePointer.value(Deno.UnsafePointer.of(new Uint8Array(memory.buffer)));
}

function need(b: Uint8Array | undefined, what: string, collective: string): Uint8Array {
  if (b === undefined) throw new TypeError(`A ${collective} call needs ${what}`);
  return b;
}

function planOf(ctx: SegmentContext, call: SegmentCall): SegmentPlan {
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
      return segmentAllGather(ctx, need(call.input, "an input", c), need(call.output, "an output", c));
    case "reduceScatter":
      return segmentReduceScatter(ctx, need(call.input, "an input", c), need(call.output, "an output", c));
    case "allToAll":
      return segmentAllToAll(ctx, need(call.input, "an input", c), need(call.output, "an output", c));
    case "barrier":
      return segmentBarrier(ctx);
  }
}
