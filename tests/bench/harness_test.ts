/**
 * The benchmarks' one harness (`bench/_descriptors.ts`, `bench/_harness.ts`, `bench/_rows.ts`): the
 * descriptors' counts, bus factors and expected outputs against a plain simulation of each collective, the
 * check catching wrong results, the table, the rows' file; the sweep on real ranks (threads), with
 * collectives broken on purpose; the MPICH peer's table of collectives (`bench/mpi.ts`, against the C
 * source's); and short real runs of `bench/collectives.ts` (cpu, and the mpi paths where MPICH is installed)
 * and the CPU side of `bench/nccl.ts`.
 */
import assert from "node:assert/strict";
import type { DType, ReduceOp } from "../../core/dtype.ts";
import { spawnThreads } from "../../backend/threads.ts";
import {
  benchContext,
  blockCount,
  collective,
  type CollectiveDescriptor,
  COLLECTIVES,
  countWrong,
  fillArray,
  findCollective,
  tolerance,
  unevenBlocks,
  unevenCount,
  unevenMatrix,
  unevenStarts,
} from "../../bench/_descriptors.ts";
import { sweepSizes } from "../../bench/_harness.ts";
import {
  type BenchRow,
  makeRow,
  mergeRows,
  parseBytes,
  rowKey,
  tableHeader,
  tableRow,
} from "../../bench/_rows.ts";
import { MPICH_CALLS, mpichResultsFile, wholeCount } from "../../bench/mpi.ts";
import { parseNcclArgs } from "../../bench/nccl.ts";
import type { ProcessGroup } from "../../backend/process_group.ts";
import { gatedTest, hasCommand } from "../_util/skip.ts";
import type { HarnessArgs, HarnessResult } from "./_fixtures/harness_rank.ts";

const FIXTURE = new URL("./_fixtures/harness_rank.ts", import.meta.url);
const COLLECTIVES_CLI = new URL("../../bench/collectives.ts", import.meta.url).pathname;

Deno.test("COLLECTIVES have nccl-tests' bus factors", () => {
  const factors = Object.fromEntries(
    COLLECTIVES.map((c) => [c.name, [1, 2, 4, 8].map((n) => c.busFactor(n))]),
  );
  assert.deepEqual(factors, {
    allReduce: [0, 1, 1.5, 1.75],
    broadcast: [1, 1, 1, 1],
    reduce: [1, 1, 1, 1],
    allGather: [0, 0.5, 0.75, 0.875],
    reduceScatter: [0, 0.5, 0.75, 0.875],
    allToAll: [0, 0.5, 0.75, 0.875],
    gather: [0, 0.5, 0.75, 0.875],
    scatter: [0, 0.5, 0.75, 0.875],
    // The v-forms as their even forms; sendrecv_perf's 1.
    allGatherv: [0, 0.5, 0.75, 0.875],
    allToAllv: [0, 0.5, 0.75, 0.875],
    sendRecv: [1, 1, 1, 1],
  });
});

Deno.test("COLLECTIVES count whole buffers: equal blocks for the block collectives, any count otherwise", () => {
  assert.deepEqual(COLLECTIVES.map((c) => [c.name, c.count(10, 4), c.count(2, 4)]), [
    ["allReduce", 10, 2],
    ["broadcast", 10, 2],
    ["reduce", 10, 2],
    ["allGather", 8, 4],
    ["reduceScatter", 8, 4],
    ["allToAll", 8, 4],
    ["gather", 8, 4],
    ["scatter", 8, 4],
    // Any count, but at least 1 + 2 + 3 + 4 (one element in the smallest block).
    ["allGatherv", 10, 10],
    ["allToAllv", 10, 10],
    ["sendRecv", 10, 2],
  ]);
  assert.equal(unevenCount(1001, 4), 1001);
  assert.equal(unevenCount(0, 1), 1);
  assert.equal(blockCount(0, 3), 3);
  const lengths = (name: string, rank = 1, root = 0): { input: number; output: number } =>
    collective(name).lengths(benchContext(collective(name), { rank, ranks: 4, count: 8, root }));
  assert.deepEqual(lengths("allGather"), { input: 2, output: 8 });
  assert.deepEqual(lengths("reduceScatter"), { input: 8, output: 2 });
  assert.deepEqual(lengths("allToAll"), { input: 8, output: 8 });
  // Rooted: the root-only buffer is the whole count on the root and empty elsewhere.
  assert.deepEqual(lengths("gather", 1, 1), { input: 2, output: 8 });
  assert.deepEqual(lengths("gather", 2, 1), { input: 2, output: 0 });
  assert.deepEqual(lengths("scatter", 1, 1), { input: 8, output: 2 });
  assert.deepEqual(lengths("scatter", 2, 1), { input: 0, output: 2 });
  // The v-forms at count 20 on 4 ranks: blocks of 2, 4, 6 and 8.
  const uneven = (name: string, rank: number): { input: number; output: number } =>
    collective(name).lengths(benchContext(collective(name), { rank, ranks: 4, count: 20 }));
  assert.deepEqual([0, 1, 2, 3].map((r) => uneven("allGatherv", r).input), [2, 4, 6, 8]);
  assert.deepEqual([0, 1, 2, 3].map((r) => uneven("allGatherv", r).output), [20, 20, 20, 20]);
  assert.deepEqual(uneven("allToAllv", 2), { input: 20, output: 20 });
  assert.deepEqual(uneven("sendRecv", 3), { input: 20, output: 20 });
});

Deno.test("unevenStarts() splits a count in proportion to rank + 1, exactly, every block differing", () => {
  assert.deepEqual(unevenStarts(10, 4), [0, 1, 3, 6, 10]);
  assert.deepEqual(unevenBlocks(100, 3), [16, 34, 50]);
  assert.deepEqual(unevenBlocks(7, 1), [7]);
  assert.deepEqual(unevenBlocks(65536, 2), [21845, 43691]);
  for (const ranks of [1, 2, 3, 4, 5, 8]) {
    for (const elements of [1, 7, 36, 1000, 262144, 16777216]) {
      const count = unevenCount(elements, ranks);
      const blocks = unevenBlocks(count, ranks);
      assert.equal(blocks.reduce((a, b) => a + b, 0), count, `${count} on ${ranks}`);
      assert.ok(blocks.every((b) => Number.isInteger(b) && b >= 1), `no empty block: ${blocks}`);
      // Growing with the rank, and within one element of count (r + 1) / (1 + ... + ranks).
      const whole = (ranks * (ranks + 1)) / 2;
      for (const [r, b] of blocks.entries()) {
        assert.ok(Math.abs(b - (count * (r + 1)) / whole) < 1, `block ${r} of ${count} on ${ranks}: ${b}`);
        if (r > 0 && count >= 2 * whole) assert.ok(b > blocks[r - 1], `${blocks}`);
      }
    }
  }
});

Deno.test("unevenMatrix() sends every rank count elements and receives as many, in rotated blocks", () => {
  assert.deepEqual(unevenMatrix(6, 3), [[1, 2, 3], [3, 1, 2], [2, 3, 1]]);
  assert.deepEqual(unevenMatrix(3, 2), [[1, 2], [2, 1]]);
  for (const ranks of [1, 2, 3, 4, 7]) {
    const count = unevenCount(12345, ranks);
    const m = unevenMatrix(count, ranks);
    const blocks = unevenBlocks(count, ranks).sort((a, b) => a - b);
    for (let i = 0; i < ranks; i++) {
      const row = m[i], column = m.map((r) => r[i]);
      assert.deepEqual([...row].sort((a, b) => a - b), blocks, `rank ${i} sends each block once`);
      assert.deepEqual([...column].sort((a, b) => a - b), blocks, `rank ${i} receives each block once`);
      // From 3 ranks on a rank's sendCounts are not its recvCounts: a call that swapped them fails.
      if (ranks >= 3) assert.notDeepEqual(row, column);
      if (i > 0) assert.notDeepEqual(row, m[i - 1], "each rank's sendCounts differ");
    }
  }
});

Deno.test("gather and scatter descriptors: rooted, out of place, the root's data in rank order", () => {
  for (const name of ["gather", "scatter"]) {
    const d = collective(name);
    assert.deepEqual([
      d.reduces,
      d.rooted,
      d.inPlace,
      d.stable(benchContext(d, { rank: 0, ranks: 3, count: 6 })),
    ], [
      false,
      true,
      false,
      true,
    ]);
    const row = makeRow(d, 1 << 20, 1000, 0, { ...LABELS, root: 2 });
    assert.deepEqual([row.redop, row.root], ["none", 2]);
    assert.ok(Math.abs(row.busbwGBs - row.algbwGBs * 0.75) < 1e-9, `${name}: busbw = algbw (n-1)/n`);
  }
  // 3 ranks, count 6 (blocks of 2), root 1: rank r's input is value(r, j) = (j + 5r) mod 13.
  const ctx = (name: string, rank: number) =>
    benchContext(collective(name), { rank, ranks: 3, count: 6, root: 1 });
  const gather = collective("gather");
  assert.deepEqual(Array.from({ length: 6 }, (_, i) => gather.expected(i, ctx("gather", 1))), [
    0,
    1,
    5,
    6,
    10,
    11,
  ]);
  assert.deepEqual(Array.from({ length: 2 }, (_, j) => gather.input(j, ctx("gather", 2))), [10, 11]);
  const scatter = collective("scatter");
  assert.deepEqual(Array.from({ length: 6 }, (_, j) => scatter.input(j, ctx("scatter", 1))), [
    5,
    6,
    7,
    8,
    9,
    10,
  ]);
  assert.deepEqual([0, 1, 2].map((r) => [0, 1].map((i) => scatter.expected(i, ctx("scatter", r)))), [
    [5, 6],
    [7, 8],
    [9, 10],
  ]);
});

Deno.test("gather and scatter descriptors pass null for the root-only buffer on the other ranks", async () => {
  const seen: unknown[][] = [];
  const input = new Float32Array(2), output = new Float32Array(0);
  for (const rank of [0, 1]) {
    const pg = {
      rank,
      gather: (...args: unknown[]) => seen.push(["gather", rank, ...args]),
      scatter: (...args: unknown[]) => seen.push(["scatter", rank, ...args]),
    } as unknown as ProcessGroup;
    await collective("gather").run(pg, input, output, { root: 1, op: "sum" });
    await collective("scatter").run(pg, input, output, { root: 1, op: "sum" });
  }
  assert.deepEqual(
    seen.map((
      [name, rank, a, b],
    ) => [
      name,
      rank,
      a === null ? null : a === input ? "input" : "output",
      b === null ? null : b === input ? "input" : "output",
    ]),
    [
      ["gather", 0, null, "input"],
      ["scatter", 0, "output", null],
      ["gather", 1, "output", "input"],
      ["scatter", 1, "output", "input"],
    ],
  );
  // The call's options go through: the root.
  assert.deepEqual(seen.map((s) => (s[4] as { root: number }).root), [1, 1, 1, 1]);
});

Deno.test("collective() names every collective when the name is unknown", () => {
  assert.throws(() => collective("gatherv"), {
    name: "RangeError",
    message: "Unknown collective: expected one of allReduce, broadcast, reduce, allGather, reduceScatter, " +
      'allToAll, gather, scatter, allGatherv, allToAllv, sendRecv, found "gatherv"',
  });
  // Exact: the command lines' loose names go through findCollective.
  assert.throws(() => collective("allgatherv"), RangeError);
});

Deno.test("findCollective() takes the names in any case, and nccl-tests' names", () => {
  const names = (list: string[]): string[] => list.map((n) => findCollective(n).name);
  assert.deepEqual(names(["allgatherv", "ALLTOALLV", "sendrecv", "sendRecv", "sendrecv_perf"]), [
    "allGatherv",
    "allToAllv",
    "sendRecv",
    "sendRecv",
    "sendRecv",
  ]);
  assert.deepEqual(
    names(["all_reduce", "all_gather_perf", "alltoall", "reduce_scatter", "gather", "scatter"]),
    [
      "allReduce",
      "allGather",
      "allToAll",
      "reduceScatter",
      "gather",
      "scatter",
    ],
  );
  assert.throws(() => findCollective("gatherv"), {
    name: "RangeError",
    message: /Unknown collective: .*"gatherv"/,
  });
});

/** op over numbers, as the collective's result holds it (avg of integers truncates). */
function reduceAll(values: number[], op: ReduceOp, dtype: DType): number {
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
      const s = values.reduce((a, b) => a + b, 0) / values.length;
      return dtype.startsWith("float") || dtype === "bfloat16" ? s : Math.trunc(s);
    }
    default:
      throw new RangeError(`The benchmarks run no ${op}`);
  }
}

/** Each rank's output after one call, simulated from every rank's inputs as the ProcessGroup docs say. */
function simulate(
  d: CollectiveDescriptor,
  inputs: number[][],
  op: ReduceOp,
  root: number,
  dtype: DType,
): number[][] {
  const ranks = inputs.length;
  const n = inputs[0].length;
  const across = (j: number): number => reduceAll(inputs.map((x) => x[j]), op, dtype);
  switch (d.name) {
    case "allReduce":
      return inputs.map(() => inputs[0].map((_, j) => across(j)));
    case "broadcast":
      return inputs.map(() => [...inputs[root]]);
    case "reduce":
      return inputs.map((x, r) => r === root ? x.map((_, j) => across(j)) : [...x]);
    case "allGather":
      return inputs.map(() => inputs.flat());
    case "reduceScatter": {
      const b = n / ranks;
      return inputs.map((_, r) => Array.from({ length: b }, (_, i) => across(r * b + i)));
    }
    case "allToAll": {
      const b = n / ranks;
      return inputs.map((_, r) =>
        Array.from({ length: n }, (_, i) => inputs[Math.floor(i / b)][r * b + (i % b)])
      );
    }
    case "gather":
      return inputs.map((_, r) => r === root ? inputs.flat() : []);
    case "scatter": {
      const b = inputs[root].length / ranks;
      return inputs.map((_, r) => inputs[root].slice(r * b, (r + 1) * b));
    }
    case "allGatherv":
      return inputs.map(() => inputs.flat());
    case "allToAllv": {
      // Rank i's input, cut by its row of the matrix; rank r's output, rank i's block for r in rank order.
      const m = unevenMatrix(n, ranks);
      const cut = (i: number, r: number): number[] => {
        const from = m[i].slice(0, r).reduce((a, b) => a + b, 0);
        return inputs[i].slice(from, from + m[i][r]);
      };
      return inputs.map((_, r) => inputs.flatMap((_, i) => cut(i, r)));
    }
    case "sendRecv":
      return inputs.map((_, r) => [...inputs[(r + ranks - 1) % ranks]]);
  }
  throw new Error(`No simulation of ${d.name}`);
}

Deno.test("CollectiveDescriptor.expected() is each collective's result on 1-5 ranks, every op", () => {
  for (const d of COLLECTIVES) {
    for (const ranks of [1, 2, 3, 5]) {
      for (const op of (d.reduces ? ["sum", "prod", "min", "max", "avg"] : ["sum"]) as ReduceOp[]) {
        for (const dtype of ["float32", "int8", "bfloat16"] as DType[]) {
          const root = ranks - 1;
          const count = d.count(7 * ranks + 1, ranks);
          const ctxs = Array.from(
            { length: ranks },
            (_, rank) => benchContext(d, { rank, ranks, count, dtype, op, root }),
          );
          const inputs = ctxs.map((c) => Array.from({ length: d.lengths(c).input }, (_, j) => d.input(j, c)));
          const outputs = simulate(d, inputs, op, root, dtype);
          for (const [rank, c] of ctxs.entries()) {
            const want = outputs[rank];
            assert.equal(want.length, d.inPlace ? d.lengths(c).input : d.lengths(c).output);
            const got = want.map((_, i) => d.expected(i, c));
            assert.deepEqual(got, want, `${d.name} ${op} ${dtype} on ${ranks} ranks, rank ${rank}`);
          }
        }
      }
    }
  }
});

Deno.test("benchContext() keeps every sum and product exact in the dtype, on many ranks too", () => {
  // dtype, ranks, the largest exact integer, the largest power of two's exponent
  const cases: [DType, number, number, number][] = [
    ["int8", 20, 127, 6],
    ["uint8", 40, 255, 7],
    ["bfloat16", 40, 256, 127],
    ["float16", 300, 2048, 15],
    ["float32", 8, 2 ** 24, 127],
  ];
  for (const [dtype, ranks, limit, exponent] of cases) {
    for (const op of ["sum", "prod"] as ReduceOp[]) {
      const ctx = benchContext(collective("allReduce"), { rank: 0, ranks, count: 26, dtype, op });
      const reduced = Array.from({ length: 40 }, (_, j) => ctx.reduced(j));
      for (const v of reduced) {
        const exact = op === "sum" ? v <= limit : Number.isInteger(Math.log2(v)) && Math.log2(v) <= exponent;
        assert.ok(exact, `${dtype} ${op} on ${ranks} ranks reaches ${v}`);
      }
      // Ranks still hold different data.
      assert.notDeepEqual(
        Array.from({ length: 13 }, (_, j) => ctx.value(0, j)),
        Array.from({ length: 13 }, (_, j) => ctx.value(1, j)),
        `${dtype} ${op} on ${ranks} ranks`,
      );
    }
  }
});

Deno.test("CollectiveDescriptor.stable() says when the data after n calls is the data after one", () => {
  const stable = (name: string, op: ReduceOp, ranks: number, dtype: DType = "float32"): boolean =>
    collective(name).stable(benchContext(collective(name), { rank: 0, ranks, count: 4, op, dtype }));
  assert.equal(stable("allReduce", "sum", 2), false); // grows by 2 each call
  assert.equal(stable("allReduce", "sum", 1), true);
  assert.equal(stable("allReduce", "max", 3), true);
  assert.equal(stable("allReduce", "avg", 4), true); // 1/4 is exact
  assert.equal(stable("allReduce", "avg", 3), false); // 1/3 rounds
  assert.equal(stable("allReduce", "avg", 3, "int32"), true);
  assert.equal(stable("reduce", "avg", 4), false); // the root averages its average with the others' inputs
  assert.equal(stable("reduce", "min", 4), true);
  for (
    const name of [
      "broadcast",
      "allGather",
      "reduceScatter",
      "allToAll",
      "gather",
      "scatter",
      "allGatherv",
      "allToAllv",
      "sendRecv",
    ]
  ) {
    assert.equal(stable(name, "sum", 3), true);
  }
});

Deno.test("countWrong() counts each wrong element, in every representation", () => {
  assert.equal(countWrong(new Float32Array([0, 1, 2, 3]), "float32", (i) => i), 0);
  assert.equal(countWrong(new Float32Array([0, 1, 7, 3]), "float32", (i) => i), 1);
  assert.equal(countWrong(new Float32Array([NaN, 1]), "float32", (i) => i), 1);
  assert.equal(countWrong(new Float32Array([9, 9]), "float32", (i) => i === 0 ? undefined : 9), 0);
  assert.equal(countWrong(new BigInt64Array([0n, 5n]), "int64", (i) => i), 1);
  for (const dtype of ["float16", "bfloat16"] as DType[]) {
    const bits = new Uint16Array(4);
    fillArray(bits, dtype, (j) => j * 3);
    assert.equal(countWrong(bits, dtype, (i) => i * 3), 0);
    bits[2] ^= 0x0100; // a bit of the mantissa
    assert.equal(countWrong(bits, dtype, (i) => i * 3), 1, dtype);
  }
  const f16 = new Float16Array([1.5, 2]);
  assert.equal(countWrong(f16, "float16", (i) => [1.5, 2.5][i]), 1);
});

Deno.test("tolerance() lets avg of floats round, and nothing else", () => {
  const ctx = (op: ReduceOp, dtype: DType = "float32") =>
    benchContext(collective("allReduce"), { rank: 0, ranks: 3, count: 4, op, dtype });
  const avg = tolerance(collective("allReduce"), ctx("avg"));
  assert.ok(avg > 0 && avg < 1e-5);
  assert.equal(tolerance(collective("allReduce"), ctx("sum")), 0);
  assert.equal(tolerance(collective("allReduce"), ctx("avg", "int32")), 0);
  assert.equal(tolerance(collective("allGather"), ctx("avg")), 0);
  const third = Math.fround(Math.fround(7) * Math.fround(1 / 3));
  assert.equal(countWrong(new Float32Array([third]), "float32", () => 7 / 3, avg), 0);
  assert.equal(countWrong(new Float32Array([third + 1e-3]), "float32", () => 7 / 3, avg), 1);
});

const LABELS = { algorithm: "auto", transport: "shm", ranks: 4, dtype: "float32" };

Deno.test("makeRow() computes algbw and nccl-tests' busbw once for every path", () => {
  const row = makeRow(collective("allGather"), 1 << 20, 1000, 0, LABELS);
  assert.equal(row.bytes, 4 << 20);
  assert.ok(Math.abs(row.algbwGBs - 4.194304) < 1e-9);
  assert.ok(Math.abs(row.busbwGBs - 4.194304 * 0.75) < 1e-9);
  assert.deepEqual([row.redop, row.root], ["none", -1]);
  const rooted = makeRow(collective("reduce"), 4, 1, -1, { ...LABELS, op: "max", root: 2 });
  assert.deepEqual([rooted.redop, rooted.root, rooted.wrong], ["max", 2, -1]);
});

Deno.test("tableHeader() and tableRow() print nccl-tests' columns, aligned", () => {
  const header = tableHeader().split("\n");
  assert.deepEqual(header[0].split(/\s+/), [
    "#",
    "size",
    "count",
    "type",
    "redop",
    "root",
    "time",
    "algbw",
    "busbw",
    "#wrong",
  ]);
  const row = makeRow(collective("allReduce"), 2, 5.4321, 0, LABELS);
  const line = tableRow([row]);
  assert.deepEqual(line.trim().split(/\s+/), ["8", "2", "float32", "sum", "-1", "5.43", "0.00", "0.00", "0"]);
  assert.equal(line.length, header[0].length);
  assert.equal(line.indexOf("5.43") + 4, header[0].indexOf("time") + 4); // right-aligned under "time"
  const unchecked = tableRow([{ ...row, wrong: -1 }]);
  assert.match(unchecked, /N\/A$/);
  // Groups side by side, a missing one dashed, extra columns after.
  const grouped = tableHeader(["dcomm", "Gloo"], [{ title: "Gloo/dcomm", unit: "time", width: 10 }]).split(
    "\n",
  );
  assert.equal(grouped.length, 3);
  assert.match(grouped[0], /^#\s+dcomm\s+Gloo$/);
  const both = tableRow([row, undefined], ["2.00"], [10]);
  assert.equal(both.length, grouped[1].length);
  assert.deepEqual(both.trim().split(/\s+/).slice(9), ["–", "–", "–", "–", "2.00"]);
  assert.throws(() => tableRow([undefined]), RangeError);
});

Deno.test("sweepSizes() and parseBytes() follow nccl-tests' -b -e -f", () => {
  assert.deepEqual(sweepSizes(8, 512, 8), [8, 64, 512]);
  assert.deepEqual(sweepSizes(1, 3, 1.1), [1, 2, 3]);
  assert.throws(() => sweepSizes(8, 4, 2), {
    message: "Invalid sizes: expected 1 <= -b <= -e, found -b 8 -e 4",
  });
  assert.throws(() => sweepSizes(8, 64, 1), RangeError);
  assert.deepEqual(["8", "64K", "1M", "2g", "1.5K", "16B"].map(parseBytes), [
    8,
    65536,
    1 << 20,
    2 * 1024 ** 3,
    1536,
    16,
  ]);
  assert.throws(() => parseBytes("lots"), {
    message: 'Invalid size: expected a number with an optional K, M or G suffix, found "lots"',
  });
});

Deno.test("mergeRows() replaces this run's rows and keeps the rest, rows of before the harness included", () => {
  const file = Deno.makeTempFileSync({ suffix: ".json" });
  try {
    const old = {
      collective: "allReduce",
      algorithm: "auto",
      transport: "shm",
      ranks: 2,
      dtype: "float32",
      bytes: 8,
    };
    Deno.writeTextFileSync(file, JSON.stringify([{ ...old, timeUs: 600 }, { ...old, bytes: 64, timeUs: 7 }]));
    const fresh = makeRow(collective("allReduce"), 2, 5, 0, { ...LABELS, ranks: 2 });
    assert.equal(rowKey(fresh), rowKey(old));
    const max = makeRow(collective("allReduce"), 2, 6, 0, { ...LABELS, ranks: 2, op: "max" });
    mergeRows(file, [fresh, max]);
    const rows = JSON.parse(Deno.readTextFileSync(file)) as BenchRow[];
    assert.deepEqual(rows.map((r) => [r.bytes, r.redop ?? "(none)", r.timeUs]), [[64, "(none)", 7], [
      8,
      "sum",
      5,
    ], [
      8,
      "max",
      6,
    ]]);
  } finally {
    Deno.removeSync(file);
  }
});

/** The sweep on `ranks` threads, each rank's result. */
function sweep(ranks: number, args: HarnessArgs): Promise<HarnessResult[]> {
  return spawnThreads(FIXTURE, { worldSize: ranks, args, timeoutMs: 60_000 }) as Promise<HarnessResult[]>;
}

Deno.test("runSweep() measures every collective on 3 ranks with no wrong element, inputs written once", async () => {
  for (const d of COLLECTIVES) {
    const results = await sweep(3, { collective: d.name, sizes: [12, 96], op: "sum", root: 1 });
    const rows = results[0].rows;
    // 3 and 24 float32 elements, as each descriptor counts them (the v-forms take at least 1 + 2 + 3).
    const bytes = [3, 24].map((e) => d.count(e, 3) * 4);
    assert.deepEqual(rows.map((r) => [r.collective, r.bytes, r.wrong]), [[d.name, bytes[0], 0], [
      d.name,
      bytes[1],
      0,
    ]]);
    // Every rank agrees (the slowest rank's time, the wrong elements of all).
    assert.deepEqual(results.map((r) => r.rows), [rows, rows, rows]);
    for (const r of results) {
      assert.equal(r.duringTiming, 0, `${d.name}: nothing but calls while timing`);
      // Once per size; in-place sums once more for the checked call.
      const again = d.stable(benchContext(d, { rank: 0, ranks: 3, count: 3 })) ? 1 : 2;
      assert.deepEqual(r.writes, [again, again], d.name);
      // 1 warm-up + 4 timed per size, and the checked call of the unstable ones.
      assert.equal(r.calls, 2 * (5 + again - 1), d.name);
    }
  }
});

Deno.test("runSweep() checks min, max, avg and prod exactly, on what the timed calls left where it can", async () => {
  // [ranks, op, writes of the input]: a sum or product grows each call, so the check writes it again;
  // avg on 3 ranks rounds 1/3, so it too; min, max and avg on 4 ranks keep the values.
  const cases: [number, ReduceOp, number][] = [[4, "min", 1], [4, "max", 1], [4, "avg", 1], [3, "avg", 2], [
    4,
    "prod",
    2,
  ]];
  for (const [ranks, op, writes] of cases) {
    const [r] = await sweep(ranks, { collective: "allReduce", sizes: [64], op, iters: 5 });
    assert.equal(r.rows[0].wrong, 0, `${op} on ${ranks} ranks`);
    assert.equal(r.writes[0], writes, `${op} on ${ranks} ranks`);
  }
  const [bf16] = await sweep(2, { collective: "reduceScatter", sizes: [64], dtype: "bfloat16" });
  assert.equal(bf16.rows[0].wrong, 0);
});

Deno.test("runSweep() counts the wrong elements of a broken collective", async () => {
  for (const name of ["allReduce", "allGather"]) {
    const skipped = await sweep(2, { collective: name, sizes: [64], broken: "skip" });
    assert.ok(skipped[0].rows[0].wrong > 0, `${name} never called`);
    const corrupt = await sweep(2, { collective: name, sizes: [64], broken: "corrupt" });
    assert.equal(corrupt[0].rows[0].wrong, 1, `${name} with one element off on rank 0`);
  }
  for (const name of ["allGatherv", "allToAllv", "sendRecv"]) {
    const skipped = await sweep(3, { collective: name, sizes: [256], broken: "skip" });
    assert.ok(skipped[0].rows[0].wrong > 0, `${name} never called`);
    const corrupt = await sweep(3, { collective: name, sizes: [256], broken: "corrupt" });
    assert.equal(corrupt[0].rows[0].wrong, 1, `${name} with one element off on rank 0`);
  }
  // A call that succeeds with the wrong layout: allToAllv's matrix transposed (every rank agrees on it),
  // the ring the other way round.
  for (const name of ["allToAllv", "sendRecv"]) {
    const [r] = await sweep(3, { collective: name, sizes: [256], broken: "swapped" });
    assert.ok(r.rows[0].wrong > 0, `${name} swapped: ${r.rows[0].wrong} wrong`);
  }
  // A fault of the last timed calls only: the check of what they left sees it (a checked call after them
  // would not).
  const late = await sweep(2, { collective: "allToAll", sizes: [64], broken: "late" });
  assert.equal(late[0].rows[0].wrong, 1);
});

Deno.test("runSweep() runs allGatherv, allToAllv and sendRecv on 2 and 4 ranks, every element checked", async () => {
  for (const ranks of [2, 4]) {
    for (const name of ["allGatherv", "allToAllv", "sendRecv"]) {
      for (const dtype of ["float32", "int8"] as DType[]) {
        const results = await sweep(ranks, { collective: name, sizes: [40, 4096, 65540], dtype });
        const rows = results[0].rows;
        const d = collective(name);
        const es = dtype === "int8" ? 1 : 4;
        assert.deepEqual(
          rows.map((r) => [r.bytes, r.wrong]),
          [40, 4096, 65540].map((b) => [d.count(Math.floor(b / es), ranks) * es, 0]),
          `${name} ${dtype} on ${ranks} ranks`,
        );
        assert.deepEqual(rows.map((r) => r.busbwGBs / r.algbwGBs).map((f) => f.toFixed(3)), [
          ...rows.map(() => d.busFactor(ranks).toFixed(3)),
        ]);
      }
    }
  }
});

Deno.test("runSweep() has no sizes for sendRecv on one rank (no peer to send to)", async () => {
  const [r] = await sweep(1, { collective: "sendRecv", sizes: [64, 1024] });
  assert.deepEqual([r.rows, r.calls], [[], 0]);
  assert.equal(collective("sendRecv").minRanks, 2);
});

Deno.test("the v-forms pass every rank's counts, and sendRecv starts its send and receive together", async () => {
  const ranks = 3, count = 12;
  const calls: { rank: number; name: string; args: unknown[] }[] = [];
  const fake = (rank: number, backend = "cpu"): ProcessGroup => {
    let pending = 0;
    // A send or receive resolves only once its pair has been issued: awaiting one before issuing the
    // other would hang, and the test time out.
    const p2p = (name: string) => (...args: unknown[]) => {
      calls.push({ rank, name, args });
      pending++;
      const since = Date.now();
      return new Promise<void>((resolve, reject) => {
        const poll = (): void => {
          if (pending >= 2) resolve();
          else if (Date.now() - since > 2000) reject(new Error(`rank ${rank}: ${name} awaited alone`));
          else setTimeout(poll, 1);
        };
        poll();
      });
    };
    return {
      rank,
      size: ranks,
      backend,
      allGather: (...args: unknown[]) => calls.push({ rank, name: "allGather", args }),
      allToAll: (...args: unknown[]) => calls.push({ rank, name: "allToAll", args }),
      send: p2p("send"),
      recv: p2p("recv"),
      batchIsendIrecv: (ops: unknown[], ...rest: unknown[]) => {
        calls.push({ rank, name: "batchIsendIrecv", args: [ops, ...rest] });
        return ops.map(() => Promise.resolve());
      },
    } as unknown as ProcessGroup;
  };
  const args = { op: "sum", root: 0, dtype: "float32" } as const;
  for (let rank = 0; rank < ranks; rank++) {
    const pg = fake(rank);
    const c = (name: string) => benchContext(collective(name), { rank, ranks, count });
    const v = collective("allGatherv");
    const vin = new Float32Array(v.lengths(c("allGatherv")).input), vout = new Float32Array(count);
    await v.run(pg, vin, vout, args);
    const a = collective("allToAllv");
    await a.run(pg, new Float32Array(count), new Float32Array(count), args);
    const s = collective("sendRecv");
    const sin = new Float32Array(count), sout = new Float32Array(count);
    await s.run(pg, sin, sout, args);
    const [send, recv] = calls.filter((x) => x.rank === rank && (x.name === "send" || x.name === "recv"));
    assert.deepEqual([send.name, send.args[0] === sin, send.args[1]], ["send", true, (rank + 1) % ranks]);
    assert.deepEqual([recv.name, recv.args[0] === sout, recv.args[1]], ["recv", true, (rank + 2) % ranks]);
    // The nccl backend: one group of the same pair.
    await s.run(fake(rank, "nccl"), sin, sout, args);
    const batch = calls.findLast((x) => x.rank === rank && x.name === "batchIsendIrecv");
    assert.deepEqual(batch?.args[0], [
      { op: "send", tensor: sin, peer: (rank + 1) % ranks },
      { op: "recv", tensor: sout, peer: (rank + 2) % ranks },
    ]);
  }
  // allGatherv: the same counts on every rank, summing to the output, each rank's its input's length.
  const gathers = calls.filter((x) => x.name === "allGather");
  const counts = gathers.map((x) => (x.args[2] as { counts: number[] }).counts);
  assert.deepEqual(counts, [[2, 4, 6], [2, 4, 6], [2, 4, 6]]);
  assert.deepEqual(gathers.map((x, r) => (x.args[1] as Float32Array).length === counts[r][r]), [
    true,
    true,
    true,
  ]);
  // The call's own options go through (the dtype).
  assert.equal((gathers[0].args[2] as { dtype: string }).dtype, "float32");
  // allToAllv: what rank i sends rank j is what rank j receives from rank i.
  const alls = calls.filter((x) => x.name === "allToAll").map((x) =>
    x.args[2] as { sendCounts: number[]; recvCounts: number[] }
  );
  for (let i = 0; i < ranks; i++) {
    for (let j = 0; j < ranks; j++) assert.equal(alls[i].sendCounts[j], alls[j].recvCounts[i], `${i} → ${j}`);
    assert.equal(alls[i].sendCounts.reduce((a, b) => a + b, 0), count);
    assert.equal(alls[i].recvCounts.reduce((a, b) => a + b, 0), count);
  }
  assert.notDeepEqual(alls[0].sendCounts, alls[1].sendCounts);
});

Deno.test("bench/mpi.ts knows every collective, with the C library's codes and the right counts", () => {
  // The C source's names, in its enum's order, are COLLECTIVES' names: the codes bench/mpi.ts passes.
  const source = Deno.readTextFileSync(new URL("../../bench/native/mpi_collectives.c", import.meta.url));
  const names = /NAMES\[COLLECTIVES\] = \{([^}]*)\}/.exec(source)?.[1].match(/"(\w+)"/g)?.map((n) =>
    n.slice(1, -1)
  );
  assert.deepEqual(names, COLLECTIVES.map((c) => c.name));
  assert.deepEqual(Object.keys(MPICH_CALLS), COLLECTIVES.map((c) => c.name));
  assert.deepEqual(Object.values(MPICH_CALLS).map((c) => c.code), COLLECTIVES.map((_, i) => i));
  for (const { mpi } of Object.values(MPICH_CALLS)) assert.match(source, new RegExp(`\\b${mpi}\\(`), mpi);
  // nccl-tests' count from a rank's two tensors, as each descriptor's lengths give them (root 0, rank 1).
  for (const d of COLLECTIVES) {
    const count = d.count(24, 4);
    const c = benchContext(d, { rank: 1, ranks: 4, count });
    const { input, output } = d.lengths(c);
    // Gather's non-root output is empty: its count comes from the input.
    assert.equal(wholeCount(d.name, input, d.inPlace ? input : output, 4), count, d.name);
  }
  assert.match(mpichResultsFile("cpu", false, "allReduce"), /\/bench\/results\/collectives-cpu-mpich\.json$/);
  assert.match(mpichResultsFile("cpu", true, "allReduce"), /\/collectives-cpu-pool-mpich\.json$/);
  assert.match(mpichResultsFile("mpi", false, "allReduce"), /\/collectives-mpi\.json$/);
  assert.match(mpichResultsFile("cpu", false, "gather"), /\/collectives-cpu-mpich-gather\.json$/);
  assert.match(mpichResultsFile("mpi", false, "scatter"), /\/collectives-mpi-scatter\.json$/);
});

const ENV_DROP =
  /^(RANK|LOCAL_RANK|WORLD_SIZE|LOCAL_WORLD_SIZE|GROUP_RANK|MASTER_ADDR|MASTER_PORT|PMI_.*|SLURM_.*|OMPI_.*|TORCHELASTIC_.*|DCOMM_.*)$/;

/** Runs bench/collectives.ts; returns its exit code, stdout and the rows it wrote. */
async function cli(args: string[]): Promise<{ code: number; stdout: string; rows: BenchRow[] }> {
  const out = await Deno.makeTempFile({ suffix: ".json" });
  await Deno.remove(out);
  const env = Object.fromEntries(Object.entries(Deno.env.toObject()).filter(([k]) => !ENV_DROP.test(k)));
  try {
    const run = await new Deno.Command(Deno.execPath(), {
      args: ["run", "-A", COLLECTIVES_CLI, ...args, "--out", out],
      env,
      clearEnv: true,
      stdout: "piped",
      stderr: "piped",
      signal: AbortSignal.timeout(120_000),
    }).output();
    const stdout = new TextDecoder().decode(run.stdout);
    const rows = run.success ? JSON.parse(await Deno.readTextFile(out)) as BenchRow[] : [];
    if (!run.success) console.error(stdout, new TextDecoder().decode(run.stderr));
    return { code: run.code, stdout, rows };
  } finally {
    await Deno.remove(out).catch(() => {});
  }
}

/** The table's lines (those that start with a size). */
function tableLines(stdout: string): string[][] {
  return stdout.split("\n").filter((l) => /^\s+\d+\s/.test(l)).map((l) => l.trim().split(/\s+/));
}

Deno.test("bench/collectives.ts --ranks 2 prints one checked row per size and writes them", async () => {
  const { code, stdout, rows } = await cli(
    ["--ranks", "2", "-b", "8", "-e", "1K", "-f", "8", "-n", "5", "-w", "2", "--jit-warmup", "20"],
  );
  assert.equal(code, 0);
  const lines = tableLines(stdout);
  assert.deepEqual(lines.map((l) => [l[0], l[1], l[2], l[3], l[4], l[8]]), [
    ["8", "2", "float32", "sum", "-1", "0"],
    ["64", "16", "float32", "sum", "-1", "0"],
    ["512", "128", "float32", "sum", "-1", "0"],
  ]);
  assert.match(stdout, /# 3 sizes, 0 wrong elements/);
  assert.deepEqual(rows.map((r) => [r.collective, r.ranks, r.bytes, r.count, r.wrong]), [
    ["allReduce", 2, 8, 2, 0],
    ["allReduce", 2, 64, 16, 0],
    ["allReduce", 2, 512, 128, 0],
  ]);
  for (const r of rows) assert.ok(r.timeUs > 0 && r.busbwGBs === r.algbwGBs, "2(n-1)/n = 1 on 2 ranks");
});

Deno.test("bench/collectives.ts runs a rooted collective with -r and -o", async () => {
  const { code, stdout } = await cli(
    [
      "--ranks",
      "2",
      "--collective",
      "reduce",
      "-o",
      "max",
      "-r",
      "1",
      "-b",
      "64",
      "-e",
      "64",
      "-n",
      "3",
      "-w",
      "1",
      "--jit-warmup",
      "0",
    ],
  );
  assert.equal(code, 0);
  assert.deepEqual(tableLines(stdout).map((l) => [l[0], l[3], l[4], l[8]]), [["64", "max", "1", "0"]]);
});

Deno.test("bench/collectives.ts takes -c NAME as --collective, nccl-tests' names, and refuses what cannot run", async () => {
  const { code, stdout, rows } = await cli(
    [
      "--ranks",
      "2",
      "-c",
      "sendrecv",
      "-b",
      "64",
      "-e",
      "4K",
      "-f",
      "64",
      "-n",
      "3",
      "-w",
      "1",
      "--jit-warmup",
      "0",
    ],
  );
  assert.equal(code, 0);
  assert.match(stdout, /# sendRecv on 2 ranks/);
  assert.deepEqual(rows.map((r) => [r.collective, r.bytes, r.wrong]), [["sendRecv", 64, 0], [
    "sendRecv",
    4096,
    0,
  ]]);
  for (const r of rows) assert.equal(r.busbwGBs, r.algbwGBs, "sendrecv_perf's bus factor 1");
  const fails = async (args: string[], message: RegExp): Promise<void> => {
    const run = await new Deno.Command(Deno.execPath(), {
      args: ["run", "-A", COLLECTIVES_CLI, ...args],
      stdout: "piped",
      stderr: "piped",
    }).output();
    assert.notEqual(run.code, 0, args.join(" "));
    assert.match(new TextDecoder().decode(run.stderr), message);
  };
  await fails(
    ["-c", "gatherv"],
    /Invalid -c: expected 0, 1 \(nccl-tests' check\) or a collective's name, found "gatherv"/,
  );
  await fails(
    ["-c", "alltoallv", "--collective", "gather"],
    /-c alltoallv and --collective gather name different/,
  );
  await fails(
    ["--ranks", "1", "--collective", "sendrecv"],
    /Invalid --ranks: sendRecv needs at least 2 ranks, found 1/,
  );
});

const noMpi = hasCommand("mpiexec") && hasCommand("mpicc")
  ? undefined
  : "mpiexec or mpicc not found (apt-get install mpich libmpich-dev)";

gatedTest(
  "bench/collectives.ts --backend mpi runs other collectives under mpiexec",
  { missing: noMpi },
  async () => {
    const { code, stdout, rows } = await cli(
      [
        "--backend",
        "mpi",
        "--ranks",
        "2",
        "--collective",
        "allGather",
        "-b",
        "8",
        "-e",
        "64",
        "-f",
        "8",
        "-n",
        "3",
        "-w",
        "1",
        "--jit-warmup",
        "0",
      ],
    );
    assert.equal(code, 0);
    assert.deepEqual(tableLines(stdout).map((l) => [l[0], l[3], l[8]]), [["8", "none", "0"], [
      "64",
      "none",
      "0",
    ]]);
    assert.deepEqual(rows.map((r) => [r.transport, r.algorithm, r.wrong]), [["mpi", "mpi", 0], [
      "mpi",
      "mpi",
      0,
    ]]);
  },
);

gatedTest(
  "bench/collectives.ts --peer mpi puts dcomm and MPICH in one table",
  { missing: noMpi },
  async () => {
    const { code, stdout, rows } = await cli(
      [
        "--ranks",
        "2",
        "--peer",
        "mpi",
        "-b",
        "8",
        "-e",
        "64",
        "-f",
        "8",
        "-n",
        "3",
        "-w",
        "1",
        "--trials",
        "1",
        "--rounds",
        "1",
        "--jit-warmup",
        "10",
      ],
    );
    assert.equal(code, 0);
    const lines = tableLines(stdout);
    // bench/mpi.ts's table, then the side-by-side one: 3 groups of time algbw busbw #wrong.
    assert.equal(lines.length, 4);
    for (const l of lines) assert.deepEqual([l[8], l[12], l[16]], ["0", "0", "0"]);
    assert.deepEqual(rows.map((r) => `${r.runner}:${r.bytes}:${r.wrong}`).sort(), [
      "c-inproc:64:0",
      "c-inproc:8:0",
      "c:64:0",
      "c:8:0",
      "dcomm:64:0",
      "dcomm:8:0",
    ]);
  },
);

gatedTest(
  "bench/collectives.ts --peer mpi --collective gather runs MPICH's MPI_Gather beside dcomm, rooted",
  { missing: noMpi },
  async () => {
    const { code, stdout, rows } = await cli(
      [
        ...["--ranks", "2", "--peer", "mpi", "--collective", "gather", "-r", "1", "-d", "float"],
        ...["-b", "8", "-e", "64", "-f", "8", "-n", "3", "-w", "1"],
        ...["--trials", "1", "--rounds", "2", "--jit-warmup", "10"],
      ],
    );
    assert.equal(code, 0);
    assert.match(stdout, /# gather, float32, root 1, 2 ranks/);
    assert.match(stdout, /MPI_Gather loop/);
    const lines = tableLines(stdout);
    // bench/mpi.ts's table, then the side-by-side one; no op, root 1, no wrong element in any group.
    assert.equal(lines.length, 4);
    for (const l of lines) {
      assert.deepEqual([l[2], l[3], l[4], l[8], l[12], l[16]], ["float32", "none", "1", "0", "0", "0"]);
    }
    // The paired ratio: 2 rounds, so 2 pairs per size.
    assert.deepEqual(lines.slice(0, 2).map((l) => l[19]), ["(2)", "(2)"]);
    assert.deepEqual(rows.map((r) => `${r.runner}:${r.collective}:${r.bytes}:${r.root}:${r.wrong}`).sort(), [
      "c-inproc:gather:64:1:0",
      "c-inproc:gather:8:1:0",
      "c:gather:64:1:0",
      "c:gather:8:1:0",
      "dcomm:gather:64:1:0",
      "dcomm:gather:8:1:0",
    ]);
    for (const r of rows) {
      assert.ok(r.timeUs > 0 && Math.abs(r.busbwGBs - r.algbwGBs / 2) < 1e-9, `${r.runner}: (n-1)/n = 1/2`);
    }
    const dcomm = rows.filter((r) => r.runner === "dcomm") as (BenchRow & { vsBaselinePaired?: number })[];
    for (const r of dcomm) assert.ok((r.vsBaselinePaired ?? 0) > 0, "a paired ratio per size");
  },
);

gatedTest(
  "bench/collectives.ts --peer mpi runs MPI_Allgatherv, MPI_Alltoallv and MPI_Sendrecv beside dcomm",
  { missing: noMpi },
  async () => {
    // Lower-case and nccl-tests' names, by --collective and by -c.
    for (
      const [flag, name, call, ranks] of [
        ["--collective", "allgatherv", "MPI_Allgatherv", "2"],
        ["-c", "alltoallv", "MPI_Alltoallv", "3"],
        ["--collective", "sendrecv", "MPI_Sendrecv", "2"],
      ]
    ) {
      const { code, stdout, rows } = await cli(
        [
          ...["--ranks", ranks, "--peer", "mpi", flag, name, "-d", "float"],
          ...["-b", "64", "-e", "64K", "-f", "32", "-n", "3", "-w", "1"],
          ...["--trials", "1", "--rounds", "1", "--jit-warmup", "10"],
        ],
      );
      assert.equal(code, 0, name);
      assert.match(stdout, new RegExp(`${call} loop`), name);
      const lines = tableLines(stdout);
      // bench/mpi.ts's table, then the side-by-side one; no wrong element in any group.
      assert.equal(lines.length, 6, name);
      for (const l of lines) assert.deepEqual([l[3], l[8], l[12], l[16]], ["none", "0", "0", "0"], name);
      const d = findCollective(name);
      const counts = [16, 512, 16384].map((e) => d.count(e, Number(ranks)));
      assert.deepEqual(
        rows.map((r) => `${r.runner}:${r.collective}:${r.count}:${r.wrong}`).sort(),
        ["c", "c-inproc", "dcomm"].flatMap((runner) => counts.map((c) => `${runner}:${d.name}:${c}:0`))
          .sort(),
        name,
      );
      for (const r of rows) {
        const factor = d.busFactor(Number(ranks));
        assert.ok(
          Math.abs(r.busbwGBs - r.algbwGBs * factor) < 1e-9,
          `${name} ${r.runner}: bus factor ${factor}`,
        );
      }
    }
  },
);

gatedTest(
  "bench/collectives.ts --backend mpi runs the v-forms and sendRecv under mpiexec",
  { missing: noMpi },
  async () => {
    for (const name of ["allGatherv", "allToAllv", "sendRecv"]) {
      const { code, rows } = await cli(
        [
          ...["--backend", "mpi", "--ranks", "3", "--collective", name],
          ...["-b", "8", "-e", "4K", "-f", "512", "-n", "3", "-w", "1", "--jit-warmup", "0"],
        ],
      );
      assert.equal(code, 0, name);
      assert.deepEqual(
        rows.map((r) => [r.collective, r.transport, r.count, r.wrong]),
        [2, 1024].map((e) => [name, "mpi", collective(name).count(e, 3), 0]),
      );
    }
  },
);

Deno.test("parseNcclArgs() takes nccl-tests' flags and refuses unknown collectives before NCCL starts", () => {
  const flags = parseNcclArgs([
    "-b",
    "1K",
    "-e",
    "1M",
    "-f",
    "4",
    "-o",
    "max",
    "-d",
    "half",
    "-r",
    "1",
    "--collectives",
    "allGather,reduce",
  ]);
  assert.deepEqual(flags.bench, {
    minBytes: 1024,
    maxBytes: 1 << 20,
    stepFactor: 4,
    iters: 20,
    warmup: 5,
    check: true,
    op: "max",
    dtype: "float16",
    root: 1,
    collectives: ["allGather", "reduce"],
  });
  assert.deepEqual(parseNcclArgs(["--quick"]).bench.maxBytes, 64 << 20);
  assert.throws(() => parseNcclArgs(["--collectives", "allgather"]), /Unknown collective/);
  assert.throws(() => parseNcclArgs(["-n", "0"]), /Invalid -n/);
  assert.throws(() => parseNcclArgs(["-f", "1"]), /Invalid -f/);
});
