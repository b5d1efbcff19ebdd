/**
 * The deterministic-mode tests' cases (`deterministic_rank.ts` on processes, `deterministic_thread.ts` on
 * threads): the same seeded float inputs (wide exponents, so the order of a sum shows in its bits)
 * all-reduced, reduced and reduce-scattered, in float32, float64, float16 and bfloat16, sum and avg, at
 * several lengths; a hash of every result.
 *
 * @module
 */
import type { DType, ReduceOp, TypedArray } from "../../../core/dtype.ts";
import type { ProcessGroup } from "../../../backend/process_group.ts";
import { hashBytes, makeArray } from "../_reference.ts";
import { castF32ToBf16, castF32ToF16 } from "../../../wasm/reference.ts";

/** Rank r's input: values of random sign and exponent (2^-12 .. 2^12). */
function inputOf(dtype: DType, n: number, seed: number, rank: number): TypedArray {
  let s = (seed * 7919 + rank * 104729 + 1) >>> 0;
  const next = () => (s = (Math.imul(s, 1664525) + 1013904223) >>> 0) / 2 ** 32;
  const values = dtype === "float64" ? new Float64Array(n) : new Float32Array(n);
  for (let i = 0; i < n; i++) values[i] = (next() - 0.5) * 2 ** Math.floor(next() * 24 - 12);
  if (dtype === "float32" || dtype === "float64") return values;
  const a = makeArray(dtype, n) as Uint16Array;
  if (dtype === "float16") castF32ToF16(values as Float32Array, a);
  else castF32ToBf16(values as Float32Array, a);
  return a;
}

/**
 * Runs every case on this rank.
 *
 * @param pg The group.
 * @param mode `det` (each call deterministic) or an algorithm name (the default mode, by that algorithm).
 * @returns The results' hashes, by case.
 */
export async function runCases(pg: ProcessGroup, mode: string): Promise<Record<string, string>> {
  const deterministic = mode === "det";
  const hashes: Record<string, string> = {};
  const algorithm = deterministic ? undefined : mode;
  let seed = 1;
  for (const dtype of ["float32", "float64", "float16", "bfloat16"] as const) {
    for (const op of ["sum", "avg"] as ReduceOp[]) {
      for (const n of [1, 7, 1000, 100_003]) {
        seed++;
        const t = inputOf(dtype, n, seed, pg.rank);
        await pg.allReduce(t, { op, dtype, algorithm, deterministic });
        hashes[`allReduce ${dtype} ${op} ${n}`] = hashBytes(t);
        if (!deterministic) continue;
        const r = inputOf(dtype, n, seed, pg.rank);
        await pg.reduce(r, { op, dtype, root: pg.size - 1, deterministic });
        if (pg.rank === pg.size - 1) hashes[`reduce ${dtype} ${op} ${n}`] = hashBytes(r);
        const block = Math.ceil(n / pg.size);
        const input = inputOf(dtype, block * pg.size, seed, pg.rank),
          out = makeArray(dtype, block) as TypedArray;
        await pg.reduceScatter(out, input, { op, dtype, deterministic });
        hashes[`reduceScatter ${dtype} ${op} ${n} block ${pg.rank}`] = hashBytes(out);
      }
    }
  }
  return hashes;
}
