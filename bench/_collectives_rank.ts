/**
 * One rank of `deno task bench:collectives` on the cpu backend (started by bench/collectives.ts through
 * the launcher): times a collective over a range of sizes, checks every result, and on rank 0 prints the
 * nccl-tests table and writes the JSON rows. Before the first size, 500 calls of a 1 KiB collective warm
 * the JIT up.
 *
 * @module
 */
import { type DType, dtypeSize, type ReduceOp } from "../core/dtype.ts";
import { init } from "../backend/init.ts";
import type { ProcessGroup } from "../backend/process_group.ts";
import {
  type BenchConfig,
  type BenchRow,
  BUS_FACTOR,
  formatHeader,
  formatRow,
} from "./_collectives_common.ts";

const config = JSON.parse(Deno.args[0]) as BenchConfig;
await using pg = await init({ checkCalls: config.checkCalls });

function makeTensor(dtype: DType, n: number): Float32Array | Float64Array | Int32Array {
  if (dtype === "float64") return new Float64Array(n);
  if (dtype === "int32") return new Int32Array(n);
  if (dtype === "float32") return new Float32Array(n);
  throw new RangeError(`bench:collectives supports float32, float64 and int32, found ${dtype}`);
}

/** Small integers, so that sums stay exact in every float dtype and "wrong" means wrong. */
function fill(t: Float32Array | Float64Array | Int32Array, rank: number, salt: number): void {
  for (let i = 0; i < t.length; i++) t[i] = ((i + salt) % 13) + rank;
}

function countWrong(t: ArrayLike<number>, expected: (i: number) => number): number {
  let wrong = 0;
  for (let i = 0; i < t.length; i++) if (t[i] !== expected(i)) wrong++;
  return wrong;
}

function expectedReduced(i: number, salt: number, size: number, op: ReduceOp): number {
  const v = (i + salt) % 13;
  if (op === "max") return v + size - 1;
  if (op === "min") return v;
  const sum = size * v + size * (size - 1) / 2;
  return op === "avg" ? sum / size : sum;
}

interface Call {
  run(): PromiseLike<unknown>;
  wrong(): number;
}

function setup(pg: ProcessGroup, bytes: number): Call {
  const es = dtypeSize(config.dtype);
  const n = Math.max(1, Math.floor(bytes / es / pg.size)) * pg.size; // divisible by size for block collectives
  const size = pg.size;
  const me = pg.rank;
  const algorithm = config.algorithm;
  const op = config.op;
  switch (config.collective) {
    case "allReduce": {
      const t = makeTensor(config.dtype, n);
      return {
        run: () => {
          fill(t, me, 0);
          return pg.allReduce(t, { op, algorithm });
        },
        wrong: () => countWrong(t, (i) => expectedReduced(i, 0, size, op)),
      };
    }
    case "broadcast": {
      const t = makeTensor(config.dtype, n);
      return {
        run: () => {
          fill(t, me === config.root ? 0 : 5, 0);
          return pg.broadcast(t, { root: config.root, algorithm });
        },
        wrong: () => countWrong(t, (i) => i % 13),
      };
    }
    case "reduce": {
      const t = makeTensor(config.dtype, n);
      return {
        run: () => {
          fill(t, me, 0);
          return pg.reduce(t, { op, root: config.root, algorithm });
        },
        wrong: () => me !== config.root ? 0 : countWrong(t, (i) => expectedReduced(i, 0, size, op)),
      };
    }
    case "allGather": {
      const input = makeTensor(config.dtype, n / size);
      const output = makeTensor(config.dtype, n);
      return {
        run: () => {
          fill(input, me, 0);
          return pg.allGather(output, input, { algorithm });
        },
        wrong: () => {
          const b = n / size;
          return countWrong(output, (i) => ((i % b) % 13) + Math.floor(i / b));
        },
      };
    }
    case "reduceScatter": {
      const input = makeTensor(config.dtype, n);
      const output = makeTensor(config.dtype, n / size);
      return {
        run: () => {
          fill(input, me, 0);
          return pg.reduceScatter(output, input, { op, algorithm });
        },
        wrong: () => countWrong(output, (i) => expectedReduced(i + me * (n / size), 0, size, op)),
      };
    }
    case "allToAll": {
      const input = makeTensor(config.dtype, n);
      const output = makeTensor(config.dtype, n);
      const b = n / size;
      return {
        run: () => {
          for (let i = 0; i < n; i++) input[i] = me * 1000 + Math.floor(i / b) * 10 + (i % 7);
          return pg.allToAll(output, input, { algorithm });
        },
        wrong: () => countWrong(output, (i) => Math.floor(i / b) * 1000 + me * 10 + ((i % b + me * b) % 7)),
      };
    }
  }
}

const rows: BenchRow[] = [];
if (pg.rank === 0) console.log(formatHeader(config, pg.size));
// JIT warm-up before anything is timed: 500 calls of a 1 KiB collective take the call path (main thread
// and communication thread) to V8's optimising tier; a few warm-up calls per size leave the first size
// measuring the baseline tier (every rank makes the same number of calls).
const jit = setup(pg, 1024);
for (let i = 0; i < 500; i++) await jit.run();
let totalWrong = 0;
for (let bytes = config.minBytes; bytes <= config.maxBytes; bytes *= config.factor) {
  const call = setup(pg, bytes);
  for (let i = 0; i < config.warmup; i++) await call.run();
  await pg.barrier();
  const t0 = performance.now();
  for (let i = 0; i < config.iters; i++) await call.run();
  const mine = (performance.now() - t0) / config.iters;
  const wrong = config.check ? call.wrong() : 0;
  // The slowest rank's time (the collective is done when the last rank is), and every rank's errors.
  const agg = new Float64Array([mine, wrong]);
  const maxTime = new Float64Array([mine]);
  await pg.allReduce(maxTime, { op: "max" });
  await pg.allReduce(agg, { op: "sum" });
  const es = dtypeSize(config.dtype);
  const count = Math.max(1, Math.floor(bytes / es / pg.size)) * pg.size;
  const realBytes = count * es;
  const timeUs = maxTime[0] * 1000;
  const algbw = realBytes / (timeUs * 1e-6) / 1e9;
  const row: BenchRow = {
    collective: config.collective,
    algorithm: config.algorithm,
    transport: (pg as unknown as { transport?: string }).transport ?? config.transport,
    ranks: pg.size,
    bytes: realBytes,
    dtype: config.dtype,
    timeUs,
    algbwGBs: algbw,
    busbwGBs: algbw * BUS_FACTOR[config.collective](pg.size),
    wrong: agg[1],
  };
  totalWrong += agg[1];
  rows.push(row);
  if (pg.rank === 0) console.log(formatRow(row, config, count));
}
if (pg.rank === 0) console.log("RESULTS " + JSON.stringify(rows));
if (totalWrong > 0) Deno.exitCode = 1;
