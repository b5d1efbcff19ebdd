/**
 * The heartbeat that tells a stopped rank from a slow one. Each rank's communication thread adds 1 to its
 * counter `hb/<rank>` in the world's store every `everyMs` (default 500; `DCOMM_HEARTBEAT_MS`, 0 turns
 * it off); it runs on the communication thread, so a rank busy computing on its main thread still beats,
 * and a stopped one (SIGSTOP, a debugger, a frozen host) does not. While a call of this rank has been
 * waiting for at least `everyMs`, the thread also reads the other ranks' counters (at most 16 a beat, in
 * turn, so a big world costs the store little), and a rank whose counter has not moved for three beats
 * is silent. A call that times out then names the silent ranks, the likely cause, rather than only the
 * ranks it waited for (a healthy rank that waits for a stopped one in a ring would otherwise be blamed).
 *
 * Nothing waits on the store for long: a beat or a read still pending at the next beat is not repeated,
 * and none keeps the thread alive.
 *
 * @module
 */
import type { Store } from "../../store/store.ts";

/** Counters read per beat while watching. */
const READS_PER_BEAT = 16;
/** Beats without a change before a rank counts as silent. */
const SILENT_BEATS = 3;

/** One rank's counter as this thread last saw it. */
interface Seen {
  value: number;
  /** `performance.now()` when the value last changed (or was first read). */
  changedAt: number;
}

/** This thread's heartbeat (one per communication thread), or none. */
let current: Heartbeat | undefined;

/** A rank's heartbeat, and its view of the others'. */
export class Heartbeat {
  readonly #store: Store;
  readonly #rank: number;
  readonly #size: number;
  readonly #everyMs: number;
  readonly #timer: number;
  readonly #seen = new Map<number, Seen>();
  #beating = false;
  #reading = false;
  #next = 0;
  /** `performance.now()` when the running call began, while one runs. */
  busySince: number | undefined;

  /**
   * Starts beating (and makes this the thread's heartbeat).
   *
   * @param store The world's store (prefixed).
   * @param rank This rank.
   * @param size The world's size.
   * @param everyMs The beat.
   */
  constructor(store: Store, rank: number, size: number, everyMs: number) {
    this.#store = store;
    this.#rank = rank;
    this.#size = size;
    this.#everyMs = everyMs;
    this.#timer = setInterval(() => this.#tick(), everyMs) as unknown as number;
    Deno.unrefTimer(this.#timer);
    current = this;
    this.#tick();
  }

  #tick(): void {
    if (!this.#beating) {
      this.#beating = true;
      this.#store.add(`hb/${this.#rank}`, 1).catch(() => {}).finally(() => (this.#beating = false));
    }
    const busy = this.busySince;
    if (busy === undefined || performance.now() - busy < this.#everyMs || this.#reading || this.#size < 2) {
      return;
    }
    this.#reading = true;
    const ranks: number[] = [];
    for (let i = 0; i < Math.min(READS_PER_BEAT, this.#size - 1); i++) {
      this.#next = (this.#next + 1) % this.#size;
      if (this.#next === this.#rank) this.#next = (this.#next + 1) % this.#size;
      ranks.push(this.#next);
    }
    Promise.all(ranks.map(async (r) => {
      const value = await this.#store.add(`hb/${r}`, 0);
      const now = performance.now(), seen = this.#seen.get(r);
      if (seen === undefined || seen.value !== value) this.#seen.set(r, { value, changedAt: now });
    })).catch(() => {}).finally(() => (this.#reading = false));
  }

  /**
   * The ranks whose counter has not moved for three beats, with how long (ms), longest first.
   *
   * @returns The silent ranks.
   */
  silent(): { rank: number; ms: number }[] {
    const now = performance.now(), out: { rank: number; ms: number }[] = [];
    for (const [rank, seen] of this.#seen) {
      const ms = now - seen.changedAt;
      if (ms >= SILENT_BEATS * this.#everyMs) out.push({ rank, ms });
    }
    return out.sort((a, b) => b.ms - a.ms);
  }

  /** Stops beating. */
  stop(): void {
    clearInterval(this.#timer);
    if (current === this) current = undefined;
  }
}

/**
 * The beat from `DCOMM_HEARTBEAT_MS` (default 500; 0: none).
 *
 * @param raw The variable's value.
 * @returns The beat in ms, 0 for none.
 * @throws {RangeError} If it is not a number >= 0.
 */
export function heartbeatMs(raw: string | undefined): number {
  if (raw === undefined || raw.trim() === "") return 500;
  const ms = Number(raw);
  if (!(ms >= 0) || !Number.isFinite(ms)) {
    throw new RangeError(`Invalid DCOMM_HEARTBEAT_MS: expected milliseconds >= 0, found "${raw}"`);
  }
  return ms;
}

/**
 * What a timeout adds about silent ranks: `; rank 1 sent no heartbeat for 2.1 s (stopped or hung?):
 * the likely cause`, or nothing when every rank this thread watched still beats.
 *
 * @returns The words to append to the message.
 */
export function silentRanksText(): string {
  const silent = current?.silent() ?? [];
  if (silent.length === 0) return "";
  const list = silent.map((s) => `rank ${s.rank}`).join(", ");
  const longest = (silent[0].ms / 1000).toFixed(1);
  return `; ${list} sent no heartbeat for ${longest} s (stopped or hung?): ` +
    (silent.length === 1 ? "the likely cause" : "the likely causes");
}

/**
 * Marks the start or end of a call on this thread (the heartbeat watches the others while one waits).
 *
 * @param since `performance.now()` when it began, or `undefined` when it ended.
 */
export function heartbeatBusy(since: number | undefined): void {
  if (current !== undefined) current.busySince = since;
}
