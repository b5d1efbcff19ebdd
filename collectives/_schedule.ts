/**
 * A collective as a plan: the messages each rank sends and receives, and what each must wait for. An
 * algorithm adds its steps, then {@linkcode Plan.run} executes them with as much overlap as the
 * dependencies allow: one sender and one receiver per peer, so that while chunk c is being reduced,
 * chunk c+1 is already in flight, and a rank talking to several peers talks to all of them at once.
 *
 * The wire order between two ranks is the only thing the two ends must agree on without a message:
 * sends to a peer leave, and receives from a peer are posted, in the order `(key, order added)`. Every
 * algorithm adds its steps so that both ends of each pair compute the same order.
 *
 * Reductions of received data land in per-peer receive slots (two per peer, each the size of that peer's
 * largest message, all carved from one `ctx.scratch` call), and run only once their `after` steps are done, so the order in which
 * contributions are combined never depends on arrival order. At most one send and one receive per peer
 * is outstanding on the communicator at a time.
 *
 * @module
 */
import type { CollectiveContext } from "./comm.ts";
import { EMPTY } from "./_layout.ts";

/** Something later steps can wait for. */
export interface Step {
  /** Resolves when the step is done (never rejects: failures surface from {@linkcode Plan.run}). */
  readonly done: Promise<void>;
}

/** Ordering of a step. */
export interface StepOptions {
  /**
   * Steps that must be done first: a send waits to leave, a receive into place waits to be posted, a
   * reduction waits to run (its receive into a slot is posted regardless).
   */
  after?: readonly Step[];
  /**
   * Position in the wire order with this step's peer; both ends must give the same key to the same
   * message. Steps with equal keys keep the order they were added in.
   * @default 0
   */
  key?: number;
}

interface Op {
  readonly peer: number;
  readonly key: number;
  readonly seq: number;
  readonly after: readonly Step[];
  readonly done: PromiseWithResolvers<void>;
}

interface SendOp extends Op {
  readonly data: Uint8Array;
}

interface RecvOp extends Op {
  readonly bytes: number;
  /** Where the payload lands; absent for receives into a slot. */
  readonly into?: Uint8Array;
  /** The slot holding the payload, once received, and the whole slot it came from. */
  slot?: Uint8Array;
  whole?: Uint8Array;
}

/** How many receive slots each peer gets: the one being reduced and the one in flight. */
const SLOTS_PER_PEER = 2;

/** A fixed set of equal receive buffers for one peer; a receive waits for a free one. */
class SlotPool {
  readonly #free: Uint8Array[];
  readonly #waiting: ((slot: Uint8Array) => void)[] = [];

  constructor(slots: Uint8Array[]) {
    this.#free = slots;
  }

  take(): Promise<Uint8Array> {
    const slot = this.#free.pop();
    if (slot !== undefined) return Promise.resolve(slot);
    return new Promise((resolve) => this.#waiting.push(resolve));
  }

  give(slot: Uint8Array): void {
    const next = this.#waiting.shift();
    if (next !== undefined) next(slot);
    else this.#free.push(slot);
  }
}

function whenDone(steps: readonly Step[]): Promise<unknown> | undefined {
  if (steps.length === 0) return undefined;
  if (steps.length === 1) return steps[0].done;
  return Promise.all(steps.map((s) => s.done));
}

function byWireOrder(a: Op, b: Op): number {
  return a.key - b.key || a.seq - b.seq;
}

/** The steps of one collective call on one rank; build it, then {@linkcode Plan.run} it once. */
export class Plan {
  readonly #ctx: CollectiveContext;
  readonly #sends = new Map<number, SendOp[]>();
  readonly #recvs = new Map<number, RecvOp[]>();
  readonly #jobs: (() => Promise<void>)[] = [];
  readonly #pools = new Map<number, SlotPool>();
  #seq = 0;

  /**
   * An empty plan.
   *
   * @param ctx The algorithm's context: its communicator, reductions and scratch.
   */
  constructor(ctx: CollectiveContext) {
    this.#ctx = ctx;
  }

  /** Sends `data` to `peer`; `data` must stay unchanged until the step is done. */
  send(peer: number, data: Uint8Array, options: StepOptions = {}): Step {
    const op: SendOp = { ...this.#op(peer, options), data };
    this.#list(this.#sends, peer).push(op);
    return { done: op.done.promise };
  }

  /** Receives the next message from `peer` straight into `into` (posted once `after` is done). */
  recv(peer: number, into: Uint8Array, options: StepOptions = {}): Step {
    const op: RecvOp = { ...this.#op(peer, options), bytes: into.length, into };
    this.#list(this.#recvs, peer).push(op);
    return { done: op.done.promise };
  }

  /**
   * Receives `dst.length` bytes from `peer` into a slot, then, once `after` is done, reduces them:
   * `dst = op(base, received)` when `base` is given (out of place), else `dst = op(dst, received)`.
   */
  recvReduce(peer: number, dst: Uint8Array, options: StepOptions & { base?: Uint8Array } = {}): Step {
    const incoming = this.#slotRecv(peer, dst.length, options.key);
    const after = whenDone(options.after ?? []);
    const ctx = this.#ctx;
    const base = options.base;
    return this.#job(async () => {
      await incoming.done.promise;
      if (after !== undefined) await after;
      const slot = incoming.slot as Uint8Array;
      if (base === undefined) ctx.reduce(dst, slot);
      else ctx.reduceMany(dst, [base, slot]);
      this.#release(incoming);
    });
  }

  /**
   * Receives `dst.length` bytes from each peer named in `sources` (numbers) into slots, then, once all
   * have arrived and `after` is done, sets `dst = op(sources...)` in the order given, local buffers
   * (Uint8Arrays) included. No source may overlap `dst`.
   */
  recvReduceMany(
    dst: Uint8Array,
    sources: readonly (number | Uint8Array)[],
    options: StepOptions = {},
  ): Step {
    const parts = sources.map((s) => typeof s === "number" ? this.#slotRecv(s, dst.length, options.key) : s);
    const after = whenDone(options.after ?? []);
    const ctx = this.#ctx;
    return this.#job(async () => {
      for (const part of parts) if (!(part instanceof Uint8Array)) await part.done.promise;
      if (after !== undefined) await after;
      ctx.reduceMany(dst, parts.map((p) => p instanceof Uint8Array ? p : p.slot as Uint8Array));
      for (const part of parts) if (!(part instanceof Uint8Array)) this.#release(part);
    });
  }

  /** A step that is done when all of `steps` are (a stage boundary that costs one wait, not many). */
  join(steps: readonly Step[]): Step {
    const all = whenDone(steps);
    return { done: all === undefined ? Promise.resolve() : all.then(() => {}) };
  }

  /**
   * Runs every step. Rejects with the first failure of a send, receive or reduction; steps that depend on
   * a failed one never run.
   */
  async run(): Promise<void> {
    this.#allocateSlots();
    const failed = Promise.withResolvers<never>();
    const guard = (p: Promise<void>): Promise<void> => p.catch((e) => failed.reject(e));
    const tasks: Promise<void>[] = [];
    for (const [peer, ops] of this.#sends) tasks.push(guard(this.#sender(peer, ops.sort(byWireOrder))));
    for (const [peer, ops] of this.#recvs) tasks.push(guard(this.#receiver(peer, ops.sort(byWireOrder))));
    for (const job of this.#jobs) tasks.push(guard(job()));
    await Promise.race([Promise.all(tasks), failed.promise]);
  }

  #op(peer: number, options: StepOptions): Op {
    const { rank, size } = this.#ctx.comm;
    if (!Number.isInteger(peer) || peer < 0 || peer >= size || peer === rank) {
      throw new RangeError(`Cannot plan a message from rank ${rank} to ${peer} in a group of ${size}`);
    }
    return {
      peer,
      key: options.key ?? 0,
      seq: this.#seq++,
      after: options.after ?? [],
      done: Promise.withResolvers<void>(),
    };
  }

  #list<T>(map: Map<number, T[]>, peer: number): T[] {
    let list = map.get(peer);
    if (list === undefined) map.set(peer, list = []);
    return list;
  }

  #slotRecv(peer: number, bytes: number, key: number | undefined): RecvOp {
    const op: RecvOp = { ...this.#op(peer, { key }), bytes };
    this.#list(this.#recvs, peer).push(op);
    return op;
  }

  #job(body: () => Promise<void>): Step {
    const done = Promise.withResolvers<void>();
    this.#jobs.push(async () => {
      await body();
      done.resolve();
    });
    return { done: done.promise };
  }

  #release(op: RecvOp): void {
    (this.#pools.get(op.peer) as SlotPool).give(op.whole as Uint8Array);
  }

  /**
   * One scratch allocation for every peer's slots, each as large as that peer's largest slotted receive;
   * a peer with a single slotted receive gets a single slot.
   */
  #allocateSlots(): void {
    const needs: [peer: number, slots: number, bytes: number][] = [];
    let total = 0;
    for (const [peer, ops] of this.#recvs) {
      let count = 0;
      let bytes = 0;
      for (const op of ops) {
        if (op.into !== undefined) continue;
        count++;
        bytes = Math.max(bytes, op.bytes);
      }
      if (count === 0) continue;
      const slots = Math.min(SLOTS_PER_PEER, count);
      needs.push([peer, slots, bytes]);
      total += slots * bytes;
    }
    const mem = total > 0 ? this.#ctx.scratch(total) : EMPTY;
    let at = 0;
    for (const [peer, slots, bytes] of needs) {
      const list: Uint8Array[] = [];
      for (let i = 0; i < slots; i++, at += bytes) list.push(mem.subarray(at, at + bytes));
      this.#pools.set(peer, new SlotPool(list));
    }
  }

  async #sender(peer: number, ops: readonly SendOp[]): Promise<void> {
    const comm = this.#ctx.comm;
    for (const op of ops) {
      const after = whenDone(op.after);
      if (after !== undefined) await after;
      await comm.send(peer, op.data);
      op.done.resolve();
    }
  }

  async #receiver(peer: number, ops: readonly RecvOp[]): Promise<void> {
    const comm = this.#ctx.comm;
    const pool = this.#pools.get(peer);
    for (const op of ops) {
      if (op.into !== undefined) {
        const after = whenDone(op.after);
        if (after !== undefined) await after;
        await comm.recv(peer, op.into);
      } else {
        op.whole = await (pool as SlotPool).take();
        op.slot = op.whole.subarray(0, op.bytes);
        await comm.recv(peer, op.slot);
      }
      op.done.resolve();
    }
  }
}
