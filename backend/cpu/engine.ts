/**
 * The engine of the CPU backend: it runs on a rank's communication Worker, owns the transport, and runs
 * the rank's calls one after another, in the order they were issued (as a CUDA stream would). Tensors are
 * regions of SharedArrayBuffers that the main thread filled, so a call progresses here while the main
 * thread computes.
 *
 * Every message of a call carries the call's descriptor; a peer running another call is reported with
 * both calls. Any failure (a timeout, a dead or aborting peer, a mismatch) is fatal: the transport aborts,
 * every peer learns why, and every pending and later call fails with the same error.
 *
 * @module
 */
import { dtypeSize, type ReduceOp } from "../../core/dtype.ts";
import { DistError, MismatchError, TimeoutError } from "../../core/errors.ts";
import type { CollectiveContext, Comm } from "../../collectives/comm.ts";
import { ALGORITHM_NAMES, modelBytes, resolveAlgorithm, runAlgorithm } from "./_dispatch.ts";
import { disseminationBarrier } from "../../collectives/dissemination_barrier.ts";
import type { Transport } from "../../transport/transport.ts";
import { type WorkReport, workReport } from "../work.ts";
import {
  type CallDescriptor,
  decodeDescriptor,
  describeCall,
  encodeDescriptor,
  sameDescriptor,
} from "./_descriptor.ts";
import type { CompressionRequest, OpRequest, PointerRegion, Region } from "./_protocol.ts";
import {
  type CodecKernels,
  CODECS,
  type CompressedContext,
  floats,
} from "../../collectives/compressed_context.ts";
import { COMPRESSED_ALL_REDUCE } from "../../collectives/mod.ts";
import { compressionKernels } from "../../wasm/compress.ts";
import { kernels as loadKernels } from "../../wasm/kernels.ts";
import type { Reducer } from "./_reducer.ts";
import { segmentBytesPosted, segmentCallOf, SegmentExecutor, segmentUnavailable } from "./_segment_exec.ts";

/** The view of an empty range (shared: nothing can be written through it). */
const EMPTY = new Uint8Array(0);

/** A group as the engine knows it. */
interface GroupState {
  /** The group id, the same on every rank. */
  id: number;
  /** Global ranks of the members, in group order. */
  ranks: number[];
  /** This rank's index in `ranks`. */
  index: number;
  /** Calls issued in this group so far. */
  seq: number;
  /** The host of each member (the world's host map in group order), or undefined where unknown. */
  hosts: readonly number[] | undefined;
  /** Point-to-point messages sent to / received from each group rank so far. */
  sent: Map<number, number>;
  received: Map<number, number>;
}

/** What the engine needs besides the transport. */
export interface EngineOptions {
  /** The pipelining chunk (bytes). @default 1 MiB */
  chunkBytes?: number;
  /** Whether messages carry the call's descriptor for the mismatch check. @default true */
  checkCalls?: boolean;
  /** The host segment as this thread runs collectives on it (shared-memory worlds). */
  segment?: SegmentExecutor;
  /** Milliseconds a segment call spins when it cannot move before it sleeps. @default 0.2 */
  segmentSpinMs?: number;
  /** The host index of every rank of the world (`_connect.ts`). @default every rank its own host */
  hosts?: readonly number[];
}

/** Runs a rank's calls over a transport. */
export class Engine {
  #transport: Transport;
  #reducer: Reducer;
  #groups = new Map<number, GroupState>();
  #chain: Promise<unknown> = Promise.resolve();
  #failure: Error | undefined;
  #chunkBytes: number;
  #checkCalls: boolean;
  #segment: SegmentExecutor | undefined;
  #segmentSpinMs: number;
  #hosts: readonly number[] | undefined;
  #cancelled = new Map<number, string>();
  #running: { id: number; fail: (e: Error) => void } | undefined;
  #scratch: ArrayBuffer[] = [];
  /** The running call's deadline and what to do then; the one timer and when it fires. */
  #deadline = Infinity;
  #onDeadline: (() => void) | undefined;
  #timer: ReturnType<typeof setTimeout> | undefined;
  #timerAt = Infinity;

  /**
   * @param transport Connected to every rank.
   * @param reducer Reductions in WASM.
   * @param options Chunking and checks.
   */
  constructor(transport: Transport, reducer: Reducer, options: EngineOptions = {}) {
    this.#transport = transport;
    this.#reducer = reducer;
    this.#chunkBytes = options.chunkBytes ?? 1 << 20;
    this.#checkCalls = options.checkCalls ?? true;
    this.#segment = options.segment;
    this.#segmentSpinMs = options.segmentSpinMs ?? 0.2;
    this.#hosts = options.hosts;
    const world = Array.from({ length: transport.size }, (_, i) => i);
    this.addGroup(0, world);
    transport.failed.then((e) => this.#fail(e));
  }

  /** The error the engine failed with, if it has. */
  get failure(): Error | undefined {
    return this.#failure;
  }

  /** The transport's kind. */
  get transportKind(): string {
    return this.#transport.kind;
  }

  /**
   * Registers a group.
   *
   * @param id The group id (the same on every rank).
   * @param ranks The global ranks of the members.
   */
  addGroup(id: number, ranks: number[]): void {
    this.#groups.set(id, {
      id,
      ranks,
      index: ranks.indexOf(this.#transport.rank),
      hosts: this.#hosts && ranks.map((r) => (this.#hosts as readonly number[])[r]),
      seq: 0,
      sent: new Map(),
      received: new Map(),
    });
  }

  /**
   * Queues a call; it runs after every call queued before it.
   *
   * @param op The call.
   * @returns Its report.
   */
  submit(op: OpRequest): Promise<WorkReport> {
    const run = this.#chain.then(() => this.#run(op));
    this.#chain = run.catch(() => {});
    return run;
  }

  /**
   * Cancels a call: a queued one never runs; a running one aborts the transport, since bytes already
   * exchanged cannot be taken back.
   */
  cancel(id: number, reason: string): void {
    if (this.#running?.id === id) {
      this.#running.fail(
        new DistError(`Aborted by the caller's signal while running: ${reason}`, { code: "ABORTED" }),
      );
    } else {
      this.#cancelled.set(id, reason);
    }
  }

  /** Aborts the transport with `error`; every peer learns why. */
  abort(error: Error): void {
    this.#fail(error);
  }

  /** Closes the transport after the queued calls. */
  async close(): Promise<void> {
    await this.#chain;
    clearTimeout(this.#timer);
    this.#timer = undefined;
    await this.#transport.close();
  }

  /**
   * Calls `onDeadline` if the running call is still running at `deadline` (`performance.now()` time). One
   * timer serves every call: it stays armed from call to call (a setTimeout and a clearTimeout per call
   * cost about 5 µs in Deno, a quarter of a small call's own time here) and is moved only when a call's
   * deadline comes before it; when it fires early for a later call, it is armed again for that one.
   */
  #watch(deadline: number, onDeadline: () => void): void {
    this.#deadline = deadline;
    this.#onDeadline = onDeadline;
    if (this.#timer === undefined || deadline < this.#timerAt) this.#arm(deadline);
  }

  #arm(at: number): void {
    clearTimeout(this.#timer);
    this.#timerAt = at;
    const timer = setTimeout(this.#fire, Math.max(0, at - performance.now()));
    this.#timer = timer;
    // Not what keeps the Worker alive: its port is. (Deno's setTimeout returns the timer's number.)
    Deno.unrefTimer(timer as unknown as number);
  }

  #fire = (): void => {
    this.#timer = undefined;
    const onDeadline = this.#onDeadline;
    if (onDeadline === undefined) return;
    if (performance.now() >= this.#deadline) {
      this.#onDeadline = undefined;
      onDeadline();
    } else this.#arm(this.#deadline);
  };

  #fail(error: Error): void {
    if (this.#failure) return;
    this.#failure = error;
    this.#segment?.segment.abort(error.message);
    this.#transport.abort(error);
    this.#running?.fail(error);
  }

  async #run(op: OpRequest): Promise<WorkReport> {
    if (this.#failure) throw this.#failure;
    if (op.commDtype !== undefined) return await this.#runNarrow(op);
    if (op.compression !== undefined) return await this.#runCompressed(op, op.compression);
    const cancelled = this.#cancelled.get(op.id);
    if (cancelled !== undefined) {
      this.#cancelled.delete(op.id);
      throw new DistError(`Aborted by the caller's signal before it started: ${cancelled}`, {
        code: "ABORTED",
      });
    }
    const group = this.#groups.get(op.group);
    if (!group) throw new DistError(`Unknown group ${op.group}: newGroup() was not called on this rank`);
    const size = group.ranks.length;
    const elemSize = dtypeSize(op.dtype);
    const bytes = op.count * elemSize;
    const segment = this.#segment !== undefined && SegmentExecutor.groupFits(group.id);
    const hosts = group.hosts;
    const algorithm = resolveAlgorithm(op.collective, op.algorithm, {
      bytes: modelBytes(op, elemSize, size),
      size,
      transport: this.#transport.kind,
      chunkBytes: this.#chunkBytes,
      servers: op.servers,
      segment,
      hosts,
    });
    if (algorithm === "segment") {
      if (!segment) throw segmentUnavailable(op.collective, group.id, this.#transport.kind);
      return await this.#runSegment(op, group);
    }

    const p2p = op.collective === "send" || op.collective === "recv";
    const desc = this.#descriptor(op, group, algorithm);
    if (segment && !p2p) {
      // Numbered in the group's one sequence of calls, which the segment's calls share.
      desc.seq = (this.#segment as SegmentExecutor).beginCall(group.id, (seq) => ({ ...desc, seq })) >>> 0;
    }
    const encoded = encodeDescriptor(desc, ALGORITHM_NAMES);
    const waitingOn = new Set<number>();
    let bytesSent = 0;
    const transport = this.#transport;
    const checkCalls = this.#checkCalls;
    const comm: Comm = {
      rank: group.index,
      size,
      async send(peer: number, data: Uint8Array): Promise<void> {
        bytesSent += data.byteLength;
        await transport.pair(group.ranks[peer]).send(encoded, data);
      },
      async recv(peer: number, into: Uint8Array): Promise<void> {
        const from = group.ranks[peer];
        waitingOn.add(from);
        await transport.pair(from).recv(into, (got, payloadBytes) => {
          if (checkCalls && !sameDescriptor(got, encoded)) {
            throw mismatch(from, decodeDescriptor(got, ALGORITHM_NAMES), transport.rank, desc);
          }
          if (payloadBytes !== into.byteLength) {
            throw new MismatchError(
              `Rank ${from} sent ${payloadBytes} bytes but rank ${transport.rank} expected ${into.byteLength} ` +
                `in ${describeCall(desc)}`,
            );
          }
        });
        waitingOn.delete(from);
      },
    };
    const ctx: CollectiveContext = {
      comm,
      elemSize,
      chunkBytes: this.#chunkBytes,
      reduce: (dst, src) => this.#reducer.reduce(op.dtype, reduceOpOf(op.op), dst, src),
      reduceMany: (dst, srcs) => this.#reducer.reduceMany(op.dtype, reduceOpOf(op.op), dst, srcs),
      scratch: (n) => this.#takeScratch(n),
      hosts,
    };

    const startedAt = performance.timeOrigin + performance.now();
    const t0 = performance.now();
    const { promise: failed, reject } = Promise.withResolvers<never>();
    this.#running = { id: op.id, fail: reject };
    this.#watch(t0 + op.timeoutMs, () => {
      const peers = [...waitingOn];
      const waiting = peers.length ? `, waiting for rank ${peers.join(", rank ")}` : "";
      this.#fail(
        new TimeoutError(
          `Timed out after ${op.timeoutMs} ms in ${describeCall(desc)} on rank ${transport.rank}${waiting}`,
        ),
      );
    });
    try {
      // A transport failure reaches `failed` through #fail (the constructor's one reaction to
      // transport.failed): racing transport.failed itself would add a reaction per call to a promise that
      // never settles while all is well, and those would pile up for the life of the process.
      if (checkCalls && size > 1 && (op.collective === "broadcast" || op.collective === "reduce")) {
        // Ranks that disagree on the root may each wait for a message the other never sends, or each
        // finish having only sent: they first agree on the call (its descriptor, root included) in a
        // dissemination round, which no rank leaves until every rank's descriptor has matched along the
        // way. `checkCalls: false` saves its ⌈log2 n⌉ empty messages.
        await Promise.race([disseminationBarrier(ctx), failed]);
      }
      await Promise.race([
        runAlgorithm(ctx, op, algorithm, { input: this.#view(op.input), output: this.#view(op.output) }),
        failed,
      ]);
      if (op.op === "avg") this.#average(op, group);
    } catch (e) {
      const error = e instanceof Error ? e : new DistError(String(e));
      this.#fail(error);
      throw this.#failure ?? error;
    } finally {
      this.#onDeadline = undefined;
      this.#running = undefined;
      this.#scratchTop = 0;
    }
    const t1 = performance.now();
    if (!p2p) group.seq++;
    return workReport({
      collective: op.collective,
      algorithm,
      transport: this.#transport.kind,
      bytes,
      bytesSent,
      timeMs: t1 - t0,
      startedAt,
      finishedAt: performance.timeOrigin + t1,
    });
  }

  /**
   * An all-reduce that travels in a narrower dtype: the tensor is cast down into a buffer of this thread's
   * (divided by the group size first for `avg`, so that the narrow sum cannot overflow where the average
   * does not), that buffer is all-reduced (sum) as a call of its own dtype, so its descriptor carries the
   * narrow dtype, and the result is cast back into the tensor.
   */
  async #runNarrow(op: OpRequest): Promise<WorkReport> {
    const narrow = op.commDtype as "float16" | "bfloat16";
    const group = this.#groups.get(op.group);
    if (!group) throw new DistError(`Unknown group ${op.group}: newGroup() was not called on this rank`);
    const tensor = this.#view(op.input) as Uint8Array;
    const bytes = op.count * 2;
    let buffer = this.#narrowBuffer;
    if (buffer === undefined || buffer.byteLength < bytes) {
      buffer = this.#narrowBuffer = new SharedArrayBuffer(Math.max(bytes, (buffer?.byteLength ?? 0) * 2));
    }
    const wire = new Uint8Array(buffer, 0, bytes);
    this.#reducer.narrow(narrow, tensor, wire, op.op === "avg" ? group.ranks.length : 1);
    const report = await this.#run({
      ...op,
      dtype: narrow,
      op: op.op === "avg" ? "sum" : op.op,
      commDtype: undefined,
      input: { buffer, byteOffset: 0, byteLength: bytes },
      output: undefined,
    });
    this.#reducer.widen(narrow, wire, tensor);
    return report;
  }

  #narrowBuffer: SharedArrayBuffer | undefined;

  /**
   * A compressed all-reduce: the codec (`collectives/compressed_*.ts`) runs here, on this thread's kernels,
   * and each collective it runs is a call of its own through {@linkcode Engine.#run} (the segment or
   * messages, as "auto" picks), its descriptor carrying the codec and the stage. The state arrays are the
   * caller's, reached by address. Its report sums what the stages sent.
   */
  async #runCompressed(op: OpRequest, c: CompressionRequest): Promise<WorkReport> {
    const outer = this.#groups.get(op.group);
    if (!outer) throw new DistError(`Unknown group ${op.group}: newGroup() was not called on this rank`);
    const split = c.interHost ? this.#hostSplit(outer) : undefined;
    const group = split === undefined ? outer : split.leaders ?? split.host;
    const kernels = await (this.#codecKernels ??= codecKernels());
    const f32 = (region: OpRequest["input"]): Float32Array | undefined => {
      const v = this.#view(region);
      return v && floats(v);
    };
    const tensor = f32(op.input) as Float32Array;
    const code = CODECS.indexOf(c.codec) + 1;
    const scratch = new CompressedScratch(this.#compressedScratch);
    const region = (bytes: Uint8Array): Region => ({
      buffer: bytes.buffer as SharedArrayBuffer,
      byteOffset: bytes.byteOffset,
      byteLength: bytes.byteLength,
    });
    const reports: WorkReport[] = [];
    // Stage numbers in descriptors: between hosts only, 1 is the host's reduce and 15 its broadcast (the
    // ranks that are not first on their host run no codec stage in between); the codec's count from there.
    let next = split ? 2 : 1;
    const stage = async (
      collective: "allToAll" | "allGather" | "allReduce" | "reduce" | "broadcast",
      dtype: "uint8" | "float32",
      input: Uint8Array,
      output?: Uint8Array,
      on: GroupState = group,
    ): Promise<void> => {
      const number = collective === "reduce" ? 1 : collective === "broadcast" ? 15 : next++;
      reports.push(
        await this.#run({
          ...op,
          group: on.id,
          collective,
          dtype,
          op: "sum",
          root: 0,
          algorithm: "auto",
          servers: undefined,
          count: input.byteLength / dtypeSize(dtype),
          input: region(input),
          output: output && region(output),
          compression: undefined,
          stage: code + 16 * number,
        }),
      );
    };
    const ctx: CompressedContext = {
      rank: group.index,
      size: group.ranks.length,
      kernels,
      allToAll: (input, output) => stage("allToAll", "uint8", input, output),
      allGather: (input, output) => stage("allGather", "uint8", input, output),
      allReduce: (data) =>
        stage("allReduce", "float32", new Uint8Array(data.buffer, data.byteOffset, data.byteLength)),
      scratch: (bytes) => scratch.take(bytes),
    };
    const startedAt = performance.timeOrigin + performance.now();
    const t0 = performance.now();
    try {
      // Between hosts only: the host's sum on its first rank (over the host's links, uncompressed), the
      // codec among the first ranks, then the result back to the host.
      const staged = split && floats(scratch.take(tensor.byteLength));
      if (split && staged) {
        staged.set(tensor);
        const bytes = new Uint8Array(staged.buffer, staged.byteOffset, staged.byteLength);
        if (split.host.ranks.length > 1) await stage("reduce", "float32", bytes, undefined, split.host);
      }
      if (split === undefined || split.leaders !== undefined) {
        await COMPRESSED_ALL_REDUCE[c.codec](ctx, {
          tensor: staged ?? tensor,
          average: split ? false : op.op === "avg",
          blockSize: c.blockSize,
          k: c.k,
          rank: c.rank,
          matrices: c.matrices,
          residual: f32(c.residual),
          serverResidual: f32(c.serverResidual),
          q: f32(c.q),
        });
        if (split && staged && op.op === "avg") kernels.divide(staged, outer.ranks.length);
      }
      if (split && staged) {
        const bytes = new Uint8Array(staged.buffer, staged.byteOffset, staged.byteLength);
        if (split.host.ranks.length > 1) await stage("broadcast", "float32", bytes, undefined, split.host);
        tensor.set(staged);
      }
    } catch (e) {
      // A kernel that threw on this rank would leave its peers waiting: every rank learns why.
      const error = e instanceof Error ? e : new DistError(String(e));
      this.#fail(error);
      throw this.#failure ?? error;
    }
    const t1 = performance.now();
    return workReport({
      collective: "allReduce",
      algorithm: reports[0]?.algorithm ?? "segment",
      transport: this.#transport.kind,
      bytes: op.count * 4,
      bytesSent: reports.reduce((sum, r) => sum + r.bytesSent, 0),
      timeMs: t1 - t0,
      startedAt,
      finishedAt: performance.timeOrigin + t1,
      compression: c.codec,
    });
  }

  /**
   * The groups of a compression between hosts only, registered on first use with ids every rank derives
   * alike from the host map: this rank's host (its ranks, the first one its root) and, on a host's first
   * rank, the group of every host's first rank. Undefined when there is nothing to split (no host map, one
   * host, or one rank on every host).
   */
  #hostSplit(group: GroupState): { host: GroupState; leaders?: GroupState } | undefined {
    const hosts = this.#hosts;
    if (hosts === undefined) return undefined;
    const byHost = new Map<number, number[]>();
    for (const r of group.ranks) {
      const h = hosts[r];
      const list = byHost.get(h);
      if (list) list.push(r);
      else byHost.set(h, [r]);
    }
    const lists = [...byHost.values()];
    if (lists.length === 1 || lists.every((l) => l.length === 1)) return undefined;
    const me = this.#transport.rank;
    const at = lists.findIndex((l) => l.includes(me));
    // Above every id newGroup hands out (those count up from 1), one block of 256 per parent group.
    const base = 0x40000000 + group.id * 256;
    const register = (id: number, ranks: number[]): GroupState => {
      if (!this.#groups.has(id)) this.addGroup(id, ranks);
      return this.#groups.get(id) as GroupState;
    };
    const host = register(base + at, lists[at]);
    const leaders = lists[at][0] === me ? register(base + 255, lists.map((l) => l[0])) : undefined;
    return { host, leaders };
  }

  #codecKernels: Promise<CodecKernels> | undefined;
  #compressedScratch: SharedArrayBuffer[] = [];

  /** Runs a call through the host segment (begun here, or by the main thread and handed over). */
  async #runSegment(op: OpRequest, group: GroupState): Promise<WorkReport> {
    const exec = this.#segment as SegmentExecutor;
    const call = segmentCallOf(
      op,
      group.ranks,
      exec.segment.layout,
      this.#view(op.input),
      this.#view(op.output),
    );
    const run = op.resume ? exec.resume(call, op.resume.number, op.resume.state) : exec.begin(call);
    const startedAt = performance.timeOrigin + performance.now();
    const t0 = performance.now();
    const { promise: failed, reject } = Promise.withResolvers<never>();
    this.#running = { id: op.id, fail: reject };
    try {
      await Promise.race([run.drive(t0 + op.timeoutMs, this.#segmentSpinMs, op.timeoutMs), failed]);
    } catch (e) {
      const error = e instanceof Error ? e : new DistError(String(e));
      this.#fail(error);
      throw this.#failure ?? error;
    } finally {
      this.#running = undefined;
    }
    const t1 = performance.now();
    return workReport({
      collective: op.collective,
      algorithm: "segment",
      transport: this.#transport.kind,
      bytes: op.count * dtypeSize(op.dtype),
      bytesSent: segmentBytesPosted(call, group.index),
      timeMs: t1 - t0,
      startedAt,
      finishedAt: performance.timeOrigin + t1,
    });
  }

  #descriptor(op: OpRequest, group: GroupState, algorithm: string): CallDescriptor {
    if (op.collective === "send" || op.collective === "recv") {
      // Both ends describe the message as the sender's call, numbered per direction.
      const sending = op.collective === "send";
      const counter = sending ? group.sent : group.received;
      const seq = counter.get(op.root) ?? 0;
      counter.set(op.root, seq + 1);
      return {
        group: group.id,
        seq,
        collective: "send",
        dtype: op.dtype,
        op: "sum",
        algorithm: "",
        root: sending ? op.root : group.index,
        count: op.count,
        servers: 0,
      };
    }
    return {
      group: group.id,
      seq: group.seq,
      collective: op.collective,
      dtype: op.dtype,
      op: op.op,
      algorithm,
      root: op.collective === "broadcast" || op.collective === "reduce" ? op.root : 0,
      count: op.count,
      servers: algorithm === "ps" ? op.servers ?? group.ranks.length : 0,
      stage: op.stage ?? 0,
    };
  }

  #average(op: OpRequest, group: GroupState): void {
    const size = group.ranks.length;
    const target = op.collective === "allReduce"
      ? op.input
      : op.collective === "reduce"
      ? (group.index === op.root ? op.input : undefined)
      : op.collective === "reduceScatter"
      ? op.output
      : undefined;
    const v = this.#view(target);
    if (v) this.#reducer.divide(op.dtype, v, size);
  }

  /** A tensor's bytes as this thread reaches them. */
  #view(region: OpRequest["input"]): Uint8Array | undefined {
    if (region !== undefined && "pool" in region) {
      const seg = this.#segment?.segment;
      if (seg === undefined) throw new DistError("A pool tensor reached a rank without a host segment");
      return seg.pool(seg.rank).subarray(region.pool, region.pool + region.byteLength);
    }
    return view(region);
  }

  #scratchTop = 0;

  /** Scratch memory for the running call; reused across calls so a steady workload allocates nothing. */
  #takeScratch(bytes: number): Uint8Array {
    const i = this.#scratchTop++;
    let buf = this.#scratch[i];
    if (!buf || buf.byteLength < bytes) {
      buf = new ArrayBuffer(Math.max(bytes, buf ? buf.byteLength * 2 : 0));
      this.#scratch[i] = buf;
    }
    return new Uint8Array(buf, 0, bytes);
  }
}

function reduceOpOf(op: ReduceOp): ReduceOp {
  // avg is a sum that the engine divides once the algorithm is done.
  return op === "avg" ? "sum" : op;
}

function view(region: Region | PointerRegion | undefined): Uint8Array | undefined {
  if (region === undefined) return undefined;
  if ("address" in region) return pointerView(region.address, region.byteLength);
  return new Uint8Array(region.buffer, region.byteOffset, region.byteLength);
}

/**
 * Views of the main thread's tensors, by address and length, most recently used last. A training loop
 * passes the same tensors call after call: a view made once serves them all, where a new one per call
 * (an external ArrayBuffer) makes V8 count its bytes as new external memory each time and collect
 * garbage every few calls (a mark-compact of several milliseconds per 8 MiB call, measured).
 */
const views = new Map<string, Uint8Array>();
const VIEWS = 64;

/** The bytes at an address of this process (a tensor of the main thread, kept alive by its call). */
function pointerView(address: number, byteLength: number): Uint8Array {
  if (byteLength === 0) return EMPTY;
  const key = `${address}:${byteLength}`;
  let v = views.get(key);
  if (v === undefined) {
    const pointer = Deno.UnsafePointer.create(BigInt(address)) as Deno.PointerObject;
    v = new Uint8Array(Deno.UnsafePointerView.getArrayBuffer(pointer, byteLength));
    if (views.size >= VIEWS) views.delete(views.keys().next().value as string);
  } else views.delete(key);
  views.set(key, v);
  return v;
}

function mismatch(from: number, theirs: CallDescriptor, me: number, mine: CallDescriptor): MismatchError {
  const call = (d: CallDescriptor, rank: number): string =>
    d.collective === "send" && mine.collective === "send" && rank === me
      ? `expected recv(${d.count} × ${d.dtype}) #${d.seq} from rank ${from} in group ${d.group}`
      : `called ${describeCall(d)}`;
  return new MismatchError(
    `Mismatched calls: rank ${from} ${call(theirs, from)} but rank ${me} ${call(mine, me)}`,
  );
}

/** The codecs' kernels on this thread: the compression kernels and the BLAS-like ones. */
async function codecKernels(): Promise<CodecKernels> {
  const [c, k] = await Promise.all([compressionKernels(), loadKernels()]);
  return {
    quantizeInt8: (src, options) => c.quantizeInt8(src, options),
    dequantizeInt8: (packed, dst, options) => c.dequantizeInt8(packed, dst, options),
    signCompress: (src, residual, options) => c.signCompress(src, residual, options),
    signDecompress: (packed, dst, options) => c.signDecompress(packed, dst, options),
    topK: (src, n, options) => c.topK(src, n, options),
    scatterAdd: (dst, sparse) => c.scatterAdd(dst, sparse),
    divide: (dst, divisor) => k.divide(dst, divisor),
    axpy: (y, x, options) => k.axpy(y, x, options),
    scale: (x, alpha) => k.scale(x, alpha),
    matmul: (a, b, options) => k.matmul(a, b, options),
  };
}

/**
 * Scratch of compressed all-reduces: the i-th buffer a call takes is the i-th of the previous call's,
 * grown if it must be, so a steady training loop allocates nothing. Shared, since the collectives it feeds
 * take regions of SharedArrayBuffers; zeroed on every take.
 */
class CompressedScratch {
  #buffers: SharedArrayBuffer[];
  #next = 0;

  constructor(buffers: SharedArrayBuffer[]) {
    this.#buffers = buffers;
  }

  take(bytes: number): Uint8Array {
    const i = this.#next++;
    let buf = this.#buffers[i];
    if (buf === undefined || buf.byteLength < bytes) {
      buf = this.#buffers[i] = new SharedArrayBuffer(Math.max(16, bytes, (buf?.byteLength ?? 0) * 2));
    }
    const out = new Uint8Array(buf, 0, bytes);
    out.fill(0);
    return out;
  }
}
