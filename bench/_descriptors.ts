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
  /** The fewest ranks it runs on (a sweep on fewer has no sizes). @default 1 */
  readonly minRanks?: number;
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

/**
 * The smallest count of a v-form on `ranks` ranks: 1 + 2 + … + ranks, the one at which every block of
 * {@linkcode unevenStarts} holds at least one element.
 */
function unevenMinimum(ranks: number): number {
  return (ranks * (ranks + 1)) / 2;
}

/**
 * nccl-tests' count of a v-form: any whole count (no equal blocks to round to), at least one element per
 * block ({@linkcode unevenMinimum}).
 */
export function unevenCount(elements: number, ranks: number): number {
  return Math.max(1, elements, unevenMinimum(ranks));
}

/**
 * The uneven blocks of the v-forms (`allGatherv`, `allToAllv`): `count` elements in `ranks` blocks, block
 * `r` in proportion to `r + 1`, as the offsets `starts` (length `ranks + 1`): block `r` is
 * `starts[r]..starts[r + 1]`, `starts[r] = ⌊count · (1 + 2 + … + r) / (1 + 2 + … + ranks)⌋`. The blocks sum
 * to `count` exactly, every rank's differs from the others' (1 : 2 : … : ranks, to within an element), and
 * none is empty from {@linkcode unevenCount}'s minimum on (zeros are allowed by the API, but a benchmark of
 * empty blocks measures nothing; the backend matrix tests them). `bench/native/mpi_collectives.c` computes
 * the same offsets (`uneven_start`).
 *
 * @param count The elements of all blocks.
 * @param ranks The blocks.
 * @returns The `ranks + 1` offsets.
 *
 * @example 10 elements in 4 blocks of 1, 2, 3 and 4
 * ```ts
 * import { unevenStarts } from "./_descriptors.ts";
 * import assert from "node:assert/strict";
 * assert.deepEqual(unevenStarts(10, 4), [0, 1, 3, 6, 10]);
 * assert.deepEqual(unevenStarts(100, 3), [0, 16, 50, 100]); // blocks of 16, 34 and 50
 * ```
 */
export function unevenStarts(count: number, ranks: number): number[] {
  const whole = unevenMinimum(ranks);
  return Array.from({ length: ranks + 1 }, (_, r) => Math.floor((count * ((r * (r + 1)) / 2)) / whole));
}

/**
 * The blocks of {@linkcode unevenStarts}, in elements.
 *
 * @param count The elements of all blocks.
 * @param ranks The blocks.
 * @returns Block `r`'s elements, for each `r`.
 */
export function unevenBlocks(count: number, ranks: number): number[] {
  const starts = unevenStarts(count, ranks);
  return starts.slice(1).map((s, r) => s - starts[r]);
}

/**
 * `allToAllv`'s traffic matrix: rank `i` sends rank `j` block `(j − i) mod ranks` of
 * {@linkcode unevenBlocks}, so that every row (a rank's input) and every column (a rank's output) holds each
 * block once and sums to `count`, nccl-tests' count of an all-to-all (elements per rank), while each rank's
 * `sendCounts` is a rotation of the others' and, from 3 ranks on, differs from its `recvCounts` (a call
 * that mixed them up would fail).
 *
 * @param count Elements per rank, in and out.
 * @param ranks The world size.
 * @returns `matrix[i][j]`: elements rank `i` sends rank `j`.
 *
 * @example 3 ranks, 6 elements each (blocks of 1, 2, 3)
 * ```ts
 * import { unevenMatrix } from "./_descriptors.ts";
 * import assert from "node:assert/strict";
 * assert.deepEqual(unevenMatrix(6, 3), [[1, 2, 3], [3, 1, 2], [2, 3, 1]]);
 * ```
 */
export function unevenMatrix(count: number, ranks: number): number[][] {
  const blocks = unevenBlocks(count, ranks);
  return Array.from({ length: ranks }, (_, i) => blocks.map((_, j) => blocks[(j - i + ranks) % ranks]));
}

/** Offsets of consecutive blocks: `[0, b0, b0 + b1, …]`. */
function offsets(blocks: readonly number[]): number[] {
  const out = [0];
  for (const b of blocks) out.push(out[out.length - 1] + b);
  return out;
}

/** The block of `starts` that holds element `i` (the last whose start is at most `i`). */
function blockOf(starts: readonly number[], i: number): number {
  let r = 0;
  while (r + 2 < starts.length && starts[r + 1] <= i) r++;
  return r;
}

/** The layout of a v-form at one size, computed once per context rather than once per element. */
interface UnevenLayout {
  /** {@linkcode unevenStarts}. */
  readonly starts: readonly number[];
  /** {@linkcode unevenMatrix}. */
  readonly matrix: readonly (readonly number[])[];
  /** For `allToAllv`: offsets of this rank's output blocks, one per sender. */
  readonly recvStarts: readonly number[];
  /** For `allToAllv`: `sendStarts[i]`, offsets of rank i's input blocks, one per receiver. */
  readonly sendStarts: readonly (readonly number[])[];
}

const LAYOUTS = new WeakMap<BenchContext, UnevenLayout>();

function layoutOf(c: BenchContext): UnevenLayout {
  let layout = LAYOUTS.get(c);
  if (!layout) {
    const matrix = unevenMatrix(c.count, c.ranks);
    layout = {
      starts: unevenStarts(c.count, c.ranks),
      matrix,
      recvStarts: offsets(matrix.map((row) => row[c.rank])),
      sendStarts: matrix.map(offsets),
    };
    LAYOUTS.set(c, layout);
  }
  return layout;
}

/**
 * A call's options for one rank, size and group, made once and kept while the next call is the same: the
 * timed loop calls `run` with the same tensors and arguments, and should time the call, not the options.
 */
function lastOptions<T>(
  make: (count: number, pg: ProcessGroup, o: CallArgs) => T,
): (count: number, pg: ProcessGroup, o: CallArgs) => T {
  let last: { count: number; pg: ProcessGroup; o: CallArgs; value: T } | undefined;
  return (count: number, pg: ProcessGroup, o: CallArgs): T => {
    if (last?.count !== count || last.pg !== pg || last.o !== o) {
      last = { count, pg, o, value: make(count, pg, o) };
    }
    return last.value;
  };
}

const allGathervOptions = lastOptions((count, pg, o) => ({ ...o, counts: unevenBlocks(count, pg.size) }));

// The uneven all-gather (MPI_Allgatherv, torch's all_gather with tensors of different sizes): rank r's
// input is block r of unevenStarts; every rank's output holds every block in rank order. nccl-tests'
// count is the gathered buffer's, as allGather's, and so is the bus factor.
const allGatherv: CollectiveDescriptor = {
  name: "allGatherv",
  reduces: false,
  rooted: false,
  inPlace: false,
  busFactor: (n) => (n - 1) / n,
  count: unevenCount,
  lengths: (c) => {
    const { starts } = layoutOf(c);
    return { input: starts[c.rank + 1] - starts[c.rank], output: c.count };
  },
  input: (j, c) => c.value(c.rank, j),
  expected: (i, c) => {
    const { starts } = layoutOf(c);
    const r = blockOf(starts, i);
    return c.value(r, i - starts[r]);
  },
  stable: () => true,
  run: (pg, input, output, o) => pg.allGather(output, input, allGathervOptions(output.length, pg, o)),
};

const allToAllvOptions = lastOptions((count, pg, o) => {
  const matrix = unevenMatrix(count, pg.size);
  return { ...o, sendCounts: matrix[pg.rank], recvCounts: matrix.map((row) => row[pg.rank]) };
});

// The uneven all-to-all (MPI_Alltoallv, torch's all_to_all_single with split sizes): rank i sends rank j
// unevenMatrix's [i][j] elements, its input's blocks in rank order, and receives [j][i] from rank j, its
// output's blocks in rank order. Every rank's input and output hold `count` elements, nccl-tests' count of
// an all-to-all; the bus factor is allToAll's.
const allToAllv: CollectiveDescriptor = {
  name: "allToAllv",
  reduces: false,
  rooted: false,
  inPlace: false,
  busFactor: (n) => (n - 1) / n,
  count: unevenCount,
  lengths: (c) => ({ input: c.count, output: c.count }),
  input: (j, c) => c.value(c.rank, j),
  // Element k of this rank's output comes from the sender i whose block holds it, at this rank's offset in
  // the sender's input.
  expected: (k, c) => {
    const { recvStarts, sendStarts } = layoutOf(c);
    const i = blockOf(recvStarts, k);
    return c.value(i, sendStarts[i][c.rank] + k - recvStarts[i]);
  },
  stable: () => true,
  run: (pg, input, output, o) => pg.allToAll(output, input, allToAllvOptions(input.length, pg, o)),
};

const sendRecvPeers = lastOptions((_count, pg, o) => {
  const next = (pg.rank + 1) % pg.size, prev = (pg.rank + pg.size - 1) % pg.size;
  return { next, prev, options: o.dtype === undefined ? {} : { dtype: o.dtype } };
});

// nccl-tests' sendrecv_perf: every rank sends its buffer to rank + 1 and receives rank − 1's, both at once
// (the ring's every link busy in both directions); count is the elements each rank sends, and busbw is
// algbw (factor 1). A world of one has no peer (dcomm refuses a send to oneself, where nccl-tests copies
// to itself): the sweep has no sizes there (`minRanks`). The nccl backend takes the pair as one NCCL
// group (`batchIsendIrecv`), as nccl-tests issues it: two separate NCCL calls on one stream around a ring
// would each wait for the other rank's second.
const sendRecv: CollectiveDescriptor = {
  name: "sendRecv",
  reduces: false,
  rooted: false,
  inPlace: false,
  minRanks: 2,
  busFactor: () => 1,
  count: (elements) => Math.max(1, elements),
  lengths: (c) => ({ input: c.count, output: c.count }),
  input: (j, c) => c.value(c.rank, j),
  expected: (i, c) => c.value((c.rank + c.ranks - 1) % c.ranks, i),
  stable: () => true,
  run: (pg, input, output, o) => {
    const { next, prev, options } = sendRecvPeers(input.length, pg, o);
    if (pg.backend === "nccl") {
      return Promise.all(pg.batchIsendIrecv([
        { op: "send", tensor: input, peer: next },
        { op: "recv", tensor: output, peer: prev },
      ], options));
    }
    return Promise.all([pg.send(input, next, options), pg.recv(output, prev, options)]);
  },
};

/**
 * Every collective of the benchmarks: nccl-tests' (all-reduce to scatter, then sendrecv's ring exchange),
 * and between them the uneven forms of all-gather and all-to-all, which nccl-tests does not have.
 */
export const COLLECTIVES: readonly CollectiveDescriptor[] = [
  allReduce,
  broadcast,
  reduce,
  allGather,
  reduceScatter,
  allToAll,
  gather,
  scatter,
  allGatherv,
  allToAllv,
  sendRecv,
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

/** A name without case, `_` or `-`, and without nccl-tests' `_perf` suffix. */
function looseName(name: string): string {
  return name.toLowerCase().replace(/_perf$/, "").replace(/[-_]/g, "");
}

/**
 * The descriptor of a collective by a name as a command line gives it: the descriptor's (`allGatherv`), in
 * any case (`allgatherv`, nccl-tests' `alltoall`, `sendrecv`), with or without `_`/`-` and a `_perf`
 * suffix (nccl-tests' binaries: `all_gather_perf`, `sendrecv_perf`). The flags of `bench:collectives` and
 * `bench/mpi.ts` take it; {@linkcode collective} takes the exact name.
 *
 * @param name The name.
 * @returns Its descriptor.
 * @throws {RangeError} If no descriptor has that name.
 *
 * @example nccl-tests' names
 * ```ts
 * import { findCollective } from "./_descriptors.ts";
 * import assert from "node:assert/strict";
 * assert.equal(findCollective("sendrecv").name, "sendRecv");
 * assert.equal(findCollective("all_gather_perf").name, "allGather");
 * assert.equal(findCollective("alltoallv").name, "allToAllv");
 * ```
 */
export function findCollective(name: string): CollectiveDescriptor {
  return COLLECTIVES.find((c) => looseName(c.name) === looseName(name)) ?? collective(name);
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
