/**
 * The one harness of dcomm's collective benchmarks, as nccl-tests' (`src/common.cu`): {@linkcode runSweep}
 * runs any collective of `_descriptors.ts` over a range of sizes on any process group and returns the rows
 * of `_rows.ts`. The cpu backend's path (`bench/_collectives_rank.ts`), the mpi backend's (`bench/mpi.ts`,
 * and that rank script under mpiexec) and the nccl backend's (`bench/_nccl_cases.ts`) differ only in their
 * {@linkcode BenchDevice}: where tensors live and how a run of calls is timed.
 *
 * Timing, as nccl-tests: per size the input is written once; `warmup` calls run untimed; then, after a
 * barrier, `iters` calls are timed back to back, and the slowest rank's time divided by `iters` is the
 * row's time (with `rounds` > 1, the fastest round's). Nothing but the calls runs inside the timed loop: an
 * in-place sum all-reduce goes on summing its own output (the values grow by the world size each call, as
 * in nccl-tests).
 *
 * Checking (`check`): when a call's output is the same after any number of calls
 * ({@linkcode CollectiveDescriptor.stable}: every out-of-place collective, broadcast, in-place min and max,
 * and avg where it is exact), the data the timed calls left is checked as it lies, with no further call.
 * Otherwise (in-place sum and prod, avg of floats on a world whose size is not a power of two, and whenever
 * peers share the tensors) the input is written again and one more untimed call is checked, as nccl-tests
 * re-initialises before its check. `#wrong` counts elements, summed over ranks.
 *
 * @module
 */
import { type DType, dtypeSize, type ReduceOp, type TypedArray } from "../core/dtype.ts";
import type { AnyTensor, ProcessGroup } from "../backend/process_group.ts";
import { newArray } from "../gpu/_arrays.ts";
import {
  benchContext,
  type CallArgs,
  type CollectiveDescriptor,
  countWrong,
  fillArray,
  tolerance,
} from "./_descriptors.ts";
import { type BenchRow, makeRow, type RowLabels } from "./_rows.ts";

/**
 * A tensor of a sweep, where the device keeps it, with copies to and from the host.
 */
export interface BenchTensor extends Disposable {
  /** What the collective is called with. */
  readonly tensor: AnyTensor;
  /** Copies a host array of the same length and dtype in. */
  write(host: TypedArray): void;
  /** The tensor's elements on the host (the array itself for host tensors). */
  read(): TypedArray;
}

/** Where a sweep's tensors live and how a run of calls is timed: the one thing a backend's path adds. */
export interface BenchDevice {
  /** A tensor of `count` elements of `dtype`. */
  tensor(count: number, dtype: DType): BenchTensor;
  /** Seconds `iters` calls of `call` take on this rank, as this device measures them. */
  time(iters: number, call: () => PromiseLike<unknown>): Promise<number>;
  /** All-reduces a few float64 scalars in place across the group (times, wrong counts). */
  reduceScalars(values: Float64Array, op: "max" | "sum"): Promise<void>;
}

/** Wall-clock seconds of `iters` calls, each awaited before the next starts (what a training loop sees). */
export async function timeAwaited(iters: number, call: () => PromiseLike<unknown>): Promise<number> {
  const t0 = performance.now();
  for (let i = 0; i < iters; i++) await call();
  return (performance.now() - t0) / 1000;
}

/**
 * Host tensors (ordinary TypedArrays, or with `pool` the group's `pg.alloc()` tensors; a tensor of no
 * elements, as gather's output on the other ranks, is an ordinary one), timed by the wall clock with every
 * call awaited: the device of the cpu and mpi backends.
 *
 * @param pg The group.
 * @param options `pool`: tensors from `pg.alloc()` (the host segment's pool on the cpu backend).
 * @returns The device.
 */
export function hostDevice(pg: ProcessGroup, options: { pool?: boolean } = {}): BenchDevice {
  return {
    tensor(count, dtype): BenchTensor {
      const pooled = options.pool === true && count > 0;
      const array = pooled ? pg.alloc(count, { dtype }) : newArray(dtype, count);
      return {
        tensor: array,
        write: (host) => {
          // float16 from pg.alloc() is a Uint16Array of bits: copy the bits, not the values.
          const source = array instanceof Uint16Array && host instanceof Float16Array
            ? new Uint16Array(host.buffer, host.byteOffset, host.length)
            : host;
          if (source !== array) array.set(source as never);
        },
        read: () => array,
        [Symbol.dispose]: () => {
          if (pooled) pg.release(array);
        },
      };
    },
    time: timeAwaited,
    reduceScalars: async (values, op) => {
      await pg.allReduce(values, { op });
    },
  };
}

/** Another implementation of the same collective, timed in turn with the group's on the same tensors. */
export interface PeerCall {
  /** Its name in the rows' `runner` (e.g. `"c-inproc"`). */
  readonly name: string;
  /** One call on the sweep's tensors. */
  call(input: AnyTensor, output: AnyTensor): unknown;
  /** `iters` calls in a loop of its own, returning the seconds they took; else `iters` awaited calls. */
  loop?(input: AnyTensor, output: AnyTensor, iters: number): number;
}

/** Options of {@linkcode runSweep}. */
export interface SweepOptions {
  /** Sizes in bytes (each becomes the descriptor's count of whole elements; repeated counts run once). */
  sizes: readonly number[];
  /** Timed calls per round (`-n`). @default 20 */
  iters?: number;
  /** Untimed calls per size before timing (`-w`). @default 5 */
  warmup?: number;
  /** Check the results (`-c`). @default true */
  check?: boolean;
  /** Timed rounds per size; the fastest counts. @default 1 */
  rounds?: number;
  /** The element type (`-d`). @default "float32" */
  dtype?: DType;
  /** The reduction (`-o`). @default "sum" */
  op?: ReduceOp;
  /** The root (`-r`). @default 0 */
  root?: number;
  /** The algorithm every call asks for; `undefined` asks for none (the backend's default). @default undefined */
  algorithm?: string;
  /** The rows' algorithm label. @default `algorithm`, or "auto" */
  algorithmLabel?: string;
  /** The rows' transport label. @default the group's `transport`, or its backend's name */
  transport?: string;
  /** Extra untimed calls of the first size. @default 0 */
  firstWarmup?: number;
  /**
   * Calls of a 1 KiB collective before the first size, per implementation, and a third as many of a
   * 256 KiB one: they take the JIT to its optimising tier on the paths of small and mid-size calls, so the
   * first sizes measure the backend rather than the compiler. @default 0
   */
  jitWarmup?: number;
  /** Where tensors live and how calls are timed. @default hostDevice(pg) */
  device?: BenchDevice;
  /** Other implementations timed in turn with the group's, round by round. @default [] */
  peers?: readonly PeerCall[];
  /** Called with each size's rows (the group's, then each peer's) as they are measured. @default none */
  onSize?: (rows: BenchRow[]) => void;
}

/**
 * Sizes from `min` to `max` bytes, multiplying by `factor` (nccl-tests' `-b -e -f`; always growing).
 *
 * @param min The first size, at least 1.
 * @param max The last size, at least `min`.
 * @param factor The factor, above 1.
 * @returns The sizes.
 * @throws {RangeError} If the range or the factor is invalid.
 */
export function sweepSizes(min: number, max: number, factor: number): number[] {
  if (!(min >= 1) || !(max >= min)) {
    throw new RangeError(`Invalid sizes: expected 1 <= -b <= -e, found -b ${min} -e ${max}`);
  }
  if (!(factor > 1)) throw new RangeError(`Invalid -f: expected a factor above 1, found ${factor}`);
  const out: number[] = [];
  for (let b = min; b <= max; b = Math.max(b + 1, Math.floor(b * factor))) out.push(b);
  return out;
}

/**
 * Runs one collective over a range of sizes on every rank of `pg` (every rank calls it with the same
 * options): writes the input once per size, warms up, times `iters` calls per round (the slowest rank's
 * time), and checks (see the module's doc).
 *
 * @param pg The group.
 * @param descriptor The collective.
 * @param options Sizes, iterations, dtype, op, root, device, peers.
 * @returns Per size, the group's row then each peer's (the same on every rank); none on a group smaller than
 *   the descriptor's `minRanks`.
 * @throws {DistError} If a call fails.
 */
export async function runSweep(
  pg: ProcessGroup,
  descriptor: CollectiveDescriptor,
  options: SweepOptions,
): Promise<BenchRow[][]> {
  const { iters = 20, warmup = 5, check = true, rounds = 1, dtype = "float32", op = "sum", root = 0 } =
    options;
  // A collective that needs more ranks than the group has (sendRecv on one) has no sizes here.
  if (pg.size < (descriptor.minRanks ?? 1)) return [];
  const device = options.device ?? hostDevice(pg);
  const peers = options.peers ?? [];
  const args: CallArgs = {
    op,
    root,
    dtype,
    ...(options.algorithm === undefined ? {} : { algorithm: options.algorithm }),
  };
  const labels = (runner?: string): RowLabels => ({
    algorithm: options.algorithmLabel ?? options.algorithm ?? "auto",
    transport: options.transport ?? (pg as { transport?: string }).transport ?? pg.backend,
    ranks: pg.size,
    dtype,
    op,
    root,
    runner: peers.length > 0 ? runner ?? "dcomm" : runner,
  });
  const es = dtypeSize(dtype);
  const prepare = (count: number): Prepared =>
    prepareSize(pg, descriptor, device, { count, dtype, op, root });
  const jit = options.jitWarmup ?? 0;
  if (jit > 0) {
    for (const [bytes, calls] of [[1024, jit], [262144, Math.ceil(jit / 3)]]) {
      using size = prepare(descriptor.count(Math.max(1, Math.floor(bytes / es)), pg.size));
      const implementations = [size.call(args), ...peers.map((p) => size.peer(p))];
      for (const call of implementations) for (let i = 0; i < calls; i++) await call();
    }
  }
  const out: BenchRow[][] = [];
  const seen = new Set<number>();
  for (const bytes of options.sizes) {
    const count = descriptor.count(Math.max(1, Math.floor(bytes / es)), pg.size);
    if (seen.has(count)) continue;
    const first = seen.size === 0;
    seen.add(count);
    using size = prepare(count);
    const calls = [size.call(args), ...peers.map((p) => size.peer(p))];
    const timed = [
      () => device.time(iters, calls[0]),
      ...peers.map((p, k) => {
        const loop = p.loop?.bind(p);
        return loop
          ? () => Promise.resolve(loop(size.input, size.output, iters))
          : () => device.time(iters, calls[k + 1]);
      }),
    ];
    const warm = warmup + (first ? options.firstWarmup ?? 0 : 0);
    for (const call of calls) for (let w = 0; w < warm; w++) await call();
    const roundsUs: number[][] = calls.map(() => []);
    for (let rep = 0; rep < Math.max(1, rounds); rep++) {
      // Forwards then backwards, round after round: no implementation always runs first.
      const order = rep % 2 === 0 ? [...calls.keys()] : [...calls.keys()].reverse();
      for (const k of order) {
        await pg.barrier();
        const slowest = new Float64Array([(await timed[k]()) / iters]);
        await device.reduceScalars(slowest, "max");
        roundsUs[k].push(slowest[0] * 1e6);
      }
    }
    const rows: BenchRow[] = [];
    for (let k = 0; k < calls.length; k++) {
      let wrong = -1;
      if (check) {
        // What the timed calls left, when it is known; else the input again and one checked call.
        if (peers.length > 0 || !size.stable) {
          size.reset();
          await calls[k]();
        }
        const total = new Float64Array([size.wrong()]);
        await device.reduceScalars(total, "sum");
        wrong = total[0];
      }
      rows.push({
        ...makeRow(
          descriptor,
          count,
          Math.min(...roundsUs[k]),
          wrong,
          labels(k === 0 ? undefined : peers[k - 1].name),
        ),
        roundsUs: roundsUs[k],
      });
    }
    options.onSize?.(rows);
    out.push(rows);
  }
  return out;
}

/** One size's tensors, calls and check. */
interface Prepared extends Disposable {
  readonly input: AnyTensor;
  readonly output: AnyTensor;
  /** Whether the data after any number of calls can be checked as it lies. */
  readonly stable: boolean;
  /** The group's call on these tensors. */
  call(args: CallArgs): () => PromiseLike<unknown>;
  /** A peer's call on these tensors. */
  peer(p: PeerCall): () => PromiseLike<unknown>;
  /** Writes the initial input again. */
  reset(): void;
  /** Wrong elements of this rank's output. */
  wrong(): number;
}

function prepareSize(
  pg: ProcessGroup,
  descriptor: CollectiveDescriptor,
  device: BenchDevice,
  options: { count: number; dtype: DType; op: ReduceOp; root: number },
): Prepared {
  const ctx = benchContext(descriptor, { rank: pg.rank, ranks: pg.size, ...options });
  const lengths = descriptor.lengths(ctx);
  const host = newArray(options.dtype, lengths.input);
  fillArray(host, options.dtype, (j) => descriptor.input(j, ctx));
  const input = device.tensor(lengths.input, options.dtype);
  const output = descriptor.inPlace ? input : device.tensor(lengths.output, options.dtype);
  input.write(host);
  const tol = tolerance(descriptor, ctx);
  return {
    input: input.tensor,
    output: output.tensor,
    stable: descriptor.stable(ctx),
    call: (args) => () => descriptor.run(pg, input.tensor, output.tensor, args),
    peer: (p) => () => Promise.resolve(p.call(input.tensor, output.tensor)),
    reset: () => input.write(host),
    wrong: () => countWrong(output.read(), options.dtype, (i) => descriptor.expected(i, ctx), tol),
    [Symbol.dispose]: () => {
      if (output !== input) output[Symbol.dispose]();
      input[Symbol.dispose]();
    },
  };
}
