/**
 * The flight recorder, always on: every process group keeps its last calls (the collective, dtype, count,
 * root or peer, op, algorithm, its sequence number, and its Work, from which the state and times are read
 * when a dump is written), in a ring of preallocated slots, so a call costs a few field stores and no
 * clock read when it finishes before it returns (the host segment's small all-reduce), one
 * `performance.now()` otherwise.
 *
 * A dump (JSON, {@linkcode FlightDump}) holds every group of this thread. It is written to
 * `DCOMM_TRACE_DIR/rank-<world rank>.json` when a call fails with a timeout, a mismatch or a peer's
 * failure, on SIGUSR1 (only with `DCOMM_TRACE_DIR` set: then the signal no longer ends the process), and by
 * `pg.dump()` (which also returns it, set or not). `deno task trace analyze DIR` (`cli/trace.ts`) reads
 * every rank's dump and says which ranks are behind, where each is stuck and the first mismatch.
 *
 * `DCOMM_TRACE_BUFFER` sets the calls kept per group (default 2000; 0 turns the recorder off),
 * `DCOMM_TRACE_STACK=1` keeps each call's stack (costly: a stack trace per call).
 *
 * @module
 */
import { DistError } from "../core/errors.ts";
import type { Work } from "./work.ts";
import { observeWorkFailures } from "./work.ts";

/** The format tag of a dump, checked by the analyzer. */
export const FLIGHT_FORMAT = "dcomm-flight-recorder/1";

/**
 * What a recorded call was doing when the dump was written.
 *
 * @example The calls a rank had not finished
 * ```ts
 * import type { FlightCall, FlightState } from "@dcomm/dcomm";
 * const open: FlightState[] = ["queued", "started"];
 * const pending = (calls: FlightCall[]): FlightCall[] => calls.filter((c) => open.includes(c.state));
 * console.log(pending([]).length); // 0
 * ```
 */
export type FlightState = "queued" | "started" | "done" | "failed";

/**
 * One call in a dump.
 *
 * @example A call as the dump writes it
 * ```ts
 * import type { FlightCall } from "@dcomm/dcomm";
 * const call: FlightCall = {
 *   seq: 4, collective: "allReduce", dtype: "float32", count: 256, root: 0, op: "sum", algorithm: "auto",
 *   state: "done", enqueuedAt: 1_700_000_000_000, startedAt: 1_700_000_000_000, finishedAt: 1_700_000_000_001,
 * };
 * ```
 */
export interface FlightCall {
  /**
   * Its number in the group: collectives are numbered alike on every member, from 1 (as error messages
   * number them: `allReduce(...) #5 in group 0`); sends and receives
   * count on their own (`p2p: true`), as they involve only two ranks.
   */
  readonly seq: number;
  /** Whether it is a send or receive (numbered apart from the collectives). */
  readonly p2p?: boolean;
  /** The collective, e.g. `"allReduce"`. */
  readonly collective: string;
  /** The element type. */
  readonly dtype: string;
  /** Elements (the call's descriptor count: one rank's block for the out-of-place collectives). */
  readonly count: number;
  /** The root, or the peer of a send or receive (-1: any source), as a rank of the group. */
  readonly root: number;
  /** The reduction (`sum` for collectives without one). */
  readonly op: string;
  /** The algorithm asked for (`auto`), or the one that ran once done. */
  readonly algorithm: string;
  /** Queued (an earlier call of the group is not done), started (the group's oldest unfinished), done or failed. */
  readonly state: FlightState;
  /** When it was made, Unix epoch ms. */
  readonly enqueuedAt: number;
  /** When it started, once done (the backend's report). */
  readonly startedAt?: number;
  /** When it ended, once done. */
  readonly finishedAt?: number;
  /** The transport it ran over, once done. */
  readonly transport?: string;
  /** Why it failed. */
  readonly error?: string;
  /** The caller's stack (`DCOMM_TRACE_STACK=1`). */
  readonly stack?: string;
}

/**
 * One group in a dump.
 *
 * @example
 * ```ts
 * import type { FlightGroup } from "@dcomm/dcomm";
 * const group: FlightGroup = { key: "0,1#0", ranks: [0, 1], rank: 0, backend: "cpu", calls: [], dropped: 0 };
 * ```
 */
export interface FlightGroup {
  /** The group across ranks: its world ranks, and which group of those ranks this thread made it as (`0,1,2#0`). */
  readonly key: string;
  /** Its members' world ranks. */
  readonly ranks: readonly number[];
  /** This rank within it. */
  readonly rank: number;
  /** The backend. */
  readonly backend: string;
  /** Whether it was closed when the dump was written. */
  readonly closed?: boolean;
  /** Its last calls, oldest first. */
  readonly calls: readonly FlightCall[];
  /** Calls made before these, no longer kept. */
  readonly dropped: number;
}

/**
 * What a rank writes: every group of its thread, with their last calls.
 *
 * @example Reading this rank's recorder
 * ```ts
 * import { type FlightDump, init } from "@dcomm/dcomm";
 * import assert from "node:assert/strict";
 * await using pg = await init({ rank: 0, worldSize: 1, env: {} });
 * await pg.allReduce(new Float32Array(4));
 * const dump: FlightDump = pg.dump();
 * assert.equal(dump.groups[0].calls.at(-1)?.collective, "allReduce");
 * assert.equal(dump.groups[0].calls.at(-1)?.state, "done");
 * ```
 */
export interface FlightDump {
  /** {@linkcode FLIGHT_FORMAT}. */
  readonly format: string;
  /** This rank in the world. */
  readonly rank: number;
  /** The world's size. */
  readonly worldSize: number;
  /** This process. */
  readonly pid: number;
  /** This host's name. */
  readonly hostname: string;
  /** Why it was written: `"dump()"`, `"SIGUSR1"`, or the failure. */
  readonly reason: string;
  /** When, Unix epoch ms. */
  readonly dumpedAt: number;
  /** Every group of this thread (the world first). */
  readonly groups: readonly FlightGroup[];
}

/** One slot of a recorder's ring, reused (no allocation per call). */
interface Slot {
  seq: number;
  p2p: boolean;
  collective: string;
  dtype: string;
  count: number;
  root: number;
  op: string;
  algorithm: string;
  at: number;
  work: Work | undefined;
  stack: string | undefined;
}

/** The env this module reads; `undefined` without --allow-env. */
function envOf(name: string): string | undefined {
  try {
    return Deno.env.get(name);
  } catch {
    return undefined;
  }
}

let capacityDefault: number | undefined;
let keepStacks = false;

/** Calls kept per group, from `DCOMM_TRACE_BUFFER` (read once). */
function defaultCapacity(): number {
  if (capacityDefault !== undefined) return capacityDefault;
  const raw = envOf("DCOMM_TRACE_BUFFER");
  keepStacks = envOf("DCOMM_TRACE_STACK") === "1";
  if (raw === undefined || raw === "") return capacityDefault = 2000;
  const n = Number(raw);
  if (!Number.isInteger(n) || n < 0 || n > 1_000_000) {
    throw new RangeError(
      `Invalid DCOMM_TRACE_BUFFER: expected calls per group in 0..1000000, found "${raw}"`,
    );
  }
  return capacityDefault = n;
}

/** Whether calls are recorded now (the cost benchmark turns it off and on, alternately, in one run). */
let recording = true;

/**
 * Turns recording off or on for every group of this thread, at run time.
 *
 * @param on Whether to record.
 * @internal For `bench/flight.ts`, which measures what recording costs.
 */
export function setFlightRecording(on: boolean): void {
  recording = on;
}

/** Every recorder of this thread: the open groups, and the last few closed ones. */
const recorders: FlightRecorder[] = [];
const KEEP_CLOSED = 16;
/** How many groups of each member list this thread made (for the cross-rank key). */
const made = new Map<string, number>();

/**
 * A group's recorder: its ring of calls and their numbers.
 *
 * @internal The call front (`_front.ts`) makes one per group.
 */
export class FlightRecorder {
  readonly #slots: Slot[];
  #next = 0;
  #total = 0;
  #seq = 0;
  #p2pSeq = 0;
  readonly #isClosed: () => boolean;
  /** The group's key across ranks. */
  readonly key: string;

  /**
   * Makes a group's recorder and registers it for dumps.
   *
   * @param ranks The members' world ranks.
   * @param rank This rank in the group.
   * @param backend The backend.
   * @param isClosed Whether the group is closed now.
   * @param capacity Calls kept. @default DCOMM_TRACE_BUFFER, else 2000
   */
  constructor(
    readonly ranks: readonly number[],
    readonly rank: number,
    readonly backend: string,
    isClosed: () => boolean,
    capacity: number = defaultCapacity(),
  ) {
    this.#isClosed = isClosed;
    const members = ranks.join(",");
    const ordinal = made.get(members) ?? 0;
    made.set(members, ordinal + 1);
    this.key = `${members}#${ordinal}`;
    this.#slots = Array.from({ length: capacity }, () => ({
      seq: 0,
      p2p: false,
      collective: "",
      dtype: "",
      count: 0,
      root: 0,
      op: "",
      algorithm: "",
      at: 0,
      work: undefined,
      stack: undefined,
    }));
    if (rank >= 0) {
      // Closed groups stay for dumps, the last few of them.
      const closed = recorders.filter((r) => r.#isClosed());
      for (const r of closed.slice(0, Math.max(0, closed.length - KEEP_CLOSED))) {
        recorders.splice(recorders.indexOf(r), 1);
      }
      recorders.push(this);
      watchSignal();
    }
  }

  /** Whether it keeps anything (`DCOMM_TRACE_BUFFER=0`: no). */
  get enabled(): boolean {
    return this.#slots.length > 0;
  }

  /**
   * Records a call the front checked and the backend took.
   *
   * @param collective The collective.
   * @param dtype Its dtype.
   * @param count Its elements.
   * @param root Its root or peer.
   * @param op Its op.
   * @param algorithm The algorithm asked for.
   * @param work Its Work.
   * @returns Its sequence number (0 when nothing is recorded).
   */
  record(
    collective: string,
    dtype: string,
    count: number,
    root: number,
    op: string,
    algorithm: string,
    work: Work,
  ): number {
    const slots = this.#slots;
    if (slots.length === 0 || !recording) return 0;
    const slot = slots[this.#next];
    const p2p = collective === "send" || collective === "recv";
    slot.seq = p2p ? ++this.#p2pSeq : ++this.#seq;
    slot.p2p = p2p;
    slot.collective = collective;
    slot.dtype = dtype;
    slot.count = count;
    slot.root = root;
    slot.op = op;
    slot.algorithm = algorithm;
    // A call done when it returned has its times in its report: no clock read for it.
    slot.at = work.completed ? 0 : performance.timeOrigin + performance.now();
    slot.work = work;
    slot.stack = keepStacks ? new Error().stack?.split("\n").slice(2).join("\n") : undefined;
    this.#next = this.#next + 1 === slots.length ? 0 : this.#next + 1;
    this.#total++;
    return slot.seq;
  }

  /** The group's calls, oldest first, with their states now. */
  snapshot(): FlightGroup {
    const slots = this.#slots, kept = Math.min(this.#total, slots.length);
    const calls: FlightCall[] = [];
    let oldestOpen = true;
    for (let i = 0; i < kept; i++) {
      const slot = slots[(this.#next - kept + i + slots.length) % slots.length];
      const work = slot.work as Work;
      const report = work.report;
      const error = work.error;
      let state: FlightState;
      if (!work.completed) {
        // Calls of a group run in order: the oldest unfinished one is the one running.
        state = oldestOpen ? "started" : "queued";
        oldestOpen = false;
      } else state = error === undefined ? "done" : "failed";
      const call: Record<string, unknown> = {
        seq: slot.seq,
        ...(slot.p2p ? { p2p: true } : {}),
        collective: slot.collective,
        dtype: slot.dtype,
        count: slot.count,
        root: slot.root,
        op: slot.op,
        algorithm: report?.algorithm ?? slot.algorithm,
        state,
        enqueuedAt: slot.at || (report?.startedAt ?? 0),
      };
      if (report !== undefined) {
        call.startedAt = report.startedAt;
        call.finishedAt = report.finishedAt;
        call.transport = report.transport;
        if (report.peer !== undefined) call.peer = report.peer;
      }
      if (error !== undefined) call.error = error instanceof Error ? error.message : String(error);
      if (slot.stack !== undefined) call.stack = slot.stack;
      calls.push(call as unknown as FlightCall);
    }
    return {
      key: this.key,
      ranks: this.ranks,
      rank: this.rank,
      backend: this.backend,
      ...(this.#isClosed() ? { closed: true } : {}),
      calls,
      dropped: this.#total - kept,
    };
  }
}

/**
 * This thread's dump: every group's recorder, the world first.
 *
 * @param reason Why it is written.
 * @returns The dump.
 */
export function flightDump(reason: string): FlightDump {
  const world = recorders.reduce<FlightRecorder | undefined>(
    (best, r) => best === undefined || r.ranks.length > best.ranks.length ? r : best,
    undefined,
  );
  let hostname = "";
  try {
    hostname = Deno.hostname();
  } catch { /* no --allow-sys */ }
  return {
    format: FLIGHT_FORMAT,
    rank: world === undefined ? -1 : world.ranks[world.rank],
    worldSize: world === undefined ? 0 : world.ranks.length,
    pid: Deno.pid,
    hostname,
    reason,
    dumpedAt: Date.now(),
    groups: recorders.map((r) => r.snapshot()),
  };
}

/**
 * Writes this thread's dump to `DCOMM_TRACE_DIR` (as `rank-<world rank>.json`), when it is set.
 *
 * @param reason Why it is written.
 * @param dump The dump, if made already.
 * @returns The file written, or `undefined` (no directory set, or the write failed: said on stderr).
 */
export function writeFlightDump(reason: string, dump: FlightDump = flightDump(reason)): string | undefined {
  const dir = envOf("DCOMM_TRACE_DIR");
  if (dir === undefined || dir === "" || recorders.length === 0) return undefined;
  const path = `${dir.replace(/\/+$/, "")}/rank-${dump.rank}.json`;
  try {
    Deno.mkdirSync(dir, { recursive: true });
    Deno.writeTextFileSync(path, JSON.stringify(dump, null, 1) + "\n");
    return path;
  } catch (e) {
    console.error(`dcomm: cannot write the flight recorder's dump to ${path}: ${(e as Error).message}`);
    return undefined;
  }
}

let signalWatched = false;

/** With DCOMM_TRACE_DIR set, SIGUSR1 writes the dump (once per thread; the main thread only). */
function watchSignal(): void {
  if (signalWatched) return;
  signalWatched = true;
  if (Deno.build.os === "windows" || envOf("DCOMM_TRACE_DIR") === undefined) return;
  if (typeof (globalThis as { WorkerGlobalScope?: unknown }).WorkerGlobalScope !== "undefined") return;
  try {
    Deno.addSignalListener("SIGUSR1", () => writeFlightDump("SIGUSR1"));
  } catch { /* no signals here */ }
}

let pendingRewrite = false;

/** Failures that make a rank write its dump: timeouts, mismatches, a peer's failure or abort, NCCL's and MPI's. */
function dumpsFor(error: unknown): boolean {
  return error instanceof DistError &&
    (error.code === "TIMEOUT" || error.code === "MISMATCH" || error.code === "TRANSPORT" ||
      error.code === "NCCL" || error.code === "MPI" || error.code === "MPI_BROKEN");
}

observeWorkFailures((error) => {
  if (!dumpsFor(error) || recorders.length === 0) return;
  if (envOf("DCOMM_TRACE_DIR") === undefined) return;
  // The first failure is written at once (the process may end right after); the rest of a burst once more,
  // a moment later, with every call's final state.
  if (pendingRewrite) return;
  pendingRewrite = true;
  const reason = error instanceof Error ? error.message : String(error);
  writeFlightDump(reason);
  const timer = setTimeout(() => {
    pendingRewrite = false;
    writeFlightDump(reason);
  }, 20);
  Deno.unrefTimer(timer);
});
