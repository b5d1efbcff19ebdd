/**
 * The `nccl` side of the collectives benchmark: the harness's sweep (`_harness.ts`) of the harness's
 * descriptors (`_descriptors.ts`) on the nccl backend, with a device of its own ({@linkcode ncclDevice}):
 * tensors are `DeviceBuffer`s, and a run of `iters` calls is queued back to back on the group's stream
 * between two CUDA events, as nccl-tests times it, after `warmup` untimed calls. Rows and table are
 * `_rows.ts`'s (`size count type redop root | time algbw busbw #wrong`), the rows those of
 * `bench/results/collectives-nccl.json`. Also the per-call cost of a 1-element all-reduce
 * ({@linkcode measureCallOverhead}).
 *
 * @module
 */
import type { DType, ReduceOp } from "../core/dtype.ts";
import type { NcclProcessGroup } from "../backend/nccl/nccl_group.ts";
import type { NcclWork } from "../backend/nccl/nccl_work.ts";
import { DeviceBuffer } from "../gpu/device_buffer.ts";
import { Event } from "../gpu/stream.ts";
import { collective, COLLECTIVES } from "./_descriptors.ts";
import { type BenchDevice, type BenchTensor, runSweep, sweepSizes } from "./_harness.ts";
import type { BenchRow } from "./_rows.ts";

/**
 * The nccl backend's {@linkcode BenchDevice}: device buffers, copied to and from the host around the
 * timing, and GPU time between two events around `iters` calls queued back to back (the calls' Works are
 * awaited after the second event, outside the time). Dispose it to free its events.
 *
 * @param pg The group.
 * @returns The device.
 */
export function ncclDevice(pg: NcclProcessGroup): BenchDevice & Disposable {
  const start = Event.create({ device: pg.device });
  const end = Event.create({ device: pg.device });
  return {
    tensor(count: number, dtype: DType): BenchTensor {
      const buffer = DeviceBuffer.alloc(count, { dtype, device: pg.device });
      return {
        tensor: buffer,
        write: (host) => buffer.copyFrom(host),
        read: () => buffer.toArray(),
        [Symbol.dispose]: () => buffer[Symbol.dispose](),
      };
    },
    async time(iters, call): Promise<number> {
      start.record(pg.stream);
      const works: PromiseLike<unknown>[] = [];
      for (let i = 0; i < iters; i++) works.push(call());
      end.record(pg.stream);
      await end.done();
      await Promise.all(works);
      return end.elapsedSince(start) / 1000;
    },
    async reduceScalars(values, op): Promise<void> {
      using buffer = DeviceBuffer.from(values, { device: pg.device });
      await pg.allReduce(buffer, { op });
      buffer.copyTo(values);
    },
    [Symbol.dispose](): void {
      start[Symbol.dispose]();
      end[Symbol.dispose]();
    },
  };
}

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
  /** The reduction of the collectives that reduce (`-o`). @default "sum" */
  op?: ReduceOp;
  /** The root of the rooted collectives (`-r`). @default 0 */
  root?: number;
  /** Only these collectives, by descriptor name. @default every descriptor */
  collectives?: readonly string[];
  /** Called before each collective's sizes. @default none */
  onCollective?: (name: string) => void;
  /** Called with each row as it is measured. @default none */
  onRow?: (row: BenchRow) => void;
}

/**
 * Runs the sweep of each collective on a group of the `nccl` backend (every rank calls it with the same
 * options).
 *
 * @param pg The group.
 * @param options Sizes, iterations, dtype, op, root and collectives.
 * @returns One row per collective and size.
 * @throws {RangeError} If a collective has no descriptor.
 * @throws {DistError} If a collective fails.
 */
export async function runNcclBench(
  pg: NcclProcessGroup,
  options: NcclBenchOptions = {},
): Promise<BenchRow[]> {
  const descriptors = options.collectives?.map(collective) ?? COLLECTIVES;
  const sizes = sweepSizes(options.minBytes ?? 8, options.maxBytes ?? 1 << 27, options.stepFactor ?? 2);
  using device = ncclDevice(pg);
  const rows: BenchRow[] = [];
  for (const descriptor of descriptors) {
    options.onCollective?.(descriptor.name);
    const results = await runSweep(pg, descriptor, {
      sizes,
      iters: options.iters,
      warmup: options.warmup,
      check: options.check,
      dtype: options.dtype,
      op: options.op,
      root: options.root,
      algorithmLabel: pg.tuning.env["NCCL_ALGO"] ?? "nccl",
      transport: "nccl",
      device,
      onSize: ([row]) => options.onRow?.(row),
    });
    rows.push(...results.map(([row]) => row));
  }
  return rows;
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
