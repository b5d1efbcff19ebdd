/**
 * {@linkcode HostSegment}: the memory that the ranks of one host share for collectives, so that a rank
 * reduces its peers' bytes where they lie instead of receiving copies of them (the way MPI's and
 * oneCCL's shared-memory collectives work). Each rank owns one area, made in the shm transport's connect
 * phase inside the same `/dev/shm` object as its inbox (so it is unlinked when the inbox is, and nothing
 * is left in `/dev/shm` after the connect phase whatever happens to the processes); every rank maps every
 * area, and every thread that runs collectives maps them once more into its own WebAssembly memory, so
 * the WASM kernels read the peers' areas in place.
 *
 * ## An area
 * ```text
 * byte     0  magic "DCSG"  4 version  8 rank  12 world size  16 pid  20 buffers  24 buffer bytes
 * byte    64  doorbell (own cache line): peers add 1 and futex-wake it when the owner sleeps
 * byte   128  sleeping: 1 while the owner sleeps on the doorbell (own cache line)
 * byte   192  aborted: 1 once the owner failed;  byte 196 length of the reason, bytes 256.. its UTF-8
 * byte   200  closed: 1 once the owner closed its process group (its counters are final from then on)
 * byte  4096  group blocks, 2 KiB each, one per group id below SEGMENT_GROUPS:
 *               +0 called (calls begun)  +64 posted  +128 reduced  +192 consumed (chunks; own lines)
 *               +256 the log of the last SEGMENT_LOG calls: 64 bytes each, the call's 32-byte descriptor
 *                    then, for a call on a pool tensor, its byte offset in the pool (f64; -1 for none)
 * byte 131072 the data buffers: `buffers` × `bufferBytes`
 * then        the pool: `poolBytes` for tensors the owner allocated there (`pg.alloc`), which the peers
 *             read in place (collectives on them need no copy in or out)
 * ```
 * Every word is written by the area's owner only (but the doorbell, which peers add to) and read by
 * everyone: a rank publishes progress by storing its own counter and learns of its peers' by loading
 * theirs. Counters are 32-bit and wrap; they are compared by signed difference ({@linkcode reached}).
 *
 * @module
 */
import { TransportError } from "../core/errors.ts";
import { hasExited } from "./_liveness.ts";
import {
  duplicateMapping,
  futexWait,
  futexWaitSync,
  futexWake,
  mapAnonymousAt,
  munmap,
  type SharedMapping,
  SYS_FUTEX,
} from "../ffi/libc/libc.ts";

/** The shape of every rank's area; every rank of a world uses the same. */
export interface SegmentLayout {
  /** Data buffers per rank, a power of two: how many chunks a rank may post ahead of the slowest reader. */
  readonly buffers: number;
  /** Bytes per data buffer, a multiple of 4096: the chunk a collective moves at once. */
  readonly bufferBytes: number;
  /** Bytes of the pool, a multiple of 65536 (0: none). @default 0 */
  readonly poolBytes?: number;
}

/** The layout used unless a world asks for another: 4 buffers of 1 MiB per rank. */
export const DEFAULT_SEGMENT_LAYOUT: SegmentLayout = Object.freeze({ buffers: 4, bufferBytes: 1 << 20 });

/** Bytes before the first data buffer of an area. */
export const SEGMENT_HEADER_BYTES = 131072;
/** Group ids below this have a block in every area; larger ids run their calls without the segment. */
export const SEGMENT_GROUPS = 32;
/** Descriptors each group block keeps, by call number modulo this. */
export const SEGMENT_LOG = 16;

const MAGIC = 0x47534344; // "DCSG" little-endian
const VERSION = 2; // 2: a group's four counters share one cache line
const W_MAGIC = 0;
const W_VERSION = 1;
const W_RANK = 2;
const W_SIZE = 3;
const W_PID = 4;
const W_BUFFERS = 5;
const W_BUFFER_BYTES = 6;
const W_POOL_PAGES = 7;
/** Word index of an area's doorbell. */
export const W_BELL = 16;
const W_SLEEPING = 32;
const W_ABORTED = 48;
const W_REASON_LENGTH = 49;
const W_CLOSED = 50;
const REASON_OFFSET = 256;
const REASON_MAX = 3840;
const GROUPS_OFFSET = 4096;
const GROUP_BYTES = 2048;
const LOG_OFFSET = 256;
/** Bytes of a log entry: a call's descriptor (32) and what more its peers need to know of it. */
export const LOG_ENTRY_BYTES = 64;

/**
 * A group block's counters, as word offsets from the block's first word: the four share one cache line
 * (only their owner writes them), so a peer reads all of them in one transfer between cores; one line
 * each cost a small all-reduce about 0.3 µs more on 2 ranks (`deno task bench:floor`).
 */
export const COUNTER = Object.freeze({ called: 0, posted: 1, reduced: 2, consumed: 3 });
/** The name of a counter of a group block. */
export type CounterName = keyof typeof COUNTER;

/**
 * Whether counter value `value` has reached `target`, for 32-bit counters that wrap.
 *
 * @param value The counter.
 * @param target The value waited for.
 * @returns `value - target >= 0` in 32-bit arithmetic.
 */
export function reached(value: number, target: number): boolean {
  return ((value - target) | 0) >= 0;
}

/**
 * Bytes of one rank's area.
 *
 * @param layout The buffers.
 * @returns Bytes (a multiple of 64 KiB).
 */
export function segmentAreaBytes(layout: SegmentLayout): number {
  const bytes = poolOffset(layout) + (layout.poolBytes ?? 0);
  return Math.ceil(bytes / 65536) * 65536;
}

/**
 * Where the pool starts in an area.
 *
 * @param layout The buffers.
 * @returns The byte offset (a multiple of 64 KiB).
 */
export function poolOffset(layout: SegmentLayout): number {
  return Math.ceil((SEGMENT_HEADER_BYTES + layout.buffers * layout.bufferBytes) / 65536) * 65536;
}

/**
 * Checks a layout.
 *
 * @param layout The layout asked for.
 * @returns The same layout.
 * @throws {RangeError} If `buffers` is not a power of two in 2..64 or `bufferBytes` not a multiple of
 * 4096 in 4 KiB..256 MiB, or `poolBytes` not a multiple of 65536 below 2 GiB.
 */
export function checkSegmentLayout(layout: SegmentLayout): SegmentLayout {
  const poolBytes = layout.poolBytes ?? 0;
  if (!Number.isInteger(poolBytes) || poolBytes < 0 || poolBytes % 65536 !== 0 || poolBytes >= 2 ** 31) {
    throw new RangeError(
      `Invalid segment poolBytes: expected a multiple of 65536 in 0..${2 ** 31 - 65536}, found ${poolBytes}`,
    );
  }
  const { buffers, bufferBytes } = layout;
  if (!Number.isInteger(buffers) || buffers < 2 || buffers > 64 || (buffers & (buffers - 1)) !== 0) {
    throw new RangeError(`Invalid segment buffers: expected a power of two in 2..64, found ${buffers}`);
  }
  if (
    !Number.isInteger(bufferBytes) || bufferBytes < 4096 || bufferBytes > 256 << 20 ||
    bufferBytes % 4096 !== 0
  ) {
    throw new RangeError(
      `Invalid segment bufferBytes: expected a multiple of 4096 in 4096..${256 << 20}, found ${bufferBytes}`,
    );
  }
  return layout;
}

/**
 * Writes an empty area into zeroed memory.
 *
 * @param buffer Memory with {@linkcode segmentAreaBytes} bytes from `byteOffset` on.
 * @param byteOffset Where the area starts.
 * @param owner The layout, the owner's rank and process id, and the world size.
 */
export function initSegmentArea(
  buffer: ArrayBufferLike,
  byteOffset: number,
  owner: { layout: SegmentLayout; rank: number; size: number; pid: number },
): void {
  const { layout, rank, size, pid } = owner;
  const w = new Int32Array(buffer, byteOffset, 64);
  w[W_VERSION] = VERSION;
  w[W_RANK] = rank;
  w[W_SIZE] = size;
  w[W_PID] = pid;
  w[W_BUFFERS] = layout.buffers;
  w[W_BUFFER_BYTES] = layout.bufferBytes;
  w[W_POOL_PAGES] = (layout.poolBytes ?? 0) / 65536;
  Atomics.store(w, W_MAGIC, MAGIC);
}

/** Where another thread of this process finds the areas a {@linkcode HostSegment} mapped. */
export interface SegmentAddress {
  /** The address of each rank's area in this process, as numbers (structured-cloneable). */
  readonly pointers: readonly number[];
  /** The layout. */
  readonly layout: SegmentLayout;
  /** This rank. */
  readonly rank: number;
}

const encoder = new TextEncoder();
const decoder = new TextDecoder();

/** Every rank's area as one process (or thread) sees it. */
export class HostSegment {
  /** This rank. */
  readonly rank: number;
  /** The number of ranks. */
  readonly size: number;
  /** The buffers of every area. */
  readonly layout: SegmentLayout;
  /** Bytes of each area. */
  readonly areaBytes: number;
  readonly #maps: SharedMapping[];
  readonly #words: Int32Array[];
  readonly #f64: Float64Array[];
  readonly #views: DataView[];
  readonly #bytes: Uint8Array[];
  readonly #pids: number[];
  /** Peers whose pid means something here (not in another pid namespace, as a container sharing /dev/shm). */
  readonly #watched: boolean[];
  readonly #bells: (Deno.PointerObject | undefined)[];
  readonly #buffers: Uint8Array[][];
  #closed = false;

  private constructor(maps: SharedMapping[], rank: number, layout: SegmentLayout) {
    this.#maps = maps;
    this.rank = rank;
    this.size = maps.length;
    this.layout = layout;
    this.areaBytes = segmentAreaBytes(layout);
    this.#words = maps.map((m) => new Int32Array(m.buffer));
    this.#views = maps.map((m) => new DataView(m.buffer));
    this.#f64 = maps.map((m) =>
      new Float64Array(m.buffer, 0, GROUPS_OFFSET / 8 + (SEGMENT_GROUPS * GROUP_BYTES) / 8)
    );
    this.#bytes = maps.map((m) => new Uint8Array(m.buffer));
    this.#pids = this.#words.map((w, owner) => {
      if (Atomics.load(w, W_MAGIC) !== MAGIC || w[W_VERSION] !== VERSION || w[W_RANK] !== owner) {
        throw new TransportError(`Expected the segment area of rank ${owner}, found none (bad magic)`);
      }
      const pool = (layout.poolBytes ?? 0) / 65536;
      if (
        w[W_BUFFERS] !== layout.buffers || w[W_BUFFER_BYTES] !== layout.bufferBytes ||
        w[W_POOL_PAGES] !== pool
      ) {
        throw new TransportError(
          `Rank ${owner} uses ${w[W_BUFFERS]} segment buffers of ${w[W_BUFFER_BYTES]} bytes and a pool of ` +
            `${
              w[W_POOL_PAGES] * 65536
            } bytes but rank ${rank} uses ${layout.buffers} of ${layout.bufferBytes} ` +
            `and ${pool * 65536}`,
          { peer: owner },
        );
      }
      return w[W_PID];
    });
    // Every rank is alive while the world connects, so a pid not found now is one from another namespace.
    this.#watched = this.#pids.map((pid, r) => r !== rank && !hasExited(pid));
    this.#bells = maps.map((m) =>
      SYS_FUTEX === undefined
        ? undefined
        : Deno.UnsafePointer.offset(m.pointer, W_BELL * 4) as Deno.PointerObject
    );
    this.#buffers = this.#bytes.map((bytes) =>
      Array.from(
        { length: layout.buffers },
        (_, b) =>
          bytes.subarray(
            SEGMENT_HEADER_BYTES + b * layout.bufferBytes,
            SEGMENT_HEADER_BYTES + (b + 1) * layout.bufferBytes,
          ),
      )
    );
  }

  /**
   * Maps the areas at `pointers` (mappings of this process, such as the shm transport's or another
   * thread's segment) once more, for this thread: the new mappings stay valid when the originals are
   * unmapped, until {@linkcode HostSegment.close}.
   *
   * @param address The areas' addresses, layout and this rank.
   * @returns The segment.
   * @throws {TransportError} If an area is not one, or has another layout.
   * @throws {LibcError} If a mapping fails.
   */
  static attach(address: SegmentAddress): HostSegment {
    const layout = checkSegmentLayout(address.layout);
    const bytes = segmentAreaBytes(layout);
    const maps: SharedMapping[] = [];
    try {
      for (const p of address.pointers) {
        maps.push(duplicateMapping(Deno.UnsafePointer.create(BigInt(p)) as Deno.PointerObject, bytes));
      }
      return new HostSegment(maps, address.rank, layout);
    } catch (e) {
      for (const m of maps) munmap(m);
      throw e;
    }
  }

  /** Where another thread of this process can {@linkcode HostSegment.attach} the same areas. */
  get address(): SegmentAddress {
    return {
      pointers: this.#maps.map((m) => Number(Deno.UnsafePointer.value(m.pointer))),
      layout: this.layout,
      rank: this.rank,
    };
  }

  /**
   * The start of a rank's area in this mapping (to map it once more, into WebAssembly memory).
   *
   * @param rank The owner.
   * @returns The pointer.
   */
  pointer(rank: number): Deno.PointerObject {
    return this.#maps[rank].pointer;
  }

  /**
   * A rank's area as 32-bit words.
   *
   * @param rank The owner.
   * @returns The words.
   */
  words(rank: number): Int32Array {
    return this.#words[rank];
  }

  /**
   * A data buffer of a rank.
   *
   * @param rank The owner.
   * @param buffer Its index, below `layout.buffers`.
   * @returns The buffer's bytes.
   */
  buffer(rank: number, buffer: number): Uint8Array {
    return this.#buffers[rank][buffer];
  }

  /**
   * A rank's pool (empty without one).
   *
   * @param rank The owner.
   * @returns The pool's bytes.
   */
  pool(rank: number): Uint8Array {
    const at = poolOffset(this.layout);
    return this.#bytes[rank].subarray(at, at + (this.layout.poolBytes ?? 0));
  }

  /**
   * The word index of a counter of a group block.
   *
   * @param group The group id, below {@linkcode SEGMENT_GROUPS}.
   * @param counter Which counter.
   * @returns The index into {@linkcode HostSegment.words}.
   */
  counterIndex(group: number, counter: CounterName): number {
    return (GROUPS_OFFSET + group * GROUP_BYTES) / 4 + COUNTER[counter];
  }

  /**
   * The log entry of call `call` of a group in a rank's area.
   *
   * @param rank The owner.
   * @param group The group id.
   * @param call The call's number.
   * @returns Its 64 bytes: the descriptor, then the call's pool offset (f64 at byte 32).
   */
  logEntry(rank: number, group: number, call: number): Uint8Array {
    const at = GROUPS_OFFSET + group * GROUP_BYTES + LOG_OFFSET +
      ((call >>> 0) % SEGMENT_LOG) * LOG_ENTRY_BYTES;
    return this.#bytes[rank].subarray(at, at + LOG_ENTRY_BYTES);
  }

  /**
   * A rank's whole area as bytes.
   *
   * @param rank The owner.
   * @returns The bytes.
   */
  area(rank: number): Uint8Array {
    return this.#bytes[rank];
  }

  /**
   * A rank's whole area as a DataView.
   *
   * @param rank The owner.
   * @returns The view.
   */
  view(rank: number): DataView {
    return this.#views[rank];
  }

  /**
   * Where the log entry of call `call` of a group starts in every area (its 32-byte descriptor, then the
   * pool offset at byte 32).
   *
   * @param group The group id.
   * @param call The call's number.
   * @returns The byte offset.
   */
  logOffset(group: number, call: number): number {
    return GROUPS_OFFSET + group * GROUP_BYTES + LOG_OFFSET + ((call >>> 0) % SEGMENT_LOG) * LOG_ENTRY_BYTES;
  }

  /**
   * The pool offset a rank logged with call `call` of a group (-1 for a call not on a pool tensor).
   *
   * @param rank The owner.
   * @param group The group id.
   * @param call The call's number.
   * @returns The byte offset in the owner's pool.
   */
  logPool(rank: number, group: number, call: number): number {
    return this.#f64[rank][this.#logPoolIndex(group, call)];
  }

  /**
   * Logs this rank's pool offset for call `call` of a group.
   *
   * @param rank This rank.
   * @param group The group id.
   * @param call The call's number.
   * @param offset The offset, or -1.
   */
  setLogPool(rank: number, group: number, call: number, offset: number): void {
    this.#f64[rank][this.#logPoolIndex(group, call)] = offset;
  }

  #logPoolIndex(group: number, call: number): number {
    return (GROUPS_OFFSET + group * GROUP_BYTES + LOG_OFFSET +
      ((call >>> 0) % SEGMENT_LOG) * LOG_ENTRY_BYTES + 32) / 8;
  }

  /** The process id of a rank. */
  pid(rank: number): number {
    return this.#pids[rank];
  }

  /**
   * Wakes the ranks among `ranks` that sleep on their doorbell (those that do not are spinning, and see
   * the change by themselves). Call after publishing.
   *
   * @param ranks Global ranks.
   */
  ring(ranks: readonly number[]): void {
    for (let i = 0; i < ranks.length; i++) {
      const r = ranks[i];
      if (r === this.rank) continue;
      const w = this.#words[r];
      if (Atomics.load(w, W_SLEEPING) !== 0) {
        Atomics.add(w, W_BELL, 1);
        const bell = this.#bells[r];
        if (bell !== undefined) futexWake(bell);
      }
    }
  }

  /** {@linkcode HostSegment.ring} for every rank. */
  ringAll(): void {
    for (let r = 0; r < this.size; r++) {
      if (r === this.rank) continue;
      const w = this.#words[r];
      if (Atomics.load(w, W_SLEEPING) !== 0) {
        Atomics.add(w, W_BELL, 1);
        const bell = this.#bells[r];
        if (bell !== undefined) futexWake(bell);
      }
    }
  }

  /**
   * Sleeps on this rank's doorbell (a futex wait on a pool thread; the event loop runs on) until a peer
   * rings it or `ms` pass. `stillWaiting` is asked once more after the "sleeping" flag is up, so that a
   * peer's publication between the caller's last look and the sleep is not missed.
   *
   * @param ms The longest sleep.
   * @param stillWaiting Whether to sleep at all.
   */
  async sleep(ms: number, stillWaiting: () => boolean): Promise<void> {
    const w = this.#words[this.rank];
    const seen = Atomics.load(w, W_BELL);
    Atomics.store(w, W_SLEEPING, 1);
    try {
      if (!stillWaiting()) return;
      const bell = this.#bells[this.rank];
      if (bell === undefined) await new Promise((resolve) => setTimeout(resolve, 1));
      else await futexWait(bell, seen, ms);
    } finally {
      Atomics.store(w, W_SLEEPING, 0);
    }
  }

  /**
   * {@linkcode HostSegment.sleep} on the calling thread: a futex wait that blocks it (and its event loop)
   * until a peer rings or `ms` pass. For a communication thread in the middle of a call, where a wake-up
   * through a pool thread and the event loop would cost its own latency.
   *
   * @param ms The longest sleep.
   * @param stillWaiting Whether to sleep at all.
   */
  sleepSync(ms: number, stillWaiting: () => boolean): void {
    const w = this.#words[this.rank];
    const seen = Atomics.load(w, W_BELL);
    Atomics.store(w, W_SLEEPING, 1);
    try {
      if (!stillWaiting()) return;
      const bell = this.#bells[this.rank];
      if (bell === undefined) Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, ms);
      else futexWaitSync(bell, seen, ms);
    } finally {
      Atomics.store(w, W_SLEEPING, 0);
    }
  }

  /**
   * Marks this rank failed, with its reason, and wakes every rank: peers waiting on it fail with
   * `Rank <rank> aborted: <reason>`. Idempotent: the first reason stays.
   *
   * @param reason Why.
   */
  abort(reason: string): void {
    if (this.#closed) return;
    const w = this.#words[this.rank];
    if (Atomics.load(w, W_ABORTED) !== 0) return;
    const text = encoder.encode(reason).subarray(0, REASON_MAX);
    this.#bytes[this.rank].set(text, REASON_OFFSET);
    w[W_REASON_LENGTH] = text.length;
    Atomics.store(w, W_ABORTED, 1);
    for (let r = 0; r < this.size; r++) {
      if (r === this.rank) continue;
      Atomics.add(this.#words[r], W_BELL, 1);
      const bell = this.#bells[r];
      if (bell !== undefined) futexWake(bell);
    }
  }

  /**
   * Marks this rank's process group closed, after its last call, and wakes every rank: a peer that still
   * waits on this rank's counters fails at once (they will not move again) rather than at its timeout.
   */
  markClosed(): void {
    if (this.#closed) return;
    Atomics.store(this.#words[this.rank], W_CLOSED, 1);
    for (let r = 0; r < this.size; r++) {
      if (r === this.rank) continue;
      Atomics.add(this.#words[r], W_BELL, 1);
      const bell = this.#bells[r];
      if (bell !== undefined) futexWake(bell);
    }
  }

  /**
   * Whether a rank closed its process group ({@linkcode HostSegment.markClosed}).
   *
   * @param rank The rank.
   * @returns True once it has.
   */
  hasClosed(rank: number): boolean {
    return Atomics.load(this.#words[rank], W_CLOSED) !== 0;
  }

  /**
   * Why a rank failed, if it marked itself so.
   *
   * @param rank The rank.
   * @returns Its reason, or `undefined` while it has not failed.
   */
  abortReason(rank: number): string | undefined {
    const w = this.#words[rank];
    if (Atomics.load(w, W_ABORTED) === 0) return undefined;
    const n = Math.min(w[W_REASON_LENGTH], REASON_MAX);
    return decoder.decode(this.#bytes[rank].slice(REASON_OFFSET, REASON_OFFSET + n));
  }

  /**
   * Whether a rank's process is gone or a zombie (never for a peer whose pid could not be seen when the
   * segment was mapped: one in another pid namespace).
   *
   * @param rank The rank.
   * @returns True once it has exited.
   */
  exited(rank: number): boolean {
    return this.#watched[rank] && hasExited(this.#pids[rank]);
  }

  /**
   * Unmaps this mapping of the areas (other threads' mappings stay). Idempotent.
   *
   * @param options `keepAddresses`: put fresh zeroed memory where the areas were instead of leaving the
   *   addresses unmapped, for views of them that may outlive the segment (pool tensors): reading them
   *   then gives zeros rather than a crash. @default false
   */
  close(options: { keepAddresses?: boolean } = {}): void {
    if (this.#closed) return;
    this.#closed = true;
    for (const m of this.#maps) {
      if (options.keepAddresses) mapAnonymousAt(m.pointer, m.bytes);
      else munmap(m);
    }
  }
}
