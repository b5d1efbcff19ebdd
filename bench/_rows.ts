/**
 * The one row of dcomm's collective benchmarks ({@linkcode BenchRow}, what `bench/results/collectives-*.json`
 * hold), the one place bandwidths are computed ({@linkcode makeRow}: nccl-tests' algbw = bytes / time and
 * busbw = algbw × the collective's bus factor, `doc/PERFORMANCE.md`), nccl-tests' table
 * (`size count type redop root | time algbw busbw #wrong`, with a group of measured columns per
 * implementation side by side) and the rows' files.
 *
 * @module
 */
import type { DType } from "../core/dtype.ts";
import { dtypeSize } from "../core/dtype.ts";
import { type CollectiveDescriptor, COLLECTIVES } from "./_descriptors.ts";

/** One row of a benchmark: `bench/results/collectives-*.json` hold arrays of them. */
export interface BenchRow {
  /** The collective. */
  collective: string;
  /** The algorithm asked for (`"auto"`, a name), or `"mpi"`/`"nccl"` where the library chooses. */
  algorithm: string;
  /** The transport (`"shm"`, `"tcp"`, `"mpi"`, `"nccl"`). */
  transport: string;
  /** The world size. */
  ranks: number;
  /** Bytes of `count` elements. */
  bytes: number;
  /** nccl-tests' count: elements of the whole buffer. */
  count: number;
  /** The element type. */
  dtype: string;
  /** The reduction, or `"none"`. */
  redop: string;
  /** The root, or -1. */
  root: number;
  /** Microseconds per call: the slowest rank's mean over the timed calls (the fastest round's). */
  timeUs: number;
  /** bytes / time, in GB/s. */
  algbwGBs: number;
  /** algbw × the bus factor, in GB/s. */
  busbwGBs: number;
  /** Wrong elements summed over ranks, or -1 when not checked. */
  wrong: number;
  /** Who ran it beside peers: `"dcomm"` for the group, else the peer's name (`PeerCall.name`, `_harness.ts`). */
  runner?: string;
  /** Every round's microseconds per call (the slowest rank's), in the order they ran. */
  roundsUs?: number[];
}

/** The fields of a row besides the measurement. */
export interface RowLabels {
  /** The algorithm label. */
  algorithm: string;
  /** The transport label. */
  transport: string;
  /** The world size. */
  ranks: number;
  /** The element type. */
  dtype: string;
  /** The op (printed only for collectives that reduce). @default "sum" */
  op?: string;
  /** The root (printed only for rooted collectives). @default 0 */
  root?: number;
  /** The runner, when not the group alone. */
  runner?: string;
}

/**
 * A row from a measurement: the one place the bandwidths are computed (nccl-tests' algbw and busbw).
 *
 * @param descriptor The collective.
 * @param count nccl-tests' count.
 * @param timeUs Microseconds per call.
 * @param wrong Wrong elements (-1: not checked).
 * @param labels Algorithm, transport, world, dtype, op, root.
 * @returns The row.
 *
 * @example busbw of a 2-rank all-reduce of 1 MB in 100 µs
 * ```ts
 * import { collective } from "./_descriptors.ts";
 * import { makeRow } from "./_rows.ts";
 * import assert from "node:assert/strict";
 * const row = makeRow(collective("allReduce"), 250_000, 100, 0, {
 *   algorithm: "auto", transport: "shm", ranks: 2, dtype: "float32",
 * });
 * assert.equal(row.bytes, 1_000_000);
 * assert.equal(row.algbwGBs, 10);
 * assert.equal(row.busbwGBs, 10); // 2(n − 1)/n = 1
 * ```
 */
export function makeRow(
  descriptor: CollectiveDescriptor,
  count: number,
  timeUs: number,
  wrong: number,
  labels: RowLabels,
): BenchRow {
  const bytes = count * dtypeSize(labels.dtype as DType);
  const algbw = bytes / (timeUs * 1e-6) / 1e9;
  return {
    collective: descriptor.name,
    algorithm: labels.algorithm,
    transport: labels.transport,
    ranks: labels.ranks,
    bytes,
    count,
    dtype: labels.dtype,
    redop: descriptor.reduces ? labels.op ?? "sum" : "none",
    root: descriptor.rooted ? labels.root ?? 0 : -1,
    timeUs,
    algbwGBs: algbw,
    busbwGBs: algbw * descriptor.busFactor(labels.ranks),
    wrong,
    ...(labels.runner === undefined ? {} : { runner: labels.runner }),
  };
}

/** A column after the measured groups (ratios, a peer's numbers): its title and unit, and its width. */
export interface ExtraColumn {
  /** The header's first line. */
  readonly title: string;
  /** The header's second line. @default "" */
  readonly unit?: string;
  /** Characters, at least the title's. */
  readonly width: number;
}

const LEAD = [12, 12, 8, 6, 6];
const GROUP = [9, 7, 7, 6];

function joinCells(cells: readonly string[], widths: readonly number[]): string {
  return cells.map((c, i) => c.padStart(widths[i])).join("  ");
}

/**
 * nccl-tests' table header: `size count type redop root`, then `time algbw busbw #wrong` once per measured
 * group (titled above when `groups` names them, as nccl-tests' "out-of-place" and "in-place"), then the
 * extra columns.
 *
 * @param groups The groups' titles; empty for one untitled group. @default []
 * @param extras Columns after the groups. @default []
 * @returns The header lines.
 */
export function tableHeader(groups: readonly string[] = [], extras: readonly ExtraColumn[] = []): string {
  const n = Math.max(1, groups.length);
  const lines: string[] = [];
  if (groups.length > 0) {
    // Each title centred over its group, as nccl-tests' "out-of-place" and "in-place".
    const width = GROUP.reduce((a, b) => a + b + 2, 0) - 2;
    const centred = groups.map((g) => g.padStart(Math.floor((width + g.length) / 2)).padEnd(width));
    lines.push(["", ...centred].join("  ").replace(/^/, " ".repeat(LEAD.reduce((a, b) => a + b + 2, 0) - 2)));
  }
  const titles = [
    joinCells(["size", "count", "type", "redop", "root"], LEAD),
    ...Array.from({ length: n }, () => joinCells(["time", "algbw", "busbw", "#wrong"], GROUP)),
    ...extras.map((e) => e.title.padStart(e.width)),
  ];
  const units = [
    joinCells(["(B)", "(elements)", "", "", ""], LEAD),
    ...Array.from({ length: n }, () => joinCells(["(us)", "(GB/s)", "(GB/s)", ""], GROUP)),
    ...extras.map((e) => (e.unit ?? "").padStart(e.width)),
  ];
  lines.push(titles.join("  "), units.join("  "));
  return lines.map((l) => ("#" + l.slice(1)).trimEnd()).join("\n");
}

/**
 * One line of the table: the first row's size columns, then each group's measurement (`–` for a group
 * without a row at this size; `N/A` for #wrong when not checked), then the extra cells.
 *
 * @param rows One row per group, of the same size (the first must be present).
 * @param extras The extra columns' cells.
 * @param widths The extra columns' widths. @default the cells' own
 * @returns The line.
 * @throws {RangeError} If the first row is missing.
 */
export function tableRow(
  rows: readonly (BenchRow | undefined)[],
  extras: readonly string[] = [],
  widths: readonly number[] = [],
): string {
  const lead = rows[0];
  if (!lead) throw new RangeError("Cannot format a table line: expected the first group's row, found none");
  const cells = [
    joinCells(
      [String(lead.bytes), String(lead.count), lead.dtype, lead.redop, String(lead.root)],
      LEAD,
    ),
    ...rows.map((r) =>
      joinCells(
        r
          ? [
            r.timeUs.toFixed(2),
            r.algbwGBs.toFixed(2),
            r.busbwGBs.toFixed(2),
            r.wrong < 0 ? "N/A" : String(r.wrong),
          ]
          : ["–", "–", "–", "–"],
        GROUP,
      )
    ),
    ...extras.map((e, i) => e.padStart(widths[i] ?? 0)),
  ];
  return cells.join("  ");
}

/** The identity of a row in a results file: a new run replaces rows of the same identity. */
export function rowKey(row: Partial<BenchRow>): string {
  const descriptor = COLLECTIVES.find((c) => c.name === row.collective);
  // Rows written before the harness carried no redop/root: all-reduce sums then.
  const redop = row.redop ?? (descriptor?.reduces === false ? "none" : "sum");
  const root = row.root ?? (descriptor?.rooted ? 0 : -1);
  return [
    row.collective,
    row.algorithm,
    row.transport,
    row.ranks,
    row.dtype,
    redop,
    root,
    row.bytes,
    row.runner ?? "",
  ].join("|");
}

/**
 * Merges rows into a results file (a JSON array): rows of this run replace those of the same
 * {@linkcode rowKey}, the others stay (other collectives, transports, world sizes).
 *
 * @param file The JSON file (created if missing).
 * @param rows This run's rows.
 * @throws {SyntaxError} If the file holds something other than JSON.
 */
export function mergeRows(file: string, rows: readonly BenchRow[]): void {
  let existing: Partial<BenchRow>[] = [];
  try {
    const parsed = JSON.parse(Deno.readTextFileSync(file));
    if (Array.isArray(parsed)) existing = parsed;
  } catch (e) {
    if (!(e instanceof Deno.errors.NotFound)) throw e;
  }
  const mine = new Set(rows.map(rowKey));
  const merged = [...existing.filter((r) => !mine.has(rowKey(r))), ...rows];
  Deno.writeTextFileSync(file, JSON.stringify(merged, null, 2) + "\n");
}

/**
 * Parses a size such as `8`, `64K`, `1M`, `2G`, `1.5M` (powers of 1024, as nccl-tests; a trailing `B` is
 * allowed), rounded down to whole bytes.
 *
 * @param text The size.
 * @returns Bytes.
 * @throws {RangeError} If `text` is not a size.
 */
export function parseBytes(text: string): number {
  const m = /^(\d+(?:\.\d+)?)([KMG]?)B?$/i.exec(text.trim());
  if (!m) {
    throw new RangeError(
      `Invalid size: expected a number with an optional K, M or G suffix, found "${text}"`,
    );
  }
  const scale = { "": 1, K: 1024, M: 1024 ** 2, G: 1024 ** 3 }[m[2].toUpperCase() as "" | "K" | "M" | "G"];
  return Math.floor(Number(m[1]) * scale);
}

/** nccl-tests' dtype names (`-d float`), beside dcomm's own. */
export const NCCL_TESTS_DTYPES: Readonly<Record<string, DType>> = {
  float: "float32",
  half: "float16",
  double: "float64",
  bfloat16: "bfloat16",
  int8: "int8",
  uint8: "uint8",
  int32: "int32",
  uint32: "uint32",
  int64: "int64",
  uint64: "uint64",
};
