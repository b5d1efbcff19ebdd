/**
 * Reductions for the engine: the WASM kernels applied to regions of SharedArrayBuffers. Wasm memory
 * cannot alias a SharedArrayBuffer, so each reduction streams through fixed staging slots in wasm memory,
 * a chunk at a time (the chunk stays in cache between the copy in, the kernel and the copy out). The slots
 * are allocated once, so no call ever grows wasm memory.
 *
 * @module
 */
import { type DType, dtypeSize, type ReduceOp } from "../../core/dtype.ts";
import type { Kernels } from "../../wasm/kernels.ts";
import { addPhase, PHASE_CODEC, PHASE_REDUCING, phasesOn } from "../../core/phases.ts";

/** Bytes per staging slot: large enough to amortise a kernel call, small enough to stay in L2. */
const SLOT_BYTES = 256 * 1024;

/** Chunked WASM reductions over any memory. */
export class Reducer {
  #k: Kernels;
  #slots: number[] = [];

  /**
   * @param kernels The loaded kernels.
   * @param maxInputs The most inputs a `reduceMany` will get (the world size).
   */
  constructor(kernels: Kernels, maxInputs: number) {
    this.#k = kernels;
    for (let i = 0; i < Math.max(2, maxInputs + 1); i++) this.#slots.push(kernels.heap.alloc(SLOT_BYTES));
  }

  /** `dst = op(dst, src)`; both hold whole elements of `dtype`. */
  reduce(dtype: DType, op: ReduceOp, dst: Uint8Array, src: Uint8Array): void {
    const t0 = phasesOn ? performance.now() : 0;
    const es = dtypeSize(dtype);
    const mem = this.#k.heap.bytes();
    const [a, b] = this.#slots;
    for (let off = 0; off < dst.byteLength; off += SLOT_BYTES) {
      const len = Math.min(SLOT_BYTES, dst.byteLength - off);
      mem.set(dst.subarray(off, off + len), a);
      mem.set(src.subarray(off, off + len), b);
      this.#k.reducePtr(dtype, op, a, b, len / es);
      dst.set(mem.subarray(a, a + len), off);
    }
    if (phasesOn) addPhase(PHASE_REDUCING, performance.now() - t0);
  }

  /** `dst = op(srcs[0], …, srcs[k-1])` in that order. */
  reduceMany(dtype: DType, op: ReduceOp, dst: Uint8Array, srcs: readonly Uint8Array[]): void {
    const t0 = phasesOn ? performance.now() : 0;
    if (srcs.length + 1 > this.#slots.length) {
      for (let i = this.#slots.length; i <= srcs.length; i++) {
        this.#slots.push(this.#k.heap.alloc(SLOT_BYTES));
      }
    }
    const es = dtypeSize(dtype);
    const mem = this.#k.heap.bytes();
    const out = this.#slots[0];
    const ins = this.#slots.slice(1, srcs.length + 1);
    for (let off = 0; off < dst.byteLength; off += SLOT_BYTES) {
      const len = Math.min(SLOT_BYTES, dst.byteLength - off);
      for (let i = 0; i < srcs.length; i++) mem.set(srcs[i].subarray(off, off + len), ins[i]);
      this.#k.reduceManyPtr(dtype, op, out, ins, len / es);
      dst.set(mem.subarray(out, out + len), off);
    }
    if (phasesOn) addPhase(PHASE_REDUCING, performance.now() - t0);
  }

  /** `dst /= divisor` (NCCL's avg: a float scale, an integer division). */
  divide(dtype: DType, dst: Uint8Array, divisor: number): void {
    const t0 = phasesOn ? performance.now() : 0;
    const es = dtypeSize(dtype);
    const mem = this.#k.heap.bytes();
    const a = this.#slots[0];
    for (let off = 0; off < dst.byteLength; off += SLOT_BYTES) {
      const len = Math.min(SLOT_BYTES, dst.byteLength - off);
      mem.set(dst.subarray(off, off + len), a);
      this.#k.dividePtr(dtype, a, len / es, divisor);
      dst.set(mem.subarray(a, a + len), off);
    }
    if (phasesOn) addPhase(PHASE_REDUCING, performance.now() - t0);
  }

  /**
   * Casts the float32 values of `src` to `dtype` (float16 or bfloat16, rounding to nearest even) into
   * `dst`, dividing them by `divisor` first (in `src`, which the caller overwrites afterwards).
   */
  narrow(dtype: "float16" | "bfloat16", src: Uint8Array, dst: Uint8Array, divisor: number): void {
    if (divisor !== 1) this.divide("float32", src, divisor);
    const t0 = phasesOn ? performance.now() : 0;
    const k = this.#k;
    castChunks(src, dst, (f, h) => dtype === "float16" ? k.castF32ToF16(f, h) : k.castF32ToBf16(f, h));
    if (phasesOn) addPhase(PHASE_CODEC, performance.now() - t0);
  }

  /** Widens the `dtype` (float16 or bfloat16) values of `src` back to float32 into `dst`, exactly. */
  widen(dtype: "float16" | "bfloat16", src: Uint8Array, dst: Uint8Array): void {
    const t0 = phasesOn ? performance.now() : 0;
    const k = this.#k;
    castChunks(dst, src, (f, h) => dtype === "float16" ? k.castF16ToF32(h, f) : k.castBf16ToF32(h, f));
    if (phasesOn) addPhase(PHASE_CODEC, performance.now() - t0);
  }
}

/** Runs `cast` over float32 `wide` and 16-bit `narrow` in pieces of one staging slot's worth of floats. */
function castChunks(
  wide: Uint8Array,
  narrow: Uint8Array,
  cast: (f: Float32Array, h: Uint16Array) => void,
): void {
  const chunk = SLOT_BYTES / 4;
  const n = wide.byteLength / 4;
  for (let at = 0; at < n; at += chunk) {
    const len = Math.min(chunk, n - at);
    cast(
      new Float32Array(wide.buffer, wide.byteOffset + at * 4, len),
      new Uint16Array(narrow.buffer, narrow.byteOffset + at * 2, len),
    );
  }
}
