/**
 * The checks of `ReduceOptions.compression`, for the call front: the codec, its sizes and its state arrays,
 * each refused with what was expected and what was found before anything is sent.
 *
 * @module
 */
import type { DType, ReduceOp } from "../core/dtype.ts";
import {
  type Codec,
  CODECS,
  type CompressedCall,
  type MatrixSpan,
  powerSgdSizes,
} from "../collectives/compressed_context.ts";
import type { Compression } from "./process_group.ts";

/**
 * A checked compression, its defaults filled in: the codec's sizes and state as a codec takes them
 * (`CompressedCall`; `k`, `rank` are 0 and `matrices` empty where the codec has none), and where it runs.
 */
export interface CheckedCompression
  extends
    Pick<CompressedCall, "blockSize" | "k" | "rank" | "matrices" | "residual" | "serverResidual" | "q"> {
  /** The codec. */
  readonly codec: Codec;
  /** Compress only between hosts. */
  readonly interHost: boolean;
}

/** What each codec takes besides `codec`. */
const FIELDS: Readonly<Record<Codec, readonly string[]>> = {
  int8: ["blockSize"],
  sign: ["blockSize", "residual", "serverResidual"],
  topk: ["k", "residual"],
  powersgd: ["rank", "matrices", "residual", "q"],
};

/**
 * Checks an all-reduce's `compression`.
 *
 * @param c The option as passed.
 * @param dtype The tensor's dtype.
 * @param op The call's op.
 * @param tensor The tensor.
 * @param others The call's other options that compression excludes.
 * @returns The checked compression.
 * @throws {TypeError} On a value of the wrong kind, a field of another codec, or a tensor not float32.
 * @throws {RangeError} On a size out of range, a state array of the wrong length or over the tensor.
 */
export function checkCompression(
  c: unknown,
  dtype: DType,
  op: ReduceOp,
  tensor: ArrayBufferView,
  others: { commDtype?: DType; algorithm?: string; servers?: number },
): CheckedCompression {
  const fail = (message: string): never => {
    throw new TypeError(`Cannot all-reduce with compression: ${message}`);
  };
  const range = (message: string): never => {
    throw new RangeError(`Cannot all-reduce with compression: ${message}`);
  };
  if (typeof c !== "object" || c === null) fail(`expected an object with a codec, found ${String(c)}`);
  const o = c as Compression & Record<string, unknown>;
  const codec = o.codec as Codec;
  if (!CODECS.includes(codec)) {
    fail(`codec must be one of ${CODECS.join(", ")}, found ${JSON.stringify(o.codec)}`);
  }
  for (const key of Object.keys(o)) {
    if (key !== "codec" && key !== "interHost" && o[key] !== undefined && !FIELDS[codec].includes(key)) {
      fail(`${key} is not an option of the ${codec} codec (it takes ${FIELDS[codec].join(", ")})`);
    }
  }
  if (dtype !== "float32") fail(`it takes float32 tensors, found a ${dtype} tensor`);
  if (op !== "sum" && op !== "avg") fail(`op must be sum or avg, found ${op}`);
  if (others.commDtype !== undefined) fail("commDtype and compression exclude each other");
  if (others.algorithm !== undefined && others.algorithm !== "auto") {
    fail(
      `the codec runs its own stages; algorithm must be "auto", found ${JSON.stringify(others.algorithm)}`,
    );
  }
  if (others.servers !== undefined) fail("servers is an option of the ps algorithm");
  const count = tensor.byteLength / 4;
  const integer = (name: string, v: unknown, lo: number, hi: number): number => {
    if (typeof v !== "number" || !Number.isInteger(v) || v < lo || v > hi) {
      range(`${name} must be an integer in ${lo}..${hi}, found ${String(v)}`);
    }
    return v as number;
  };
  const state = (name: string, v: unknown, length: number): Float32Array | undefined => {
    if (v === undefined) return undefined;
    if (!(v instanceof Float32Array)) fail(`${name} must be a Float32Array, found ${describe(v)}`);
    const a = v as Float32Array;
    if (a.length !== length) range(`${name} must have ${length} elements, found ${a.length}`);
    if (overlaps(a, tensor)) range(`${name} shares memory with the tensor`);
    return a;
  };
  const blockSize = codec === "int8" || codec === "sign"
    ? integer("blockSize", o.blockSize ?? 256, 1, 1 << 24)
    : 256;
  const k = codec === "topk" ? integer("k", o.k, 1, Math.max(1, count)) : 0;
  const rank = codec === "powersgd" ? integer("rank", o.rank ?? 1, 1, 1 << 16) : 0;
  const matrices = codec === "powersgd" ? checkMatrices(o.matrices, count, fail, range) : [];
  const residual = state("residual", o.residual, count);
  const serverResidual = state("serverResidual", o.serverResidual, count);
  let q: Float32Array | undefined;
  if (codec === "powersgd") {
    if (o.q === undefined) fail("powersgd needs q, the warm start kept from call to call");
    q = state("q", o.q, powerSgdSizes(count, matrices, rank).q);
  }
  for (
    const [a, b, x, y] of [
      [residual, serverResidual, "residual", "serverResidual"],
      [residual, q, "residual", "q"],
    ] as const
  ) {
    if (a !== undefined && b !== undefined && overlaps(a, b)) range(`${x} and ${y} share memory`);
  }
  if (o.interHost !== undefined && typeof o.interHost !== "boolean") {
    fail(`interHost must be a boolean, found ${describe(o.interHost)}`);
  }
  return {
    codec,
    blockSize,
    k,
    rank,
    matrices,
    residual,
    serverResidual,
    q,
    interHost: o.interHost === true,
  };
}

function checkMatrices(
  v: unknown,
  count: number,
  fail: (m: string) => never,
  range: (m: string) => never,
): MatrixSpan[] {
  if (!Array.isArray(v)) {
    fail(`powersgd needs matrices, an array of { offset, rows, cols }, found ${describe(v)}`);
  }
  const out: MatrixSpan[] = [];
  let end = 0;
  for (const [i, m] of (v as unknown[]).entries()) {
    const { offset, rows, cols } = (m ?? {}) as Record<string, unknown>;
    for (const [name, x] of [["offset", offset], ["rows", rows], ["cols", cols]] as const) {
      if (typeof x !== "number" || !Number.isInteger(x) || x < (name === "offset" ? 0 : 1)) {
        range(
          `matrices[${i}].${name} must be an integer >= ${name === "offset" ? 0 : 1}, found ${String(x)}`,
        );
      }
    }
    const span = { offset: offset as number, rows: rows as number, cols: cols as number };
    if (span.offset < end) {
      range(`matrices[${i}] starts at ${span.offset}, inside the matrix before it (ends at ${end})`);
    }
    end = span.offset + span.rows * span.cols;
    if (end > count) range(`matrices[${i}] ends at ${end}, past the tensor's ${count} elements`);
    out.push(span);
  }
  return out;
}

function overlaps(a: ArrayBufferView, b: ArrayBufferView): boolean {
  return a.buffer === b.buffer && a.byteOffset < b.byteOffset + b.byteLength &&
    b.byteOffset < a.byteOffset + a.byteLength;
}

function describe(v: unknown): string {
  if (v === null || v === undefined) return String(v);
  if (typeof v === "object") return `a ${(v as object).constructor?.name ?? "object"}`;
  return `${typeof v} ${String(v)}`;
}
