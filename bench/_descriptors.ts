/**
 * The collectives of dcomm's benchmarks, as nccl-tests' `struct testColl` (`src/common.h`): each is one
 * {@linkcode CollectiveDescriptor} (what a count means for its buffers, the bus factor, each rank's input,
 * the expected output, whether repeated calls keep it, the call); the harness (`_harness.ts`) runs any of
 * them on any backend, and the table (`_rows.ts`) prints them all alike.
 *
 * The data, exact by construction: inputs are small integers (`(j + 5·rank) mod m`, m ≤ 13 chosen so that
 * a sum over every rank stays exact in the dtype; for `prod`, 1s and a 2 on one rank in m, whose products
 * are powers of two the dtype holds),
 * so every sum, min, max and product is exact in any order and `#wrong` means wrong. avg of floats is
 * compared within a few units in the last place (backends scale by 1/size before or after summing, or
 * divide); everything else must be equal.
 *
 * A new collective is one more descriptor in {@linkcode COLLECTIVES}, e.g. gather's (rooted: the root's
 * output is the only one, and the other ranks pass `null` for it; the harness gives them a buffer of 0
 * elements, which is not passed):
 *
 * ```ts ignore
 * const gather: CollectiveDescriptor = {
 *   name: "gather", reduces: false, rooted: true, inPlace: false,
 *   busFactor: (n) => (n - 1) / n,
 *   count: blockCount,
 *   lengths: (c) => ({ input: c.count / c.ranks, output: c.rank === c.root ? c.count : 0 }),
 *   input: (j, c) => c.value(c.rank, j),
 *   expected: (i, c) => c.value(Math.floor(i / (c.count / c.ranks)), i % (c.count / c.ranks)),
 *   stable: () => true,
 *   run: (pg, input, output, o) => pg.gather(pg.rank === (o.root ?? 0) ? output : null, input, o),
 * };
 * ```
 *
 * @module
 */
import { type DType, isFloat, type ReduceOp, type TypedArray } from "../core/dtype.ts";
import type { AnyTensor, ProcessGroup, RootReduceOptions } from "../backend/process_group.ts";

/** What a descriptor's functions know about one size on one rank. */
export interface BenchContext {
  /** This rank. */
  readonly rank: number;
  /** The world size. */
  readonly ranks: number;
  /** nccl-tests' count: elements of the collective's whole buffer (the gathered or scattered one). */
  readonly count: number;
  /** The element type. */
  readonly dtype: DType;
  /** The reduction (meaningful when the descriptor reduces). */
  readonly op: ReduceOp;
  /** The root (meaningful when the descriptor is rooted). */
  readonly root: number;
  /** Rank `rank`'s input element `j` (a small integer, exact in the dtype). */
  value(rank: number, j: number): number;
  /** `op` over every rank's `value(·, j)`, exact (avg of floats: the exact quotient). */
  reduced(j: number): number;
}

/** The options every call of a sweep passes (each collective reads the ones it takes). */
export type CallArgs = RootReduceOptions;

/**
 * One collective of the benchmarks, as nccl-tests' `struct testColl`.
 *
 * @example A descriptor's sizes and bus factor
 * ```ts
 * import { collective } from "./_descriptors.ts";
 * import assert from "node:assert/strict";
 * const allGather = collective("allGather");
 * assert.equal(allGather.count(1000, 4), 1000); // elements of the gathered buffer, in 4 equal blocks
 * assert.equal(allGather.busFactor(4), 0.75);
 * ```
 */
export interface CollectiveDescriptor {
  /** The name, as `--collective` takes it and the rows carry it. */
  readonly name: string;
  /** Whether it takes an op (the table prints it; else `none`). */
  readonly reduces: boolean;
  /** Whether it takes a root (the table prints it; else -1). */
  readonly rooted: boolean;
  /** Whether its output is its input buffer. */
  readonly inPlace: boolean;
  /** nccl-tests' bus factor for `ranks` ranks: busbw = algbw × this. */
  busFactor(ranks: number): number;
  /** nccl-tests' count for `elements` requested (rounded, e.g. to equal blocks), at least 1 block. */
  count(elements: number, ranks: number): number;
  /** This rank's input and output lengths, in elements (the output's is ignored when in place). */
  lengths(ctx: BenchContext): { input: number; output: number };
  /** This rank's input element `j` before the first call. */
  input(j: number, ctx: BenchContext): number;
  /** Output element `i` on this rank after one call on the inputs, or undefined where nothing is promised. */
  expected(i: number, ctx: BenchContext): number | undefined;
  /** Whether the output after any number of calls is the output after one (no re-init to check it). */
  stable(ctx: BenchContext): boolean;
  /** Starts one call. */
  run(pg: ProcessGroup, input: AnyTensor, output: AnyTensor, args: CallArgs): PromiseLike<unknown>;
}

/** nccl-tests' count of a collective over the whole buffer: equal blocks, one per rank. */
export function blockCount(elements: number, ranks: number): number {
  return Math.max(1, Math.floor(elements / ranks)) * ranks;
}

/** Whether an in-place reduction gives the same result when run again on its own result. */
function reductionIsStable(ctx: BenchContext): boolean {
  if (ctx.ranks === 1 || ctx.op === "min" || ctx.op === "max") return true;
  // avg of identical values: exact for integers (truncation) and for floats when 1/size is a power of two.
  return ctx.op === "avg" && (!isFloat(ctx.dtype) || (ctx.ranks & (ctx.ranks - 1)) === 0);
}

const allReduce: CollectiveDescriptor = {
  name: "allReduce",
  reduces: true,
  rooted: false,
  inPlace: true,
  busFactor: (n) => (2 * (n - 1)) / n,
  count: (elements) => Math.max(1, elements),
  lengths: (c) => ({ input: c.count, output: c.count }),
  input: (j, c) => c.value(c.rank, j),
  expected: (i, c) => c.reduced(i),
  stable: reductionIsStable,
  run: (pg, input, _output, o) => pg.allReduce(input, o),
};

const broadcast: CollectiveDescriptor = {
  name: "broadcast",
  reduces: false,
  rooted: true,
  inPlace: true,
  busFactor: () => 1,
  count: (elements) => Math.max(1, elements),
  lengths: (c) => ({ input: c.count, output: c.count }),
  input: (j, c) => c.value(c.rank, j),
  expected: (i, c) => c.value(c.root, i),
  stable: () => true,
  run: (pg, input, _output, o) => pg.broadcast(input, o),
};

const reduce: CollectiveDescriptor = {
  name: "reduce",
  reduces: true,
  rooted: true,
  inPlace: true,
  busFactor: () => 1,
  count: (elements) => Math.max(1, elements),
  lengths: (c) => ({ input: c.count, output: c.count }),
  input: (j, c) => c.value(c.rank, j),
  // The other ranks' tensors are left unchanged (ProcessGroup.reduce).
  expected: (i, c) => c.rank === c.root ? c.reduced(i) : c.value(c.rank, i),
  // The root reduces its own result with the others' unchanged inputs: the same only for min and max.
  stable: (c) => c.ranks === 1 || c.op === "min" || c.op === "max",
  run: (pg, input, _output, o) => pg.reduce(input, o),
};

const allGather: CollectiveDescriptor = {
  name: "allGather",
  reduces: false,
  rooted: false,
  inPlace: false,
  busFactor: (n) => (n - 1) / n,
  count: blockCount,
  lengths: (c) => ({ input: c.count / c.ranks, output: c.count }),
  input: (j, c) => c.value(c.rank, j),
  expected: (i, c) => {
    const block = c.count / c.ranks;
    return c.value(Math.floor(i / block), i % block);
  },
  stable: () => true,
  run: (pg, input, output, o) => pg.allGather(output, input, o),
};

const reduceScatter: CollectiveDescriptor = {
  name: "reduceScatter",
  reduces: true,
  rooted: false,
  inPlace: false,
  busFactor: (n) => (n - 1) / n,
  count: blockCount,
  lengths: (c) => ({ input: c.count, output: c.count / c.ranks }),
  input: (j, c) => c.value(c.rank, j),
  expected: (i, c) => c.reduced(c.rank * (c.count / c.ranks) + i),
  stable: () => true,
  run: (pg, input, output, o) => pg.reduceScatter(output, input, o),
};

const allToAll: CollectiveDescriptor = {
  name: "allToAll",
  reduces: false,
  rooted: false,
  inPlace: false,
  busFactor: (n) => (n - 1) / n,
  count: blockCount,
  lengths: (c) => ({ input: c.count, output: c.count }),
  input: (j, c) => c.value(c.rank, j),
  // Block j of rank i's input lands in block i of rank j's output.
  expected: (i, c) => {
    const block = c.count / c.ranks;
    return c.value(Math.floor(i / block), c.rank * block + (i % block));
  },
  stable: () => true,
  run: (pg, input, output, o) => pg.allToAll(output, input, o),
};

/** The root of a call's options (0 when they name none). */
function rootOf(o: CallArgs): number {
  return o.root ?? 0;
}

// Rooted, out of place: the root's output holds every rank's input block, in rank order; the other ranks
// have no output (`null`).
const gather: CollectiveDescriptor = {
  name: "gather",
  reduces: false,
  rooted: true,
  inPlace: false,
  busFactor: (n) => (n - 1) / n,
  count: blockCount,
  lengths: (c) => ({ input: c.count / c.ranks, output: c.rank === c.root ? c.count : 0 }),
  input: (j, c) => c.value(c.rank, j),
  expected: (i, c) => {
    const block = c.count / c.ranks;
    return c.value(Math.floor(i / block), i % block);
  },
  stable: () => true,
  run: (pg, input, output, o) => pg.gather(pg.rank === rootOf(o) ? output : null, input, o),
};

// Rooted, out of place: block r of the root's input lands in rank r's output; the other ranks have no
// input (`null`).
const scatter: CollectiveDescriptor = {
  name: "scatter",
  reduces: false,
  rooted: true,
  inPlace: false,
  busFactor: (n) => (n - 1) / n,
  count: blockCount,
  lengths: (c) => ({ input: c.rank === c.root ? c.count : 0, output: c.count / c.ranks }),
  input: (j, c) => c.value(c.rank, j),
  expected: (i, c) => c.value(c.root, c.rank * (c.count / c.ranks) + i),
  stable: () => true,
  run: (pg, input, output, o) => pg.scatter(output, pg.rank === rootOf(o) ? input : null, o),
};

/** Every collective of the benchmarks, in nccl-tests' order of its binaries. */
export const COLLECTIVES: readonly CollectiveDescriptor[] = [
  allReduce,
  broadcast,
  reduce,
  allGather,
  reduceScatter,
  allToAll,
  gather,
  scatter,
];

/**
 * The descriptor of a collective by name.
 *
 * @param name The name (`"allReduce"`, `"allGather"`, ...).
 * @returns Its descriptor.
 * @throws {RangeError} If no descriptor has that name.
 */
export function collective(name: string): CollectiveDescriptor {
  const found = COLLECTIVES.find((c) => c.name === name);
  if (!found) {
    throw new RangeError(
      `Unknown collective: expected one of ${COLLECTIVES.map((c) => c.name).join(", ")}, found "${name}"`,
    );
  }
  return found;
}

/** The largest integer n such that 0..n are all exact in the dtype (wrapping integers: their maximum). */
const EXACT_LIMIT: Readonly<Record<DType, number>> = {
  int8: 127,
  uint8: 255,
  int32: 2 ** 31 - 1,
  uint32: 2 ** 32 - 1,
  int64: 2 ** 53,
  uint64: 2 ** 53,
  float16: 2048,
  bfloat16: 256,
  float32: 2 ** 24,
  float64: 2 ** 53,
  bool: 1,
};

/** The largest power of two each dtype holds exactly, as its exponent (products of 2s stay below it). */
const MAX_POW2: Readonly<Record<DType, number>> = {
  int8: 6,
  uint8: 7,
  int32: 30,
  uint32: 31,
  int64: 52,
  uint64: 52,
  float16: 15,
  bfloat16: 127,
  float32: 127,
  float64: 1023,
  bool: 0,
};

/** Where a size runs: the rank, the world, the element count, dtype, op and root. */
export interface ContextOptions {
  /** This rank. */
  rank: number;
  /** The world size. */
  ranks: number;
  /** nccl-tests' count (from the descriptor's `count`). */
  count: number;
  /** The element type. @default "float32" */
  dtype?: DType;
  /** The reduction. @default "sum" */
  op?: ReduceOp;
  /** The root. @default 0 */
  root?: number;
}

/**
 * The context of one size: the data every rank starts from (small integers whose reductions over every rank
 * are exact in the dtype) and their reduction.
 *
 * @param descriptor The collective.
 * @param options Rank, world, count, dtype, op and root.
 * @returns The context its functions take.
 *
 * @example The expected sum all-reduce of two ranks' inputs
 * ```ts
 * import { benchContext, collective } from "./_descriptors.ts";
 * import assert from "node:assert/strict";
 * const ctx = benchContext(collective("allReduce"), { rank: 0, ranks: 2, count: 4 });
 * assert.deepEqual([0, 1, 2, 3].map((j) => ctx.value(1, j)), [5, 6, 7, 8]);
 * assert.equal(ctx.reduced(1), ctx.value(0, 1) + ctx.value(1, 1));
 * ```
 */
export function benchContext(descriptor: CollectiveDescriptor, options: ContextOptions): BenchContext {
  const { rank, ranks, count, dtype = "float32", op = "sum", root = 0 } = options;
  const products = descriptor.reduces && op === "prod";
  const accumulates = descriptor.reduces && (op === "sum" || op === "avg");
  // Sums: m − 1 times every rank must stay exact (fewer distinct values for narrow dtypes on many ranks).
  // Products: 2 on one rank in m, so at most ceil(ranks / m) factors of 2 per element, a power of two the
  // dtype holds.
  const m = products
    ? Math.max(13, Math.ceil(ranks / MAX_POW2[dtype]))
    : accumulates
    ? Math.min(13, Math.max(2, Math.floor(EXACT_LIMIT[dtype] / ranks) + 1))
    : 13;
  // A step coprime with m, so that ranks (up to m of them) hold different values at every element.
  const step = m % 5 === 0 ? 1 : 5;
  const value = products
    ? (r: number, j: number): number => (j + r) % m === 0 ? 2 : 1
    : (r: number, j: number): number => (j + step * r) % m;
  const table = Array.from({ length: m }, (_, q) => {
    const values = Array.from({ length: ranks }, (_, r) => value(r, q));
    switch (op) {
      case "sum":
        return values.reduce((a, b) => a + b, 0);
      case "prod":
        return values.reduce((a, b) => a * b, 1);
      case "min":
        return Math.min(...values);
      case "max":
        return Math.max(...values);
      case "avg": {
        const sum = values.reduce((a, b) => a + b, 0);
        return isFloat(dtype) ? sum / ranks : Math.trunc(sum / ranks);
      }
      case "band":
        return values.reduce((a, b) => a & b);
      case "bor":
        return values.reduce((a, b) => a | b);
      case "bxor":
        return values.reduce((a, b) => a ^ b);
      case "premulSum":
        throw new RangeError("The benchmarks run no premulSum: its factor is not part of a context");
    }
  });
  return { rank, ranks, count, dtype, op, root, value, reduced: (j) => table[j % m] };
}

/** The stored mantissa bits of the float dtypes. */
const MANTISSA_BITS: Partial<Record<DType, number>> = { float16: 10, bfloat16: 7, float32: 23, float64: 52 };

/**
 * The relative error allowed when comparing a result: 0 (exact) except for avg of floats, which backends
 * compute as a sum times 1/size, a sum divided by size, or a sum of inputs times 1/size.
 */
export function tolerance(descriptor: CollectiveDescriptor, ctx: BenchContext): number {
  if (!descriptor.reduces || ctx.op !== "avg" || !isFloat(ctx.dtype)) return 0;
  return (ctx.ranks + 2) * 2 ** -(MANTISSA_BITS[ctx.dtype] ?? 0);
}

const f16 = new Float16Array(1);
const f16Bits = new Uint16Array(f16.buffer);
const f32 = new Float32Array(1);
const f32Bits = new Uint32Array(f32.buffer);

/** Reads element `i` of a tensor's host array as a number (float16/bfloat16 bits decoded). */
function readerOf(array: TypedArray, dtype: DType): (i: number) => number {
  if (array instanceof Uint16Array && dtype === "bfloat16") {
    return (i) => {
      f32Bits[0] = array[i] << 16;
      return f32[0];
    };
  }
  if (array instanceof Uint16Array && dtype === "float16") {
    return (i) => {
      f16Bits[0] = array[i];
      return f16[0];
    };
  }
  return (i) => Number(array[i]);
}

/**
 * Writes `value(j)` into every element of a host array of `dtype` (float16/bfloat16 in a `Uint16Array` as
 * their bits; 64-bit integers as BigInts).
 *
 * @param array The host array.
 * @param dtype Its dtype.
 * @param value Element `j`'s value.
 */
export function fillArray(array: TypedArray, dtype: DType, value: (j: number) => number): void {
  if (array instanceof BigInt64Array || array instanceof BigUint64Array) {
    for (let j = 0; j < array.length; j++) array[j] = BigInt(value(j));
  } else if (array instanceof Uint16Array && dtype === "bfloat16") {
    for (let j = 0; j < array.length; j++) {
      f32[0] = value(j);
      array[j] = f32Bits[0] >>> 16;
    }
  } else if (array instanceof Uint16Array && dtype === "float16") {
    for (let j = 0; j < array.length; j++) {
      f16[0] = value(j);
      array[j] = f16Bits[0];
    }
  } else {
    const a = array as Float64Array;
    for (let j = 0; j < a.length; j++) a[j] = value(j);
  }
}

/**
 * Counts the elements of `got` that differ from `expected(i)` (elements where it is undefined are not
 * checked), within a relative `tolerance` (0: exactly equal).
 *
 * @param got The output, on the host.
 * @param dtype Its dtype.
 * @param expected The expected element `i`, or undefined where nothing is promised.
 * @param tol The relative error allowed. @default 0
 * @returns The number of wrong elements.
 *
 * @example A wrong element is counted
 * ```ts
 * import { countWrong } from "./_descriptors.ts";
 * import assert from "node:assert/strict";
 * assert.equal(countWrong(new Float32Array([0, 2, 2]), "float32", (i) => i), 1);
 * ```
 */
export function countWrong(
  got: TypedArray,
  dtype: DType,
  expected: (i: number) => number | undefined,
  tol = 0,
): number {
  const read = readerOf(got, dtype);
  let wrong = 0;
  for (let i = 0; i < got.length; i++) {
    const want = expected(i);
    if (want === undefined) continue;
    const v = read(i);
    if (tol === 0 ? v !== want : !(Math.abs(v - want) <= tol * Math.max(1, Math.abs(want)))) wrong++;
  }
  return wrong;
}
