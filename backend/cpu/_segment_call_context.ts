/**
 * One segment call's {@linkcode SegmentContext}, over the memory of its group as this thread maps it: the
 * members' buffers and counters, the kernels that reduce them where they lie (by wasm address), the pool
 * tensors the members logged, and the check of every member's descriptor before any of its bytes is read.
 *
 * @module
 */
import { addPhase, PHASE_REDUCING, phasesOn } from "../../core/phases.ts";
import { dtypeSize } from "../../core/dtype.ts";
import { MismatchError } from "../../core/errors.ts";
import { type HostSegment, reached, SEGMENT_HEADER_BYTES } from "../../transport/segment.ts";
import type { Kernels } from "../../wasm/kernels.ts";
import type { SegmentContext } from "../../collectives/segment_context.ts";
import { decodeDescriptor, describeCall } from "./_descriptor.ts";
import { ALGORITHM_NAMES } from "./_dispatch.ts";
import { type SegmentCall, segmentDescriptor } from "./_segment_call.ts";

/** Bytes reduced at once into the scratch buffer before they are copied out (stays in L2). */
export const SCRATCH_BYTES = 64 * 1024;

/** A group's memory as its calls reach it (made once per group by the executor). */
export interface GroupMemory {
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
  /** Throws if this thread's wasm memory moved since the areas were mapped into it (before a kernel). */
  readonly checkMemory: () => void;
}

/** One call's {@linkcode SegmentContext}: its methods on the prototype, so a call allocates little. */
export class CallContext implements SegmentContext {
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
  #memoryChecked = false;
  #checkedMany: boolean[] | undefined;
  #tensorOffsets: number[] | undefined;

  /**
   * @param g The group's memory.
   * @param call The call.
   * @param number Its number in the group.
   * @param kernels This thread's kernels.
   * @param scratch The address of {@linkcode SCRATCH_BYTES} of this thread's wasm memory.
   */
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
    return describeCall(segmentDescriptor(this.#c, this.call >>> 0));
  }

  buffer(q: number, b: number): Uint8Array {
    return this.#g.seg.buffer(this.#g.members[q], b);
  }

  /** Before the call's first kernel: the mapping into wasm memory still holds. */
  #ready(): void {
    if (this.#memoryChecked) return;
    this.#g.checkMemory();
    this.#memoryChecked = true;
  }

  #address(q: number, b: number, offset: number): number {
    return this.#g.wasm[q] + SEGMENT_HEADER_BYTES + b * this.bufferBytes + offset;
  }

  reduceToBuffer(b: number, offset: number, bytes: number): void {
    this.#ready();
    const t0 = phasesOn ? performance.now() : 0;
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
    if (phasesOn) addPhase(PHASE_REDUCING, performance.now() - t0);
  }

  reduceToOutput(out: Uint8Array, b: number, offset: number): void {
    this.#ready();
    const t0 = phasesOn ? performance.now() : 0;
    const sources = this.#g.sources, c = this.#c, k = this.#kernels, scratch = this.#scratch;
    for (let done = 0; done < out.byteLength; done += SCRATCH_BYTES) {
      const len = Math.min(SCRATCH_BYTES, out.byteLength - done);
      for (let q = 0; q < sources.length; q++) sources[q] = this.#address(q, b, offset + done);
      k.reduceManyPtr(c.dtype, c.op, scratch, sources, len / this.elemSize);
      out.set(k.heap.bytes().subarray(scratch, scratch + len), done);
    }
    if (phasesOn) addPhase(PHASE_REDUCING, performance.now() - t0);
  }

  reduceWithOwn(out: Uint8Array, own: Uint8Array, b: number, offset: number): void {
    this.#ready();
    const t0 = phasesOn ? performance.now() : 0;
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
    if (phasesOn) addPhase(PHASE_REDUCING, performance.now() - t0);
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
    this.#ready();
    const t0 = phasesOn ? performance.now() : 0;
    const g = this.#g, sources = g.sources, c = this.#c;
    for (let q = 0; q < sources.length; q++) sources[q] = g.wasm[q] + g.pool + this.#tensorOffset(q) + offset;
    this.#kernels.reduceManyPtr(c.dtype, c.op, sources[this.rank], sources, n / this.elemSize);
    if (phasesOn) addPhase(PHASE_REDUCING, performance.now() - t0);
  }

  counter(q: number, name: "called" | "posted" | "reduced" | "consumed"): number {
    const g = this.#g;
    // This rank's own counters are written by this thread (or by its other thread before it handed the
    // call over, which synchronised): a plain read. An atomic load is a call into V8 here (about 15 ns).
    return q === g.me ? g.words[q][g[name]] : Atomics.load(g.words[q], g[name]);
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
    // The log entry as words (it is 64-byte aligned): 8 compares for the 32 bytes of a descriptor.
    const at = g.seg.logOffset(g.group, number), w = at >>> 2;
    const mine = g.words[this.rank];
    for (let q = 0; q < size; q++) {
      if (q < 31 ? (checked >>> q) & 1 : this.#checkedMany?.[q]) continue;
      const theirs = g.words[q];
      if (!reached(Atomics.load(theirs, g.called), number)) {
        all = false;
        continue;
      }
      // A member far ahead may have logged over this call; its seq field (word 1) then says so.
      if (theirs[w + 1] === number) {
        // Byte 28, the low byte of word 7: a pool tensor or not.
        const pool = theirs[w + 7] & 0xff;
        if (pool !== (mine[w + 7] & 0xff)) {
          const [p, n] = pool ? [g.members[q], g.seg.rank] : [g.seg.rank, g.members[q]];
          throw new MismatchError(
            `Mismatched calls: rank ${p} passed a tensor from pg.alloc() (its pool) to ${this.description} ` +
              `but rank ${n} an ordinary one: either every rank of a call passes a pool tensor or none does`,
          );
        }
        for (let i = 0; i < 8; i++) {
          if (theirs[w + i] !== mine[w + i]) {
            const d = decodeDescriptor(g.seg.area(g.members[q]).slice(at, at + 32), ALGORITHM_NAMES);
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
