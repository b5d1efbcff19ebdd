/**
 * `premulSum` on a backend without one of its own (cpu, mpi): each rank multiplies its own contribution
 * by its own factor with the WASM kernels (`premulSum` over one source: the factor and each product
 * rounded to the dtype, `kernels/reduce.c`), then the call runs as a sum. So ranks may pass different
 * factors (each scales its own input, as NCCL's PreMulSum does), and the call is described to the peers
 * as a sum.
 *
 * What is scaled: an all-reduce's tensor in place (the result overwrites it anyway); a copy of a
 * reduce's tensor (a rank that is not the root keeps its tensor, and the root's gets the result when the
 * call is done); a copy of a reduce-scatter's input (the input is never written).
 *
 * @module
 */
import { bytesOf, DTYPE_ARRAY, type TypedArray } from "../core/dtype.ts";
import type { Kernels } from "../wasm/kernels.ts";
import type { CallRecord } from "./_front.ts";
import { doneWork, Work } from "./work.ts";

/**
 * Elements scaled per kernel call: the kernels stage arrays outside wasm memory on their heap, and a
 * bounded piece keeps that heap (and the host segment's mapping inside it) from growing with the tensor.
 */
const PIECE = 1 << 16;

/** `dst = src · factor` in the dtype's precision, a piece at a time (`dst` may be `src`). */
function scale(kernels: Kernels, dst: TypedArray, src: TypedArray, options: PremulOptions): void {
  const n = src.length;
  if (n <= PIECE) return kernels.reduceMany(dst, [src], options);
  for (let at = 0; at < n; at += PIECE) {
    const end = Math.min(n, at + PIECE);
    kernels.reduceMany(dst.subarray(at, end), [src.subarray(at, end)], options);
  }
}

type PremulOptions = { op: "premulSum"; factor: number | undefined; dtype: CallRecord["dtype"] };

/** A premulSum call as a sum: the record to run, and what to do once it is done. */
export interface PremulAsSum {
  /** The call with op `sum`, its contribution scaled. */
  readonly call: CallRecord;
  /** Copies a reduce's result from the scaled copy into the root's tensor (none otherwise). */
  readonly after?: () => void;
}

/**
 * Scales this rank's contribution to a `premulSum` call and turns it into a sum.
 *
 * @param call A checked call with op `premulSum` (host tensors of a float dtype, a finite factor).
 * @param kernels This thread's kernels.
 * @param rank This rank in the call's group (the root's tensor gets a reduce's result).
 * @returns The sum to run, and the copy back.
 */
export function premulAsSum(call: CallRecord, kernels: Kernels, rank: number): PremulAsSum {
  const { dtype } = call;
  const options: PremulOptions = { op: "premulSum", factor: call.factor, dtype };
  const sum: CallRecord = { ...call, op: "sum", factor: undefined };
  const scaledCopy = (t: TypedArray): TypedArray => {
    const copy = new DTYPE_ARRAY[dtype](new ArrayBuffer(t.byteLength), 0, t.length);
    scale(kernels, copy, t, options);
    return copy;
  };
  switch (call.collective) {
    case "allReduce": {
      const tensor = call.tensor as TypedArray;
      scale(kernels, tensor, tensor, options);
      return { call: sum };
    }
    case "reduce": {
      const tensor = call.tensor as TypedArray;
      const copy = scaledCopy(tensor);
      // Bytes, not values: the copy may be of another class than the tensor (float16's Uint16Array).
      const after = call.root === rank ? (): void => bytesOf(tensor).set(bytesOf(copy)) : undefined;
      return { call: { ...sum, tensor: copy }, after };
    }
    case "reduceScatter":
      return { call: { ...sum, input: scaledCopy(call.input as TypedArray) } };
    default:
      throw new TypeError(`Cannot ${call.collective}: op "premulSum" is an op of the reducing collectives`);
  }
}

/**
 * The Work of a premulSum call: `work`, then the copy back (at once when `work` is already done).
 *
 * @param work The sum's Work.
 * @param after The copy back, if any.
 * @returns The call's Work.
 */
export function afterWork(work: Work, after: (() => void) | undefined): Work {
  if (after === undefined) return work;
  if (work.completed && work.error === undefined) {
    after();
    return doneWork(work.report);
  }
  return new Work(
    work.wait().then((report) => {
      after();
      return report;
    }),
  );
}
