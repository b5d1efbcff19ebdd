/**
 * What every backend's part of `deno task bench:collectives` shares: the configuration, the row, the bus
 * bandwidth factors of nccl-tests, and the table.
 *
 * @module
 */
import type { DType, ReduceOp } from "../core/dtype.ts";

/** The collectives the benchmark runs. */
export type BenchCollective =
  | "allReduce"
  | "broadcast"
  | "reduce"
  | "allGather"
  | "reduceScatter"
  | "allToAll";

/** One benchmark run. */
export interface BenchConfig {
  collective: BenchCollective;
  minBytes: number;
  maxBytes: number;
  factor: number;
  iters: number;
  warmup: number;
  check: boolean;
  op: ReduceOp;
  dtype: DType;
  root: number;
  algorithm: string;
  transport: string;
  checkCalls: boolean;
}

/** A row of `bench/results/collectives-<backend>.json`. */
export interface BenchRow {
  collective: string;
  algorithm: string;
  transport: string;
  ranks: number;
  bytes: number;
  dtype: string;
  timeUs: number;
  algbwGBs: number;
  busbwGBs: number;
  wrong: number;
}

/**
 * busbw = algbw × factor, as nccl-tests defines it (PERFORMANCE.md): the bandwidth each rank's link
 * would need, which makes algorithms and world sizes comparable with the hardware's peak.
 */
export const BUS_FACTOR: Readonly<Record<BenchCollective, (n: number) => number>> = {
  allReduce: (n) => (2 * (n - 1)) / n,
  reduceScatter: (n) => (n - 1) / n,
  allGather: (n) => (n - 1) / n,
  allToAll: (n) => (n - 1) / n,
  broadcast: () => 1,
  reduce: () => 1,
};

/** The table's header, nccl-tests style. */
export function formatHeader(config: BenchConfig, ranks: number): string {
  return [
    `# ${config.collective} on ${ranks} ranks, algorithm ${config.algorithm}, transport ${config.transport}, ` +
    `${config.iters} iterations after ${config.warmup} warm-up, check ${config.check ? "on" : "off"}`,
    "#",
    "#       size         count      type   redop    root       time   algbw   busbw #wrong",
    "#        (B)    (elements)                                  (us)  (GB/s)  (GB/s)       ",
  ].join("\n");
}

/** One row of the table. */
export function formatRow(row: BenchRow, config: BenchConfig, count: number): string {
  const rooted = config.collective === "broadcast" || config.collective === "reduce";
  const reduces = config.collective === "allReduce" || config.collective === "reduce" ||
    config.collective === "reduceScatter";
  return [
    String(row.bytes).padStart(12),
    String(count).padStart(13),
    row.dtype.padStart(9),
    (reduces ? config.op : "none").padStart(7),
    String(rooted ? config.root : -1).padStart(7),
    row.timeUs.toFixed(1).padStart(10),
    row.algbwGBs.toFixed(2).padStart(7),
    row.busbwGBs.toFixed(2).padStart(7),
    String(row.wrong).padStart(6),
  ].join(" ");
}

/** Parses a size such as `8`, `64K`, `1M`, `2G` (powers of 1024, as nccl-tests). */
export function parseBytes(text: string): number {
  const m = /^(\d+)([KMG]?)B?$/i.exec(text.trim());
  if (!m) {
    throw new RangeError(
      `Invalid size: expected a number with an optional K, M or G suffix, found "${text}"`,
    );
  }
  const scale = { "": 1, K: 1024, M: 1024 ** 2, G: 1024 ** 3 }[m[2].toUpperCase() as "" | "K" | "M" | "G"];
  return Number(m[1]) * scale;
}
