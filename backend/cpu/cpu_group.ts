/**
 * The CPU backend's process group, on the rank's main thread. It checks every argument, stages tensors
 * into shared memory, and hands each call to the communication Worker, whose engine runs it; the
 * returned {@linkcode Work} settles when the result has been copied back.
 *
 * @module
 */
import { Worker as NodeWorker } from "node:worker_threads";
import { checkGroupRanks } from "../_checks.ts";
import { dtypeSize, type TypedArray } from "../../core/dtype.ts";
import { DistError } from "../../core/errors.ts";
import type { AllocOptions, GroupOptions, ProcessGroup } from "../process_group.ts";
import { type CallRecord, compressionUnsupported, GroupFront, narrowUnsupported } from "../_front.ts";
import { Work, type WorkReport, workReport } from "../work.ts";
import type {
  Collective,
  EngineConfig,
  FromEngine,
  OpRequest,
  PointerRegion,
  PoolRegion,
  Region,
  ToEngine,
} from "./_protocol.ts";
import { HostSegment } from "../../transport/segment.ts";
import { kernels } from "../../wasm/kernels.ts";
import { segmentBytesPosted, segmentCallOf, SegmentExecutor, segmentUnavailable } from "./_segment_exec.ts";
import { StagingPool } from "./_staging.ts";
import { PoolAllocator } from "./_pool.ts";
import { allocOrdinary, checkAlloc, releaseOrdinary, tensorOver } from "../_alloc.ts";
import { ALGORITHM_NAMES, checkAlgorithm } from "./_dispatch.ts";
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
  /** Sub-groups created so far, so every rank numbers them alike. */
  nextGroupId = 1;
  /** The staging pool of this rank (tensors that cannot be reached by address). */
  readonly staging: StagingPool = new StagingPool();
  /** The host segment as the main thread runs calls on it, in a shared-memory world. */
  segment: SegmentExecutor | undefined;
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

/** The region of a tensor the Worker reaches by its address. */
function pointerRegion(t: TypedArray): PointerRegion {
  const pointer = t.byteLength === 0 ? null : Deno.UnsafePointer.of(t as unknown as BufferSource);
  return {
    address: pointer === null ? 0 : Number(Deno.UnsafePointer.value(pointer)),
    byteLength: t.byteLength,
  };
}

/** Returns `value`; its other arguments stay reachable until the call that holds them settles. */
function keepAlive<T>(value: T, ..._tensors: unknown[]): T {
  return value;
}

function bytesOf(t: TypedArray): Uint8Array {
  return new Uint8Array(t.buffer, t.byteOffset, t.byteLength);
}

/** How a {@linkcode CpuProcessGroup} is made. */
export interface CpuGroupOptions {
  /** The group id (0 = world). */
  id: number;
  /** Global ranks of the members, in group order. */
  ranks: readonly number[];
  /** This process's global rank. */
  globalRank: number;
  /** Default timeout of calls. */
  timeoutMs: number;
  /** Runs when the world group closes (after the engine), e.g. to close the store; told whether the group failed. */
  onClose?: (failed: boolean) => Promise<void>;
}

/** A process group of the CPU backend. */
export class CpuProcessGroup extends GroupFront {
  readonly rank: number;
  readonly size: number;
  readonly ranks: readonly number[];
  readonly backend = "cpu";
  #engine: EngineHandle;
  #id: number;
  #timeoutMs: number;
  #onClose?: (failed: boolean) => Promise<void>;
  #closed = false;

  /**
   * @param engine The rank's engine handle.
   * @param options The group's identity.
   */
  constructor(engine: EngineHandle, options: CpuGroupOptions) {
    super();
    this.#engine = engine;
    this.#id = options.id;
    this.ranks = options.ranks;
    this.size = options.ranks.length;
    this.rank = options.ranks.indexOf(options.globalRank);
    this.#timeoutMs = options.timeoutMs;
    this.#onClose = options.onClose;
  }

  /** The transport the group's calls run over. */
  get transport(): string {
    return this.#engine.transport;
  }

  protected get defaultTimeoutMs(): number {
    return this.#timeoutMs;
  }

  protected get isClosed(): boolean {
    return this.#engine.closed;
  }

  protected override describe(): string {
    return `group ${this.#id} (ranks ${this.ranks.join(", ")})`;
  }

  protected checkAlgorithm(collective: Collective, name: string): void {
    checkAlgorithm(collective, name);
  }

  async newGroup(ranks: readonly number[], options: GroupOptions = {}): Promise<ProcessGroup> {
    if (this.isClosed) throw new DistError("Cannot create a group: the process group is closed");
    const sorted = checkGroupRanks(ranks, this.size);
    const id = this.#engine.nextGroupId++;
    const global = sorted.map((r) => this.ranks[r]);
    const timeoutMs = options.timeoutMs ?? this.#timeoutMs;
    const me = this.ranks[this.rank];
    if (global.includes(me)) this.#engine.addGroup(id, global, timeoutMs);
    return await Promise.resolve(
      new CpuProcessGroup(this.#engine, { id, ranks: global, globalRank: me, timeoutMs }),
    );
  }

  alloc(count: number, options: AllocOptions = {}): TypedArray {
    const pool = this.#engine.pool;
    if (pool === undefined) return allocOrdinary(count, options);
    const { dtype, bytes } = checkAlloc(count, options);
    const at = pool.allocator.alloc(bytes);
    if (at === undefined) {
      throw new RangeError(
        `Cannot alloc ${bytes} bytes in this rank's pool: ${
          pool.allocator.capacity - pool.allocator.used
        } of ` +
          `${pool.allocator.capacity} are free (in pieces); ask init() for a larger segment.poolBytes`,
      );
    }
    const view = pool.bytes.subarray(at, at + bytes);
    view.fill(0);
    return tensorOver(dtype, view);
  }

  release(tensor: TypedArray): void {
    const pool = this.#engine.pool;
    if (pool !== undefined && tensor.buffer === pool.bytes.buffer) {
      if (pool.allocator.release(tensor.byteOffset - pool.bytes.byteOffset)) return;
    } else if (releaseOrdinary(tensor)) return;
    throw new TypeError(
      `Cannot release: expected a tensor from this backend's alloc() not released yet, found a ` +
        `${tensor?.constructor?.name ?? typeof tensor} of ${tensor?.length} elements`,
    );
  }

  async close(): Promise<void> {
    if (this.#closed || this.#id !== 0) return;
    this.#closed = true;
    const failed = this.#engine.failure !== undefined;
    await this.#engine.close();
    await this.#onClose?.(failed);
  }

  /** The communication Worker casts and compresses. */
  protected override get codecThread(): boolean {
    return true;
  }

  protected execute(call: CallRecord): Work {
    const { collective, timeoutMs, signal } = call;
    const algorithm = call.algorithm;
    const inPlace = call.tensor as TypedArray | undefined;
    // The in-place tensor is the call's input, but for a recv, which only writes it.
    const input = collective === "recv" ? undefined : inPlace ?? call.input as TypedArray | undefined;
    const output = collective === "recv" ? inPlace : call.output as TypedArray | undefined;
    const writesInPlace = inPlace !== undefined && collective !== "send" &&
      !(collective === "broadcast" && call.root === this.rank) &&
      !(collective === "reduce" && call.root !== this.rank);

    const engine = this.#engine;
    const count = call.count;
    const p2p = collective === "send" || collective === "recv";
    const segmentOk = engine.segment !== undefined && SegmentExecutor.groupFits(this.#id);
    if (algorithm === "segment" && (!segmentOk || p2p)) {
      throw segmentUnavailable(collective, this.#id, engine.transport);
    }
    const viaSegment = segmentOk && !p2p && (algorithm === "auto" || algorithm === "segment");
    // An all-reduce of a tensor from this rank's pool runs in place there (every rank must pass one).
    const pool = engine.pool;
    const pooled = viaSegment && collective === "allReduce" && pool !== undefined && input !== undefined &&
        input.buffer === pool.bytes.buffer
      ? { pool: input.byteOffset - pool.bytes.byteOffset, byteLength: input.byteLength }
      : undefined;
    const request = {
      group: this.#id,
      collective,
      dtype: call.dtype,
      op: call.op,
      root: call.root,
      algorithm: viaSegment ? "segment" : algorithm,
      servers: call.servers,
      count,
      timeoutMs,
      commDtype: call.commDtype,
    } as const;
    const c = call.compression;
    if (c !== undefined) {
      // The codec runs on the communication thread, which reaches the tensor and the state by address.
      if (!engine.byAddress) throw compressionUnsupported("cpu backend without FFI");
      const at = (t: Float32Array | undefined): PointerRegion | undefined => t && pointerRegion(t);
      const submitted = engine.submit({
        ...request,
        input: input ? pointerRegion(input) : undefined,
        compression: { ...c, residual: at(c.residual), serverResidual: at(c.serverResidual), q: at(c.q) },
      }, signal);
      return new Work(
        submitted.then((report) => keepAlive(report, input, c.residual, c.serverResidual, c.q)),
      );
    }
    if (call.commDtype !== undefined) {
      // Cast down and back on the communication thread, which reaches the tensor by address.
      if (!engine.byAddress) throw narrowUnsupported("cpu backend without FFI");
      const submitted = engine.submit(
        { ...request, input: input ? pointerRegion(input) : undefined },
        signal,
      );
      return new Work(submitted.then((report) => keepAlive(report, input)));
    }
    if (pooled !== undefined) {
      // Whatever its size: the plan copies nothing, so every step is the peers' reading of it.
      if (engine.idle && engine.failure === undefined) {
        return this.#inline(request, input, output, signal, pooled);
      }
      const submitted = engine.submit({ ...request, input: pooled }, signal);
      return new Work(submitted.then((report) => keepAlive(report, input)));
    }
    if (
      viaSegment && engine.idle && engine.failure === undefined &&
      (input?.byteLength ?? 0) <= engine.inlineBytes
    ) {
      return this.#inline(request, input, output, signal);
    }
    if (engine.byAddress) {
      // The Worker works on the tensors themselves: they are kept alive by this call until it settles.
      const submitted = engine.submit({
        ...request,
        input: input ? pointerRegion(input) : undefined,
        output: output ? pointerRegion(output) : undefined,
      }, signal);
      return new Work(submitted.then((report) => keepAlive(report, input, output)));
    }
    const staging = engine.staging;
    const inRegion: Region | undefined = input ? staging.stage(input, collective !== "recv") : undefined;
    const outRegion: Region | undefined = output ? staging.stage(output, false) : undefined;
    const submitted = engine.submit({ ...request, input: inRegion, output: outRegion }, signal);
    return new Work(submitted.then(
      (report) => {
        if (input && inRegion) staging.unstage(inRegion, input, writesInPlace);
        if (output && outRegion) staging.unstage(outRegion, output, true);
        return report;
      },
      (error) => {
        if (input && inRegion) staging.unstage(inRegion, input, false);
        if (output && outRegion) staging.unstage(outRegion, output, false);
        throw error;
      },
    ));
  }

  /**
   * Runs a segment call on this thread: begins it, and spins while the peers keep up; a call that is not
   * done within `inlineSpinMs` goes on on the Worker, which reaches the tensors by address.
   */
  #inline(
    request: Omit<OpRequest, "id" | "input" | "output">,
    input: TypedArray | undefined,
    output: TypedArray | undefined,
    signal: AbortSignal | undefined,
    pooled?: PoolRegion,
  ): Work {
    const engine = this.#engine;
    const exec = engine.segment as SegmentExecutor;
    const startedAt = performance.timeOrigin + performance.now();
    const t0 = performance.now();
    const call = segmentCallOf(
      { ...request, input: pooled },
      this.ranks,
      exec.segment.layout,
      input ? bytesOf(input) : undefined,
      output ? bytesOf(output) : undefined,
    );
    let run;
    try {
      run = exec.begin(call);
      if (run.spin(engine.inlineSpinMs)) {
        const t1 = performance.now();
        return new Work(Promise.resolve(workReport({
          collective: request.collective,
          algorithm: "segment",
          transport: engine.transport,
          bytes: request.count * dtypeSize(request.dtype),
          bytesSent: segmentBytesPosted(call, this.rank),
          timeMs: t1 - t0,
          startedAt,
          finishedAt: performance.timeOrigin + t1,
        })));
      }
    } catch (e) {
      const error = e instanceof Error ? e : new DistError(String(e));
      engine.fail(error);
      return new Work(Promise.reject(error));
    }
    // The peers are late: the communication thread goes on with the call from where it stands.
    const submitted = engine.submit({
      ...request,
      input: pooled ?? (input ? pointerRegion(input) : undefined),
      output: output ? pointerRegion(output) : undefined,
      resume: { number: run.call, state: run.state },
    }, signal);
    return new Work(submitted.then((report) => keepAlive(report, input, output)));
  }
}
