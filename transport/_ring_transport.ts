/**
 * What the in-process and the shared-memory transports share: the inbox layout, the doorbells, and a
 * {@linkcode Transport} over rings with one progress loop per rank and the failure model of
 * `transport.ts`.
 *
 * ## Inboxes
 * Each rank owns one inbox: a 4 KiB header, then one ring per other rank, in which that rank writes to
 * the owner. (A SharedArrayBuffer for Workers, a POSIX shared memory segment for processes.)
 * ```text
 * byte  0 magic "DCIB"   4 version   8 world size   12 owner rank   16 ring bytes   20 owner pid
 * byte 24 peers attached (shm)       28 claimed (inproc)
 * byte 64 doorbell: every write into a ring of this inbox, and every read from a ring the owner writes,
 *         adds 1 to it (own cache line)
 * byte 128 sleeping: 1 while the owner waits on the doorbell (own cache line)
 * byte 4096 ring from the lowest other rank, then the next, ... (each `ringRegionBytes(ringBytes)`)
 * ```
 * One doorbell per rank is what lets a rank that waits on several peers at once sleep on one word
 * (`Atomics.waitAsync` on a SharedArrayBuffer, a futex on a segment) and still be woken by any of them.
 * A peer rings it and wakes the owner only when the owner said it sleeps, so a busy stream costs one
 * atomic add per 256 KiB, not a system call.
 *
 * ## The progress loop
 * Sends and receives first try to complete at once, in the call. What remains is driven by one loop per
 * rank that runs only while something is pending (so an idle rank holds no timer and no thread, and
 * learns of a peer's failure at its next operation): it progresses every ring, spins on the doorbell for
 * `spinUs`, then sleeps on it (at most 100 ms; every 100 ms it checks that the peers it waits for are
 * alive). While data keeps moving it yields to the event loop every 2 ms, so timers and the continuations
 * of completed operations run.
 *
 * @module
 */
import { TransportError } from "../core/errors.ts";
import { addPhase, PHASE_WAITING, phasesOn } from "../core/phases.ts";
import { Grace, Lifecycle } from "./_lifecycle.ts";
import {
  initRing,
  Ring,
  RingReader,
  ringRegionBytes,
  RingWriter,
  STATE_ABORTED,
  STATE_CLOSED,
} from "./_ring.ts";
import {
  DESC_BYTES,
  type MessageHeader,
  type Pair,
  pairOf,
  type RecvCheck,
  type Transport,
} from "./transport.ts";

/** Bytes of an inbox's header. */
export const INBOX_HEADER_BYTES = 4096;
const INBOX_MAGIC = 0x42494344; // "DCIB" little-endian
const INBOX_VERSION = 1;
/** Word index of the inbox's magic. */
const I_MAGIC = 0;
const I_VERSION = 1;
const I_SIZE = 2;
const I_OWNER = 3;
const I_RING_BYTES = 4;
const I_OWNER_PID = 5;
/** Word index of the count of peers that mapped the inbox. */
export const I_ATTACHED = 6;
/** Word index of the flag that an inbox is in use (in-process meshes are single-use). */
export const I_CLAIMED = 7;
/** Word index of the doorbell. */
export const I_BELL = 16;
/** Word index of the owner's "sleeping" flag. */
export const I_SLEEPING = 32;

/** How often a waiting rank checks that its peers are alive. */
export const LIVENESS_MS = 100;
/** How long a rank may copy without yielding to its event loop. */
const SLICE_MS = 2;

/** The shape of an inbox. */
export interface InboxShape {
  /** The world size. */
  readonly size: number;
  /** The rank that reads from it. */
  readonly owner: number;
  /** Capacity of each ring. */
  readonly ringBytes: number;
}

/**
 * Bytes of an inbox.
 *
 * @param size The world size.
 * @param ringBytes Capacity of each ring.
 * @returns Bytes.
 */
export function inboxBytes(size: number, ringBytes: number): number {
  return INBOX_HEADER_BYTES + (size - 1) * ringRegionBytes(ringBytes);
}

/**
 * Writes an empty inbox into zeroed memory: header and one ring per peer.
 *
 * @param buffer At least {@linkcode inboxBytes} bytes.
 * @param shape World size, owner and ring size.
 * @param pid The owner's process id.
 */
export function initInbox(buffer: ArrayBufferLike, shape: InboxShape, pid: number): void {
  const words = new Int32Array(buffer, 0, INBOX_HEADER_BYTES / 4);
  words[I_VERSION] = INBOX_VERSION;
  words[I_SIZE] = shape.size;
  words[I_OWNER] = shape.owner;
  words[I_RING_BYTES] = shape.ringBytes;
  words[I_OWNER_PID] = pid;
  for (let peer = 0; peer < shape.size; peer++) {
    if (peer === shape.owner) continue;
    initRing(buffer, ringOffset(shape, peer), shape.ringBytes);
    new Ring(buffer, ringOffset(shape, peer)).setPid("reader", pid);
  }
  Atomics.store(words, I_MAGIC, INBOX_MAGIC);
}

function ringOffset(shape: InboxShape, peer: number): number {
  const slot = peer < shape.owner ? peer : peer - 1;
  return INBOX_HEADER_BYTES + slot * ringRegionBytes(shape.ringBytes);
}

/** An inbox as any rank sees it. */
export class Inbox {
  /** The header as i32 words (doorbell, sleeping flag, counters). */
  readonly words: Int32Array;
  /** Its shape. */
  readonly shape: InboxShape;
  readonly #buffer: ArrayBufferLike;

  /**
   * @param buffer The inbox's memory.
   * @param shape What the inbox must look like.
   * @throws {TransportError} If the memory holds no inbox or one of another shape.
   */
  constructor(buffer: ArrayBufferLike, shape: InboxShape) {
    this.#buffer = buffer;
    this.shape = shape;
    this.words = new Int32Array(buffer, 0, INBOX_HEADER_BYTES / 4);
    const w = this.words;
    if (Atomics.load(w, I_MAGIC) !== INBOX_MAGIC || w[I_VERSION] !== INBOX_VERSION) {
      throw new TransportError(`Expected the inbox of rank ${shape.owner}, found no inbox (bad magic)`);
    }
    const found = { size: w[I_SIZE], owner: w[I_OWNER], ringBytes: w[I_RING_BYTES] };
    if (found.size !== shape.size || found.owner !== shape.owner || found.ringBytes !== shape.ringBytes) {
      throw new TransportError(
        `Expected the inbox of rank ${shape.owner} of ${shape.size} ranks with rings of ${shape.ringBytes} ` +
          `bytes, found rank ${found.owner} of ${found.size} with rings of ${found.ringBytes} bytes`,
        { peer: shape.owner },
      );
    }
  }

  /** The owner's process id. */
  get ownerPid(): number {
    return Atomics.load(this.words, I_OWNER_PID);
  }

  /**
   * The ring in which `peer` writes to the owner.
   *
   * @param peer Another rank.
   * @returns The ring.
   */
  ring(peer: number): Ring {
    return new Ring(this.#buffer, ringOffset(this.shape, peer));
  }
}

/** How a rank sleeps on its doorbell and wakes a peer sleeping on its own. */
export interface Sleeper {
  /**
   * Waits until the own doorbell no longer holds `seq`, or `ms` passed; may return early.
   *
   * @param seq The doorbell's value when the caller last looked.
   * @param ms The longest wait.
   */
  sleep(seq: number, ms: number): Promise<void>;
  /**
   * Wakes the owner of `peer`'s inbox from a sleep on its doorbell.
   *
   * @param peer The rank.
   */
  wake(peer: number): void;
}

/** What a concrete transport hands to {@linkcode RingTransport}. */
export interface RingTransportInit {
  /** `"inproc"` or `"shm"`. */
  readonly kind: string;
  /** This rank. */
  readonly rank: number;
  /** The world size. */
  readonly size: number;
  /**
   * Every rank's inbox (this rank's own included); `undefined` for a rank this one does not talk to (the
   * ranks of other hosts, in a {@linkcode HybridTransport}), which then has no pair.
   */
  readonly inboxes: readonly (Inbox | undefined)[];
  /** Sleeps and wakes on doorbells. */
  readonly sleeper: Sleeper;
  /** Microseconds to spin on the doorbell before sleeping. */
  readonly spinUs: number;
  /**
   * Says how `peer` died, if it did (as `"died (pid 1234)"`), or `undefined` if it is alive. Called every
   * {@linkcode LIVENESS_MS} of waiting, for the peers waited on.
   */
  readonly liveness?: (peer: number) => string | undefined;
  /** Frees the memory once nothing can touch it any more. Called once. */
  readonly release: () => void;
}

/** One peer: the ring this rank writes into and the ring it reads from. */
class RingPair implements Pair {
  readonly peer: number;
  readonly writer: RingWriter;
  readonly reader: RingReader;
  readonly #host: RingTransport;

  constructor(host: RingTransport, peer: number, writer: RingWriter, reader: RingReader) {
    this.#host = host;
    this.peer = peer;
    this.writer = writer;
    this.reader = reader;
  }

  send(desc: Uint8Array, payload: Uint8Array): Promise<void> {
    if (desc.length !== DESC_BYTES) {
      return Promise.reject(
        new RangeError(`Expected a descriptor of ${DESC_BYTES} bytes, found ${desc.length}`),
      );
    }
    const unusable = this.#host.unusable(this.peer, true);
    if (unusable !== undefined) return Promise.reject(unusable);
    const done = this.writer.send(desc, payload);
    this.#host.kick(this);
    return done;
  }

  recv(into: Uint8Array, check?: RecvCheck): Promise<Uint8Array> {
    const unusable = this.#host.unusable(this.peer, false);
    if (unusable !== undefined) return Promise.reject(unusable);
    const done = this.reader.recv(into, check);
    this.#host.kick(this);
    return done;
  }

  cancelProbe(): void {
    this.reader.cancelProbe();
  }

  probe(): Promise<MessageHeader> {
    const unusable = this.#host.unusable(this.peer, false);
    if (unusable !== undefined) return Promise.reject(unusable);
    const probe = this.reader.probe();
    this.#host.kick(this);
    return probe;
  }
}

/** A {@linkcode Transport} over one inbox per rank; `inproc.ts` and `shm.ts` wrap it. */
export class RingTransport implements Transport {
  /** `"inproc"` or `"shm"`. */
  readonly kind: string;
  /** This rank. */
  readonly rank: number;
  /** The number of ranks. */
  readonly size: number;
  /** Resolves with the error that failed the transport; never resolves if it only closes. */
  readonly failed: Promise<Error>;

  readonly #init: RingTransportInit;
  readonly #life: Lifecycle;
  readonly #pairs: (RingPair | undefined)[];
  readonly #own: Int32Array;
  readonly #peerWords: (Int32Array | undefined)[];
  /** The progress loop (the last one started). */
  #loop: Promise<void> | undefined;
  /** Whether the loop runs; cleared synchronously when it ends, so that a kick right after restarts it. */
  #running = false;
  /** Set once the loop must stop for good. */
  #stopping = false;
  #stopped: Promise<void> | undefined;
  #channel: MessageChannel | undefined;
  #onMacrotask: (() => void) | undefined;

  /**
   * @param init The inboxes, the sleeper and the hooks of the concrete transport.
   */
  constructor(init: RingTransportInit) {
    this.#init = init;
    this.kind = init.kind;
    this.rank = init.rank;
    this.size = init.size;
    this.#life = new Lifecycle({
      name: init.kind,
      rank: init.rank,
      onFail: (error) => this.#onFail(error),
      onClose: (closed) => this.#closeGracefully(closed),
    });
    this.failed = this.#life.failed;
    const own = init.inboxes[init.rank] as Inbox;
    this.#own = own.words;
    this.#peerWords = init.inboxes.map((inbox, peer) => peer === init.rank ? undefined : inbox?.words);
    this.#pairs = init.inboxes.map((inbox, peer) => {
      if (peer === init.rank || inbox === undefined) return undefined;
      const notify = (): void => this.#ring(peer);
      const out = inbox.ring(init.rank);
      const writer = new RingWriter(out, { writer: init.rank, reader: peer, notify });
      const reader = new RingReader(own.ring(peer), { writer: peer, reader: init.rank, notify });
      return new RingPair(this, peer, writer, reader);
    });
  }

  /**
   * The pair with `peer`.
   *
   * @param peer Another rank.
   * @returns The pair.
   * @throws {RangeError} If `peer` is this rank or out of range.
   */
  pair(peer: number): Pair {
    return pairOf(this.#pairs, peer, this);
  }

  /**
   * Fails every pending and future operation with `error`, writes `error.message` into every ring shared
   * with a peer (so each fails with `Rank <this rank> aborted: <message>`), and frees the memory.
   * Idempotent, and a no-op after close.
   *
   * @param error Why.
   */
  abort(error: Error): void {
    this.#life.fail(error);
  }

  /**
   * Closes: peers see this rank closed on purpose and fail only if they still wait on it. Pending
   * receives reject at once; sends under way get up to a second to finish. After a failure, waits until
   * the memory is freed.
   */
  close(): Promise<void> {
    return this.#life.close();
  }

  /** Same as {@linkcode RingTransport.close}. */
  [Symbol.asyncDispose](): Promise<void> {
    return this.close();
  }

  /**
   * The error a new operation with `peer` rejects with: the failure, the close, the peer's abort, or, for
   * a send, the peer's close (nobody would read it).
   */
  unusable(peer: number, sending: boolean): Error | undefined {
    const settled = this.#life.unusable();
    if (settled !== undefined) return settled;
    const pair = this.#pairs[peer] as RingPair;
    try {
      this.#checkPeer(pair);
      if (sending && pair.writer.ring.state("reader") === STATE_CLOSED) {
        throw this.#life.peerClosed("send to", peer);
      }
    } catch (error) {
      this.#life.fail(error);
      return this.#life.failure;
    }
    return undefined;
  }

  /** Progresses `pair` at once, then makes sure the loop runs if anything is left. */
  kick(pair: RingPair): void {
    try {
      pair.writer.progress();
      pair.reader.progress();
      this.#checkPeer(pair);
    } catch (error) {
      this.#life.fail(error);
      return;
    }
    if (!this.#running && !this.#stopping && this.#hasPending()) {
      this.#running = true;
      this.#loop = this.#run();
    }
  }

  #hasPending(): boolean {
    for (const pair of this.#pairs) {
      if (pair !== undefined && (pair.writer.pending || pair.reader.pending)) return true;
    }
    return false;
  }

  /** Rings `peer`'s doorbell, waking it if it sleeps. */
  #ring(peer: number): void {
    const words = this.#peerWords[peer] as Int32Array;
    Atomics.add(words, I_BELL, 1);
    if (Atomics.load(words, I_SLEEPING) !== 0) this.#init.sleeper.wake(peer);
  }

  /** Throws if the peer aborted, or closed while this rank still needs it. */
  #checkPeer(pair: RingPair): void {
    const inbound = pair.reader.ring.state("writer");
    const outbound = pair.writer.ring.state("reader");
    if (inbound === STATE_ABORTED) throw pair.reader.peerAborted(pair.reader.ring.reason("writer"));
    if (outbound === STATE_ABORTED) throw pair.reader.peerAborted(pair.writer.ring.reason("reader"));
    // The state was read before the ring: whatever the peer wrote before closing is visible now.
    if (inbound === STATE_CLOSED && pair.reader.pending && !pair.reader.unread) {
      throw this.#life.peerClosed("receive from", pair.peer);
    }
    if (outbound === STATE_CLOSED && pair.writer.pending) throw this.#life.peerClosed("send to", pair.peer);
  }

  /** One pass over every pair; throws the first failure. */
  #progressAll(): boolean {
    let moved = false;
    for (const pair of this.#pairs) {
      if (pair === undefined) continue;
      if (pair.writer.progress()) moved = true;
      if (pair.reader.progress()) moved = true;
      this.#checkPeer(pair);
    }
    return moved;
  }

  #checkLiveness(): void {
    const liveness = this.#init.liveness;
    if (liveness === undefined) return;
    for (const pair of this.#pairs) {
      const probed = pair?.reader.takeProbed() ?? false;
      if (pair === undefined || !(pair.reader.pending || pair.writer.pending || probed)) continue;
      const death = liveness(pair.peer);
      if (death !== undefined) {
        const during = pair.reader.pending ? "a receive" : "a send";
        throw new TransportError(`Rank ${pair.peer} ${death} during ${during}`, { peer: pair.peer });
      }
    }
  }

  async #run(): Promise<void> {
    // Start after the caller's synchronous code, so that a rank posting several operations in a row
    // posts them all before the loop spins.
    await undefined;
    const spinMs = this.#init.spinUs / 1000;
    let sliceStart = performance.now();
    let lastCheck = sliceStart;
    try {
      while (!this.#stopping && this.#hasPending()) {
        const seq = Atomics.load(this.#own, I_BELL);
        const moved = this.#progressAll();
        const now = performance.now();
        if (now - lastCheck >= LIVENESS_MS) {
          lastCheck = now;
          this.#checkLiveness();
        }
        if (moved) {
          // Let the continuations of completed operations run after every step (a send waiting for the
          // receive that just completed posts itself now, not after the next megabytes), and timers and
          // I/O now and then.
          if (now - sliceStart >= SLICE_MS) {
            await this.#macrotask();
            sliceStart = performance.now();
          } else await null;
          continue;
        }
        if (spinMs > 0) {
          const until = now + spinMs;
          while (Atomics.load(this.#own, I_BELL) === seq && performance.now() < until) {
            // Spin: a peer that answers within microseconds is seen without a sleep and a wake-up.
          }
          if (Atomics.load(this.#own, I_BELL) !== seq) {
            if (phasesOn) addPhase(PHASE_WAITING, performance.now() - now);
            continue;
          }
        }
        Atomics.store(this.#own, I_SLEEPING, 1);
        if (Atomics.load(this.#own, I_BELL) === seq) await this.#init.sleeper.sleep(seq, LIVENESS_MS);
        Atomics.store(this.#own, I_SLEEPING, 0);
        sliceStart = performance.now();
        // Nothing moved from `now` until the bell rang: waiting for a peer.
        if (phasesOn) addPhase(PHASE_WAITING, sliceStart - now);
      }
    } catch (error) {
      this.#life.fail(error);
    } finally {
      this.#running = false;
      this.#channel?.port1.close();
      this.#channel?.port2.close();
      this.#channel = undefined;
    }
  }

  /**
   * One turn of the event loop. setTimeout(0) takes about 2 ms in Deno; a MessageChannel message about
   * 10 µs. The channel exists only while the loop runs: an open port keeps the process alive.
   */
  #macrotask(): Promise<void> {
    if (this.#channel === undefined) {
      this.#channel = new MessageChannel();
      this.#channel.port1.onmessage = () => this.#onMacrotask?.();
    }
    const channel = this.#channel;
    return new Promise((resolve) => {
      this.#onMacrotask = resolve;
      channel.port2.postMessage(null);
    });
  }

  /** The first failure: the reason goes into every shared ring, and every operation rejects. */
  #onFail(error: Error): Promise<void> {
    const reason = error.message;
    for (const pair of this.#pairs) {
      if (pair === undefined) continue;
      pair.writer.ring.abort("writer", reason);
      pair.reader.ring.abort("reader", reason);
      pair.writer.writeAbortFrame(reason);
      pair.writer.rejectAll(error);
      pair.reader.rejectAll(error);
      this.#ring(pair.peer);
    }
    return this.#stop();
  }

  /** Rejects receives, lets sends finish for a while, tells the peers, stops. (Failures are ignored now.) */
  async #closeGracefully(closed: TransportError): Promise<void> {
    for (const pair of this.#pairs) pair?.reader.rejectAll(closed);
    await new Grace().waitWhile(() => this.#running && this.#hasPending());
    for (const pair of this.#pairs) {
      if (pair === undefined) continue;
      pair.writer.rejectAll(closed);
      pair.writer.ring.close("writer");
      pair.reader.ring.close("reader");
      this.#ring(pair.peer);
    }
    await this.#stop();
  }

  /** Stops the loop (waking it from a sleep), then frees the memory. */
  #stop(): Promise<void> {
    return this.#stopped ??= (async () => {
      this.#stopping = true;
      Atomics.add(this.#own, I_BELL, 1);
      this.#init.sleeper.wake(this.rank);
      this.#onMacrotask?.();
      await this.#loop;
      this.#init.release();
    })();
  }
}
