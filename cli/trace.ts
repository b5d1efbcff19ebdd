/**
 * The flight recorder's analyzer: `deno run -A jsr:@dcomm/dcomm/trace analyze DIR` (or
 * `deno task trace analyze DIR`) reads every rank's dump in `DIR` (`rank-<n>.json`, written to
 * `DCOMM_TRACE_DIR` on a timeout, a mismatch, a peer's failure, SIGUSR1 or `pg.dump()`) and says in plain
 * words which ranks wrote none, which are behind and at which sequence number, which call each is stuck
 * in, and the first call the ranks disagree on. `--json` prints the findings as JSON instead.
 *
 * ```
 * $ deno task trace analyze /tmp/trace
 * 3 of 3 ranks wrote a dump (world of 3).
 * group [0, 1, 2]: first mismatch at seq 5: rank 1 called all-reduce int32 × 256, ranks 0, 2 all-reduce float32 × 256
 * ```
 *
 * @module
 */
import { parseArgs } from "node:util";
import { FLIGHT_FORMAT, type FlightCall, type FlightDump } from "../backend/flight.ts";

/**
 * What the analyzer found.
 *
 * @example Analyzing dumps in memory
 * ```ts
 * import { analyzeTraces, type TraceFindings } from "@dcomm/dcomm/trace";
 * import assert from "node:assert/strict";
 * const findings: TraceFindings = analyzeTraces([]);
 * assert.deepEqual(findings.missing, []);
 * ```
 */
export interface TraceFindings {
  /** The world's size, as the dumps say. */
  readonly worldSize: number;
  /** World ranks that wrote no dump. */
  readonly missing: readonly number[];
  /** Per group: the first call the ranks disagree on, the ranks behind, and where each rank stands. */
  readonly groups: readonly GroupFindings[];
  /** The findings in plain words, the most telling first. */
  readonly lines: readonly string[];
}

/**
 * One group's findings.
 *
 * @example
 * ```ts
 * import type { GroupFindings } from "@dcomm/dcomm/trace";
 * const g: GroupFindings = { key: "0,1#0", ranks: [0, 1], behind: [], stuck: [] };
 * ```
 */
export interface GroupFindings {
  /** The group's key (its world ranks, and which such group). */
  readonly key: string;
  /** Its members' world ranks. */
  readonly ranks: readonly number[];
  /** The first sequence number the ranks called differently, with the odd ranks out. */
  readonly mismatch?: {
    readonly seq: number;
    /** The odd ranks (world ranks) and what they called. */
    readonly ranks: readonly number[];
    readonly call: string;
    /** What the others called. */
    readonly others: readonly number[];
    readonly othersCall: string;
  };
  /** Ranks that made fewer collectives than the others (world ranks), with how many each made. */
  readonly behind: readonly { readonly rank: number; readonly calls: number; readonly of: number }[];
  /** Each rank's oldest unfinished or failed collective. */
  readonly stuck: readonly {
    readonly rank: number;
    readonly seq: number;
    readonly call: string;
    readonly state: string;
    readonly error?: string;
  }[];
}

const VERBS: Record<string, string> = {
  allReduce: "all-reduce",
  reduceScatter: "reduce-scatter",
  allGather: "all-gather",
  allToAll: "all-to-all",
};
const ROOTED = new Set(["broadcast", "reduce", "gather", "scatter"]);
const REDUCING = new Set(["allReduce", "reduce", "reduceScatter"]);

/** A call as the findings name it: `all-reduce float32 × 256`, with the root and a non-sum op. */
function callText(c: FlightCall): string {
  const verb = VERBS[c.collective] ?? c.collective;
  if (c.collective === "barrier") return "barrier";
  let text = `${verb} ${c.dtype} × ${c.count}`;
  if (ROOTED.has(c.collective)) text += ` (root ${c.root})`;
  if (REDUCING.has(c.collective) && c.op !== "sum") text += ` (op ${c.op})`;
  return text;
}

/** A list of ranks in words: `rank 1`, `ranks 0, 2`. */
function ranksText(ranks: readonly number[]): string {
  return `${ranks.length === 1 ? "rank" : "ranks"} ${ranks.join(", ")}`;
}

/**
 * Analyzes the dumps of a world's ranks.
 *
 * @example The first mismatch, named
 * ```ts
 * import { analyzeTraces } from "@dcomm/dcomm/trace";
 * import type { FlightCall, FlightDump } from "@dcomm/dcomm";
 * import assert from "node:assert/strict";
 * const call = (seq: number, dtype: string): FlightCall => ({
 *   seq, collective: "allReduce", dtype, count: 8, root: 0, op: "sum", algorithm: "auto",
 *   state: "failed", enqueuedAt: 0,
 * });
 * const dump = (rank: number, dtype: string): FlightDump => ({
 *   format: "dcomm-flight-recorder/1", rank, worldSize: 3, pid: 1, hostname: "h", reason: "test",
 *   dumpedAt: 0,
 *   groups: [{ key: "0,1,2#0", ranks: [0, 1, 2], rank, backend: "cpu", calls: [call(1, dtype)], dropped: 0 }],
 * });
 * const findings = analyzeTraces([dump(0, "float32"), dump(1, "int32"), dump(2, "float32")]);
 * assert.deepEqual(findings.groups[0].mismatch?.ranks, [1]);
 * assert.ok(findings.lines.some((l) => l.includes("first mismatch at seq 1: rank 1 called all-reduce int32 × 8")));
 * ```
 *
 * @param dumps Every dump found (one per rank; a later one of a rank replaces an earlier one).
 * @returns The findings, with their plain-words lines.
 */
export function analyzeTraces(dumps: readonly FlightDump[]): TraceFindings {
  const byRank = new Map<number, FlightDump>();
  for (const d of dumps) {
    const had = byRank.get(d.rank);
    if (had === undefined || had.dumpedAt <= d.dumpedAt) byRank.set(d.rank, d);
  }
  const worldSize = Math.max(0, ...dumps.map((d) => d.worldSize));
  const missing = Array.from({ length: worldSize }, (_, r) => r).filter((r) => !byRank.has(r));
  const lines: string[] = [];
  lines.push(`${byRank.size} of ${worldSize} ranks wrote a dump (world of ${worldSize}).`);
  const keys = new Map<string, readonly number[]>();
  for (const d of byRank.values()) for (const g of d.groups) keys.set(g.key, g.ranks);
  const groups: GroupFindings[] = [];
  const headline: string[] = [];
  for (const [key, ranks] of keys) {
    const name = `group [${ranks.join(", ")}]`;
    // Each present member's collectives, by sequence number.
    const calls = new Map<number, Map<number, FlightCall>>();
    const made = new Map<number, number>();
    for (const r of ranks) {
      const g = byRank.get(r)?.groups.find((x) => x.key === key);
      if (g === undefined) continue;
      const own = new Map<number, FlightCall>();
      let count = 0;
      for (const c of g.calls) {
        if (c.p2p) continue;
        own.set(c.seq, c);
        count = Math.max(count, c.seq);
      }
      calls.set(r, own);
      made.set(r, count);
    }
    if (calls.size === 0) continue;
    const found: {
      key: string;
      ranks: readonly number[];
      mismatch?: GroupFindings["mismatch"];
      behind: { rank: number; calls: number; of: number }[];
      stuck: { rank: number; seq: number; call: string; state: string; error?: string }[];
    } = { key, ranks, behind: [], stuck: [] };
    // The first sequence number two ranks called differently.
    const allSeqs = [...new Set([...calls.values()].flatMap((m) => [...m.keys()]))].sort((a, b) => a - b);
    for (const seq of allSeqs) {
      const bySignature = new Map<string, number[]>();
      for (const [r, own] of calls) {
        const c = own.get(seq);
        if (c === undefined) continue;
        const sig = callText(c);
        bySignature.set(sig, [...(bySignature.get(sig) ?? []), r]);
      }
      if (bySignature.size < 2) continue;
      // The odd ones out: the smaller side (the later ranks when even).
      const sides = [...bySignature.entries()].sort((a, b) => b[1].length - a[1].length || a[1][0] - b[1][0]);
      const [othersCall, others] = sides[0];
      const odd = sides.slice(1).flatMap(([, rs]) => rs).sort((a, b) => a - b);
      const call = sides.slice(1).map(([sig]) => sig).join(" / ");
      found.mismatch = { seq, ranks: odd, call, others, othersCall };
      const line = `${name}: first mismatch at seq ${seq}: ${ranksText(odd)} called ${call}, ` +
        `${ranksText(others)} ${othersCall}`;
      lines.push(line);
      headline.push(line);
      break;
    }
    // Ranks behind: fewer collectives made than the most any member made.
    const most = Math.max(...made.values());
    for (const [r, n] of made) if (n < most) found.behind.push({ rank: r, calls: n, of: most });
    if (found.behind.length > 0) {
      for (const b of found.behind) {
        const last = calls.get(b.rank)?.get(b.calls);
        const theirs = [...calls.entries()].find(([r, own]) => made.get(r) === most && own.has(b.calls + 1))
          ?.[1]
          .get(b.calls + 1);
        const line = `${name}: rank ${b.rank} is behind: it made ${b.calls} collectives, the others up to ` +
          `${most}${last ? `; its last, seq ${last.seq}, ${callText(last)} (${last.state})` : ""}` +
          (theirs ? `; the others' seq ${b.calls + 1} is ${callText(theirs)}` : "");
        lines.push(line);
        headline.push(line);
      }
    }
    // Where each rank stands: its oldest collective not done.
    for (const [r, own] of calls) {
      const open = [...own.values()].sort((a, b) => a.seq - b.seq).find((c) => c.state !== "done");
      if (open === undefined) continue;
      found.stuck.push({
        rank: r,
        seq: open.seq,
        call: callText(open),
        state: open.state,
        ...(open.error === undefined ? {} : { error: open.error }),
      });
    }
    const stuckBy = new Map<string, number[]>();
    for (const s of found.stuck) {
      const k = `seq ${s.seq}, ${s.call}, ${s.state === "failed" ? "failed" : s.state}`;
      stuckBy.set(k, [...(stuckBy.get(k) ?? []), s.rank]);
    }
    for (const [k, rs] of stuckBy) {
      const error = found.stuck.find((s) => s.rank === rs[0])?.error;
      lines.push(`${name}: ${ranksText(rs)} stopped in ${k}${error ? `: ${error.split("\n")[0]}` : ""}`);
    }
    const absent = ranks.filter((r) => missing.includes(r));
    if (absent.length > 0 && found.stuck.length > 0) {
      const first = found.stuck.reduce((a, b) => (a.seq <= b.seq ? a : b));
      const line = `${name}: ${ranksText(absent)} wrote no dump (stopped, killed, or hung where it could ` +
        `not write: a rank that runs writes one when its call fails, or on SIGUSR1), while ` +
        `${ranksText(found.stuck.map((s) => s.rank))} waited in seq ${first.seq}, ${first.call}: ` +
        `${absent.length === 1 ? "it is" : "they are"} the likely cause`;
      lines.push(line);
      headline.push(line);
    }
    groups.push(found);
  }
  if (missing.length > 0 && headline.every((l) => !l.includes("wrote no dump"))) {
    lines.push(`${ranksText(missing)} wrote no dump.`);
  }
  if (headline.length === 0 && groups.every((g) => g.stuck.length === 0)) {
    lines.push("Every rank that wrote a dump finished every call it made, and they agree.");
  }
  // The most telling first: mismatches, ranks behind, ranks missing; then the rest in order.
  const rest = lines.filter((l) => !headline.includes(l));
  return { worldSize, missing, groups, lines: [rest[0], ...headline, ...rest.slice(1)].filter(Boolean) };
}

/**
 * Reads every dump in a directory (`*.json` files in the flight recorder's format; others are skipped).
 *
 * @example
 * ```ts
 * import { readTraces } from "@dcomm/dcomm/trace";
 * import assert from "node:assert/strict";
 * const dir = Deno.makeTempDirSync();
 * assert.deepEqual(readTraces(dir), []);
 * Deno.removeSync(dir);
 * ```
 *
 * @param dir The directory (`DCOMM_TRACE_DIR`).
 * @returns The dumps.
 * @throws {Deno.errors.NotFound} If the directory does not exist.
 */
export function readTraces(dir: string): FlightDump[] {
  const dumps: FlightDump[] = [];
  for (const entry of Deno.readDirSync(dir)) {
    if (!entry.isFile || !entry.name.endsWith(".json")) continue;
    try {
      const d = JSON.parse(Deno.readTextFileSync(`${dir}/${entry.name}`)) as FlightDump;
      if (d?.format === FLIGHT_FORMAT) dumps.push(d);
    } catch { /* not a dump */ }
  }
  return dumps;
}

const USAGE = `Usage: deno run -A jsr:@dcomm/dcomm/trace analyze DIR [--json]

Reads the flight recorder's dumps (rank-<n>.json, written to DCOMM_TRACE_DIR on a timeout,
mismatch, peer failure, SIGUSR1 or pg.dump()) and says which ranks are behind, where each
is stuck, and the first call the ranks disagree on.`;

/**
 * The command line: `analyze DIR [--json]`.
 *
 * @example
 * ```ts
 * import { traceMain } from "@dcomm/dcomm/trace";
 * import assert from "node:assert/strict";
 * assert.equal(traceMain(["--help"]), 0);
 * ```
 *
 * @param args The arguments.
 * @returns The exit code (0: dumps read; 1: none found; 2: usage).
 */
export function traceMain(args: readonly string[]): number {
  const { values, positionals } = parseArgs({
    args: [...args],
    options: { json: { type: "boolean" }, help: { type: "boolean", short: "h" } },
    allowPositionals: true,
  });
  if (values.help) {
    console.log(USAGE);
    return 0;
  }
  if (positionals[0] !== "analyze" || positionals.length !== 2) {
    console.error(`Expected "analyze DIR", found "${positionals.join(" ")}"\n\n${USAGE}`);
    return 2;
  }
  const dir = positionals[1];
  let dumps: FlightDump[];
  try {
    dumps = readTraces(dir);
  } catch (e) {
    console.error(`Cannot read ${dir}: ${(e as Error).message}`);
    return 1;
  }
  if (dumps.length === 0) {
    console.error(`No flight recorder dumps in ${dir}: expected rank-<n>.json files (set DCOMM_TRACE_DIR)`);
    return 1;
  }
  const findings = analyzeTraces(dumps);
  console.log(values.json ? JSON.stringify(findings, null, 2) : findings.lines.join("\n"));
  return 0;
}

if (import.meta.main) Deno.exit(traceMain(Deno.args));
