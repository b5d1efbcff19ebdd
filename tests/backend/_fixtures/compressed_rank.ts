/**
 * A rank of the compressed all-reduce tests, run by `spawnThreads` (`main`) or as a process of the
 * launcher, printing `RESULT {json}`. Every rank's gradients are a seeded function of (rank, step, case),
 * so each rank computes all of them and checks its result against float64 references:
 *
 * - int8: every element within the bound derived in `collectives/compressed_int8.ts`: (1/n)·Σ_i s_i/2 of
 *   the first quantisation plus s'/2 of the second, s = absmax/127 of the element's block, s' bounded by
 *   (absmax of the average's block + the first error)/127, plus float32 rounding (2^-20 of the scales);
 * - sign, top-k, PowerSGD with error feedback: the identity Σ_t out_t + mean_i e_i (+ the server
 *   residual) = Σ_t avg_t after T steps, to float32 rounding (the residuals summed over the ranks by a
 *   plain all-reduce); without error feedback the same sum is reported, to show what it loses;
 * - top-k without error feedback: each element within (1/n)·Σ over ranks that did not pick it of |g|;
 * - PowerSGD: the uncompressed elements within float32 rounding of the average, each matrix no farther
 *   from the average than the average's own norm (the result is a projection of it);
 * - every codec: the same bits on every rank (a hash per step), and the bytes each report counts.
 *
 * @module
 */
import { init } from "../../../backend/init.ts";
import type { Compression, ProcessGroup } from "../../../backend/process_group.ts";
import type { WorkReport } from "../../../backend/work.ts";
import { MismatchError } from "../../../core/errors.ts";
import { applyHostOf } from "../../_util/launched.ts";

/** One case of the tests. */
interface Case {
  name: string;
  count: number;
  steps: number;
  op: "avg" | "sum";
  make: (count: number) => Compression;
  /** For PowerSGD: the matrices. */
  matrices?: { offset: number; rows: number; cols: number }[];
  /** Compressed between hosts only (`interHost`): residuals are in sums of hosts, divided by n here. */
  interHost?: boolean;
}

const MATRICES = [{ offset: 10, rows: 60, cols: 40 }, { offset: 2410, rows: 33, cols: 7 }];

function qInit(length: number): Float32Array {
  const q = new Float32Array(length);
  for (let i = 0; i < length; i++) q[i] = Math.sin(i * 12.9898 + 1) * 0.5; // the same on every rank
  return q;
}

const CASES: Case[] = [
  { name: "int8 b256", count: 10_000, steps: 2, op: "avg", make: () => ({ codec: "int8", blockSize: 256 }) },
  { name: "int8 b7 sum", count: 1_003, steps: 1, op: "sum", make: () => ({ codec: "int8", blockSize: 7 }) },
  { name: "int8 big", count: 700_001, steps: 1, op: "avg", make: () => ({ codec: "int8" }) },
  {
    name: "sign ef",
    count: 5_000,
    steps: 6,
    op: "avg",
    make: (n) => ({
      codec: "sign",
      blockSize: 64,
      residual: new Float32Array(n),
      serverResidual: new Float32Array(n),
    }),
  },
  { name: "sign none", count: 5_000, steps: 6, op: "avg", make: () => ({ codec: "sign", blockSize: 64 }) },
  {
    name: "sign big",
    count: 1_000_003,
    steps: 2,
    op: "avg",
    make: (n) => ({ codec: "sign", residual: new Float32Array(n), serverResidual: new Float32Array(n) }),
  },
  {
    name: "topk ef",
    count: 4_000,
    steps: 6,
    op: "avg",
    make: (n) => ({ codec: "topk", k: 40, residual: new Float32Array(n) }),
  },
  { name: "topk none", count: 4_000, steps: 3, op: "sum", make: () => ({ codec: "topk", k: 40 }) },
  {
    name: "powersgd ef",
    count: 2_700,
    steps: 6,
    op: "avg",
    matrices: MATRICES,
    make: (n) => ({
      codec: "powersgd",
      rank: 2,
      matrices: MATRICES,
      q: qInit(40 * 2 + 7 * 2),
      residual: new Float32Array(n),
    }),
  },
  {
    name: "powersgd none",
    count: 2_700,
    steps: 2,
    op: "avg",
    matrices: MATRICES,
    make: () => ({ codec: "powersgd", rank: 2, matrices: MATRICES, q: qInit(40 * 2 + 7 * 2) }),
  },
];

/** A seeded value in about -2..2, the same on every rank for (rank, step, case, j). */
function gradient(rank: number, step: number, seed: number, count: number): Float32Array {
  const g = new Float32Array(count);
  let s = (rank * 7919 + step * 104_729 + seed * 1_299_709 + 1) >>> 0;
  for (let j = 0; j < count; j++) {
    s = (Math.imul(s, 1_664_525) + 1_013_904_223) >>> 0;
    // Mostly small values with a few large ones, as gradients are; and a smooth part shared by the ranks,
    // so that the average has structure for the low-rank and top-k codecs to find.
    const u = s / 2 ** 32 - 0.5;
    g[j] = Math.fround(u * (u > 0.45 || u < -0.45 ? 8 : 1) + Math.sin(j * 0.01 + step));
  }
  return g;
}

function hash(a: Float32Array): number {
  const b = new Uint8Array(a.buffer, a.byteOffset, a.byteLength);
  let h = 2166136261;
  for (let i = 0; i < b.length; i++) h = Math.imul(h ^ b[i], 16777619) >>> 0;
  return h;
}

/** What one case found on this rank. */
export interface CaseResult {
  name: string;
  failures: string[];
  hashes: number[];
  reports: { bytes: number; bytesSent: number; algorithm: string; compression?: string }[];
  /** max |Σ out + residuals − Σ avg| / (1 + max |Σ avg|), for the codecs with error feedback. */
  identity?: number;
}

async function runCase(pg: ProcessGroup, c: Case, seed: number): Promise<CaseResult> {
  const n = pg.size, count = c.count;
  const failures: string[] = [];
  const hashes: number[] = [];
  const reports: CaseResult["reports"] = [];
  const compression = c.make(count);
  const sumOut = new Float64Array(count), sumAvg = new Float64Array(count);
  const codec = compression.codec;
  for (let step = 0; step < c.steps; step++) {
    const all = Array.from({ length: n }, (_, r) => gradient(r, step, seed, count));
    const avg = new Float64Array(count);
    for (const g of all) for (let j = 0; j < count; j++) avg[j] += g[j];
    if (c.op === "avg") { for (let j = 0; j < count; j++) avg[j] /= n; }
    const t = all[pg.rank].slice();
    const report = await pg.allReduce(t, { op: c.op, compression, timeoutMs: 30_000 }).wait() as WorkReport;
    reports.push({
      bytes: report.bytes,
      bytesSent: report.bytesSent,
      algorithm: report.algorithm,
      compression: report.compression,
    });
    hashes.push(hash(t));
    for (let j = 0; j < count; j++) {
      sumOut[j] += t[j];
      sumAvg[j] += avg[j];
    }
    const scale = c.op === "avg" ? 1 / n : 1;
    if (codec === "int8") checkInt8(all, avg, t, compression.blockSize ?? 256, scale, failures);
    if (codec === "topk" && compression.residual === undefined) {
      checkTopK(all, avg, t, compression.k as number, scale, failures);
    }
    if (codec === "powersgd") checkPowerSgd(avg, t, c.matrices ?? [], failures);
    if (failures.length > 5) break;
  }
  let identity: number | undefined;
  if (codec !== "int8") {
    // Σ out + mean_i e_i + server residual = Σ avg (sum: Σ_i e_i).
    const left = Float64Array.from(sumOut);
    const add = async (a: Float32Array | undefined, divide: boolean): Promise<void> => {
      const total = a ? a.slice() : new Float32Array(count);
      await pg.allReduce(total, { op: "sum", timeoutMs: 30_000 });
      const factor = divide && c.op === "avg" ? 1 / n : 1;
      for (let j = 0; j < count; j++) left[j] += total[j] * factor;
    };
    await add(compression.residual, true);
    if (codec === "sign" && compression.serverResidual) {
      // Each rank keeps the server residual of its own chunk; the rest of its array stays zero. Between
      // hosts only, the codec sums (the first ranks' host sums) and the result is divided by n afterwards.
      await add(compression.serverResidual, c.interHost === true);
    }
    let worst = 0, size = 0;
    for (let j = 0; j < count; j++) {
      worst = Math.max(worst, Math.abs(left[j] - sumAvg[j]));
      size = Math.max(size, Math.abs(sumAvg[j]));
    }
    identity = worst / (1 + size);
  }
  return { name: c.name, failures, hashes, reports, identity };
}

function checkInt8(
  all: Float32Array[],
  avg: Float64Array,
  t: Float32Array,
  block: number,
  scale: number,
  failures: string[],
): void {
  const count = t.length;
  for (let lo = 0; lo < count; lo += block) {
    const hi = Math.min(count, lo + block);
    let first = 0, scales = 0, avgMax = 0;
    for (const g of all) {
      let m = 0;
      for (let j = lo; j < hi; j++) m = Math.max(m, Math.abs(g[j]));
      const s = Math.fround(m / 127);
      first += (s / 2) * scale;
      scales += s * scale;
    }
    for (let j = lo; j < hi; j++) avgMax = Math.max(avgMax, Math.abs(avg[j]));
    const second = (avgMax + first) / 127 / 2;
    const bound = first + second + 2 ** -20 * (scales + avgMax) * 127;
    for (let j = lo; j < hi; j++) {
      const err = Math.abs(t[j] - avg[j]);
      if (!(err <= bound)) {
        failures.push(`int8 element ${j}: ${t[j]} vs ${avg[j]}, off by ${err} > bound ${bound}`);
        return;
      }
    }
  }
}

function checkTopK(
  all: Float32Array[],
  avg: Float64Array,
  t: Float32Array,
  k: number,
  scale: number,
  failures: string[],
): void {
  const count = t.length;
  // Rank i sent its k largest |g|; element j misses |g_i[j]| where i did not pick it (≤ its k-th).
  const bound = new Float64Array(count);
  for (const g of all) {
    const sorted = Array.from(g, Math.abs).sort((a, b) => b - a);
    const kth = sorted[k - 1];
    for (let j = 0; j < count; j++) if (Math.abs(g[j]) <= kth) bound[j] += Math.abs(g[j]) * scale;
  }
  for (let j = 0; j < count; j++) {
    const err = Math.abs(t[j] - avg[j]);
    if (!(err <= bound[j] + 1e-5 * (1 + Math.abs(avg[j])))) {
      failures.push(`topk element ${j}: ${t[j]} vs ${avg[j]}, off by ${err} > bound ${bound[j]}`);
      return;
    }
  }
}

function checkPowerSgd(
  avg: Float64Array,
  t: Float32Array,
  matrices: { offset: number; rows: number; cols: number }[],
  failures: string[],
): void {
  const inMatrix = new Uint8Array(t.length);
  for (const m of matrices) {
    let err = 0, norm = 0;
    for (let j = m.offset; j < m.offset + m.rows * m.cols; j++) {
      inMatrix[j] = 1;
      err += (t[j] - avg[j]) ** 2;
      norm += avg[j] ** 2;
    }
    // Without error feedback M is the gradient and the result its projection; with it, M includes the
    // residual, so the check is looser there: the projection of M is within ‖M‖, and ‖e‖ ≲ ‖avg‖.
    if (!(Math.sqrt(err) <= 2 * Math.sqrt(norm) + 1e-4)) {
      failures.push(
        `powersgd matrix at ${m.offset}: off by ${Math.sqrt(err)}, the average's norm ${Math.sqrt(norm)}`,
      );
    }
  }
  for (let j = 0; j < t.length; j++) {
    if (!inMatrix[j] && !(Math.abs(t[j] - avg[j]) <= 1e-6 * (1 + Math.abs(avg[j])))) {
      failures.push(`powersgd uncompressed element ${j}: ${t[j]} vs ${avg[j]}`);
      return;
    }
  }
}

/** The cases again, compressed between hosts only (run on hosts told apart by DCOMM_HOST_ID). */
const INTER_HOST: Case[] = CASES.filter((c) => c.name.endsWith(" ef")).map((c) => ({
  ...c,
  name: `${c.name} interhost`,
  interHost: true,
  make: (n: number) => ({ ...c.make(n), interHost: true }),
}));

/** Runs every case on this rank (or the scenario in `args`). */
export async function main(pg: ProcessGroup, ctx?: { args: unknown }): Promise<unknown> {
  const scenario = (ctx?.args as { scenario?: string } | undefined)?.scenario ?? "values";
  if (scenario === "mismatch") {
    // Rank 1 compresses with int8 where the others use 1-bit.
    try {
      const t = new Float32Array(10_000).fill(1);
      const compression: Compression = pg.rank === 1
        ? { codec: "int8", blockSize: 256 }
        : { codec: "sign", blockSize: 256, residual: new Float32Array(t.length) };
      await pg.allReduce(t, { op: "avg", compression, timeoutMs: 20_000 });
      return { caught: "no error" };
    } catch (e) {
      return {
        caught: `${(e as Error).name}: ${(e as Error).message}`,
        mismatch: e instanceof MismatchError,
      };
    }
  }
  const results: CaseResult[] = [];
  const cases = scenario === "interhost" ? INTER_HOST : CASES;
  for (const [i, c] of cases.entries()) results.push(await runCase(pg, c, i));
  return results;
}

if (import.meta.main) {
  // DCOMM_HOST_OF="a,a,b,b": rank r's host, for the between-hosts cases.
  const hosts = applyHostOf();
  await using pg = await init();
  console.log(
    `RESULT ${JSON.stringify(await main(pg, { args: { scenario: hosts ? "interhost" : "values" } }))}`,
  );
}
