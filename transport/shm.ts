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
import type { Pair, Transport } from "./transport.ts";

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
    const { rank, size } = options;
    if (!Number.isInteger(size) || size < 1) throw new RangeError(`Expected size >= 1, found ${size}`);
    if (!Number.isInteger(rank) || rank < 0 || rank >= size) {
      throw new RangeError(`Expected rank in 0..${size - 1}, found ${rank}`);
    }
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
    const shape = (owner: number): InboxShape => ({ size, owner, ringBytes });
    const name = `/dcomm-${pid}-${rank}-${randomHex(8)}`;
    const mappings: (SharedMapping | undefined)[] = new Array(size).fill(undefined);
    try {
      const fd = shmOpen(name, { create: true });
      try {
        ftruncate(fd, bytes);
        fallocate(fd, bytes);
        mappings[rank] = mmapShared(fd, bytes);
      } finally {
        closeFd(fd);
      }
      initInbox(mappings[rank].buffer, shape(rank), pid);
      if (layout !== undefined) {
        initSegmentArea(mappings[rank].buffer, areaOffset, { layout, rank, size, pid });
      }
      const address: InboxAddress = { name, size, ringBytes, pid, segment: layout ?? null };
      await store.set(`${prefix}inbox/${rank}`, JSON.stringify(address));

      const attached = await Promise.allSettled(peers.map(async (peer) => {
        const value = await store.get(`${prefix}inbox/${peer}`, {
          timeoutMs: Math.max(1, deadline - performance.now()),
        });
        const theirs = JSON.parse(new TextDecoder().decode(value)) as InboxAddress;
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
        if (segmentText(theirs.segment) !== segmentText(layout)) {
          throw new TransportError(
            `Rank ${peer} uses ${segmentText(theirs.segment)} but rank ${rank} uses ${segmentText(layout)}`,
            { peer },
          );
        }
        let fd: number;
        try {
          fd = shmOpen(theirs.name);
        } catch (error) {
          throw new TransportError(
            `Cannot open the inbox ${theirs.name} of rank ${peer} (pid ${theirs.pid}): the segment is gone. ` +
              `Is "${prefix}inbox/${peer}" left in the store by an earlier world? Give each world its own prefix`,
            { peer, cause: error },
          );
        }
        try {
          mappings[peer] = mmapShared(fd, bytes);
        } finally {
          closeFd(fd);
        }
        const inbox = new Inbox(mappings[peer].buffer, shape(peer));
        inbox.ring(rank).setPid("writer", pid);
        if (Atomics.add(inbox.words, I_ATTACHED, 1) + 1 === peers.length) shmUnlink(theirs.name);
      }));
      const failures = peers.flatMap((peer, i) => {
        const result = attached[i];
        return result.status === "rejected" ? [{ peer, reason: result.reason as unknown }] : [];
      });
      const other = failures.find((failure) => !(failure.reason instanceof TimeoutError));
      if (other !== undefined) throw other.reason;
      if (failures.length > 0) {
        throw new TimeoutError(
          `Cannot connect the shm transport of rank ${rank}: ${ranksText(failures.map((f) => f.peer))} did ` +
            `not show up within ${timeoutMs} ms`,
          { cause: failures[0].reason },
        );
      }

      const own = new Inbox(mappings[rank].buffer, shape(rank));
      for (let wait = 1; Atomics.load(own.words, I_ATTACHED) < peers.length; wait = Math.min(wait * 2, 10)) {
        if (performance.now() >= deadline) {
          const missing = peers.filter((peer) => own.ring(peer).pid("writer") === 0);
          throw new TimeoutError(
            `Cannot connect the shm transport of rank ${rank}: ${ranksText(missing)} did not map its inbox ` +
              `within ${timeoutMs} ms`,
          );
        }
        await sleep(wait);
      }
      shmUnlink(name);
    } catch (error) {
      try {
        shmUnlink(name);
      } catch {
        // Best effort: the error that got us here matters more.
      }
      for (const mapping of mappings) if (mapping !== undefined) munmap(mapping);
      throw error;
    }

    const maps = mappings;
    let segment: HostSegment | undefined;
    if (layout !== undefined) {
      try {
        segment = HostSegment.attach({
          pointers: maps.map((m) =>
            Number(Deno.UnsafePointer.value((m as SharedMapping).pointer)) + areaOffset
          ),
          layout,
          rank,
        });
      } catch (error) {
        for (const mapping of maps) if (mapping !== undefined) munmap(mapping);
        throw error;
      }
    }
    const inboxes = maps.map((mapping, owner) => mapping && new Inbox(mapping.buffer, shape(owner)));
    // A peer in another pid namespace (a container sharing /dev/shm) has a pid that means nothing here:
    // it would look dead at once. Every peer is alive now, so the ones whose pid is not found are those.
    const watched = inboxes.map((inbox, peer) =>
      peer !== rank && inbox !== undefined && processExists(inbox.ownerPid)
    );
    const core = new RingTransport({
      kind: "shm",
      rank,
      size,
      inboxes,
      sleeper: SYS_FUTEX === undefined ? new PollSleeper() : new FutexSleeper(maps, rank),
      spinUs,
      liveness: (peer) => {
        if (!watched[peer]) return undefined;
        const peerPid = (inboxes[peer] as Inbox).ownerPid;
        return hasExited(peerPid) ? `died (pid ${peerPid})` : undefined;
      },
      release: () => {
        for (const mapping of maps) if (mapping !== undefined) munmap(mapping);
      },
    });
    return new ShmTransport(core, segment);
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
