/**
 * {@linkcode ShmTransport}: messages between processes of one host through POSIX shared memory
 * (`/dev/shm`), mapped with `mmap` through FFI (`ffi/libc/libc.ts`); needs `--allow-ffi`.
 *
 * ## Connect phase
 * Each rank creates one segment, its inbox (`inboxBytes(size, ringBytes)`: a header with its doorbell,
 * then one ring per peer in which that peer writes to it; see `_ring_transport.ts`), reserves its pages
 * (`posix_fallocate`, so a full `/dev/shm` fails here and not as a SIGBUS later), and publishes its name
 * under `<prefix>inbox/<rank>` in the store. It then maps every peer's inbox, writes its pid into the ring
 * it writes to there, and counts itself in that inbox's "attached" word. The last peer to attach removes
 * the segment's name, and so does the owner once all have attached (ENOENT is fine): from the end of the
 * connect phase on, nothing is left in `/dev/shm`, whatever happens to the processes afterwards. (One
 * inbox per reader rather than per pair gives each rank a single doorbell to sleep on, whoever it waits
 * for.)
 *
 * ## Waiting
 * The memory is a plain ArrayBuffer over the mapping: `Atomics` loads, stores and adds work on it, but
 * `Atomics.wait` and `waitAsync` do not. A waiting rank spins on its doorbell for `spinUs`, then sleeps in
 * a futex wait on it, made by a nonblocking FFI call (a pool thread sleeps; the event loop runs on), and a
 * peer that rings the doorbell while the owner's "sleeping" flag is set wakes it with a futex wake.
 *
 * Why this mechanism — measured between two processes on a 2-core VM, as the round trip of a ping-pong on
 * one mapped word, and the CPU a rank burns while it waits 1 s for a busy peer:
 *
 * | waiting by                                   | round trip | CPU while waiting |
 * |----------------------------------------------|------------|-------------------|
 * | setTimeout(0) polls (Deno fires them ~2 ms)  | 2.3 ms     | 3–4 %             |
 * | MessageChannel message per poll              | 100 µs     | 80–85 %           |
 * | futex wait, nonblocking FFI call             | 95–105 µs  | 1 %               |
 * | synchronous spin (blocks the event loop)     | 8 µs       | 100 %             |
 *
 * The futex gives the channel's latency at no CPU; the short spin in front of it catches a peer that
 * answers at once (the transport's ping-pong round trip is 20–50 µs with the default 20 µs spin, 135–150 µs
 * without it). Where the futex call number is not known (other than x86_64 and aarch64), the rank sleeps
 * 1 ms at a time instead. In-process ranks (`inproc.ts`) have SharedArrayBuffers and `Atomics.waitAsync`:
 * 40 µs round trip, asleep at no CPU.
 *
 * ## Failure model
 * As `transport.ts` says, plus liveness: every 100 ms of waiting, a rank checks with `kill(pid, 0)` that
 * each peer it waits for still exists (and, where `/proc` is readable, is not a zombie), so a peer that
 * dies mid-collective fails the transport within a few hundred milliseconds:
 * `Rank 3 died (pid 1234) during a receive`. (A peer whose pid is not visible from here, in another pid
 * namespace, is not watched.) {@linkcode ShmTransport.abort} writes the reason into every
 * ring shared with a peer and sets its aborted flag: peers fail with `Rank 2 aborted: <reason>`.
 *
 * @module
 */
import { TimeoutError, TransportError } from "../core/errors.ts";
import {
  close as closeFd,
  fallocate,
  ftruncate,
  futexWait,
  futexWake,
  getpid,
  mmapShared,
  munmap,
  processExists,
  type SharedMapping,
  shmOpen,
  shmUnlink,
  SYS_FUTEX,
} from "../ffi/libc/libc.ts";
import type { Store } from "../store/store.ts";
import { hasExited } from "./_liveness.ts";
import { checkRingBytes, DEFAULT_RING_BYTES } from "./_ring.ts";
import {
  checkSegmentLayout,
  HostSegment,
  initSegmentArea,
  segmentAreaBytes,
  type SegmentLayout,
} from "./segment.ts";
import {
  I_ATTACHED,
  I_BELL,
  Inbox,
  inboxBytes,
  type InboxShape,
  initInbox,
  RingTransport,
  type Sleeper,
} from "./_ring_transport.ts";
import { checkRank, type Pair, type Transport } from "./transport.ts";

/** Options of {@linkcode ShmTransport.connect}. */
export interface ShmTransportOptions {
  /** This rank, in `0..size-1`. */
  rank: number;
  /** The number of ranks. */
  size: number;
  /**
   * The ranks this one connects to, all on this host; the others have no pair (a
   * `HybridTransport` reaches them over TCP). Every rank of the list must pass a list that
   * holds this rank. No host segment then.
   *
   * @default every other rank
   */
  peers?: readonly number[];
  /**
   * Capacity of the ring from each rank to each other rank, in bytes (64 B to 1 GiB). Messages of any
   * size stream through. Each rank's segment holds `size − 1` rings, so `/dev/shm` must hold about
   * `size·(size−1)·ringBytes` (Docker's default of 64 MiB holds 4 ranks of 4 MiB rings, not 8). Every
   * rank must use the same value.
   *
   * @default {4194304}
   */
  ringBytes?: number;
  /**
   * How long the connect phase may take, in milliseconds, before it throws a `TimeoutError` naming the
   * ranks that did not show up.
   *
   * @default {300000}
   */
  timeoutMs?: number;
  /**
   * Prefix of this transport's keys in the store, so that several worlds (or groups) share one store.
   * Each world needs its own prefix.
   *
   * @default {"shm/"}
   */
  prefix?: string;
  /**
   * Microseconds a waiting rank spins on its doorbell before it sleeps. Spinning answers a peer that
   * replies at once in microseconds instead of a wake-up (about 40 µs), at the price of a busy core.
   *
   * @default {20}
   */
  spinUs?: number;
  /**
   * Also make this rank's area of the host segment (`segment.ts`), in the same `/dev/shm` object as its
   * inbox, with these buffers; {@linkcode ShmTransport.segment} then maps every rank's area. Every rank
   * must pass the same layout, or none.
   *
   * @default undefined (no segment)
   */
  segment?: SegmentLayout;
}

/** What a rank publishes about its inbox. */
interface InboxAddress {
  name: string;
  size: number;
  ringBytes: number;
  pid: number;
  /** The segment's layout, or null without one. */
  segment: SegmentLayout | null;
}

/** Sleeps in a futex wait on the own doorbell; wakes peers with a futex wake on theirs. */
class FutexSleeper implements Sleeper {
  readonly #bells: (Deno.PointerObject | undefined)[];
  readonly #own: Deno.PointerObject;

  constructor(mappings: readonly (SharedMapping | undefined)[], rank: number) {
    // A mapping's address is never 0, so neither is an offset into it.
    this.#bells = mappings.map((m) =>
      m === undefined ? undefined : Deno.UnsafePointer.offset(m.pointer, I_BELL * 4) as Deno.PointerObject
    );
    this.#own = this.#bells[rank] as Deno.PointerObject;
  }

  sleep(seq: number, ms: number): Promise<void> {
    return futexWait(this.#own, seq, ms);
  }

  wake(peer: number): void {
    const bell = this.#bells[peer];
    if (bell !== undefined) futexWake(bell);
  }
}

/** Where futex is not available: sleeps a millisecond at a time (Deno's timer granularity). */
class PollSleeper implements Sleeper {
  sleep(): Promise<void> {
    return new Promise((resolve) => setTimeout(resolve, 1));
  }

  wake(): void {}
}

function randomHex(bytes: number): string {
  return Array.from(crypto.getRandomValues(new Uint8Array(bytes)), (b) => b.toString(16).padStart(2, "0"))
    .join(
      "",
    );
}

function ranksText(ranks: readonly number[]): string {
  return `rank${ranks.length > 1 ? "s" : ""} ${ranks.join(", ")}`;
}

const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

/** What the steps of {@linkcode ShmTransport.connect} share: the checked options, and what is mapped. */
interface Connecting {
  readonly store: Store;
  readonly rank: number;
  readonly size: number;
  readonly ringBytes: number;
  readonly timeoutMs: number;
  readonly spinUs: number;
  readonly prefix: string;
  readonly layout: SegmentLayout | undefined;
  /** The ranks this one connects to, sorted, without itself. */
  readonly peers: readonly number[];
  readonly deadline: number;
  readonly pid: number;
  /** The name of this rank's segment in `/dev/shm`. */
  readonly name: string;
  /** Where the segment area starts in each rank's object. */
  readonly areaOffset: number;
  /** Bytes of each rank's object. */
  readonly bytes: number;
  /** Every rank's object once mapped here, this rank's own included; a failed connect unmaps them. */
  readonly mappings: (SharedMapping | undefined)[];
}

/** Checks `connect`'s options, fills in the defaults, and starts the clock. */
function connecting(store: Store, options: ShmTransportOptions): Connecting {
  const { rank, size } = options;
  checkRank(rank, size);
  const ringBytes = checkRingBytes(options.ringBytes ?? DEFAULT_RING_BYTES);
  const timeoutMs = options.timeoutMs ?? 300_000;
  if (!(timeoutMs > 0)) throw new RangeError(`Expected timeoutMs > 0, found ${timeoutMs}`);
  const spinUs = options.spinUs ?? 20;
  if (!(spinUs >= 0)) throw new RangeError(`Expected spinUs >= 0, found ${spinUs}`);
  const prefix = options.prefix ?? "shm/";
  if (typeof prefix !== "string") throw new TypeError(`Expected a string prefix, found ${typeof prefix}`);
  const layout = options.segment === undefined ? undefined : checkSegmentLayout(options.segment);
  const peers = options.peers === undefined
    ? Array.from({ length: size }, (_, peer) => peer).filter((peer) => peer !== rank)
    : [...new Set(options.peers)].filter((peer) => peer !== rank).sort((a, b) => a - b);
  if (peers.some((peer) => !Number.isInteger(peer) || peer < 0 || peer >= size)) {
    throw new RangeError(`Expected peers in 0..${size - 1}, found ${options.peers?.join(", ")}`);
  }
  if (layout !== undefined && peers.length !== size - 1) {
    throw new RangeError("A host segment needs every rank: a shm transport with peers has none");
  }
  const deadline = performance.now() + timeoutMs;
  const pid = getpid();
  // The segment area follows the inbox, 64 KiB-aligned (wasm pages, for mapping it into wasm memory).
  const areaOffset = Math.ceil(inboxBytes(size, ringBytes) / 65536) * 65536;
  const bytes = layout === undefined ? inboxBytes(size, ringBytes) : areaOffset + segmentAreaBytes(layout);
  return {
    store,
    rank,
    size,
    ringBytes,
    timeoutMs,
    spinUs,
    prefix,
    layout,
    peers,
    deadline,
    pid,
    name: `/dcomm-${pid}-${rank}-${randomHex(8)}`,
    areaOffset,
    bytes,
    mappings: new Array(size).fill(undefined),
  };
}

function shapeOf(c: Connecting, owner: number): InboxShape {
  return { size: c.size, owner, ringBytes: c.ringBytes };
}

function unmapAll(mappings: readonly (SharedMapping | undefined)[]): void {
  for (const mapping of mappings) if (mapping !== undefined) munmap(mapping);
}

/**
 * Creates this rank's object in `/dev/shm` with its pages reserved, maps it, writes an empty inbox (and
 * segment area) into it, and publishes its address.
 */
async function createInbox(c: Connecting): Promise<void> {
  const { rank, layout } = c;
  const fd = shmOpen(c.name, { create: true });
  try {
    ftruncate(fd, c.bytes);
    fallocate(fd, c.bytes);
    c.mappings[rank] = mmapShared(fd, c.bytes);
  } finally {
    closeFd(fd);
  }
  initInbox(c.mappings[rank].buffer, shapeOf(c, rank), c.pid);
  if (layout !== undefined) {
    initSegmentArea(c.mappings[rank].buffer, c.areaOffset, { layout, rank, size: c.size, pid: c.pid });
  }
  const address: InboxAddress = {
    name: c.name,
    size: c.size,
    ringBytes: c.ringBytes,
    pid: c.pid,
    segment: layout ?? null,
  };
  await c.store.set(`${c.prefix}inbox/${rank}`, JSON.stringify(address));
}

/** Throws if `peer` runs with another world size, ring size or segment layout. */
function checkAddress(c: Connecting, peer: number, theirs: InboxAddress): void {
  const { rank, size, ringBytes } = c;
  if (theirs.size !== size || theirs.ringBytes !== ringBytes) {
    throw new TransportError(
      `Rank ${peer} uses size ${theirs.size} and ringBytes ${theirs.ringBytes} but rank ${rank} uses ` +
        `size ${size} and ringBytes ${ringBytes}`,
      { peer },
    );
  }
  const segmentText = (l: SegmentLayout | null | undefined): string =>
    l
      ? `${l.buffers} segment buffers of ${l.bufferBytes} bytes and a pool of ${l.poolBytes ?? 0} bytes`
      : "no segment";
  if (segmentText(theirs.segment) !== segmentText(c.layout)) {
    throw new TransportError(
      `Rank ${peer} uses ${segmentText(theirs.segment)} but rank ${rank} uses ${segmentText(c.layout)}`,
      { peer },
    );
  }
}

/**
 * Maps `peer`'s inbox once it is published, writes this rank's pid into the ring it writes there, and
 * counts itself in; the last to attach removes the inbox's name.
 */
async function attachPeer(c: Connecting, peer: number): Promise<void> {
  const value = await c.store.get(`${c.prefix}inbox/${peer}`, {
    timeoutMs: Math.max(1, c.deadline - performance.now()),
  });
  const theirs = JSON.parse(new TextDecoder().decode(value)) as InboxAddress;
  checkAddress(c, peer, theirs);
  let fd: number;
  try {
    fd = shmOpen(theirs.name);
  } catch (error) {
    throw new TransportError(
      `Cannot open the inbox ${theirs.name} of rank ${peer} (pid ${theirs.pid}): the segment is gone. ` +
        `Is "${c.prefix}inbox/${peer}" left in the store by an earlier world? Give each world its own prefix`,
      { peer, cause: error },
    );
  }
  try {
    c.mappings[peer] = mmapShared(fd, c.bytes);
  } finally {
    closeFd(fd);
  }
  const inbox = new Inbox(c.mappings[peer].buffer, shapeOf(c, peer));
  inbox.ring(c.rank).setPid("writer", c.pid);
  if (Atomics.add(inbox.words, I_ATTACHED, 1) + 1 === c.peers.length) shmUnlink(theirs.name);
}

/**
 * Attaches to every peer's inbox; throws the first error that is no timeout, else one timeout naming
 * every peer that did not show up.
 */
async function attachPeers(c: Connecting): Promise<void> {
  const { peers } = c;
  const attached = await Promise.allSettled(peers.map((peer) => attachPeer(c, peer)));
  const failures = peers.flatMap((peer, i) => {
    const result = attached[i];
    return result.status === "rejected" ? [{ peer, reason: result.reason as unknown }] : [];
  });
  const other = failures.find((failure) => !(failure.reason instanceof TimeoutError));
  if (other !== undefined) throw other.reason;
  if (failures.length > 0) {
    throw new TimeoutError(
      `Cannot connect the shm transport of rank ${c.rank}: ${ranksText(failures.map((f) => f.peer))} did ` +
        `not show up within ${c.timeoutMs} ms`,
      { cause: failures[0].reason },
    );
  }
}

/** Waits until every peer has mapped this rank's inbox. */
async function awaitAttached(c: Connecting): Promise<void> {
  const own = new Inbox((c.mappings[c.rank] as SharedMapping).buffer, shapeOf(c, c.rank));
  for (let wait = 1; Atomics.load(own.words, I_ATTACHED) < c.peers.length; wait = Math.min(wait * 2, 10)) {
    if (performance.now() >= c.deadline) {
      const missing = c.peers.filter((peer) => own.ring(peer).pid("writer") === 0);
      throw new TimeoutError(
        `Cannot connect the shm transport of rank ${c.rank}: ${ranksText(missing)} did not map its inbox ` +
          `within ${c.timeoutMs} ms`,
      );
    }
    await sleep(wait);
  }
}

/** Maps every rank's segment area for this thread, when connect was asked for a segment. */
function attachSegment(c: Connecting): HostSegment | undefined {
  const { layout } = c;
  if (layout === undefined) return undefined;
  try {
    return HostSegment.attach({
      pointers: c.mappings.map((m) =>
        Number(Deno.UnsafePointer.value((m as SharedMapping).pointer)) + c.areaOffset
      ),
      layout,
      rank: c.rank,
    });
  } catch (error) {
    unmapAll(c.mappings);
    throw error;
  }
}

/** The rings over the mapped inboxes, watching the peers' processes while it waits on them. */
function ringTransport(c: Connecting): RingTransport {
  const { rank, mappings } = c;
  const inboxes = mappings.map((mapping, owner) => mapping && new Inbox(mapping.buffer, shapeOf(c, owner)));
  // A peer in another pid namespace (a container sharing /dev/shm) has a pid that means nothing here:
  // it would look dead at once. Every peer is alive now, so the ones whose pid is not found are those.
  const watched = inboxes.map((inbox, peer) =>
    peer !== rank && inbox !== undefined && processExists(inbox.ownerPid)
  );
  return new RingTransport({
    kind: "shm",
    rank,
    size: c.size,
    inboxes,
    sleeper: SYS_FUTEX === undefined ? new PollSleeper() : new FutexSleeper(mappings, rank),
    spinUs: c.spinUs,
    liveness: (peer) => {
      if (!watched[peer]) return undefined;
      const peerPid = (inboxes[peer] as Inbox).ownerPid;
      return hasExited(peerPid) ? `died (pid ${peerPid})` : undefined;
    },
    release: () => unmapAll(mappings),
  });
}

/**
 * A rank's connections, through shared memory, to every other rank of a world on one host.
 *
 * @example Two ranks in one process
 * ```ts
 * import { MemoryStore } from "../store/memory_store.ts";
 * import { ShmTransport } from "./shm.ts";
 * import assert from "node:assert/strict";
 *
 * await using store = new MemoryStore();
 * const [a, b] = await Promise.all([0, 1].map((rank) => ShmTransport.connect(store, { rank, size: 2 })));
 * const got = new Uint8Array(3);
 * await Promise.all([a.pair(1).send(new Uint8Array(32), new Uint8Array([1, 2, 3])), b.pair(0).recv(got)]);
 * assert.deepEqual([...got], [1, 2, 3]);
 * await Promise.all([a.close(), b.close()]);
 * ```
 */
export class ShmTransport implements Transport {
  /** Always `"shm"`. */
  readonly kind: string = "shm";
  /** This rank. */
  readonly rank: number;
  /** The number of ranks. */
  readonly size: number;
  /** Resolves with the error that failed the transport; never resolves if it only closes. */
  readonly failed: Promise<Error>;
  /**
   * Every rank's area of the host segment, mapped for this thread, when `connect` was asked for one. It
   * outlives the transport (its mappings are its own): close it with {@linkcode HostSegment.close}.
   */
  readonly segment: HostSegment | undefined;
  readonly #core: RingTransport;

  private constructor(core: RingTransport, segment: HostSegment | undefined) {
    this.#core = core;
    this.segment = segment;
    this.rank = core.rank;
    this.size = core.size;
    this.failed = core.failed;
  }

  /**
   * Connects this rank to every other rank of the world: creates its inbox segment, exchanges segment
   * names through `store`, maps every peer's inbox, and removes the names once all are mapped. Every
   * rank of the world calls it with the same `size`, `ringBytes` and `prefix`.
   *
   * @param store The rendezvous store shared by the world.
   * @param options This rank, the world size, ring size, deadline, key prefix and spin time.
   * @returns The connected transport.
   * @throws {TypeError | RangeError} If an option is invalid.
   * @throws {TimeoutError} If some rank did not show up within `timeoutMs`; the message names each one.
   * @throws {TransportError} If a rank runs with another world size or ring size.
   * @throws {LibcError} If a segment cannot be created, sized or mapped (`/dev/shm` full: ENOSPC).
   */
  static async connect(store: Store, options: ShmTransportOptions): Promise<ShmTransport> {
    const c = connecting(store, options);
    try {
      await createInbox(c);
      await attachPeers(c);
      await awaitAttached(c);
      shmUnlink(c.name);
    } catch (error) {
      try {
        shmUnlink(c.name);
      } catch {
        // Best effort: the error that got us here matters more.
      }
      unmapAll(c.mappings);
      throw error;
    }
    const segment = attachSegment(c);
    return new ShmTransport(ringTransport(c), segment);
  }

  /**
   * The pair with `peer`.
   *
   * @param peer Another rank.
   * @returns The pair.
   * @throws {RangeError} If `peer` is this rank or out of range.
   */
  pair(peer: number): Pair {
    return this.#core.pair(peer);
  }

  /**
   * Fails every pending and future operation with `error`, writes `error.message` into every ring shared
   * with a peer and sets the aborted flag there (peers fail with `Rank <this rank> aborted: <message>`),
   * then unmaps the memory. Idempotent.
   *
   * @param error Why.
   */
  abort(error: Error): void {
    this.#core.abort(error);
  }

  /**
   * Closes: peers fail only if they still wait for this rank. Pending receives reject; sends under way
   * get up to a second to finish. Resolves once the memory is unmapped.
   */
  close(): Promise<void> {
    return this.#core.close();
  }

  /** Same as {@linkcode ShmTransport.close}, for `await using`. */
  [Symbol.asyncDispose](): Promise<void> {
    return this.#core.close();
  }
}
