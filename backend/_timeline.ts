/**
 * The timeline, `DCOMM_TIMELINE=out.json`: every call of every rank in the Trace Event format (what
 * `chrome://tracing` and Perfetto open). Each rank keeps every call it makes (not only the flight
 * recorder's last few thousand) with the time it was made and the time it settled; when the world group
 * closes, the ranks gather theirs on rank 0, which writes the file: one process per rank, one thread per
 * group, and for each call a `queued` slice (made, not yet started by the communication thread: waiting
 * for the calls before it) and the call's own slice (started to finished, as its report says; its
 * algorithm, transport, bytes and codec in `args`) holding its phases (`core/phases.ts`: waiting for peers,
 * moving bytes, reducing, codec; each its total, laid end to end), or one `failed` slice with the error. When the gather
 * cannot be done (a rank is gone) each rank writes its own part beside the path, `out.rank-<r>.json`.
 *
 * @module
 */
import type { CallPhases } from "../core/phases.ts";
import type { Work } from "./work.ts";

/** One call as the timeline keeps it. */
interface Entry {
  readonly group: string;
  readonly seq: number;
  readonly collective: string;
  readonly dtype: string;
  readonly count: number;
  readonly madeAt: number;
  settledAt: number;
  readonly work: Work;
}

/** A Trace Event (the fields this writer uses). */
export interface TraceEvent {
  /** The name shown on the slice. */
  name: string;
  /** Its category: `call`, `queued`, `phase`, `failed`, or `__metadata`. */
  cat?: string;
  /** `X` (a complete slice) or `M` (metadata). */
  ph: "X" | "M";
  /** Start, µs since the Unix epoch. */
  ts?: number;
  /** Duration, µs. */
  dur?: number;
  /** The rank. */
  pid: number;
  /** The group's lane. */
  tid?: number;
  /** Details. */
  args?: Record<string, unknown>;
}

let path: string | undefined;
const entries: Entry[] = [];
const lanes = new Map<string, number>();

/**
 * Turns the timeline on when `DCOMM_TIMELINE` names a file (`init()` calls it).
 *
 * @param env The variables `init()` reads.
 * @returns The file, or `undefined` when off.
 */
export function setTimeline(env: Readonly<Record<string, string | undefined>>): string | undefined {
  const value = env["DCOMM_TIMELINE"]?.trim();
  path = value === undefined || value === "" ? undefined : value;
  return path;
}

/** Whether calls are kept for the timeline. */
export function timelineOn(): boolean {
  return path !== undefined;
}

/**
 * Keeps a call for the timeline.
 *
 * @param group The group's key (its world ranks).
 * @param seq Its sequence number.
 * @param collective The collective.
 * @param dtype Its dtype.
 * @param count Its elements.
 * @param work Its Work.
 */
export function timelineRecord(
  group: string,
  seq: number,
  collective: string,
  dtype: string,
  count: number,
  work: Work,
): void {
  const madeAt = performance.timeOrigin + performance.now();
  const entry: Entry = { group, seq, collective, dtype, count, madeAt, settledAt: madeAt, work };
  entries.push(entry);
  if (!work.completed) {
    const settle = () => void (entry.settledAt = performance.timeOrigin + performance.now());
    work.wait().then(settle, settle);
  }
}

/**
 * This rank's events.
 *
 * @param rank The world rank (the event's process).
 * @returns Its events, metadata first.
 */
export function timelineEvents(rank: number): TraceEvent[] {
  const events: TraceEvent[] = [{ name: "process_name", ph: "M", pid: rank, args: { name: `rank ${rank}` } }];
  events.push({ name: "process_sort_index", ph: "M", pid: rank, args: { sort_index: rank } });
  const lane = (group: string): number => {
    let id = lanes.get(group);
    if (id === undefined) {
      lanes.set(group, id = lanes.size);
      events.push({ name: "thread_name", ph: "M", pid: rank, tid: id, args: { name: `group [${group}]` } });
    }
    return id;
  };
  for (const e of entries) {
    const tid = lane(e.group), name = `${e.collective} #${e.seq}`;
    const report = e.work.report;
    const base = { seq: e.seq, dtype: e.dtype, count: e.count };
    if (e.work.error !== undefined || report === undefined) {
      const error = e.work.error;
      events.push({
        name: `${name} failed`,
        cat: e.work.completed ? "failed" : "unfinished",
        ph: "X",
        ts: e.madeAt * 1000,
        dur: Math.max(0, (e.work.completed ? e.settledAt : Date.now()) - e.madeAt) * 1000,
        pid: rank,
        tid,
        args: { ...base, error: error instanceof Error ? error.message : String(error ?? "not finished") },
      });
      continue;
    }
    // A call done when it returned was timed by its report alone.
    const start = report.startedAt, queuedMs = start - e.madeAt;
    if (queuedMs > 0.001) {
      events.push({
        name: `${name} queued`,
        cat: "queued",
        ph: "X",
        ts: e.madeAt * 1000,
        dur: queuedMs * 1000,
        pid: rank,
        tid,
        args: base,
      });
    }
    events.push({
      name,
      cat: "call",
      ph: "X",
      ts: start * 1000,
      dur: Math.max(0, report.finishedAt - start) * 1000,
      pid: rank,
      tid,
      args: {
        ...base,
        algorithm: report.algorithm,
        transport: report.transport,
        bytes: report.bytes,
        bytesSent: report.bytesSent,
        ...(report.compression ? { compression: report.compression } : {}),
        ...(report.peer !== undefined ? { peer: report.peer } : {}),
        ...(report.phases ? { phases: report.phases } : {}),
      },
    });
    if (report.phases) events.push(...phaseSlices(report.phases, start, rank, tid, name));
  }
  return events;
}

/**
 * A call's phases as slices inside its own, laid end to end from its start in a fixed order (waiting
 * for peers, moving bytes, reducing, codec): each is the phase's total over the call, since the phases
 * interleave (a ring step waits, moves, reduces, then waits again). Where the transport does not
 * measure waiting, the moving slice is named "communicating" (waiting and moving together).
 */
function phaseSlices(
  phases: CallPhases,
  start: number,
  pid: number,
  tid: number,
  name: string,
): TraceEvent[] {
  const parts: [string, number][] = [
    ["waiting for peers", phases.waitingMs ?? 0],
    [phases.waitingMs === undefined ? "communicating" : "moving bytes", phases.movingMs],
    ["reducing", phases.reducingMs],
    ["codec", phases.codecMs],
  ];
  const out: TraceEvent[] = [];
  let at = start;
  for (const [phase, ms] of parts) {
    if (!(ms >= 0.001)) continue;
    out.push({
      name: phase,
      cat: "phase",
      ph: "X",
      ts: at * 1000,
      dur: ms * 1000,
      pid,
      tid,
      args: { call: name, totalMs: ms, note: "the phase's total in the call, laid end to end" },
    });
    at += ms;
  }
  return out;
}

/** The group `writeTimeline` gathers through (what it needs of a ProcessGroup). */
interface Gatherer {
  readonly rank: number;
  readonly ranks: readonly number[];
  gatherObject<T>(value: T, options?: { root?: number; timeoutMs?: number }): Promise<T[] | null>;
}

/**
 * Gathers every rank's events on rank 0 and writes the file there; when that fails, writes this rank's
 * own part beside it (`out.rank-<r>.json`).
 *
 * @param pg The world group, still open.
 * @returns The file this rank wrote, if any.
 */
export async function writeTimeline(pg: Gatherer): Promise<string | undefined> {
  if (path === undefined) return undefined;
  const rank = pg.ranks[pg.rank];
  const mine = timelineEvents(rank);
  const file = (events: TraceEvent[], to: string): string => {
    Deno.writeTextFileSync(to, JSON.stringify({ traceEvents: events, displayTimeUnit: "ms" }) + "\n");
    return to;
  };
  let all: TraceEvent[][] | null;
  try {
    all = await pg.gatherObject(mine, { root: 0, timeoutMs: 30_000 });
  } catch (e) {
    const own = path.replace(/(\.json)?$/, `.rank-${rank}.json`);
    console.error(
      `dcomm: the timeline's ranks could not be gathered (${
        (e as Error).message
      }); rank ${rank} writes ${own}`,
    );
    return file(mine, own);
  }
  return all === null ? undefined : file(all.flat(), path);
}
