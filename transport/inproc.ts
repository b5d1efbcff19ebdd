/**
 * {@linkcode InprocTransport}: ranks as Workers of one process (or as tasks of one thread) that share
 * SharedArrayBuffers. Whoever starts the threads calls {@linkcode createInprocMesh} once and posts the
 * mesh to every Worker; each rank then calls {@linkcode InprocTransport.create} with its rank.
 *
 * Each rank owns an inbox (one SharedArrayBuffer) holding one ring per peer; a message is copied once
 * into the ring by the sender and once out of it by the receiver, into the receive's own view (see
 * `_ring.ts` and `_ring_transport.ts`). A waiting rank sleeps on its inbox's doorbell with
 * `Atomics.waitAsync`, so its event loop keeps running, and any peer's write wakes it.
 *
 * Failure model (as `transport.ts` says): a failure on one pair fails the whole transport, and the
 * reason is written into every ring shared with a peer, which then fails with `Rank <r> aborted: <why>`.
 * A Worker that is terminated without closing its transport is not detected: its peers wait until the
 * layer above times out and aborts.
 *
 * @module
 */
import { checkRingBytes, DEFAULT_RING_BYTES } from "./_ring.ts";
import {
  I_BELL,
  I_CLAIMED,
  Inbox,
  inboxBytes,
  initInbox,
  RingTransport,
  type Sleeper,
} from "./_ring_transport.ts";
import { checkRank, checkSize, type Pair, type Transport } from "./transport.ts";

/** Options of {@linkcode createInprocMesh}. */
export interface InprocMeshOptions {
  /**
   * Capacity of the ring from each rank to each other rank, in bytes (64 B to 1 GiB). Messages of any
   * size stream through; a bigger ring lets a sender run further ahead of its receiver. The mesh holds
   * `size·(size−1)` rings.
   *
   * @default {4194304}
   */
  ringBytes?: number;
}

/**
 * The shared memory of an in-process world: structured-cloneable, so it can be posted to Workers. A
 * mesh serves one world once: each rank may create one transport on it.
 */
export interface InprocMesh {
  /** The number of ranks. */
  readonly size: number;
  /** Capacity of each ring. */
  readonly ringBytes: number;
  /** Each rank's inbox: the rings in which the other ranks write to it. */
  readonly inboxes: readonly SharedArrayBuffer[];
}

/**
 * Allocates the shared memory of an in-process world of `size` ranks.
 *
 * @param size The number of ranks.
 * @param options The ring capacity.
 * @returns The mesh, to post to every rank.
 * @throws {RangeError} If `size` or `ringBytes` is out of range.
 *
 * @example Two ranks on one thread
 * ```ts
 * import { createInprocMesh, InprocTransport } from "./inproc.ts";
 * import assert from "node:assert/strict";
 *
 * const mesh = createInprocMesh(2, { ringBytes: 1 << 16 });
 * await using a = InprocTransport.create(mesh, 0);
 * await using b = InprocTransport.create(mesh, 1);
 * const got = new Uint8Array(3);
 * await Promise.all([a.pair(1).send(new Uint8Array(32), new Uint8Array([1, 2, 3])), b.pair(0).recv(got)]);
 * assert.deepEqual([...got], [1, 2, 3]);
 * ```
 */
export function createInprocMesh(size: number, options: InprocMeshOptions = {}): InprocMesh {
  checkSize(size);
  const ringBytes = checkRingBytes(options.ringBytes ?? DEFAULT_RING_BYTES);
  const inboxes = Array.from({ length: size }, (_, owner) => {
    const buffer = new SharedArrayBuffer(inboxBytes(size, ringBytes));
    initInbox(buffer, { size, owner, ringBytes }, 0);
    return buffer;
  });
  return { size, ringBytes, inboxes };
}

/** Options of {@linkcode InprocTransport.create}. */
export interface InprocTransportOptions {
  /**
   * Microseconds a waiting rank spins on its doorbell before it sleeps. Spinning answers a peer that
   * replies at once faster than a wake-up (about 20 µs), at the price of a busy core meanwhile.
   *
   * @default {20}
   */
  spinUs?: number;
}

/** Sleeps with `Atomics.waitAsync` on the doorbells, which live in SharedArrayBuffers. */
class WaitAsyncSleeper implements Sleeper {
  readonly #words: Int32Array[];
  readonly #own: Int32Array;

  constructor(inboxes: readonly Inbox[], rank: number) {
    this.#words = inboxes.map((inbox) => inbox.words);
    this.#own = this.#words[rank];
  }

  sleep(seq: number, ms: number): Promise<void> {
    const wait = Atomics.waitAsync(this.#own, I_BELL, seq, ms);
    if (!wait.async) return Promise.resolve();
    // A pending waitAsync does not keep Deno's event loop alive; a timer does, until the wait ends.
    const timer = setTimeout(() => {}, ms + 1);
    return wait.value.then(() => clearTimeout(timer));
  }

  wake(peer: number): void {
    Atomics.notify(this.#words[peer], I_BELL);
  }
}

/**
 * A rank's connections to the other ranks of an in-process world.
 *
 * @example Rank 0 on the main thread, rank 1 in a Worker
 * ```ts
 * import { createInprocMesh, InprocTransport } from "./inproc.ts";
 * import assert from "node:assert/strict";
 * const rank1 = await Deno.makeTempFile({ suffix: ".ts" }); // the Worker's module
 * await Deno.writeTextFile(rank1, `
 *   import { InprocTransport } from "${new URL("./inproc.ts", import.meta.url)}";
 *   self.onmessage = async (event: MessageEvent) => {
 *     const { mesh, rank } = event.data;
 *     {
 *       await using transport = InprocTransport.create(mesh, rank);
 *       await transport.pair(0).send(new Uint8Array(32), new Uint8Array([rank, 42]));
 *     }
 *     self.postMessage("closed");
 *   };
 * `);
 * const mesh = createInprocMesh(2); // SharedArrayBuffers: posted, not copied
 * const worker = new Worker(new URL(`file://${rank1}`), { type: "module" });
 * const closed = new Promise((resolve) => worker.onmessage = resolve);
 * worker.postMessage({ mesh, rank: 1 });
 * {
 *   await using transport = InprocTransport.create(mesh, 0);
 *   const got = new Uint8Array(2);
 *   await transport.pair(1).recv(got);
 *   assert.deepEqual([...got], [1, 42]);
 * }
 * await closed;
 * worker.terminate();
 * await Deno.remove(rank1);
 * ```
 */
export class InprocTransport implements Transport {
  /** Always `"inproc"`. */
  readonly kind: string = "inproc";
  /** This rank. */
  readonly rank: number;
  /** The number of ranks. */
  readonly size: number;
  /** Resolves with the error that failed the transport; never resolves if it only closes. */
  readonly failed: Promise<Error>;
  readonly #core: RingTransport;

  private constructor(core: RingTransport) {
    this.#core = core;
    this.rank = core.rank;
    this.size = core.size;
    this.failed = core.failed;
  }

  /**
   * Joins an in-process world as `rank`. Ranks may join in any order; messages sent to a rank that has
   * not joined yet wait in its inbox.
   *
   * @param mesh The world's shared memory, from {@linkcode createInprocMesh}.
   * @param rank This rank, in `0..mesh.size-1`.
   * @param options How long to spin before sleeping.
   * @returns The transport.
   * @throws {RangeError} If `rank` or `spinUs` is out of range.
   * @throws {TypeError} If `mesh` is not a mesh, or this rank already joined it.
   */
  static create(mesh: InprocMesh, rank: number, options: InprocTransportOptions = {}): InprocTransport {
    const { size, ringBytes } = mesh;
    if (!Array.isArray(mesh.inboxes) || mesh.inboxes.length !== size) {
      throw new TypeError(`Expected a mesh from createInprocMesh() with ${size} inboxes`);
    }
    checkRank(rank, size);
    const spinUs = options.spinUs ?? 20;
    if (!(spinUs >= 0)) throw new RangeError(`Expected spinUs >= 0, found ${spinUs}`);
    const inboxes = mesh.inboxes.map((buffer, owner) => new Inbox(buffer, { size, owner, ringBytes }));
    if (Atomics.compareExchange(inboxes[rank].words, I_CLAIMED, 0, 1) !== 0) {
      throw new TypeError(`Expected rank ${rank} of the mesh to be free, found it joined already`);
    }
    const core = new RingTransport({
      kind: "inproc",
      rank,
      size,
      inboxes,
      sleeper: new WaitAsyncSleeper(inboxes, rank),
      spinUs,
      release: () => {},
    });
    return new InprocTransport(core);
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
   * Fails every pending and future operation with `error`, and tells every peer (they fail with
   * `Rank <this rank> aborted: <error.message>`). Idempotent.
   *
   * @param error Why.
   */
  abort(error: Error): void {
    this.#core.abort(error);
  }

  /**
   * Closes: peers fail only if they still wait for this rank. Pending receives reject; sends under way
   * get up to a second to finish.
   */
  close(): Promise<void> {
    return this.#core.close();
  }

  /** Same as {@linkcode InprocTransport.close}, for `await using`. */
  [Symbol.asyncDispose](): Promise<void> {
    return this.#core.close();
  }
}
