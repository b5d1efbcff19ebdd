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
 * ## Fitting `/dev/shm`
 * With a host segment, rank 0 first reads the free space of `/dev/shm` (`statvfs`) and publishes under
 * `<prefix>segment` the layout every rank then uses: the one asked for if the world's objects fit, else the
 * same with smaller buffers, else none (the rings alone), with one warning on stderr that says why and how
 * to get the segment back (Docker's default 64 MiB `/dev/shm` holds 4 ranks of 4 MiB rings with buffers
 * of 512 KiB, not the default 1 MiB). The other ranks read it before they create their objects. A rank
 * whose object cannot be created removes it, publishes the reason under its inbox key instead of an
 * address (so its peers fail at once, naming it, rather than at the timeout), and throws a
 * `TransportError` that says how much `/dev/shm` has and needs, and the fixes.
 *
 * While a rank holds a name it created and not yet removed, SIGINT, SIGTERM and SIGHUP remove it first:
 * a listener unlinks the names, removes itself and sends the signal again, so its default action still
 * happens (a program with listeners of its own for that signal hears it twice). A thrown error or timeout
 * removes it too, and a peer that exits before it mapped this rank's inbox fails the connect within about
 * 100 ms. SIGKILL cannot be caught: a rank killed so during the connect phase leaves its object
 * (`rm /dev/shm/dcomm-<pid>-*`).
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
  ENOMEM,
  ENOSPC,
  fallocate,
  type FsSpace,
  ftruncate,
  futexWait,
  futexWake,
  getpid,
  LibcError,
  mmapShared,
  munmap,
  processExists,
  type SharedMapping,
  shmOpen,
  shmUnlink,
  signalProcess,
  statvfs,
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
  /**
   * With a `segment`: whether rank 0 may shrink it to what `/dev/shm` has free (smaller buffers, or no
   * segment at all), with a warning, rather than let the ranks fail with ENOSPC. Every rank must pass the
   * same value. {@linkcode ShmTransport.segment} has the layout used.
   *
   * @default {true}
   */
  fitSegment?: boolean;
  /**
   * Where rank 0 writes its one line about a segment shrunk or turned off to fit `/dev/shm`.
   *
   * @default console.error
   */
  log?: (line: string) => void;
}

/** What a rank publishes about its inbox. */
interface InboxAddress {
  name: string;
  size: number;
  ringBytes: number;
  pid: number;
  /** The segment's layout, or null without one. */
  segment: SegmentLayout | null;
  /** The owner's pid namespace (`/proc/self/ns/pid`), where readable: its pid means something here. */
  pidNamespace?: string;
}

/** What a rank publishes under its inbox key instead when it could not create its inbox. */
interface InboxFailure {
  /** Why, as its own error said. */
  error: string;
  pid: number;
}

/** What rank 0 publishes under `<prefix>segment`: the layout asked for, and the one every rank uses. */
interface SegmentPlan {
  asked: SegmentLayout | null;
  segment: SegmentLayout | null;
}

/** Where POSIX shared memory lives on Linux. */
const SHM_DIR = "/dev/shm";
/** The smallest buffers a shrunk segment gets: below that the rings serve as well. */
const MIN_SHRUNK_BUFFER_BYTES = 65536;

/** The signals whose default action ends a process, and that a rank holding a name intercepts. */
const CLEANUP_SIGNALS: readonly (readonly [Deno.Signal, number])[] = [
  ["SIGINT", 2],
  ["SIGTERM", 15],
  ["SIGHUP", 1],
];
/** The names this thread created in `/dev/shm` and has not removed yet. */
const held = new Set<string>();
/** The signal listeners, while `held` has names. */
let cleanupListeners: [Deno.Signal, () => void][] | undefined;

let ownPidNamespace: string | null | undefined;

/** This process's pid namespace, or null where `/proc` is not readable. */
function pidNamespace(): string | null {
  if (ownPidNamespace === undefined) {
    try {
      ownPidNamespace = Deno.readLinkSync("/proc/self/ns/pid");
    } catch {
      ownPidNamespace = null;
    }
  }
  return ownPidNamespace;
}

function unlinkQuietly(name: string): void {
  try {
    shmUnlink(name);
  } catch {
    // Best effort: whatever got us here matters more.
  }
}

function dropCleanupListeners(): void {
  for (const [signal, listener] of cleanupListeners ?? []) {
    try {
      Deno.removeSignalListener(signal, listener);
    } catch {
      // Already gone.
    }
  }
  cleanupListeners = undefined;
}

/**
 * Notes that `name` is about to be created: until {@linkcode releaseName}, a SIGINT, SIGTERM or SIGHUP
 * removes it (and every other name held), removes the listeners and sends itself the signal again.
 */
function holdName(name: string): void {
  held.add(name);
  if (cleanupListeners !== undefined) return;
  cleanupListeners = [];
  for (const [signal, number] of CLEANUP_SIGNALS) {
    const listener = (): void => {
      for (const n of held) unlinkQuietly(n);
      held.clear();
      dropCleanupListeners();
      // With nobody here listening, the signal does what it would have done without us.
      signalProcess(getpid(), number);
    };
    try {
      Deno.addSignalListener(signal, listener);
      cleanupListeners.push([signal, listener]);
    } catch {
      // A signal this platform does not deliver to listeners.
    }
  }
}

/** Forgets `name` (removed by now); the listeners go with the last one. */
function releaseName(name: string): void {
  held.delete(name);
  if (held.size === 0) dropCleanupListeners();
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
  /** The segment's layout asked for. */
  readonly asked: SegmentLayout | undefined;
  readonly fitSegment: boolean;
  readonly log: (line: string) => void;
  /** The layout used: the one asked for, or what rank 0 shrank it to (see `fitLayout`). */
  layout: SegmentLayout | undefined;
  /** The ranks this one connects to, sorted, without itself. */
  readonly peers: readonly number[];
  readonly deadline: number;
  readonly pid: number;
  /** The name of this rank's segment in `/dev/shm`. */
  readonly name: string;
  /** Where the segment area starts in each rank's object. */
  areaOffset: number;
  /** Bytes of each rank's object. */
  bytes: number;
  /** Every rank's object once mapped here, this rank's own included; a failed connect unmaps them. */
  readonly mappings: (SharedMapping | undefined)[];
  /** Each peer's pid, once its address is read. */
  readonly pids: (number | undefined)[];
  /** Aborted when the connect fails: waits still pending stop. */
  readonly abort: AbortController;
}

/** Where the segment area starts in a rank's object, and the object's bytes. */
function objectShape(
  size: number,
  ringBytes: number,
  layout: SegmentLayout | undefined,
): { areaOffset: number; bytes: number } {
  // The segment area follows the inbox, 64 KiB-aligned (wasm pages, for mapping it into wasm memory).
  const areaOffset = Math.ceil(inboxBytes(size, ringBytes) / 65536) * 65536;
  const bytes = layout === undefined ? inboxBytes(size, ringBytes) : areaOffset + segmentAreaBytes(layout);
  return { areaOffset, bytes };
}

/** The bytes of `/dev/shm` that `size` objects of `bytes` take (tmpfs allocates whole pages). */
function worldBytes(size: number, bytes: number): number {
  return size * Math.ceil(bytes / 4096) * 4096;
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
  const log = options.log ?? ((line: string) => console.error(line));
  if (typeof log !== "function") throw new TypeError(`Expected a function log, found ${typeof log}`);
  const deadline = performance.now() + timeoutMs;
  const pid = getpid();
  return {
    store,
    rank,
    size,
    ringBytes,
    timeoutMs,
    spinUs,
    prefix,
    asked: layout,
    fitSegment: options.fitSegment ?? true,
    log,
    layout,
    peers,
    deadline,
    pid,
    name: `/dcomm-${pid}-${rank}-${randomHex(8)}`,
    ...objectShape(size, ringBytes, layout),
    mappings: new Array(size).fill(undefined),
    pids: new Array(size).fill(undefined),
    abort: new AbortController(),
  };
}

function useLayout(c: Connecting, layout: SegmentLayout | undefined): void {
  c.layout = layout;
  Object.assign(c, objectShape(c.size, c.ringBytes, layout));
}

function shapeOf(c: Connecting, owner: number): InboxShape {
  return { size: c.size, owner, ringBytes: c.ringBytes };
}

function unmapAll(mappings: readonly (SharedMapping | undefined)[]): void {
  for (const mapping of mappings) if (mapping !== undefined) munmap(mapping);
}

const MIB = 1 << 20;

function mib(bytes: number): string {
  return `${(bytes / MIB).toFixed(1)} MiB`;
}

/** At least `bytes`, in whole MiB: what `docker run --shm-size=<n>m` takes. */
function ceilMib(bytes: number): number {
  return Math.ceil(bytes / MIB);
}

function bytesText(bytes: number): string {
  if (bytes % MIB === 0) return `${bytes / MIB} MiB`;
  return bytes % 1024 === 0 ? `${bytes / 1024} KiB` : `${bytes} bytes`;
}

function segmentText(l: SegmentLayout | null | undefined): string {
  return l
    ? `${l.buffers} segment buffers of ${l.bufferBytes} bytes and a pool of ${l.poolBytes ?? 0} bytes`
    : "no segment";
}

/** The bytes of `/dev/shm` this world takes with `layout`. */
function needs(c: Connecting, layout: SegmentLayout | undefined): number {
  return worldBytes(c.size, objectShape(c.size, c.ringBytes, layout).bytes);
}

function freeSpace(): FsSpace | undefined {
  try {
    return statvfs(SHM_DIR);
  } catch {
    return undefined; // not known here: the creation finds out
  }
}

/** `layout` with smaller buffers (halved, down to 64 KiB), the largest that fits `freeBytes`. */
function smallerLayout(c: Connecting, layout: SegmentLayout, freeBytes: number): SegmentLayout | undefined {
  for (
    let bufferBytes = Math.floor(layout.bufferBytes / 2 / 4096) * 4096;
    bufferBytes >= MIN_SHRUNK_BUFFER_BYTES;
    bufferBytes = Math.floor(bufferBytes / 2 / 4096) * 4096
  ) {
    const smaller = { ...layout, bufferBytes };
    if (needs(c, smaller) <= freeBytes) return smaller;
  }
  return undefined;
}

/**
 * Rank 0's choice of the layout every rank uses: the one asked for if the world's objects fit the free
 * space of `/dev/shm`, else the same with smaller buffers, else none; with one line to the log when it
 * is not the one asked for. Kept as asked when even the rings do not fit (the creation then fails and
 * says how to fix it), or the free space cannot be read.
 */
function fitLayout(c: Connecting): SegmentLayout | undefined {
  const asked = c.asked;
  if (asked === undefined || !c.fitSegment) return asked;
  const space = freeSpace();
  if (space === undefined) return asked;
  const need = needs(c, asked);
  if (need <= space.freeBytes || needs(c, undefined) > space.freeBytes) return asked;
  const smaller = smallerLayout(c, asked, space.freeBytes);
  const rings = mib(needs(c, undefined));
  const [from, to] = [bytesText(asked.bufferBytes), bytesText(smaller?.bufferBytes ?? 0)];
  const used = smaller === undefined
    ? `running without the host segment (${rings}): collectives use the rings alone`
    : `using segment buffers of ${to} instead of ${from} (${mib(needs(c, smaller))})`;
  const fits = ceilMib(space.totalBytes - space.freeBytes + need);
  c.log(
    `dcomm: ${SHM_DIR} has ${mib(space.freeBytes)} free, but the ${c.size} ranks of this host need ` +
      `${mib(need)} with ${segmentText(asked)}: ${used}. To get the segment back, give ${SHM_DIR} at ` +
      `least ${fits} MiB (docker run --shm-size=${fits}m); DCOMM_SEGMENT=0 or init({ segment: false }) ` +
      `turns it off without this line`,
  );
  return smaller;
}

/** Whether rank 0 decides the layout for everyone: in a world of every rank, not a host's part of one. */
function plans(c: Connecting): boolean {
  return c.peers.length === c.size - 1;
}

/**
 * Rank 0: chooses the layout and publishes it (with the one asked for, so ranks that asked for another
 * fail). Resolves with the error of the publication, if any, so that it can wait while the inbox is made.
 */
function publishPlan(c: Connecting): Promise<unknown> {
  if (!plans(c)) return Promise.resolve(undefined);
  useLayout(c, fitLayout(c));
  const plan: SegmentPlan = { asked: c.asked ?? null, segment: c.layout ?? null };
  return c.store.set(`${c.prefix}segment`, JSON.stringify(plan)).then(() => undefined, (e: unknown) => e);
}

/** The other ranks, with a segment: read rank 0's choice before they create their inboxes. */
async function readPlan(c: Connecting): Promise<void> {
  if (!plans(c) || c.asked === undefined) return;
  let value: Uint8Array;
  try {
    value = await c.store.get(`${c.prefix}segment`, {
      timeoutMs: Math.max(1, c.deadline - performance.now()),
      signal: c.abort.signal,
    });
  } catch (error) {
    if (!(error instanceof TimeoutError)) throw error;
    throw new TimeoutError(
      `Cannot connect the shm transport of rank ${c.rank}: rank 0 did not show up within ${c.timeoutMs} ms`,
      { cause: error },
    );
  }
  const plan = JSON.parse(new TextDecoder().decode(value)) as SegmentPlan;
  if (segmentText(plan.asked) !== segmentText(c.asked)) {
    throw new TransportError(
      `Rank 0 uses ${segmentText(plan.asked)} but rank ${c.rank} uses ${segmentText(c.asked)}`,
      { peer: 0 },
    );
  }
  useLayout(c, plan.segment ?? undefined);
}

/** The error of a failed creation: with the space needed and free, and the fixes, when it is space. */
function createError(c: Connecting, error: unknown): TransportError {
  const code = error instanceof LibcError ? error.errno : undefined;
  const what = `Cannot create the shared memory of rank ${c.rank} in ${SHM_DIR} (${c.bytes} bytes): ` +
    (error instanceof Error ? error.message : String(error));
  if (code !== ENOSPC && code !== ENOMEM) return new TransportError(what, { cause: error });
  const space = freeSpace();
  const need = needs(c, c.layout);
  const segment = c.layout === undefined
    ? ""
    : ` and an area of ${segmentAreaBytes(c.layout)} bytes for the host segment (${segmentText(c.layout)})`;
  const fixes = [
    `give ${SHM_DIR} at least ${ceilMib(need)} MiB (docker run --shm-size=${ceilMib(need)}m; on Kubernetes ` +
    `an emptyDir with medium: Memory and a sizeLimit mounted there)`,
  ];
  // Only the fixes that fit this /dev/shm at all (its size: the other ranks may hold some of it now).
  const room = space?.totalBytes ?? Infinity;
  if (c.layout !== undefined && needs(c, undefined) <= room) {
    fixes.push(
      `turn the host segment off (DCOMM_SEGMENT=0 or init({ segment: false }): ${mib(needs(c, undefined))})`,
    );
    const smaller = smallerLayout(c, c.layout, Math.min(room, need - 1));
    if (smaller !== undefined) {
      fixes.push(
        `use a smaller segment (init({ segment: { bufferBytes: ${smaller.bufferBytes} } }): ` +
          `${mib(needs(c, smaller))})`,
      );
    }
  }
  fixes.push("run fewer ranks on this host");
  return new TransportError(
    `${what}. The ${c.size} ranks of this host need ${need} bytes (${mib(need)}) of ${SHM_DIR} in all, ` +
      `${c.bytes} bytes each: rings of ${c.ringBytes} bytes from each of ${c.size - 1} ` +
      `peer${c.size > 2 ? "s" : ""}${segment}; ` +
      (space === undefined
        ? `${SHM_DIR} is full. `
        : `${SHM_DIR} has ${space.freeBytes} bytes (${mib(space.freeBytes)}) free of ${space.totalBytes}. `) +
      `Fixes: ${fixes.join("; or ")}`,
    { cause: error },
  );
}

/**
 * Creates this rank's object in `/dev/shm` with its pages reserved, maps it and writes an empty inbox
 * (and segment area) into it. From just before the creation on, a signal removes the name. A failure
 * removes it too.
 */
function createInbox(c: Connecting): void {
  const { rank, layout } = c;
  holdName(c.name);
  let fd: number;
  try {
    fd = shmOpen(c.name, { create: true });
  } catch (error) {
    throw createError(c, error);
  }
  try {
    ftruncate(fd, c.bytes);
    fallocate(fd, c.bytes);
    c.mappings[rank] = mmapShared(fd, c.bytes);
  } catch (error) {
    // Removed before the free space is read for the message: what it says is what the others have.
    unlinkQuietly(c.name);
    throw createError(c, error);
  } finally {
    closeFd(fd);
  }
  initInbox(c.mappings[rank].buffer, shapeOf(c, rank), c.pid);
  if (layout !== undefined) {
    initSegmentArea(c.mappings[rank].buffer, c.areaOffset, { layout, rank, size: c.size, pid: c.pid });
  }
}

/** Publishes this rank's inbox address. */
async function publishInbox(c: Connecting): Promise<void> {
  const address: InboxAddress = {
    name: c.name,
    size: c.size,
    ringBytes: c.ringBytes,
    pid: c.pid,
    segment: c.layout ?? null,
    pidNamespace: pidNamespace() ?? undefined,
  };
  await c.store.set(`${c.prefix}inbox/${c.rank}`, JSON.stringify(address));
}

/**
 * Publishes, instead of an address, why this rank has no inbox, so that its peers fail now, naming it, and
 * not at their timeout. Best effort, for at most a second. A timeout is not published: the peers time
 * out as well, naming whom they waited for.
 */
async function publishFailure(c: Connecting, error: unknown): Promise<void> {
  if (error instanceof TimeoutError) return;
  const failure: InboxFailure = { error: error instanceof Error ? error.message : String(error), pid: c.pid };
  let timer: ReturnType<typeof setTimeout> | undefined;
  await Promise.race([
    c.store.set(`${c.prefix}inbox/${c.rank}`, JSON.stringify(failure)).catch(() => {}),
    new Promise<void>((resolve) => timer = setTimeout(resolve, 1000)),
  ]);
  clearTimeout(timer);
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
  if (segmentText(theirs.segment) !== segmentText(c.layout)) {
    throw new TransportError(
      `Rank ${peer} uses ${segmentText(theirs.segment)} but rank ${rank} uses ${segmentText(c.layout)}`,
      { peer },
    );
  }
}

/**
 * Maps `peer`'s inbox once it is published, writes this rank's pid into the ring it writes there, and
 * counts itself in; the last to attach removes the inbox's name. Throws at once if the peer published
 * that it failed instead.
 */
async function attachPeer(c: Connecting, peer: number): Promise<void> {
  const value = await c.store.get(`${c.prefix}inbox/${peer}`, {
    timeoutMs: Math.max(1, c.deadline - performance.now()),
    signal: c.abort.signal,
  });
  // The connect failed meanwhile (and unmapped what it had): map nothing more.
  if (c.abort.signal.aborted) return;
  const record = JSON.parse(new TextDecoder().decode(value)) as InboxAddress | InboxFailure;
  if ("error" in record) {
    throw new TransportError(
      `Cannot connect the shm transport of rank ${c.rank}: rank ${peer} (pid ${record.pid}) failed: ` +
        record.error,
      { peer },
    );
  }
  const theirs = record;
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
  // Watched if it is in this pid namespace; where that is not known, if its pid is found from here (one
  // that is not is in another namespace, or dead already: then the timeout tells).
  const here = pidNamespace();
  const watched = here !== null && theirs.pidNamespace !== undefined
    ? theirs.pidNamespace === here
    : processExists(theirs.pid);
  c.pids[peer] = watched ? theirs.pid : undefined;
  const inbox = new Inbox(c.mappings[peer].buffer, shapeOf(c, peer));
  inbox.ring(c.rank).setPid("writer", c.pid);
  if (Atomics.add(inbox.words, I_ATTACHED, 1) + 1 === c.peers.length) shmUnlink(theirs.name);
}

/**
 * Attaches to every peer's inbox; throws the first error that is no timeout as soon as it comes (the
 * waits still pending stop), else one timeout naming every peer that did not show up.
 */
async function attachPeers(c: Connecting): Promise<void> {
  const timeouts: { peer: number; reason: TimeoutError }[] = [];
  await new Promise<void>((resolve, reject) => {
    let pending = c.peers.length;
    if (pending === 0) resolve();
    for (const peer of c.peers) {
      attachPeer(c, peer).catch((reason: unknown) => {
        if (reason instanceof TimeoutError) {
          timeouts.push({ peer, reason });
          return;
        }
        c.abort.abort(reason);
        reject(reason);
      }).finally(() => {
        if (--pending === 0) resolve();
      });
    }
  });
  if (timeouts.length > 0) {
    timeouts.sort((a, b) => a.peer - b.peer);
    throw new TimeoutError(
      `Cannot connect the shm transport of rank ${c.rank}: ${ranksText(timeouts.map((f) => f.peer))} did ` +
        `not show up within ${c.timeoutMs} ms`,
      { cause: timeouts[0].reason },
    );
  }
}

/** Waits until every peer has mapped this rank's inbox; fails soon if one exits first. */
async function awaitAttached(c: Connecting): Promise<void> {
  const own = new Inbox((c.mappings[c.rank] as SharedMapping).buffer, shapeOf(c, c.rank));
  const missing = (): number[] => c.peers.filter((peer) => own.ring(peer).pid("writer") === 0);
  let checked = performance.now();
  for (let wait = 1; Atomics.load(own.words, I_ATTACHED) < c.peers.length; wait = Math.min(wait * 2, 10)) {
    const now = performance.now();
    if (now >= c.deadline) {
      throw new TimeoutError(
        `Cannot connect the shm transport of rank ${c.rank}: ${ranksText(missing())} did not map its inbox ` +
          `within ${c.timeoutMs} ms`,
      );
    }
    if (now - checked >= 100) {
      checked = now;
      const gone = missing().find((peer) => c.pids[peer] !== undefined && hasExited(c.pids[peer]));
      if (gone !== undefined) {
        throw new TransportError(
          `Cannot connect the shm transport of rank ${c.rank}: rank ${gone} (pid ${c.pids[gone]}) exited ` +
            `before it mapped its inbox`,
          { peer: gone },
        );
      }
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
   * @throws {TransportError} If a rank runs with another world size, ring size or segment layout; if
   * this rank's object cannot be created, sized or mapped (`/dev/shm` full: the message says how much it
   * needs and has, and the fixes), or a peer's could not be (the message names it and its reason); or if a
   * peer exited before it mapped this rank's inbox.
   */
  static async connect(store: Store, options: ShmTransportOptions): Promise<ShmTransport> {
    const c = connecting(store, options);
    try {
      try {
        // Rank 0 publishes the layout while it creates its inbox; the others wait for it first.
        let published: Promise<unknown> = Promise.resolve(undefined);
        if (c.rank === 0) published = publishPlan(c);
        else await readPlan(c);
        createInbox(c);
        const failed = await published;
        if (failed !== undefined) throw failed;
      } catch (error) {
        await publishFailure(c, error);
        throw error;
      }
      await publishInbox(c);
      await attachPeers(c);
      await awaitAttached(c);
      shmUnlink(c.name);
    } catch (error) {
      unlinkQuietly(c.name);
      c.abort.abort(error);
      unmapAll(c.mappings);
      throw error;
    } finally {
      releaseName(c.name);
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
