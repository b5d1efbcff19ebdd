/**
 * The main thread's side of the bridge to a rank's communication Worker: it starts the Worker and
 * connects it, sends it calls (through the ring of calls, or as messages) and settles them as their
 * completions come back (through the ring of completions, or as messages), and maps the host segment for
 * the calls this thread runs itself.
 *
 * @module
 */
import { Worker as NodeWorker } from "node:worker_threads";
import { DistError } from "../../core/errors.ts";
import { type WorkReport, workReport } from "../work.ts";
import type { Collective, EngineConfig, FromEngine, OpRequest, ToEngine } from "./_protocol.ts";
import { HostSegment } from "../../transport/segment.ts";
import { type Kernels, kernels } from "../../wasm/kernels.ts";
import { SegmentExecutor } from "./_segment_exec.ts";
import { StagingPool } from "./_staging.ts";
import { PoolAllocator } from "./_pool.ts";
import { ALGORITHM_NAMES } from "./_dispatch.ts";
import { type Completion, completionBuffer, CompletionReader } from "./_completions.ts";
import { encodeRequest, requestBuffer, RequestWriter } from "./_requests.ts";
import { nodeWorkerUrl } from "./_worker_url.ts";
import { fromWire, toWire } from "../../core/wire_error.ts";

/**
 * The main thread's handle on the communication Worker; shared by the world and its sub-groups. The
 * Worker keeps the process alive only while calls are pending (a `node:worker_threads` Worker, because
 * its `unref()` lets a script that ends without closing its group end too).
 */
export class EngineHandle {
  #worker: NodeWorker;
  #pending = new Map<
    number,
    { collective: Collective; resolve: (r: WorkReport) => void; reject: (e: Error) => void }
  >();
  #completions: CompletionReader;
  #requests: RequestWriter;
  /** Numbers of the staging buffers the Worker has been sent. */
  #bufferIds = new WeakMap<SharedArrayBuffer, number>();
  #nextBufferId = 0;
  #nextId = 1;
  #failure: Error | undefined;
  #closed: Promise<void>;
  #onClosed!: () => void;
  /** The transport's kind, once connected. */
  transport = "";
  /** The host index of every rank (hosts numbered in order of their first rank), once connected. */
  hosts: readonly number[] = [];
  /** Sub-groups created so far, so every rank numbers them alike. */
  nextGroupId = 1;
  /** The staging pool of this rank (tensors that cannot be reached by address). */
  readonly staging: StagingPool = new StagingPool();
  /** The host segment as the main thread runs calls on it, in a shared-memory world. */
  segment: SegmentExecutor | undefined;
  /** The main thread's WASM kernels (a premulSum's own contribution is scaled with them), once started. */
  kernels: Kernels | undefined;
  /** Calls of at most this many input bytes may run on the main thread (when nothing else is pending). */
  inlineBytes = 0;
  /** Milliseconds a call on the main thread spins for its peers before the communication thread takes it over. */
  inlineSpinMs = 4;
  /** This rank's pool in the host segment, as the main thread sees it, and its allocator. */
  pool: { bytes: Uint8Array; allocator: PoolAllocator } | undefined;
  /** Whether the Worker may reach tensors by address (FFI is allowed): no staging copies. */
  readonly byAddress: boolean = ffiGranted();
  #closing = false;

  private constructor(worker: NodeWorker, completions: SharedArrayBuffer, requests: SharedArrayBuffer) {
    this.#worker = worker;
    this.#requests = new RequestWriter(requests);
    this.#completions = new CompletionReader(completions, (c) => this.#complete(c));
    this.#closed = new Promise((resolve) => (this.#onClosed = resolve));
  }

  /**
   * Starts the Worker and connects it.
   *
   * @param config The engine's configuration.
   * @returns The handle, once every rank is connected.
   * @throws {DistError} If connecting fails or times out.
   */
  static async start(config: EngineConfig): Promise<EngineHandle> {
    const worker = new NodeWorker(nodeWorkerUrl(new URL("./comm_worker.ts", import.meta.url)));
    const completions = completionBuffer(), requests = requestBuffer();
    const handle = new EngineHandle(worker, completions, requests);
    const ready = Promise.withResolvers<void>();
    let segment: FromEngine & { type: "ready" } | undefined;
    worker.on("message", (msg: FromEngine): void => {
      if (msg.type === "ready") {
        handle.transport = msg.transport;
        handle.hosts = msg.hosts;
        segment = msg;
        ready.resolve();
      } else handle.#receive(msg, ready.reject);
    });
    worker.on("error", (e: Error): void => {
      const error = new DistError(
        `The communication thread of rank ${config.rank} crashed: ${e?.message ?? String(e)}`,
        { cause: e },
      );
      ready.reject(error);
      handle.#failAll(error);
      handle.#completions.stop();
      worker.terminate();
      handle.#onClosed();
    });
    handle.#post({ type: "init", config: { ...config, completions, requests } });
    try {
      await ready.promise;
      handle.kernels = await kernels();
      if (segment?.segment !== undefined) {
        // The main thread maps the areas too, to run the calls that can finish before they return.
        const shared = HostSegment.attach(segment.segment);
        handle.segment = new SegmentExecutor(shared, await kernels());
        const layout = shared.layout;
        if ((layout.poolBytes ?? 0) > 0) {
          handle.pool = {
            bytes: shared.pool(shared.rank),
            allocator: new PoolAllocator(layout.poolBytes ?? 0),
          };
        }
        handle.inlineBytes = config.segmentInlineBytes ?? DEFAULT_INLINE_BYTES;
        handle.inlineSpinMs = config.segmentInlineSpinMs ?? handle.inlineSpinMs;
      }
    } catch (e) {
      worker.terminate();
      throw e;
    }
    handle.#idle();
    return handle;
  }

  /** Whether no call is pending on the Worker (so the main thread may run one itself). */
  get idle(): boolean {
    return this.#pending.size === 0;
  }

  /** Whether the group has been closed (or is closing). */
  get closed(): boolean {
    return this.#closing;
  }

  /**
   * Fails the world from the main thread, after a call it ran itself failed (a mismatch, an aborted
   * peer): peers learn it through the segment at once, and through the transport from the Worker.
   *
   * @param error Why.
   */
  fail(error: Error): void {
    if (this.#failure !== undefined) return;
    this.#failure = error;
    this.segment?.segment.abort(error.message);
    this.#post({
      type: "abort",
      error: toWire(error),
    });
  }

  /**
   * Revokes the world: fails it with `error` (see {@linkcode EngineHandle.fail}) and every call pending on
   * this rank at once, without waiting for the Worker to report them.
   *
   * @param error The RevokedError.
   */
  revoke(error: Error): void {
    this.fail(error);
    this.#failure = error;
    this.#failAll(error);
  }

  /** The error the engine failed with, if any. */
  get failure(): Error | undefined {
    return this.#failure;
  }

  #receive(msg: FromEngine, rejectReady: (e: Error) => void): void {
    switch (msg.type) {
      case "done":
        this.#pending.get(msg.id)?.resolve(msg.report);
        this.#pending.delete(msg.id);
        this.#idle();
        break;
      case "error":
        this.#pending.get(msg.id)?.reject(fromWire(msg.error));
        this.#pending.delete(msg.id);
        this.#idle();
        break;
      case "failed": {
        const error = fromWire(msg.error);
        this.#failure ??= error;
        rejectReady(error);
        break;
      }
      case "closed":
        this.#completions.stop();
        this.#worker.terminate();
        this.#failAll(new DistError("The process group is closed"));
        this.#onClosed();
        break;
    }
  }

  #complete(c: Completion): void {
    const pending = this.#pending.get(c.id);
    if (pending === undefined) return;
    this.#pending.delete(c.id);
    pending.resolve(workReport({
      collective: pending.collective,
      algorithm: ALGORITHM_NAMES[c.algorithm],
      transport: this.transport,
      bytes: c.bytes,
      bytesSent: c.bytesSent,
      timeMs: c.timeMs,
      startedAt: c.startedAt,
      finishedAt: c.finishedAt,
      compression: c.compression,
      peer: c.peer,
      phases: c.phases,
    }));
    this.#idle();
  }

  /** Without pending calls, the Worker no longer keeps the process alive. */
  #idle(): void {
    if (this.#pending.size === 0) this.#worker.unref();
  }

  #failAll(error: Error): void {
    this.#failure ??= error;
    for (const p of this.#pending.values()) p.reject(error);
    this.#pending.clear();
  }

  #post(msg: ToEngine): void {
    this.#worker.postMessage(msg);
  }

  /**
   * Queues a call on the engine.
   *
   * @param op The call, without its id.
   * @param signal Cancels it.
   * @returns The report.
   */
  submit(op: Omit<OpRequest, "id">, signal?: AbortSignal): Promise<WorkReport> {
    const id = this.#nextId++;
    const { promise, resolve, reject } = Promise.withResolvers<WorkReport>();
    this.#pending.set(id, { collective: op.collective, resolve, reject });
    this.#worker.ref();
    if (signal) {
      const onAbort = (): void => this.#post({ type: "cancel", id, reason: String(signal.reason) });
      signal.addEventListener("abort", onAbort, { once: true });
      promise.finally(() => signal.removeEventListener("abort", onAbort)).catch(() => {});
    }
    this.#send({ ...op, id });
    this.#completions.watch(() => this.#pending.size > 0);
    return promise;
  }

  /**
   * Sends a call through the ring of calls, or as a message when it uses a buffer the Worker has not been
   * sent yet (sent now, ahead of it), a buffer of the caller's own (not kept by number: it may be
   * collected), or an algorithm name that is not a number, or when the ring is full.
   */
  #send(op: OpRequest): void {
    let byMessage = false;
    for (const region of [op.input, op.output]) {
      if (region === undefined || !("buffer" in region)) continue;
      if (!this.staging.owns(region.buffer)) byMessage = true;
      else if (!this.#bufferIds.has(region.buffer)) {
        const id = this.#nextBufferId++;
        this.#bufferIds.set(region.buffer, id);
        this.#post({ type: "buffer", id, buffer: region.buffer });
        byMessage = true;
      }
    }
    const bufferId = (buffer: SharedArrayBuffer): number => this.#bufferIds.get(buffer) as number;
    if (byMessage || !this.#requests.write((slot) => encodeRequest(op, ALGORITHM_NAMES, bufferId, slot))) {
      this.#post({ type: "op", op });
    }
  }

  /** Tells the engine about a group, in turn with the calls. */
  addGroup(id: number, ranks: number[], timeoutMs: number): void {
    this.#post({ type: "group", seq: this.#nextId++, id, ranks, timeoutMs });
  }

  /** Finishes the queued calls, closes the transport and ends the Worker. */
  async close(): Promise<void> {
    this.#closing = true;
    this.#worker.ref();
    this.#post({ type: "close", seq: this.#nextId++ });
    let timer: ReturnType<typeof setTimeout> | undefined;
    await Promise.race([
      this.#closed,
      new Promise<void>((resolve) => {
        timer = setTimeout(() => {
          this.#worker.terminate();
          this.#failAll(new DistError("The process group was closed while calls were still running"));
          resolve();
        }, 30_000);
      }),
    ]);
    clearTimeout(timer);
    // Every call of this rank is over: peers still waiting on it in the segment fail now.
    this.segment?.segment.markClosed();
    this.segment?.close();
    // Pool tensors may outlive the group: their memory becomes ordinary zeroed memory, not a hole.
    this.segment?.segment.close({ keepAddresses: this.pool !== undefined });
    this.segment = undefined;
  }
}

/**
 * Calls with at most this many input bytes run on the calling thread when nothing is pending: on 2 ranks
 * sharing 2 cores, the hops to and from the communication thread and the skew between the ranks' hops
 * cost 0.74x (8 MiB), 0.85x (16 MiB) and 0.97x (32 MiB) the time of the same call run in the call (A/B
 * rounds in the same processes). Larger calls, and calls issued while others are pending, run on the
 * communication thread and overlap with the caller's work.
 */
const DEFAULT_INLINE_BYTES = 16 << 20;

let ffi: boolean | undefined;

function ffiGranted(): boolean {
  ffi ??= Deno.permissions.querySync({ name: "ffi" }).state === "granted";
  return ffi;
}
