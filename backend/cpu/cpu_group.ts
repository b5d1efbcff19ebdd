/**
 * The CPU backend's process group, on the rank's main thread. The front (`../_front.ts`) checks every
 * argument; the group routes each call once (`_route.ts`): it runs a segment call itself when it can
 * finish before returning, and hands every other call to the communication Worker (`_engine_handle.ts`),
 * whose engine runs it, with the tensors by address or staged into shared memory; the returned
 * {@linkcode Work} settles when the result is in the tensors.
 *
 * @module
 */
import { phaseMark, phasesOn, phasesSince } from "../../core/phases.ts";
import { pinBuffer } from "../_pin.ts";
import { checkGroupRanks } from "../_checks.ts";
import type { DType, ReduceOp, TypedArray } from "../../core/dtype.ts";
import { epochNowMs } from "../../ffi/libc/libc.ts";
import { DistError, RevokedError, TimeoutError, UnsupportedError } from "../../core/errors.ts";
import type { AllocOptions, AnyTensor, GroupOptions, ProcessGroup, ShrinkOptions } from "../process_group.ts";
import { type CallRecord, GroupFront } from "../_front.ts";
import type { MonitorStore } from "../_monitored_barrier.ts";
import { afterWork, premulAsSum } from "../_premul.ts";
import { doneWork, Work, workReport } from "../work.ts";
import type { Collective, OpRequest, PointerRegion, PoolRegion, Region } from "./_protocol.ts";
import type { SegmentExecutor } from "./_segment_exec.ts";
import { newSegmentCall, segmentPlanForced } from "./_segment_call.ts";
import { SmallAllReduce, smallAllReduceTakes } from "./_segment_small.ts";
import { SCRATCH_BYTES } from "./_segment_call_context.ts";
import type { SegmentState } from "../../collectives/segment_context.ts";
import { allocOrdinary, checkAlloc, releaseOrdinary, tensorOver } from "../_alloc.ts";
import { ALGORITHM_NAMES, checkAlgorithm } from "./_dispatch.ts";
import type { EngineHandle } from "./_engine_handle.ts";
import { peerRevoked, revokeMessage } from "./_revoked.ts";
import type { Kernels } from "../../wasm/kernels.ts";
import { groupUsesSegment, inputOf, outputOf, route, type RoutedCall, type RouteSite } from "./_route.ts";

/** The region of a tensor the Worker reaches by its address. */
function pointerRegion(t: TypedArray): PointerRegion {
  const pointer = t.byteLength === 0 ? null : Deno.UnsafePointer.of(t as unknown as BufferSource);
  const address = pointer === null ? 0 : Number(Deno.UnsafePointer.value(pointer));
  // The Worker reads and writes it until the call settles: it must not be detached meanwhile.
  if (address !== 0) pinBuffer(t.buffer, address - t.byteOffset);
  return { address, byteLength: t.byteLength };
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
  /** The world's store and this job's key prefix, where monitored barriers meet. */
  store?: MonitorStore;
  /** Whether reducing calls run in deterministic mode by default (`init({ deterministic })`). */
  deterministic?: boolean;
  /**
   * Starts an engine for a new world of `size` ranks (this one `rank`) under the store key `prefix`, as
   * this world's was started: what `shrink()` makes its world with. None over threads (one shared mesh).
   */
  reform?: (rank: number, size: number, prefix: string) => Promise<EngineHandle>;
}

/** A process group of the CPU backend. */
export class CpuProcessGroup extends GroupFront {
  readonly rank: number;
  readonly size: number;
  readonly ranks: readonly number[];
  readonly backend = "cpu";
  #engine: EngineHandle;
  #id: number;
  #site: GroupSite;
  #timeoutMs: number;
  #onClose?: (failed: boolean) => Promise<void>;
  #store: MonitorStore | undefined;
  readonly #deterministic: boolean;
  #reform: CpuGroupOptions["reform"];
  #shrinks = 0;
  #shrinking = false;
  #monitor: MonitorStore | undefined;
  #closed = false;
  #lastTensor: TypedArray | undefined;
  #lastBytes: Uint8Array | undefined;
  #small: SmallAllReduce | undefined;
  /** What {@linkcode route} sees of a plain all-reduce, its tensor set for the call. */
  readonly #quickCall: { -readonly [K in keyof RoutedCall]: RoutedCall[K] } = {
    collective: "allReduce",
    algorithm: "auto",
    tensor: undefined,
    input: undefined,
    output: undefined,
    compression: undefined,
    commDtype: undefined,
  };

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
    this.#store = options.store;
    this.#deterministic = options.deterministic ?? false;
    this.#reform = options.reform;
    this.#site = new GroupSite(engine, options.id);
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

  /** Monitored barriers meet in the world's store: this engine's receives run one after another. */
  protected override get monitorStore(): MonitorStore | undefined {
    const s = this.#store;
    return this.#monitor ??= s && { store: s.store, prefix: `${s.prefix}/monitored-barrier/${this.#id}` };
  }

  async newGroup(ranks: readonly number[], options: GroupOptions = {}): Promise<ProcessGroup> {
    // (A closed group says so first, in groupInOrder.)
    return await this.groupInOrder(this.isClosed ? [...ranks] : checkGroupRanks(ranks, this.size), options);
  }

  protected override async groupInOrder(
    sorted: readonly number[],
    options: GroupOptions,
  ): Promise<ProcessGroup> {
    if (this.isClosed) throw new DistError("Cannot create a group: the process group is closed");
    // A world that failed (a mismatch, a timeout, a lost peer) stays failed: its groups would share its
    // transport, so a new one fails at once with the world's error, as every call does.
    const failure = this.#engine.failure;
    if (failure !== undefined) throw failure;
    const id = this.#engine.nextGroupId++;
    const global = sorted.map((r) => this.ranks[r]);
    const timeoutMs = options.timeoutMs ?? this.#timeoutMs;
    const me = this.ranks[this.rank];
    if (global.includes(me)) this.#engine.addGroup(id, global, timeoutMs);
    return await Promise.resolve(
      new CpuProcessGroup(this.#engine, {
        id,
        ranks: global,
        globalRank: me,
        timeoutMs,
        store: this.#store,
        deterministic: this.#deterministic,
      }),
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

  /**
   * The survivors' new world (see `ProcessGroup.shrink`): each writes that it is here under
   * `<prefix>/shrink/<n>/alive/<rank>`, waits up to the window for the ranks not excluded (nor named dead by
   * this world's failure), proposes those present, and the first proposal stored (`compareSet`) is the new
   * world's members, for every rank; each then starts an engine as this world's was, under the key
   * `<prefix>/shrink/<n>/world`.
   */
  override async shrink(options: ShrinkOptions = {}): Promise<ProcessGroup> {
    if (this.isClosed) throw new DistError("Cannot shrink: the process group is closed");
    if (this.#id !== 0) {
      throw new UnsupportedError(
        "Cannot shrink a sub-group: shrink the world group, then make the sub-groups of the new world",
      );
    }
    const reform = this.#reform, store = this.#store;
    if (reform === undefined || store === undefined) {
      throw new UnsupportedError(
        "Cannot shrink a world of threads (one in-process mesh): shrinking needs a transport that connects anew (tcp, shm, hybrid)",
      );
    }
    const me = this.ranks[this.rank];
    const exclude = checkExclude(options.exclude, this.size, me);
    const timeoutMs = options.timeoutMs ?? this.#timeoutMs;
    const windowMs = options.windowMs ?? Math.min(5_000, this.#timeoutMs);
    if (!(typeof windowMs === "number" && windowMs > 0 && Number.isFinite(windowMs))) {
      throw new RangeError(`Cannot shrink: expected windowMs a number of ms > 0, found ${String(windowMs)}`);
    }
    if (this.#shrinking) throw new DistError("Cannot shrink: another shrink of this group is running");
    this.#shrinking = true;
    try {
      const base = `${store.prefix}/shrink/${this.#shrinks++}`;
      const gone = new Set([...exclude, ...deadIn(this.#engine.failure)]);
      gone.delete(me);
      const key = (r: number): string => `${base}/alive/${r}`;
      await store.store.set(key(me), "1");
      const candidates = this.ranks.map((_, r) => r).filter((r) => !gone.has(r));
      try {
        await store.store.wait(candidates.map(key), { timeoutMs: windowMs });
      } catch (e) {
        if (!(e instanceof TimeoutError)) throw e;
      }
      const present: number[] = [];
      for (const r of candidates) if (r === me || await store.store.check([key(r)])) present.push(r);
      const decided = await store.store.compareSet(`${base}/members`, "", JSON.stringify(present));
      const members = JSON.parse(new TextDecoder().decode(decided)) as number[];
      const rank = members.indexOf(me);
      if (rank < 0) {
        throw new DistError(
          `Cannot shrink: rank ${me} is not in the new world [${
            members.join(", ")
          }] (it came too late, or another rank excluded it)`,
        );
      }
      const prefix = `${base}/world`;
      const engine = await reform(rank, members.length, prefix);
      return new CpuProcessGroup(engine, {
        id: 0,
        ranks: members.map((_, i) => i),
        globalRank: rank,
        timeoutMs,
        store: { store: store.store, prefix },
        deterministic: this.#deterministic,
        reform: (r, n, p) => reform(r, n, p),
      });
    } finally {
      this.#shrinking = false;
    }
  }

  /** The world's transport aborted with a RevokedError, which every rank's calls then fail with. */
  protected override revokeGroup(reason: string): void {
    if (this.isClosed) throw new DistError("Cannot revoke: the process group is closed");
    this.#engine.revoke(new RevokedError(revokeMessage(this.#id, this.ranks[this.rank], reason)));
  }

  async close(): Promise<void> {
    if (this.#closed || this.#id !== 0) return;
    this.#closed = true;
    const failed = this.#engine.failure !== undefined;
    await this.#engine.close();
    await this.#onClose?.(failed);
  }

  /** Reductions fold in rank order through the segment's plans or the `"ordered"` algorithms. */
  protected override get foldsInOrder(): boolean {
    return true;
  }

  protected override get deterministicDefault(): boolean {
    return this.#deterministic;
  }

  /** The communication Worker casts and compresses. */
  protected override get codecThread(): boolean {
    return true;
  }

  protected execute(call: CallRecord): Work {
    const failure = this.#engine.failure;
    if (failure instanceof RevokedError) return new Work(Promise.reject(failure));
    if (call.op === "premulSum") {
      // This rank's input scaled on this thread, then a sum (see ../_premul.ts).
      const premul = premulAsSum(call, this.#engine.kernels as Kernels, this.rank);
      return afterWork(this.execute(premul.call), premul.after);
    }
    const where = route(call, this.#site);
    const input = inputOf(call), output = outputOf(call);
    // The common case first, with nothing made for the Worker: a call this thread runs to its end.
    if (where.kind === "inline") return this.#inline(call, input, output);
    const engine = this.#engine;
    const signal = call.signal;
    const request = this.#request(call, where.segment);
    switch (where.kind) {
      case "pooled": {
        // An all-reduce of a tensor from this rank's pool runs in place there (every rank must pass one).
        const tensor = input as TypedArray;
        const pool = engine.pool?.bytes as Uint8Array;
        const pooled = { pool: tensor.byteOffset - pool.byteOffset, byteLength: tensor.byteLength };
        if (where.inline) return this.#inline(call, input, output, pooled);
        const submitted = engine.submit({ ...request, input: pooled }, signal);
        return new Work(submitted.then((report) => keepAlive(report, input)));
      }
      case "codec": {
        const c = call.compression;
        if (c !== undefined) {
          // The codec runs on the communication thread, which reaches the tensor and the state by address.
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
        // Cast down and back on the communication thread, which reaches the tensor by address.
        const submitted = engine.submit(
          { ...request, input: input ? pointerRegion(input) : undefined },
          signal,
        );
        return new Work(submitted.then((report) => keepAlive(report, input)));
      }
      case "byAddress": {
        // The Worker works on the tensors themselves: they are kept alive by this call until it settles.
        const submitted = engine.submit({
          ...request,
          input: input ? pointerRegion(input) : undefined,
          output: output ? pointerRegion(output) : undefined,
        }, signal);
        return new Work(submitted.then((report) => keepAlive(report, input, output)));
      }
      case "staged":
        return this.#staged(call, request, signal);
    }
  }

  /** The request of a call the Worker runs (or goes on with). */
  #request(call: CallRecord, segment: boolean): Omit<OpRequest, "id" | "input" | "output"> {
    return {
      group: this.#id,
      collective: call.collective,
      dtype: call.dtype,
      op: call.op,
      root: call.root,
      algorithm: segment ? "segment" : call.algorithm,
      servers: call.servers,
      count: call.count,
      counts: call.counts,
      recvCounts: call.recvCounts,
      deterministic: call.deterministic,
      timeoutMs: call.timeoutMs,
      commDtype: call.commDtype,
    };
  }

  /** Runs a call on the Worker on copies of its tensors in SharedArrayBuffers (no FFI). */
  #staged(
    call: CallRecord,
    request: Omit<OpRequest, "id" | "input" | "output">,
    signal: AbortSignal | undefined,
  ): Work {
    const { collective } = call;
    const input = inputOf(call), output = outputOf(call);
    const writesInPlace = call.tensor !== undefined && collective !== "send" &&
      !(collective === "broadcast" && call.root === this.rank) &&
      !(collective === "reduce" && call.root !== this.rank);
    const staging = this.#engine.staging;
    const inRegion: Region | undefined = input ? staging.stage(input, collective !== "recv") : undefined;
    const outRegion: Region | undefined = output ? staging.stage(output, false) : undefined;
    const submitted = this.#engine.submit({ ...request, input: inRegion, output: outRegion }, signal);
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
    call: CallRecord,
    input: TypedArray | undefined,
    output: TypedArray | undefined,
    pooled?: PoolRegion,
    resumed?: { readonly number: number; readonly state: SegmentState },
  ): Work {
    const engine = this.#engine;
    const exec = engine.segment as SegmentExecutor;
    const segmentCall = newSegmentCall(
      this.#id,
      this.ranks,
      call.collective,
      call.dtype,
      call.op,
      call.root,
      call.count,
      0,
      pooled?.pool,
      exec.segment.layout,
      input ? this.#bytesOf(input) : undefined,
      output ? bytesOf(output) : undefined,
      call.counts,
    );
    let run;
    try {
      run = resumed === undefined
        ? exec.begin(segmentCall)
        : exec.resume(segmentCall, resumed.number, resumed.state);
      if (run.spin(engine.inlineSpinMs)) return doneWork(run.report(engine.transport));
    } catch (e) {
      const thrown = e instanceof Error ? e : new DistError(String(e));
      const error = peerRevoked(thrown) ?? thrown;
      engine.fail(error);
      return new Work(Promise.reject(error));
    }
    // The peers are late: the communication thread goes on with the call from where it stands.
    const submitted = engine.submit({
      ...this.#request(call, true),
      input: pooled ?? (input ? pointerRegion(input) : undefined),
      output: output ? pointerRegion(output) : undefined,
      resume: { number: run.call, state: run.state },
    }, call.signal);
    return new Work(submitted.then((report) => keepAlive(report, input, output)));
  }

  /**
   * A small sum on the host segment, when this thread may run it (nothing queued on the Worker, the
   * tensor not from the pool): run to its end here with nothing made but its report and Work, unless a
   * peer is late or runs another call; then the general path goes on from where it stands.
   */
  protected override quickAllReduce(
    tensor: AnyTensor,
    dtype: DType,
    op: ReduceOp,
    timeoutMs: number,
  ): Work | undefined {
    const t = tensor as TypedArray, engine = this.#engine;
    if (this.size === 1 || !smallAllReduceTakes(dtype, op, t.byteLength) || segmentPlanForced()) {
      return undefined;
    }
    // The one routing decision, on a record kept for these calls (a plain all-reduce of this tensor).
    const quick = this.#quickCall;
    quick.tensor = t;
    const where = route(quick, this.#site);
    quick.tensor = undefined;
    if (where.kind !== "inline") return undefined;
    const exec = engine.segment as SegmentExecutor;
    if (exec.closed) return undefined;
    const small = this.#small ??= new SmallAllReduce(
      exec.segment,
      this.#id,
      this.ranks,
      SEGMENT_CODE,
      (members, at, dt, o, into) => exec.reducePosts(members, at, dt, o, into),
      SCRATCH_BYTES,
    );
    if (!small.takes(dtype, op, t.byteLength)) return undefined;
    let state;
    try {
      const began = epochNowMs();
      const mark = phasesOn ? phaseMark() : undefined;
      state = small.run(t, dtype, op);
      if (state === undefined) {
        const ended = epochNowMs();
        return doneWork(workReport({
          collective: "allReduce",
          algorithm: "segment",
          transport: engine.transport,
          bytes: t.byteLength,
          bytesSent: t.byteLength,
          timeMs: ended - began,
          startedAt: began,
          finishedAt: ended,
          phases: mark && phasesSince(mark, ended - began, true),
        }));
      }
    } catch (e) {
      const thrown = e instanceof Error ? e : new DistError(String(e));
      const error = peerRevoked(thrown) ?? thrown;
      engine.fail(error);
      return new Work(Promise.reject(error));
    }
    const call: CallRecord = {
      collective: "allReduce",
      dtype,
      op,
      root: 0,
      tensor,
      input: undefined,
      output: undefined,
      count: t.length,
      algorithm: "auto",
      servers: undefined,
      commDtype: undefined,
      compression: undefined,
      timeoutMs,
      signal: undefined,
      options: {},
    };
    return this.#inline(call, t, undefined, undefined, { number: small.number, state });
  }

  /**
   * A tensor's bytes; the view of the last small tensor is kept, as a loop of calls on one tensor is the
   * common case (its buffer cannot move: the front refuses detached and resizable buffers).
   */
  #bytesOf(t: TypedArray): Uint8Array {
    if (t === this.#lastTensor) return this.#lastBytes as Uint8Array;
    const bytes = bytesOf(t);
    if (t.byteLength <= KEPT_VIEW_BYTES) {
      this.#lastTensor = t;
      this.#lastBytes = bytes;
    }
    return bytes;
  }
}

/** The code of the algorithm `"segment"` in descriptors. */
const SEGMENT_CODE = ALGORITHM_NAMES.indexOf("segment") + 1;

/** The largest tensor whose bytes' view a group keeps between calls (it keeps the tensor alive too). */
const KEPT_VIEW_BYTES = 65536;

/** A group and its rank's threads, as {@linkcode route} sees them when a call is made. */
class GroupSite implements RouteSite {
  readonly group: number;
  readonly segment: boolean;
  readonly #engine: EngineHandle;

  constructor(engine: EngineHandle, group: number) {
    this.#engine = engine;
    this.group = group;
    this.segment = groupUsesSegment(engine.segment !== undefined, group);
  }

  get transport(): string {
    return this.#engine.transport;
  }

  get idle(): boolean {
    return this.#engine.idle && this.#engine.failure === undefined;
  }

  get inlineBytes(): number {
    return this.#engine.inlineBytes;
  }

  get byAddress(): boolean {
    return this.#engine.byAddress;
  }

  get pool(): ArrayBufferLike | undefined {
    return this.#engine.pool?.bytes.buffer;
  }
}

/** `shrink()`'s exclude list, checked: ranks of the group, not every one, not this one. */
function checkExclude(exclude: unknown, size: number, me: number): number[] {
  if (exclude === undefined) return [];
  if (!Array.isArray(exclude) || exclude.some((r) => !Number.isSafeInteger(r) || r < 0 || r >= size)) {
    throw new RangeError(
      `Cannot shrink: expected exclude to list ranks in 0..${size - 1}, found ${JSON.stringify(exclude)}`,
    );
  }
  if (new Set(exclude).size >= size) {
    throw new RangeError(`Cannot shrink: excluding every rank (${size}) leaves no group`);
  }
  if (exclude.includes(me)) {
    throw new DistError(`Cannot shrink: this rank (${me}) is in exclude; only the others shrink`);
  }
  return exclude as number[];
}

/** The ranks a world's failure says are dead ("Rank 2 died …", through relays and causes). */
function deadIn(failure: Error | undefined): number[] {
  const dead: number[] = [];
  for (let e: unknown = failure, depth = 0; e instanceof Error && depth < 8; e = e.cause, depth++) {
    for (const m of e.message.matchAll(/Rank (\d+) (?:died|closed its connection|is gone)/g)) {
      dead.push(Number(m[1]));
    }
  }
  return [...new Set(dead)];
}
