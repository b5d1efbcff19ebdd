/**
 * Shared pieces of the GPU tests: their gates (no GPU is a skip CI cannot satisfy), a one-rank NCCL
 * world, and the CPU reference of every collective, computed in TypeScript from each rank's input.
 *
 * @module
 */
import type { DType, ReduceOp, TypedArray } from "../../core/dtype.ts";
import { createNcclGroup } from "../../backend/nccl/create.ts";
import type { NcclProcessGroup } from "../../backend/nccl/nccl_group.ts";
import type { NcclTuning } from "../../backend/nccl/tuning.ts";
import { newArray } from "../../gpu/_arrays.ts";
import { MemoryStore } from "../../store/memory_store.ts";
import type { GateOptions } from "../_util/skip.ts";
import { GPU_MISSING, NCCL_MISSING } from "../_util/gpu.ts";

/** Tests that need a GPU. */
export const GPU: GateOptions = { missing: GPU_MISSING, ciCanSatisfy: false };
/** Tests that need a GPU and NCCL. */
export const NCCL_GPU: GateOptions = { missing: GPU_MISSING ?? NCCL_MISSING, ciCanSatisfy: false };

/** A one-rank world group on GPU 0 (one GPU cannot host two NCCL ranks), with its store. */
export async function oneRank(
  options: { timeoutMs?: number; tuning?: NcclTuning; prefix?: string } = {},
): Promise<NcclProcessGroup> {
  const store = new MemoryStore();
  return await createNcclGroup({
    rank: 0,
    size: 1,
    store,
    device: 0,
    timeoutMs: options.timeoutMs ?? 60_000,
    tuning: options.tuning,
    prefix: options.prefix,
    onClose: () => store.close(),
  });
}

/** Every dtype the GPU tests cover. */
export const TEST_DTYPES: readonly DType[] = [
  "int8",
  "uint8",
  "int32",
  "uint32",
  "int64",
  "uint64",
  "float16",
  "bfloat16",
  "float32",
  "float64",
];

function toBf16(x: number): number {
  const u = new Uint32Array(new Float32Array([x]).buffer)[0];
  return (u + 0x7fff + ((u >>> 16) & 1)) >>> 16;
}

function fromBf16(bits: number): number {
  return new Float32Array(new Uint32Array([bits << 16]).buffer)[0];
}

/** A test array: element i of rank r is a small value exact in every dtype (and in sums of a few ranks). */
export function rankInput(dtype: DType, length: number, rank: number): TypedArray {
  const out = newArray(dtype, length);
  for (let i = 0; i < length; i++) {
    setValue(out, dtype, i, ((i * 7 + rank * 3) % 13) - (dtype.startsWith("u") ? 0 : 4));
  }
  return out;
}

/** Reads element `i` as a number (bfloat16 decoded). */
export function getValue(array: TypedArray, dtype: DType, i: number): number {
  if (dtype === "bfloat16") return fromBf16((array as Uint16Array)[i]);
  return Number(array[i]);
}

/** Writes element `i` (bfloat16 encoded, 64-bit as bigint). */
export function setValue(array: TypedArray, dtype: DType, i: number, value: number): void {
  if (dtype === "bfloat16") (array as Uint16Array)[i] = toBf16(value);
  else if (array instanceof BigInt64Array || array instanceof BigUint64Array) array[i] = BigInt(value);
  else (array as Float32Array)[i] = value;
}

/** The reference reduction of `inputs` (one per rank), element by element, as NCCL defines the op. */
export function referenceReduce(
  inputs: readonly TypedArray[],
  dtype: DType,
  op: ReduceOp,
  scale?: number,
): number[] {
  const n = inputs.length;
  const out: number[] = [];
  for (let i = 0; i < inputs[0].length; i++) {
    const xs = inputs.map((a) => getValue(a, dtype, i) * (scale ?? 1));
    let v: number;
    switch (op) {
      case "sum":
        v = xs.reduce((a, b) => a + b, 0);
        break;
      case "prod":
        v = xs.reduce((a, b) => a * b, 1);
        break;
      case "max":
        v = Math.max(...xs);
        break;
      case "min":
        v = Math.min(...xs);
        break;
      case "avg": {
        const sum = xs.reduce((a, b) => a + b, 0);
        // Integers: sum then divide (truncating); floats: a pre-multiply by 1/n.
        v = dtype.includes("int") ? Math.trunc(sum / n) : sum / n;
        break;
      }
      case "premulSum": // each rank's own factor is `scale` here
        v = xs.reduce((a, b) => a + b, 0);
        break;
      default:
        throw new RangeError(`NCCL has no ${op}`);
    }
    out.push(v);
  }
  return out;
}

/** The indices where `got` differs from `expected`, with both values, for messages (at most 5). */
export function mismatches(got: TypedArray, dtype: DType, expected: readonly number[]): string[] {
  const bad: string[] = [];
  for (let i = 0; i < expected.length && bad.length < 5; i++) {
    const g = getValue(got, dtype, i);
    if (g !== expected[i]) bad.push(`[${i}] got ${g}, expected ${expected[i]}`);
  }
  return bad;
}
