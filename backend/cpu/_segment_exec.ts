/**
 * The host segment (`transport/segment.ts`) as one thread of a rank runs collectives on it: the rank's
 * main thread, for calls that can finish before returning, or its communication Worker. Each thread maps
 * every rank's area once more into its own WebAssembly memory, so the kernels reduce the peers' buffers
 * where they are; copies in and out are `TypedArray.set` between the tensor and the mapped buffers. The
 * call itself is `_segment_call.ts`, its context `_segment_call_context.ts`, its run `_segment_run.ts`.
 *
 * A call begins by writing its descriptor into this rank's log in the group's block and bumping the
 * group's `called` counter; before any member's buffer is read, that member's descriptor for the same
 * call is compared with ours (a member running another call fails every rank with a `MismatchError`
 * naming both calls). Calls of every path (segment or transport) in a group with a block count in that
 * one sequence, so whichever thread of a rank runs a call, all ranks number it alike.
 *
 * @module
 */
import { addPhase, PHASE_REDUCING, phasesOn } from "../../core/phases.ts";
import type { DType, ReduceOp, TypedArray } from "../../core/dtype.ts";
import { DistError } from "../../core/errors.ts";
import { duplicateMapping, mapAnonymousAt, type SharedMapping } from "../../ffi/libc/libc.ts";
import { type HostSegment, poolOffset } from "../../transport/segment.ts";
import type { Kernels, TypedArrayConstructor } from "../../wasm/kernels.ts";
import { SegmentPipeline, type SegmentState } from "../../collectives/segment_context.ts";
import { type CallDescriptor, countsMark, encodeCallInto, encodeDescriptorInto } from "./_descriptor.ts";
import { ALGORITHM_NAMES } from "./_dispatch.ts";
import { rootedCollective } from "./_protocol.ts";
import { type SegmentCall, segmentPlanOf } from "./_segment_call.ts";
import { CallContext, type GroupMemory, SCRATCH_BYTES } from "./_segment_call_context.ts";
import { SegmentRun } from "./_segment_run.ts";

/** The code of the algorithm `"segment"` in descriptors. */
const SEGMENT_CODE = ALGORITHM_NAMES.indexOf("segment") + 1;

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
  /** {@linkcode SegmentExecutor.reducePosts}'s source addresses, kept between calls. */
  readonly #sources: number[] = [];
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

  /**
   * Starts a call: logs its descriptor, bumps the group's call counter, and builds its pipeline.
   *
   * @param call The call and its tensors' bytes.
   * @returns The run.
   */
  begin(call: SegmentCall): SegmentRun {
    const seg = this.segment, me = seg.rank, group = call.group;
    const words = seg.words(me);
    const called = seg.counterIndex(group, "called");
    // This rank's own counters, which only this rank's threads write: plain reads.
    const number = (words[called] + 1) | 0;
    // The descriptor straight from the call: no descriptor object, no closure.
    encodeCallInto(
      seg.view(me),
      seg.logOffset(group, number),
      group,
      number >>> 0,
      call.collective,
      call.dtype,
      call.op,
      SEGMENT_CODE,
      rootedCollective(call.collective) ? call.root : 0,
      call.count,
      call.counts === undefined ? 0 : countsMark(call),
      call.stage,
    );
    this.#logged(group, number, called, call.pooled ?? -1);
    const base = words[seg.counterIndex(group, "posted")];
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
    encodeDescriptorInto(describe(number >>> 0), ALGORITHM_NAMES, seg.view(me), seg.logOffset(group, number));
    this.#logged(group, number, index, pooled);
    return number;
  }

  /** Ends a call's begin, its descriptor written: the pool flag and offset, then the counter, then the bells. */
  #logged(group: number, number: number, index: number, pooled: number): void {
    const seg = this.segment, me = seg.rank;
    // Byte 28 (reserved in the descriptor) says whether the call is on pool tensors; its offset follows.
    seg.area(me)[seg.logOffset(group, number) + 28] = pooled >= 0 ? 1 : 0;
    seg.setLogPool(me, group, number, pooled);
    Atomics.store(seg.words(me), index, number);
    // Peers asleep waiting for this rank to begin wake now.
    seg.ringAll();
  }

  /**
   * Reduces a call's posts with this thread's kernels, in member order, where they lie in the areas:
   * `into = op(post of members[0], ..., post of members[n-1])`, each post `into.length` elements at
   * `byteOffset` in its member's area (through the scratch: `into` is not in wasm memory).
   *
   * @param members The members' global ranks, in member order.
   * @param byteOffset Where each post lies in its member's area.
   * @param dtype The posts' dtype (`into`'s).
   * @param op The op.
   * @param into Where the result goes (at most the scratch's bytes).
   * @throws {DistError} If this thread's wasm memory moved.
   */
  reducePosts(
    members: readonly number[],
    byteOffset: number,
    dtype: DType,
    op: ReduceOp,
    into: TypedArray,
  ): void {
    this.#checkMemory();
    const sources = this.#sources;
    sources.length = members.length;
    for (let q = 0; q < members.length; q++) sources[q] = this.#wasm[members[q]] + byteOffset;
    const t0 = phasesOn ? performance.now() : 0;
    this.#kernels.reduceManyPtr(dtype, op, this.#scratch, sources, into.length);
    if (phasesOn) addPhase(PHASE_REDUCING, performance.now() - t0);
    const kind = into.constructor as TypedArrayConstructor<TypedArray>;
    (into as Uint8Array).set(this.#kernels.heap.view(kind, this.#scratch, into.length) as Uint8Array);
  }

  /** Whether {@linkcode SegmentExecutor.close} was called. */
  get closed(): boolean {
    return this.#closed;
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
    const ctx = new CallContext(this.#groupOf(call), call, number, this.#kernels, this.#scratch);
    const plan = segmentPlanOf(ctx, call);
    return new SegmentRun(this, call, new SegmentPipeline(ctx, plan, state), ctx);
  }

  /**
   * Checks that this thread's wasm memory has not moved since the areas were mapped into it: before a
   * call's first kernel (a call whose reductions run in JavaScript, every small one, needs no check).
   *
   * @throws {DistError} If it moved (the mapping is lost).
   */
  readonly #checkMemory = (): void => {
    const memory = this.#kernels.heap.memory;
    if (memory.buffer !== this.#memoryBuffer) {
      // Memory grew: it must have grown in place, or the mapping is lost.
      if (memoryAddress(memory) !== this.#memoryAddress) {
        throw new DistError("WebAssembly memory moved; the segment mapping is lost (grow it before mapping)");
      }
      this.#memoryBuffer = memory.buffer;
    }
  };

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
      checkMemory: this.#checkMemory,
    };
    this.#groups.set(group, made);
    return made;
  }
}

function memoryAddress(memory: WebAssembly.Memory): bigint {
  return Deno.UnsafePointer.value(Deno.UnsafePointer.of(new Uint8Array(memory.buffer)));
}
