/**
 * `monitoredBarrier` (torch's `monitored_barrier(group, timeout, wait_all_ranks)`), once for every
 * backend: a barrier that, past its timeout, fails on every rank that came naming every rank that did
 * not, and fails the late rank too when it comes (it never succeeds after the others gave up). The words
 * are made here from what the ranks found, so they are the same on every backend.
 *
 * Every rank ends with the same outcome, taken once. Where the ranks meet depends on what the backend's
 * own calls can do without the absent rank:
 *
 * - **Through the world's store** (cpu, nccl: {@linkcode MonitorStore}). Their receives run one after
 *   another and a timed-out one fails the whole group, so waiting on the absent rank's message would hide
 *   every rank after it (and kill the group). Each rank sets its key `<prefix>/<call>/arrived/<rank>` and
 *   counts itself in `<call>/count`; the rank that counts the last one proposes "ok", a rank whose wait for
 *   the outcome times out proposes the ranks whose keys are missing; the first proposal stands (the store's
 *   `compareSet` on `<call>/outcome`) and every rank, the late ones too, reads that one. Two keys a call
 *   stay in the store (the count and the outcome; each rank deletes its own arrival key).
 * - **Over the group's own send and recv** (mpi, whose receives run side by side and are cancelled on
 *   timeout, the group staying usable). Every rank sends every other a token and waits for every other's
 *   (so a missing rank 0 is named too, and all the missing ones at once), then sends every other what it
 *   found (the ranks it missed) and waits for theirs from the ranks it heard: a rank succeeds only if no
 *   rank missed anyone. A late rank finds the others' verdicts waiting for it and fails at once. Messages
 *   carry the call's number, so a late rank's messages, received by nobody in time, are dropped by the
 *   next monitored barrier (but a plain `recv` from that rank would take them: after a failed monitored
 *   barrier, do not go on with point-to-point messages from the ranks it named). `2·(n−1)` messages each
 *   way per rank: for finding who hangs, not for every step.
 *
 * Every wait has a deadline: the call's timeout for the ranks to arrive, then as long again at most for
 * the outcome (a store that does not answer, a verdict that does not come), and nothing hangs.
 *
 * @module
 */
import { DistError, TimeoutError } from "../core/errors.ts";
import type { Store } from "../store/store.ts";
import type { MonitoredBarrierOptions, ProcessGroup } from "./process_group.ts";

/** Where the ranks of a group meet for a monitored barrier through the store. */
export interface MonitorStore {
  /** The world's store (the rendezvous's). */
  readonly store: Store;
  /** The keys' prefix, one per group (the same on every member). */
  readonly prefix: string;
}

/** A monitored barrier, checked: all the protocol needs. */
export interface MonitoredCall {
  /** The group, whose send and recv the point-to-point protocol uses. */
  readonly pg: ProcessGroup;
  /** The call's number in the group, from 0 (the same on every member). */
  readonly seq: number;
  /** Milliseconds the ranks have to arrive. */
  readonly timeoutMs: number;
  /** Name every absent rank, not only the first. */
  readonly waitAll: boolean;
  /** Aborts the call. */
  readonly signal?: AbortSignal;
  /** Where the ranks meet, if through a store. */
  readonly board?: MonitorStore;
}

/** What the ranks found: every rank came, or these did not (or one aborted). */
type Outcome =
  | { readonly ok: true }
  | {
    readonly ok: false;
    readonly by: number;
    readonly missing: readonly number[];
    readonly aborted?: string;
  };

const OK: Outcome = Object.freeze({ ok: true });
const decoder = new TextDecoder();

/**
 * Checks a monitored barrier's own option (`waitAll`); the front checks the others as for every call.
 *
 * @param options The options.
 * @returns `waitAll`.
 * @throws {TypeError} If `waitAll` is given and not a boolean.
 */
export function checkWaitAll(options: MonitoredBarrierOptions): boolean {
  const waitAll = options.waitAll ?? false;
  if (typeof waitAll !== "boolean") {
    const found = typeof waitAll === "string" ? JSON.stringify(waitAll) : `${typeof waitAll} ${waitAll}`;
    throw new TypeError(`Cannot monitoredBarrier: expected waitAll to be a boolean, found ${found}`);
  }
  return waitAll;
}

/**
 * Runs a checked monitored barrier.
 *
 * @param call The call.
 * @returns When every rank has arrived within the timeout.
 * @throws {TimeoutError} Naming the ranks that did not arrive; on a late rank, saying that it came too late.
 * @throws {DistError} If a rank aborted it (code `ABORTED`).
 */
export async function monitoredBarrier(call: MonitoredCall): Promise<void> {
  const { pg } = call;
  if (pg.size === 1) return;
  // A timer that keeps the process alive while the ranks wait (the store's socket does not).
  const alive = setInterval(() => {}, MAX_DELAY);
  try {
    const outcome = call.board ? await throughStore(call, call.board) : await overMessages(call);
    if (!outcome.ok) throw failure(call, outcome);
  } finally {
    clearInterval(alive);
  }
}

/** The error of an outcome that is not ok, on this rank. */
function failure(call: MonitoredCall, outcome: Extract<Outcome, { ok: false }>): Error {
  const me = call.pg.rank, t = call.timeoutMs;
  if (outcome.aborted !== undefined) {
    return outcome.by === me
      ? new DistError(`Aborted by the caller's signal while running: ${outcome.aborted}`, { code: "ABORTED" })
      : new DistError(
        `Monitored barrier failed on rank ${me}: rank ${outcome.by} aborted it: ${outcome.aborted}`,
        {
          code: "ABORTED",
        },
      );
  }
  const names = (ranks: readonly number[]): string => ranks.map((r) => `rank ${r}`).join(", ");
  if (outcome.missing.includes(me)) {
    const others = outcome.missing.filter((r) => r !== me);
    return new TimeoutError(
      `Monitored barrier timed out on rank ${me}: it arrived after rank ${outcome.by} had given up waiting ` +
        `${t} ms for it` + (call.waitAll && others.length > 0 ? ` (and for ${names(others)})` : ""),
    );
  }
  const named = call.waitAll ? outcome.missing : outcome.missing.slice(0, 1);
  const more = outcome.missing.length - named.length;
  return new TimeoutError(
    `Monitored barrier timed out after ${t} ms on rank ${me}: ${names(named)} did not arrive` +
      (more > 0 ? ` (nor ${more} more: waitAll: true names every one)` : ""),
  );
}

/** The longest delay `setTimeout` takes (a longer one would fire at once). */
const MAX_DELAY = 2 ** 31 - 1;

/**
 * A timer racing `work`: past `until` (a `performance.now()` time; `Infinity`: never) it fails with
 * `what`.
 */
async function within<T>(work: Promise<T>, until: number, what: () => Error): Promise<T> {
  if (!Number.isFinite(until)) return await work;
  let timer: ReturnType<typeof setTimeout> | undefined;
  const late = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(what()), Math.min(MAX_DELAY, Math.max(0, until - performance.now())));
  });
  try {
    return await Promise.race([work, late]);
  } finally {
    clearTimeout(timer);
    work.catch(() => {});
  }
}

/** The store protocol (see the module's documentation). */
async function throughStore(call: MonitoredCall, board: MonitorStore): Promise<Outcome> {
  const { pg, timeoutMs, signal } = call, { store } = board;
  const me = pg.rank, n = pg.size;
  const began = performance.now(), deadline = began + timeoutMs, last = deadline + Math.max(timeoutMs, 1000);
  const base = `${board.prefix}/${call.seq}`;
  const arrived = (r: number): string => `${base}/arrived/${r}`;
  // The store's own silence, told apart from its get's timeout (which only ends the wait for the others).
  let silence: TimeoutError | undefined;
  const silent = (): Error =>
    silence ??= new TimeoutError(
      `Monitored barrier timed out after ${timeoutMs} ms on rank ${me}: the store did not answer ` +
        `(its server may be a rank whose event loop is blocked)`,
    );
  const ask = <T>(work: Promise<T>): Promise<T> => within(work, last, silent);
  const decide = async (proposal: Outcome): Promise<Outcome> =>
    parseOutcome(await ask(store.compareSet(`${base}/outcome`, "", encodeOutcome(proposal))));
  const missing = async (): Promise<number[]> => {
    const ranks = Array.from({ length: n }, (_, r) => r);
    const there = await ask(Promise.all(ranks.map((r) => store.check([arrived(r)]))));
    return ranks.filter((r) => !there[r]);
  };
  await ask(store.set(arrived(me), "1"));
  let outcome: Outcome;
  if (await ask(store.add(`${base}/count`, 1)) >= n) {
    outcome = await decide(OK);
  } else {
    let found: Uint8Array | undefined;
    let aborted: string | undefined;
    try {
      found = await ask(
        store.get(`${base}/outcome`, { timeoutMs: Math.max(1, deadline - performance.now()), signal }),
      );
    } catch (e) {
      if (signal?.aborted) aborted = String(signal.reason);
      else if (!(e instanceof TimeoutError) || e === silence) throw e;
    }
    if (found !== undefined) outcome = parseOutcome(found);
    else if (aborted !== undefined) outcome = await decide({ ok: false, by: me, missing: [], aborted });
    else {
      const absent = await missing();
      outcome = await decide(absent.length === 0 ? OK : { ok: false, by: me, missing: absent });
    }
  }
  // The outcome stands: nobody needs this rank's key any more (a rank still counting the missing ones
  // finds the outcome taken when it proposes).
  await ask(store.delete(arrived(me))).catch(() => {});
  return outcome;
}

function encodeOutcome(outcome: Outcome): string {
  return JSON.stringify(outcome);
}

function parseOutcome(bytes: Uint8Array): Outcome {
  const text = decoder.decode(bytes);
  try {
    const value = JSON.parse(text) as Outcome;
    if (value.ok === true || (value.ok === false && Array.isArray(value.missing))) return value;
  } catch {
    // Not an outcome of ours: said below.
  }
  throw new DistError(`Monitored barrier: the store holds ${JSON.stringify(text)} where an outcome belongs`);
}

/** The kinds of the point-to-point protocol's messages. */
const TOKEN = 1, VERDICT = 2, ABORTED = 3;

/** The point-to-point protocol (see the module's documentation). */
async function overMessages(call: MonitoredCall): Promise<Outcome> {
  const { pg, seq, timeoutMs, signal } = call;
  const me = pg.rank, n = pg.size;
  const words = 2 + Math.ceil(n / 32);
  const peers = Array.from({ length: n }, (_, r) => r).filter((r) => r !== me);
  // Sends complete at once (small messages go eagerly); their own timeout only bounds a broken group.
  const sendOptions = { timeoutMs: 2 * timeoutMs + 1000 };
  const message = (kind: number, missing: readonly number[] = []): Int32Array => {
    const m = new Int32Array(words);
    m[0] = seq;
    m[1] = kind;
    for (const r of missing) m[2 + (r >>> 5)] |= 1 << (r & 31);
    return m;
  };
  const sending: PromiseLike<unknown>[] = [];
  const sendAll = (m: Int32Array): void => {
    for (const q of peers) sending.push(pg.send(m, q, sendOptions));
  };
  /** The next message of this call from `q` (dropping a late rank's from earlier calls), or none by `until`. */
  const receive = async (q: number, until: number): Promise<Int32Array | undefined> => {
    for (;;) {
      const got = new Int32Array(words);
      try {
        // At least 1 ms: a message already there is taken even past the deadline.
        await pg.recv(got, q, { timeoutMs: Math.max(1, until - performance.now()), signal });
      } catch (e) {
        if (e instanceof TimeoutError) return undefined;
        throw e;
      }
      if (got[0] === seq) return got;
      if (((got[0] - seq) | 0) > 0) {
        throw new DistError(
          `Monitored barrier: rank ${q} sent call #${got[0]} while rank ${me} runs #${seq} (the ranks call ` +
            "monitoredBarrier a different number of times)",
        );
      }
    }
  };
  try {
    sendAll(message(TOKEN));
    const deadline = performance.now() + timeoutMs;
    const tokens = await Promise.all(peers.map((q) => receive(q, deadline)));
    const heard = peers.filter((_, i) => tokens[i] !== undefined);
    const missed = peers.filter((_, i) => tokens[i] === undefined);
    // Every peer learns what this rank found, the late ones too (it waits for them there).
    sendAll(message(VERDICT, missed));
    const until = performance.now() + timeoutMs;
    const verdicts = await Promise.all(heard.map((q) => receive(q, until)));
    const missing = new Set(missed);
    let by = me;
    for (let i = 0; i < heard.length; i++) {
      const v = verdicts[i], q = heard[i];
      if (v === undefined) {
        missing.add(q);
        continue;
      }
      if (v[1] === ABORTED) return { ok: false, by: q, missing: [], aborted: "its caller's signal" };
      for (let r = 0; r < n; r++) {
        if ((v[2 + (r >>> 5)] >>> (r & 31)) & 1) {
          if (r === me && by === me) by = q;
          missing.add(r);
        }
      }
    }
    if (missing.size === 0) return OK;
    return { ok: false, by, missing: [...missing].sort((a, b) => a - b) };
  } catch (e) {
    if (signal?.aborted) {
      // The others learn why this rank leaves (those waiting for its verdict).
      sendAll(message(ABORTED));
      return { ok: false, by: me, missing: [], aborted: String(signal.reason) };
    }
    throw e;
  } finally {
    await Promise.allSettled(sending);
  }
}
