/**
 * The engine of the CPU backend: it runs on a rank's communication Worker, owns the transport, and runs
 * the rank's calls one after another, in the order they were issued (as a CUDA stream would). Tensors are
 * regions of SharedArrayBuffers that the main thread filled, or the main thread's own memory by address,
 * so a call progresses here while the main thread computes.
 *
 * Each call goes where the main thread routed it (`_route.ts`): a codec's call (`_narrow_call.ts`,
 * `_compressed_call.ts`), a segment call (`_segment_exec.ts`), or a message algorithm over the transport
 * (`_message_call.ts`), whose `"auto"` the cost model resolves here.
 *
 * Every message of a call carries the call's descriptor; a peer running another call is reported with
 * both calls. Any failure (a timeout, a dead or aborting peer, a mismatch) is fatal: the transport aborts,
 * every peer learns why, and every pending and later call fails with the same error.
 *
 * @module
 */
import { phaseMark, phasesOn, phasesSince } from "../../core/phases.ts";
import { heartbeatBusy } from "./_heartbeat.ts";
import { dtypeSize } from "../../core/dtype.ts";
import { DistError, MismatchError, TransportError } from "../../core/errors.ts";
import { peerRevoked } from "./_revoked.ts";
import type { Transport } from "../../transport/transport.ts";
import type { WorkReport } from "../work.ts";
import { modelBytes, resolveAlgorithm } from "./_dispatch.ts";
import type { OpRequest } from "./_protocol.ts";
import type { Reducer } from "./_reducer.ts";
import type { SegmentExecutor } from "./_segment_exec.ts";
import { segmentCallOf, segmentUnavailable } from "./_segment_call.ts";
import { EngineGroups, type GroupState } from "./_groups.ts";
import { MessageCall, type MessageEnv } from "./_message_call.ts";
import { NarrowAllReduce } from "./_narrow_call.ts";
import { CompressedAllReduce } from "./_compressed_call.ts";
import { ScratchPool } from "./_scratch.ts";
import { CallDeadline } from "./_deadline.ts";
import { regionView } from "./_views.ts";

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

/**
 * What a codec's call (narrow or compressed) needs of the engine: its groups, its reductions, and its
 * collectives, which the codec's call runs as calls of its own while it holds the engine's turn.
 */
export interface CodecEngine {
  /** The engine's groups (sub-groups registered on first use). */
  readonly groups: EngineGroups;
  /** Reductions and casts in WASM. */
  readonly reducer: Reducer;
  /** The transport's kind, as reports name it. */
  readonly transport: string;
  /**
   * Runs one of the codec's collectives now, as a call of the engine's.
   *
   * @param op The collective.
   * @returns Its report.
   */
  run(op: OpRequest): Promise<WorkReport>;
  /**
   * A tensor's bytes as this thread reaches them.
   *
   * @param region The tensor.
   * @returns Its bytes.
   */
  view(region: OpRequest["input"]): Uint8Array | undefined;
  /**
   * Fails the engine with what a call threw (every peer learns why).
   *
   * @param e What was thrown.
   * @returns The error to throw.
   */
  fatal(e: unknown): Error;
}

/** Runs a rank's calls over a transport. */
export class Engine {
  #transport: Transport;
  #groups: EngineGroups;
  #chain: Promise<unknown> = Promise.resolve();
  #failure: Error | undefined;
  #chunkBytes: number;
  #segment: SegmentExecutor | undefined;
  #segmentSpinMs: number;
  #cancelled = new Map<number, string>();
  #running: { id: number; fail: (e: Error) => void } | undefined;
  #scratch = new ScratchPool();
  #deadline = new CallDeadline();
  #messages: MessageEnv;
  #codec: CodecEngine;
  #narrow = new NarrowAllReduce();
  #compressed = new CompressedAllReduce();

  /**
   * @param transport Connected to every rank.
   * @param reducer Reductions in WASM.
   * @param options Chunking and checks.
   */
  constructor(transport: Transport, reducer: Reducer, options: EngineOptions = {}) {
    this.#transport = transport;
    this.#chunkBytes = options.chunkBytes ?? 1 << 20;
    this.#segment = options.segment;
    this.#segmentSpinMs = options.segmentSpinMs ?? 0.2;
    this.#groups = new EngineGroups(transport.rank, options.hosts, options.segment !== undefined);
    const view = (region: OpRequest["input"]): Uint8Array | undefined =>
      regionView(region, this.#segment?.segment);
    this.#messages = {
      transport,
      reducer,
      chunkBytes: this.#chunkBytes,
      checkCalls: options.checkCalls ?? true,
      scratch: this.#scratch,
      segment: options.segment,
      view,
    };
    this.#codec = {
      groups: this.#groups,
      reducer,
      transport: transport.kind,
      run: (op) => this.#run(op),
      view,
      fatal: (e) => this.#fatal(e),
    };
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
    this.#groups.add(id, ranks);
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
    this.#deadline.close();
    await this.#transport.close();
  }

  #fail(thrown: Error): void {
    if (this.#failure) return;
    const error = peerMismatch(thrown) ?? peerRevoked(thrown) ?? thrown;
    this.#failure = error;
    this.#segment?.segment.abort(error.message);
    this.#transport.abort(error);
    this.#running?.fail(error);
  }

  /** Fails the engine with what a call threw; the error every call of it then throws. */
  #fatal(e: unknown): Error {
    const error = e instanceof Error ? e : new DistError(String(e));
    this.#fail(error);
    return this.#failure ?? error;
  }

  /**
   * Marks call `id` as the running one, which a cancel or the engine's failure fails from now on.
   * A transport failure reaches the returned promise through #fail (the constructor's one reaction to
   * transport.failed): racing transport.failed itself would add a reaction per call to a promise that
   * never settles while all is well, and those would pile up for the life of the process.
   *
   * @returns A promise that rejects when that happens; race the call against it.
   */
  #begin(id: number): Promise<never> {
    const { promise, reject } = Promise.withResolvers<never>();
    this.#running = { id, fail: reject };
    heartbeatBusy(performance.now());
    return promise;
  }

  /** Runs a call; its report says where its time went (`core/phases.ts`). */
  async #run(op: OpRequest): Promise<WorkReport> {
    if (!phasesOn) return await this.#dispatch(op);
    const mark = phaseMark();
    const report = await this.#dispatch(op);
    if (report.phases) return report; // a segment call's, over exactly its own time
    const kind = this.#transport.kind;
    const measured = kind === "shm" || kind === "inproc";
    return { ...report, phases: phasesSince(mark, report.timeMs, measured) };
  }

  async #dispatch(op: OpRequest): Promise<WorkReport> {
    if (this.#failure) throw this.#failure;
    if (op.commDtype !== undefined) return await this.#narrow.run(this.#codec, op);
    if (op.compression !== undefined) return await this.#compressed.run(this.#codec, op, op.compression);
    const cancelled = this.#cancelled.get(op.id);
    if (cancelled !== undefined) {
      this.#cancelled.delete(op.id);
      throw new DistError(`Aborted by the caller's signal before it started: ${cancelled}`, {
        code: "ABORTED",
      });
    }
    const group = this.#groups.get(op.group);
    const size = group.ranks.length;
    const algorithm = resolveAlgorithm(op.collective, op.algorithm, {
      bytes: modelBytes(op, dtypeSize(op.dtype), size),
      size,
      transport: this.#transport.kind,
      chunkBytes: this.#chunkBytes,
      servers: op.servers,
      segment: group.segment && !(op.counts !== undefined && op.collective === "allToAll"),
      hosts: group.hosts,
      uneven: op.counts !== undefined && !(group.segment && op.collective !== "allToAll"),
      deterministic: op.deterministic,
    });
    if (algorithm === "segment") return await this.#runSegment(op, group);
    return await this.#runMessages(op, group, algorithm);
  }

  /** Runs a call as a message algorithm over the transport. */
  async #runMessages(op: OpRequest, group: GroupState, algorithm: string): Promise<WorkReport> {
    const call = new MessageCall(this.#messages, op, group, algorithm);
    this.#deadline.watch(call.began + op.timeoutMs, () => this.#fail(call.timedOut()));
    const failed = this.#begin(op.id);
    try {
      await Promise.race([call.run(), failed]);
    } catch (e) {
      throw this.#fatal(e);
    } finally {
      this.#deadline.clear();
      this.#running = undefined;
      heartbeatBusy(undefined);
      this.#scratch.reset();
    }
    return call.report();
  }

  /** Runs a call through the host segment (begun here, or by the main thread and handed over). */
  async #runSegment(op: OpRequest, group: GroupState): Promise<WorkReport> {
    if (!group.segment) throw segmentUnavailable(op.collective, group.id, this.#transport.kind);
    const exec = this.#segment as SegmentExecutor;
    const view = this.#messages.view;
    const call = segmentCallOf(op, group.ranks, exec.segment.layout, view(op.input), view(op.output));
    const run = op.resume ? exec.resume(call, op.resume.number, op.resume.state) : exec.begin(call);
    const failed = this.#begin(op.id);
    try {
      await Promise.race([run.drive(run.began + op.timeoutMs, this.#segmentSpinMs, op.timeoutMs), failed]);
    } catch (e) {
      throw this.#fatal(e);
    } finally {
      this.#running = undefined;
      heartbeatBusy(undefined);
    }
    return run.report(this.#transport.kind);
  }
}

/**
 * A peer's abort whose reason is a mismatch it found, as the MismatchError it was there: every rank of a
 * mismatch then fails with the same kind of error, naming both calls, whichever rank found it (over
 * messages only the ranks that received from the odd one find it; the others learn it by the abort).
 * Costs nothing until a transport fails.
 *
 * @param error The transport's failure.
 * @returns The mismatch, or `undefined` for any other failure.
 */
export function peerMismatch(error: Error): MismatchError | undefined {
  if (!(error instanceof TransportError) || error.peer === undefined) return undefined;
  // The peer may relay another rank's abort ("Rank 0 aborted: Rank 2 aborted: Mismatched calls: …"): a rank
  // that heard of the mismatch second-hand fails with it as well.
  const m = /^Rank (\d+) aborted: (?:Rank \d+ aborted: )*(Mismatched calls: [\s\S]*)$/.exec(error.message);
  if (m === null || Number(m[1]) !== error.peer) return undefined;
  return new MismatchError(m[2], { cause: error });
}
