/**
 * How dcomm's dtypes and ops map to NCCL's enums, and the scalar of a PreMulSum in a collective's dtype.
 *
 * @module
 */
import { boolOpAsUint8, type DType, isBitwise, type ReduceOp } from "../../core/dtype.ts";
import { NcclDataType, NcclRedOp } from "../../ffi/nccl/constants.ts";
import { castF32ToBf16 } from "../../wasm/reference.ts";

const NCCL_DTYPES: Readonly<Record<DType, number>> = {
  int8: NcclDataType.Int8,
  uint8: NcclDataType.Uint8,
  int32: NcclDataType.Int32,
  uint32: NcclDataType.Uint32,
  int64: NcclDataType.Int64,
  uint64: NcclDataType.Uint64,
  float16: NcclDataType.Float16,
  bfloat16: NcclDataType.Bfloat16,
  float32: NcclDataType.Float32,
  float64: NcclDataType.Float64,
  // torch's NCCL backend sends bools as ncclUint8 too, and reduces them by max and min.
  bool: NcclDataType.Uint8,
};

/** NCCL's built-in ops (premulSum is a dynamic op, made per call; NCCL has no bitwise ops). */
const NCCL_OPS: Readonly<Partial<Record<ReduceOp, number>>> = {
  sum: NcclRedOp.Sum,
  prod: NcclRedOp.Prod,
  max: NcclRedOp.Max,
  min: NcclRedOp.Min,
  avg: NcclRedOp.Avg,
};

/**
 * The `ncclDataType_t` of a dtype.
 *
 * @param dtype The dtype.
 * @returns The NCCL value.
 */
export function ncclDataType(dtype: DType): number {
  return NCCL_DTYPES[dtype];
}

/**
 * The `ncclRedOp_t` of a built-in reduce op (sum, prod, max, min, avg).
 *
 * @param op The op.
 * @returns The NCCL value.
 * @throws {TypeError} For an op NCCL has no built-in value for (the front refuses those first).
 */
export function ncclRedOp(op: ReduceOp): number {
  const value = NCCL_OPS[op];
  if (value === undefined) throw new TypeError(`NCCL has no built-in op for "${op}"`);
  return value;
}

/**
 * The op NCCL runs for `op` on `dtype`: a bool's by the uint8 op that computes it on 0/1 bytes (max for
 * sum, max, bor; min for prod, min, band), any other dtype's as is.
 *
 * @param op An op that applies to the dtype.
 * @param dtype The dtype.
 * @returns The op to map with {@linkcode ncclRedOp} (or `premulSum`).
 */
export function ncclOpFor(op: ReduceOp, dtype: DType): ReduceOp {
  return dtype === "bool" ? boolOpAsUint8(op) : op;
}

/**
 * Whether NCCL runs `op` on `dtype`: every op but the bitwise ones, which NCCL lacks (a bool's `band` and
 * `bor` are its min and max, so they run; `bxor` never does).
 *
 * @param op An op that applies to the dtype.
 * @param dtype The dtype.
 * @returns Whether it does.
 */
export function ncclRuns(op: ReduceOp, dtype: DType): boolean {
  return !isBitwise(ncclOpFor(op, dtype));
}

/**
 * The scalar of a PreMulSum in the collective's dtype, as NCCL reads it from host memory.
 *
 * @param dtype The collective's dtype.
 * @param value The scalar.
 * @returns Its bytes.
 */
export function scalarBytes(dtype: DType, value: number): Uint8Array<ArrayBuffer> {
  const bytes = new Uint8Array(8);
  const b = bytes.buffer;
  switch (dtype) {
    case "float64":
      new Float64Array(b)[0] = value;
      break;
    case "float32":
      new Float32Array(b)[0] = value;
      break;
    case "float16":
      new Float16Array(b)[0] = value;
      break;
    case "bfloat16":
      castF32ToBf16(new Float32Array([value]), new Uint16Array(b, 0, 1));
      break;
    case "int64":
      new BigInt64Array(b)[0] = BigInt(Math.trunc(value));
      break;
    case "uint64":
      new BigUint64Array(b)[0] = BigInt(Math.trunc(value));
      break;
    case "int32":
      new Int32Array(b)[0] = value;
      break;
    case "uint32":
      new Uint32Array(b)[0] = value;
      break;
    case "int8":
      new Int8Array(b)[0] = value;
      break;
    case "uint8":
      new Uint8Array(b)[0] = value;
      break;
  }
  return bytes;
}
