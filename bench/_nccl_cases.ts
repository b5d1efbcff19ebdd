/**
 * The `nccl` side of the collectives benchmark, as nccl-tests does it: each collective is a small
 * descriptor (how many bytes a count means, the bus-bandwidth factor, how to fill the input, how to run,
 * how to check), and one harness sweeps sizes, times `iters` back-to-back calls between two CUDA events
 * on the group's stream after `warmup` untimed ones, then runs once more on known data and counts wrong
 * elements. The table is nccl-tests' (`size count type redop root | time algbw busbw #wrong`); the rows
 * are `bench/results/collectives-nccl.json`'s. The CPU harness (`bench/collectives.ts`) can call
 * {@linkcode runNcclBench} with its own group.
 *
 * Bandwidths follow nccl-tests' definitions: algbw = size / time; busbw = algbw × factor, with factor
 * 2(n−1)/n for all-reduce, (n−1)/n for all-gather, reduce-scatter and all-to-all (size being the whole
 * gathered / scattered buffer), 1 for broadcast and reduce.
 *
 * @module
 */
import type { DType } from "../core/dtype.ts";
import { dtypeSize, type TypedArray } from "../core/dtype.ts";
import type { NcclProcessGroup } from "../backend/nccl/nccl_group.ts";
import type { NcclWork } from "../backend/nccl/nccl_work.ts";
import { DeviceBuffer } from "../gpu/device_buffer.ts";
import { Event } from "../gpu/stream.ts";
import { newArray } from "../gpu/_arrays.ts";

/** One collective of the benchmark. */
export interface NcclBenchCase {
  /** The collective's name, as in the JSON rows. */
  readonly collective: string;
  /** The reduction op printed (`"sum"` or `"none"`). */
  readonly redop: string;
  /** The root printed (-1 when there is none). */
  readonly root: number;
  /** The bus-bandwidth factor for `n` ranks. */
  busFactor(n: number): number;
  /** Elements of the input and output buffers for a size (in elements) of the whole buffer. */
  shape(count: number, n: number): { input: number; output: number; inPlace: boolean };
  /** Queues the collective. */
  run(pg: NcclProcessGroup, input: DeviceBuffer, output: DeviceBuffer): NcclWork;
  /** The expected output element `i` on `rank`, given each rank's input `v(rank, j)`. */
  expected(i: number, rank: number, n: number, count: number, v: (rank: number, j: number) => number): number;
}

/** Each rank's input element: small integers, exact in every dtype and sum the benchmark uses. */
export function benchValue(rank: number, j: number): number {
  return ((rank + 1) * ((j % 7) + 1)) % 32;
}

/** Every collective of the benchmark. */
export const NCCL_CASES: readonly NcclBenchCase[] = [
  {
    collective: "allReduce",
    redop: "sum",
    root: -1,
    busFactor: (n) => (2 * (n - 1)) / n,
    shape: (count) => ({ input: count, output: count, inPlace: true }),
    run: (pg, input) => pg.allReduce(input),
    expected: (i, _r, n, _c, v) => Array.from({ length: n }, (_, r) => v(r, i)).reduce((a, b) => a + b, 0),
  },
  {
    collective: "allGather",
    redop: "none",
    root: -1,
    busFactor: (n) => (n - 1) / n,
    shape: (count, n) => ({
      input: Math.floor(count / n),
      output: Math.floor(count / n) * n,
      inPlace: false,
    }),
    run: (pg, input, output) => pg.allGather(output, input),
    expected: (i, _r, n, count, v) => {
      const block = Math.floor(count / n);
      return v(Math.floor(i / block), i % block);
    },
  },
  {
    collective: "reduceScatter",
    redop: "sum",
    root: -1,
    busFactor: (n) => (n - 1) / n,
    shape: (count, n) => ({
      input: Math.floor(count / n) * n,
      output: Math.floor(count / n),
      inPlace: false,
    }),
    run: (pg, input, output) => pg.reduceScatter(output, input),
    expected: (i, rank, n, count, v) => {
      const block = Math.floor(count / n);
      return Array.from({ length: n }, (_, r) => v(r, rank * block + i)).reduce((a, b) => a + b, 0);
    },
  },
  {
    collective: "broadcast",
    redop: "none",
    root: 0,
    busFactor: () => 1,
    shape: (count) => ({ input: count, output: count, inPlace: true }),
    run: (pg, input) => pg.broadcast(input, { root: 0 }),
    expected: (i, _r, _n, _c, v) => v(0, i),
  },
  {
    collective: "reduce",
    redop: "sum",
    root: 0,
    busFactor: () => 1,
    shape: (count) => ({ input: count, output: count, inPlace: true }),
    run: (pg, input) => pg.reduce(input, { root: 0 }),
    expected: (i, rank, n, _c, v) =>
      rank === 0 ? Array.from({ length: n }, (_, r) => v(r, i)).reduce((a, b) => a + b, 0) : v(rank, i),
  },
  {
    collective: "allToAll",
    redop: "none",
    root: -1,
    busFactor: (n) => (n - 1) / n,
    shape: (count, n) => ({
      input: Math.floor(count / n) * n,
      output: Math.floor(count / n) * n,
      inPlace: false,
    }),
    run: (pg, input, output) => pg.allToAll(output, input),
    expected: (i, rank, n, count, v) => {
      const block = Math.floor(count / n);
      // Block j of rank i's input lands in block i of rank j's output.
      return v(Math.floor(i / block), rank * block + (i % block));
    },
  },
];

/** Options of {@linkcode runNcclBench}. */
export interface NcclBenchOptions {
  /** Smallest size in bytes (`-b`). @default 8 */
  minBytes?: number;
  /** Largest size in bytes (`-e`). @default 134217728 */
  maxBytes?: number;
  /** Size multiplier between rows (`-f`). @default 2 */
  stepFactor?: number;
  /** Timed iterations per size (`-n`). @default 20 */
  iters?: number;
  /** Untimed iterations per size (`-w`). @default 5 */
  warmup?: number;
  /** Whether to check results (`-c`). @default true */
  check?: boolean;
  /** The element type (`-d`). @default "float32" */
  dtype?: DType;
  /** Only these collectives. @default every case */
  collectives?: readonly string[];
  /** Called with each row as it is measured. @default none */
  onRow?: (row: NcclBenchRow) => void;
}

/** One measured row, as `bench/results/collectives-nccl.json` stores it. */
export interface NcclBenchRow {
  /** The collective. */
  collective: string;
  /** What ran: `"nccl"`, or NCCL_ALGO when set. */
  algorithm: string;
  /** `"nccl"`. */
  transport: string;
  /** The number of ranks. */
  ranks: number;
  /** nccl-tests' size of the operation, in bytes. */
  bytes: number;
  /** Elements (nccl-tests' count). */
  count: number;
  /** The element type. */
  dtype: DType;
  /** The reduction op, or `"none"`. */
  redop: string;
  /** The root, or -1. */
  root: number;
  /** Microseconds per call (GPU time between events / iterations). */
  timeUs: number;
  /** size / time, in GB/s. */
  algbwGBs: number;
  /** algbw × the bus factor, in GB/s. */
  busbwGBs: number;
  /** Elements that differ from the reference after one checked run (-1 when not checked). */
  wrong: number;
}

function fill(array: TypedArray, rank: number, offset = 0): void {
  if (array instanceof BigInt64Array || array instanceof BigUint64Array) {
    for (let j = 0; j < array.length; j++) array[j] = BigInt(benchValue(rank, offset + j));
  } else if (array instanceof Uint16Array) {
    // bfloat16 bits of small integers: the upper half of their float32 bits.
    const f = new Float32Array(1);
    const u = new Uint32Array(f.buffer);
    for (let j = 0; j < array.length; j++) {
      f[0] = benchValue(rank, offset + j);
      array[j] = u[0] >>> 16;
    }
  } else {
    const a = array as Float32Array;
    for (let j = 0; j < a.length; j++) a[j] = benchValue(rank, offset + j);
  }
}

function valueAt(array: TypedArray, i: number): number {
  if (array instanceof Uint16Array) {
    const u = new Uint32Array([array[i] << 16]);
    return new Float32Array(u.buffer)[0];
  }
  return Number(array[i]);
}

/**
 * Runs the sweep on a group of the `nccl` backend (every rank calls it with the same options).
 *
 * @param pg The group.
 * @param options Sizes, iterations, dtype and collectives.
 * @returns One row per collective and size.
 * @throws {DistError} If a collective fails.
 */
export async function runNcclBench(
  pg: NcclProcessGroup,
  options: NcclBenchOptions = {},
): Promise<NcclBenchRow[]> {
  const dtype = options.dtype ?? "float32";
  const size = dtypeSize(dtype);
  const n = pg.size;
  const rows: NcclBenchRow[] = [];
  const cases = NCCL_CASES.filter((c) => !options.collectives || options.collectives.includes(c.collective));
  const iters = options.iters ?? 20;
  const warmup = options.warmup ?? 5;
  const minBytes = options.minBytes ?? 8;
  const maxBytes = options.maxBytes ?? 1 << 27;
  const factor = options.stepFactor ?? 2;
  using start = Event.create({ device: pg.device });
  using end = Event.create({ device: pg.device });
  for (const c of cases) {
    for (
      let bytes = minBytes;
      bytes <= maxBytes;
      bytes = Math.max(bytes + size, Math.floor(bytes * factor))
    ) {
      const count = Math.max(n, Math.floor(bytes / size / n) * n);
      const shape = c.shape(count, n);
      using input = DeviceBuffer.alloc(shape.input, { dtype, device: pg.device });
      using output = shape.inPlace
        ? input.view(0)
        : DeviceBuffer.alloc(shape.output, { dtype, device: pg.device });
      const host = newArray(dtype, shape.input);
      fill(host, pg.rank);
      input.copyFrom(host);
      for (let i = 0; i < warmup; i++) c.run(pg, input, output);
      start.record(pg.stream);
      const works: NcclWork[] = [];
      for (let i = 0; i < iters; i++) works.push(c.run(pg, input, output));
      end.record(pg.stream);
      await end.done();
      await Promise.all(works);
      const timeUs = (end.elapsedSince(start) * 1000) / iters;
      let wrong = -1;
      if (options.check ?? true) {
        input.copyFrom(host);
        await c.run(pg, input, output);
        const got = output.toArray();
        wrong = 0;
        for (let i = 0; i < got.length; i++) {
          if (valueAt(got, i) !== c.expected(i, pg.rank, n, count, benchValue)) wrong++;
        }
      }
      const opBytes = count * size;
      const algbw = opBytes / (timeUs * 1e-6) / 1e9;
      const row: NcclBenchRow = {
        collective: c.collective,
        algorithm: pg.tuning.env["NCCL_ALGO"] ?? "nccl",
        transport: "nccl",
        ranks: n,
        bytes: opBytes,
        count,
        dtype,
        redop: c.redop,
        root: c.root,
        timeUs,
        algbwGBs: algbw,
        busbwGBs: algbw * c.busFactor(n),
        wrong,
      };
      rows.push(row);
      options.onRow?.(row);
      if (bytes >= maxBytes) break;
    }
  }
  return rows;
}

/** The header of nccl-tests' table. */
export const NCCL_TABLE_HEADER: string = [
  "#  collective       size      count    type   redop   root       time    algbw    busbw  #wrong",
  "#                    (B)   (elements)                             (us)   (GB/s)   (GB/s)",
].join("\n");

/**
 * One row of nccl-tests' table.
 *
 * @param row The row.
 * @returns The line.
 */
export function formatNcclRow(row: NcclBenchRow): string {
  return [
    row.collective.padStart(13),
    String(row.bytes).padStart(12),
    String(row.count).padStart(10),
    row.dtype.padStart(8),
    row.redop.padStart(6),
    String(row.root).padStart(6),
    row.timeUs.toFixed(2).padStart(10),
    row.algbwGBs.toFixed(2).padStart(8),
    row.busbwGBs.toFixed(2).padStart(8),
    String(row.wrong).padStart(7),
  ].join(" ");
}

/** What {@linkcode measureCallOverhead} measured. */
export interface CallOverhead {
  /** Host microseconds per bare `ncclAllReduce` call through Deno FFI (1 element, no Work). */
  readonly ffiUs: number;
  /** Host microseconds per `pg.allReduce()` (events, Work, poller included). */
  readonly dcommUs: number;
  /** GPU microseconds per 1-element all-reduce, back to back. */
  readonly gpuUs: number;
  /** Calls per batch and batches. */
  readonly calls: number;
}

/**
 * The per-call cost of a 1-element all-reduce: the bare FFI call (as a C program would make it) and the
 * whole `pg.allReduce()` path; each the median over batches of host time per call, the stream synchronized
 * between batches so NCCL's launch queue never fills.
 *
 * @param pg The group.
 * @param options Calls per batch and batches.
 * @returns Microseconds per call.
 */
export async function measureCallOverhead(
  pg: NcclProcessGroup,
  options: { calls?: number; batches?: number } = {},
): Promise<CallOverhead> {
  const calls = options.calls ?? 500;
  const batches = options.batches ?? 11;
  using buf = DeviceBuffer.from(new Float32Array([1]), { device: pg.device });
  const pointer = buf.pointer;
  const stream = pg.stream;
  const ffi: number[] = [];
  const gpu: number[] = [];
  using start = Event.create({ device: pg.device });
  using end = Event.create({ device: pg.device });
  await pg.run("overhead", ({ comm, stream: s, symbols }) => {
    const { ncclAllReduce, ncclCommGetAsyncError } = symbols;
    const state = new Int32Array(1);
    for (let b = 0; b < batches; b++) {
      start.record(stream);
      const t0 = performance.now();
      for (let i = 0; i < calls; i++) {
        // 7 = ncclFloat32, 0 = ncclSum: the call a C program makes.
        let rc = ncclAllReduce(pointer, pointer, 1n, 7, 0, comm, s);
        // A non-blocking communicator may still be queuing it (ncclInProgress): wait before the next call.
        while (rc === 7) rc = ncclCommGetAsyncError(comm, state) || state[0];
        if (rc !== 0) return rc;
      }
      ffi.push(((performance.now() - t0) * 1000) / calls);
      end.record(stream);
      stream.synchronize();
      gpu.push((end.elapsedSince(start) * 1000) / calls);
    }
    return 0;
  });
  const dcomm: number[] = [];
  for (let b = 0; b < batches; b++) {
    const works: NcclWork[] = [];
    const t0 = performance.now();
    for (let i = 0; i < calls; i++) works.push(pg.allReduce(buf));
    dcomm.push(((performance.now() - t0) * 1000) / calls);
    await Promise.all(works);
  }
  const median = (xs: number[]): number => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
  return { ffiUs: median(ffi), dcommUs: median(dcomm), gpuUs: median(gpu), calls };
}
