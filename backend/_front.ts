/**
 * The call front every backend's process group shares: a call is checked and normalised here, once, into
 * a {@linkcode CallRecord}, and a backend only runs records ({@linkcode GroupFront.execute}). So a bad call
 * gets the same error on `cpu`, `nccl` and `mpi`, thrown before anything is sent (the group stays usable),
 * and a call on a closed group, or with a signal that is already aborted, is refused at once.
 *
 * What the front checks, in this order: the group is open (else the Work rejects at once), this rank is a
 * member, the timeout, the signal (an `AbortSignal` or nothing), each tensor (the backend says which kinds
 * it takes; a detached or resizable buffer is refused by name), the dtype (inferred, or the one given;
 * input and output agree), the op, the root or peer, the block lengths of the out-of-place collectives,
 * the algorithm's name (the backend says which it runs), and the parameter servers.
 *
 * @module
 */
import {
  checkFactor,
  checkOp,
  checkOpDType,
  type DType,
  dtypeOf,
  isFloat,
  type ReduceOp,
  type TypedArray,
} from "../core/dtype.ts";
import { DistError, UnsupportedError } from "../core/errors.ts";
import { checkBlocks, checkCountLength, checkCounts, checkPeer, checkRank, countsSum } from "./_checks.ts";
import { checkCompression, type CheckedCompression } from "./_compression.ts";
import {
  type AllocOptions,
  type AllToAllOptions,
  ANY_SOURCE,
  type AnyTensor,
  type CallOptions,
  type CountsOptions,
  type GatherOptions,
  type GroupOptions,
  isDeviceTensor,
  type MonitoredBarrierOptions,
  type ObjectRootOptions,
  type P2POp,
  type ProcessGroup,
  type ReduceOptions,
  type ReduceScatterOptions,
  type RootOptions,
  type RootReduceOptions,
  type ShrinkOptions,
  type SplitOptions,
} from "./process_group.ts";
import { Work } from "./work.ts";
import { type FlightDump, flightDump, FlightRecorder, writeFlightDump } from "./flight.ts";
import { debugLog, debugOn } from "./_debug.ts";
import { timelineOn, timelineRecord } from "./_timeline.ts";
import { checkWaitAll, monitoredBarrier, type MonitorStore } from "./_monitored_barrier.ts";
import {
  allGatherObject,
  broadcastObject,
  gatherObject,
  recvObject,
  scatterObject,
  sendObject,
} from "./_objects.ts";

/** The options of a call made without any: one frozen object, not a new one per call. */
const NO_OPTIONS: Readonly<Record<never, never>> = Object.freeze({});

/** The collectives, in the order of their wire codes (1-based). */
export const COLLECTIVES = [
  "allReduce",
  "broadcast",
  "reduce",
  "allGather",
  "reduceScatter",
  "allToAll",
  "barrier",
  "send",
  "recv",
  "gather",
  "scatter",
] as const;

/** A collective's name. */
export type Collective = typeof COLLECTIVES[number];

/** How error messages name each collective (`Cannot all-reduce: ...`). */
export const VERB: Readonly<Record<Collective, string>> = {
  allReduce: "all-reduce",
  broadcast: "broadcast",
  reduce: "reduce",
  allGather: "all-gather",
  reduceScatter: "reduce-scatter",
  allToAll: "all-to-all",
  barrier: "barrier",
  send: "send",
  recv: "recv",
  gather: "gather",
  scatter: "scatter",
};

/**
 * Whether a collective has a root (broadcast, reduce, gather, scatter), which its descriptor carries.
 *
 * @param collective The collective.
 * @returns Whether it has.
 */
export function rootedCollective(collective: Collective): boolean {
  return collective === "broadcast" || collective === "reduce" || collective === "gather" ||
    collective === "scatter";
}

/** One call, checked and normalised: all a backend needs to run it. */
export interface CallRecord {
  /** The collective. */
  readonly collective: Collective;
  /** The element type (`uint8` for a barrier). */
  readonly dtype: DType;
  /** The reduction (`sum` for collectives without one). */
  readonly op: ReduceOp;
  /** `premulSum`'s factor, checked finite (and finite in the dtype); undefined for every other op. */
  readonly factor?: number;
  /** The root (broadcast, reduce, gather, scatter) or the peer (send, recv), as a rank of the group; 0 otherwise. */
  readonly root: number;
  /** The in-place tensor (all-reduce, broadcast, reduce, send, recv). */
  readonly tensor?: AnyTensor;
  /**
   * The input of an out-of-place collective (all-gather, reduce-scatter, all-to-all, gather; scatter's on
   * the root only).
   */
  readonly input?: AnyTensor;
  /** The output of an out-of-place collective (gather's on the root only). */
  readonly output?: AnyTensor;
  /**
   * Elements, as the call's descriptor counts them: the tensor's, or the input's (the output's for a
   * scatter): one rank's block, the same on every rank.
   */
  readonly count: number;
  /** The algorithm asked for, or `"auto"`. */
  readonly algorithm: string;
  /** Parameter servers of the `ps` all-reduce. */
  readonly servers?: number;
  /**
   * A v-form's blocks, in elements per rank (`counts`; all-to-all's `sendCounts`), checked; with them
   * `count` is the n-block buffer's elements (the same on every rank), 0 for an all-to-all.
   */
  readonly counts?: readonly number[];
  /** An uneven all-to-all's `recvCounts`, checked. */
  readonly recvCounts?: readonly number[];
  /**
   * Deterministic mode (`ReduceOptions.deterministic`, or the group's): set only where it changes
   * something, a sum, avg or product of floats, whose contributions must then fold in rank order.
   */
  readonly deterministic?: boolean;
  /** The narrower dtype an all-reduce travels in (`ReduceOptions.commDtype`), if any. */
  readonly commDtype?: DType;
  /** The codec of a compressed all-reduce (`ReduceOptions.compression`), checked. */
  readonly compression?: CheckedCompression;
  /** Milliseconds before the call fails. */
  readonly timeoutMs: number;
  /** Aborts the call. */
  readonly signal?: AbortSignal;
  /** The options as the caller passed them, for what only one backend takes (the nccl backend's `scale`). */
  readonly options: Readonly<CallOptions>;
}

/**
 * A process group's front: the collectives of {@linkcode ProcessGroup}, checked and turned into records
 * that the backend's {@linkcode GroupFront.execute} runs. `W` is the backend's kind of Work.
 *
 * @internal Every backend's group extends it; users see only {@linkcode ProcessGroup}.
 */
export abstract class GroupFront<W extends Work = Work> implements ProcessGroup {
  // The last host tensor checked, the dtype asked for with it, and the dtype found (see #dtype).
  #lastTensor: AnyTensor | undefined;
  #lastAsked: DType | undefined;
  #lastDtype: DType = "float32";
  #flight: FlightRecorder | undefined;
  // Monitored barriers called so far (their keys and messages carry the number).
  #monitored = 0;
  /** This rank within the group, or -1 if this rank is not a member. */
  abstract readonly rank: number;
  /** The number of ranks in the group. */
  abstract readonly size: number;
  /** The global ranks of the members, in group order. */
  abstract readonly ranks: readonly number[];
  /** The backend's name. */
  abstract readonly backend: string;

  /** The group's default timeout of calls, in milliseconds. */
  protected abstract get defaultTimeoutMs(): number;
  /** Whether the group (or the world it belongs to) is closed or closing. */
  protected abstract get isClosed(): boolean;
  /** The group as messages name it (`the group of ranks 0, 1`). */
  protected describe(): string {
    return `the group of ranks ${this.ranks.join(", ")}`;
  }
  /**
   * Refuses a tensor the backend cannot take, with a `TypeError` or `UnsupportedError` naming it. By
   * default a backend takes host TypedArrays only (cpu, mpi): a device tensor is refused with the way out.
   *
   * @param what The collective, as messages name it.
   * @param tensor The tensor.
   * @param _name The argument's name (`tensor`, `input`, `output`).
   */
  protected checkTensor(what: string, tensor: AnyTensor, _name: string): void {
    if (isDeviceTensor(tensor)) {
      throw new UnsupportedError(
        `Cannot ${what}: the ${this.backend} backend takes host TypedArrays, found a ${tensor.dtype} tensor ` +
          `on GPU ${tensor.device}; copy it to the host (DeviceBuffer.copyTo) or use init({ backend: "nccl" })`,
      );
    }
  }
  /**
   * Whether the backend casts and compresses all-reduces on a thread of its own (`commDtype`,
   * `compression`); a backend without one refuses them with an `UnsupportedError`. @default false
   */
  protected get codecThread(): boolean {
    return false;
  }
  /**
   * Whether the backend runs `op` on `dtype` (the front has checked that the op applies to the dtype); one
   * that cannot is refused at the front with {@linkcode opUnsupported}'s words. @default true
   *
   * @param _op The op.
   * @param _dtype The dtype.
   * @returns Whether it does.
   */
  protected supportsOp(_op: ReduceOp, _dtype: DType): boolean {
    return true;
  }
  /** Whether the group's reducing calls run in deterministic mode unless a call says otherwise. @default false */
  /**
   * Whether the backend receives from {@linkcode ANY_SOURCE}; one that cannot refuses it with an
   * `UnsupportedError`. @default true
   */
  protected get receivesFromAnySource(): boolean {
    return true;
  }
  protected get deterministicDefault(): boolean {
    return false;
  }
  /**
   * Whether the backend can fold a reduction's contributions in rank order (deterministic mode); one that
   * cannot refuses it with an `UnsupportedError`. @default false
   */
  protected get foldsInOrder(): boolean {
    return false;
  }
  /**
   * Refuses an algorithm name the backend does not run.
   *
   * @param collective The collective.
   * @param name The name asked for (`"auto"` is always allowed).
   */
  protected abstract checkAlgorithm(collective: Collective, name: string): void;
  /**
   * Runs a checked call. It may still throw before sending anything (a limit of the backend's), and the
   * group stays usable.
   *
   * @param call The call.
   * @returns Its Work.
   */
  protected abstract execute(call: CallRecord): W;
  /**
   * A Work that has already failed, for a call refused before it started (closed group, aborted signal).
   *
   * @param error Why.
   * @returns The Work.
   */
  protected rejected(error: Error): W {
    return new Work(Promise.reject(error)) as W;
  }

  allReduce(tensor: AnyTensor, options: ReduceOptions = NO_OPTIONS): W {
    return this.#call("allReduce", options, () => {
      const dtype = this.#dtype("all-reduce", tensor, "tensor", options);
      const servers = options.servers;
      if (servers !== undefined && (!Number.isInteger(servers) || servers < 1 || servers > this.size)) {
        throw new RangeError(
          `Cannot all-reduce: servers must be an integer in 1..${this.size}, found ${servers}`,
        );
      }
      const commDtype = commDtypeOf(dtype, options.commDtype);
      const op = opOf("all-reduce", options), factor = this.#reduction("all-reduce", dtype, op, options);
      const compression = options.compression === undefined
        ? undefined
        : checkCompression(options.compression, dtype, op, tensor as ArrayBufferView, options);
      const deterministic = this.#deterministic("all-reduce", dtype, op, options);
      if (deterministic && (compression !== undefined || commDtype !== undefined)) {
        throw new UnsupportedError(
          `Cannot all-reduce deterministically with ${
            compression ? "compression" : "commDtype"
          }: the codecs ` +
            `and narrower sums do not fold the ranks in rank order; drop one of the two`,
        );
      }
      return {
        dtype,
        op,
        factor,
        tensor,
        count: tensor.length,
        servers,
        commDtype,
        compression,
        deterministic,
      };
    });
  }

  broadcast(tensor: AnyTensor, options: RootOptions = NO_OPTIONS): W {
    return this.#call("broadcast", options, () => ({
      dtype: this.#dtype("broadcast", tensor, "tensor", options),
      root: checkRank("broadcast", "root", options.root ?? 0, this.size),
      tensor,
      count: tensor.length,
    }));
  }

  reduce(tensor: AnyTensor, options: RootReduceOptions = NO_OPTIONS): W {
    return this.#call("reduce", options, () => {
      onlyAllReduce("reduce", options);
      const dtype = this.#dtype("reduce", tensor, "tensor", options), op = opOf("reduce", options);
      const factor = this.#reduction("reduce", dtype, op, options);
      return {
        dtype,
        op,
        factor,
        deterministic: this.#deterministic("reduce", dtype, op, options),
        root: checkRank("reduce", "root", options.root ?? 0, this.size),
        tensor,
        count: tensor.length,
      };
    });
  }

  allGather(output: AnyTensor, input: AnyTensor, options: CountsOptions = NO_OPTIONS): W {
    return this.#call("allGather", options, () => {
      const dtype = this.#pair("all-gather", output, input, options);
      if (options.counts === undefined) {
        checkBlocks("allGather", output, input, this.size);
        return { dtype, input, output, count: input.length };
      }
      const counts = this.#counts("all-gather", options.counts, "input", input, "output", output);
      return { dtype, input, output, count: countsSum(counts), counts };
    });
  }

  reduceScatter(output: AnyTensor, input: AnyTensor, options: ReduceScatterOptions = NO_OPTIONS): W {
    return this.#call("reduceScatter", options, () => {
      const dtype = this.#pair("reduce-scatter", output, input, options);
      const op = opOf("reduce-scatter", options);
      const factor = this.#reduction("reduce-scatter", dtype, op, options);
      onlyAllReduce("reduce-scatter", options);
      const deterministic = this.#deterministic("reduce-scatter", dtype, op, options);
      if (options.counts === undefined) {
        checkBlocks("reduceScatter", output, input, this.size);
        return { dtype, op, factor, input, output, count: input.length, deterministic };
      }
      const counts = this.#counts("reduce-scatter", options.counts, "output", output, "input", input);
      return { dtype, op, factor, input, output, count: countsSum(counts), counts, deterministic };
    });
  }

  allToAll(output: AnyTensor, input: AnyTensor, options: AllToAllOptions = NO_OPTIONS): W {
    return this.#call("allToAll", options, () => {
      const dtype = this.#pair("all-to-all", output, input, options);
      const { sendCounts, recvCounts } = options;
      if (sendCounts === undefined && recvCounts === undefined) {
        checkBlocks("allToAll", output, input, this.size);
        return { dtype, input, output, count: input.length };
      }
      if (sendCounts === undefined || recvCounts === undefined) {
        throw new TypeError(
          `Cannot all-to-all: expected both sendCounts and recvCounts (or neither), found only ` +
            (sendCounts === undefined ? "recvCounts" : "sendCounts"),
        );
      }
      const send = checkCounts("all-to-all", "sendCounts", sendCounts, this.size);
      const recv = checkCounts("all-to-all", "recvCounts", recvCounts, this.size);
      checkCountLength("all-to-all", "input", input, countsSum(send), "the sum of sendCounts");
      checkCountLength("all-to-all", "output", output, countsSum(recv), "the sum of recvCounts");
      if (send[this.rank] !== recv[this.rank]) {
        throw new RangeError(
          `Cannot all-to-all: this rank (${this.rank}) sends itself sendCounts[${this.rank}] = ` +
            `${send[this.rank]} elements but receives recvCounts[${this.rank}] = ${recv[this.rank]}`,
        );
      }
      return { dtype, input, output, count: 0, counts: send, recvCounts: recv };
    });
  }

  gather(output: AnyTensor | null, input: AnyTensor, options: GatherOptions = NO_OPTIONS): W {
    return this.#call("gather", options, () => {
      const root = checkRank("gather", "root", options.root ?? 0, this.size);
      const atRoot = this.rank === root;
      rootOnly("gather", "output", output, atRoot, root);
      const dtype = atRoot
        ? this.#pair("gather", output as AnyTensor, input, options)
        : this.#dtype("gather", input, "input", options);
      const out = atRoot ? output as AnyTensor : undefined;
      if (options.counts === undefined) {
        if (out) checkBlocks("gather", out, input, this.size);
        return { dtype, root, input, output: out, count: input.length };
      }
      const counts = this.#counts("gather", options.counts, "input", input, "the root's output", out);
      return { dtype, root, input, output: out, count: countsSum(counts), counts };
    });
  }

  scatter(output: AnyTensor, input: AnyTensor | null, options: GatherOptions = NO_OPTIONS): W {
    return this.#call("scatter", options, () => {
      const root = checkRank("scatter", "root", options.root ?? 0, this.size);
      const atRoot = this.rank === root;
      rootOnly("scatter", "input", input, atRoot, root);
      const dtype = atRoot
        ? this.#pair("scatter", output, input as AnyTensor, options)
        : this.#dtype("scatter", output, "output", options);
      const all = atRoot ? input as AnyTensor : undefined;
      if (options.counts === undefined) {
        if (all) checkBlocks("scatter", output, all, this.size);
        return { dtype, root, input: all, output, count: output.length };
      }
      const counts = this.#counts("scatter", options.counts, "output", output, "the root's input", all);
      return { dtype, root, input: all, output, count: countsSum(counts), counts };
    });
  }

  broadcastObject<T>(value: T | null, options?: ObjectRootOptions): Promise<T> {
    return broadcastObject(this, value, options);
  }

  allGatherObject<T>(value: T, options?: CallOptions): Promise<T[]> {
    return allGatherObject(this, value, options);
  }

  gatherObject<T>(value: T, options?: ObjectRootOptions): Promise<T[] | null> {
    return gatherObject(this, value, options);
  }

  scatterObject<T>(values: readonly T[] | null, options?: ObjectRootOptions): Promise<T> {
    return scatterObject(this, values, options);
  }

  sendObject(value: unknown, peer: number, options?: CallOptions): Promise<void> {
    return sendObject(this, value, peer, options);
  }

  recvObject<T>(peer: number, options?: CallOptions): Promise<T> {
    return recvObject(this, peer, options);
  }

  monitoredBarrier(options: MonitoredBarrierOptions = NO_OPTIONS): Promise<void> {
    const what = "monitoredBarrier";
    if (this.isClosed) return Promise.reject(new DistError(`Cannot ${what}: the process group is closed`));
    const { timeoutMs, signal } = this.#checkCall(what, options);
    const waitAll = checkWaitAll(options);
    // Numbered on every member alike, refused calls aside.
    const seq = this.#monitored++;
    if (signal?.aborted) {
      return Promise.reject(
        new DistError(`Aborted before it started: ${signal.reason}`, { code: "ABORTED" }),
      );
    }
    return monitoredBarrier({ pg: this, seq, timeoutMs, waitAll, signal, board: this.monitorStore });
  }

  /**
   * Where this group's monitored barriers meet: the world's store, under a prefix of the group's own, for
   * a backend whose receives run one after another or fail the group on a timeout (cpu, nccl); by
   * default (`undefined`) over the group's own send and recv (mpi: receives side by side, cancelled on
   * timeout). See `_monitored_barrier.ts`.
   */
  protected get monitorStore(): MonitorStore | undefined {
    return undefined;
  }

  barrier(options: CallOptions = NO_OPTIONS): W {
    return this.#call("barrier", options, () => ({ dtype: "uint8" as const, count: 0 }));
  }

  send(tensor: AnyTensor, peer: number, options: CallOptions = NO_OPTIONS): W {
    return this.#call("send", options, () => ({
      dtype: this.#dtype("send", tensor, "tensor", options),
      root: checkPeer("send", peer, this),
      tensor,
      count: tensor.length,
    }));
  }

  recv(tensor: AnyTensor, peer: number, options: CallOptions = NO_OPTIONS): W {
    return this.#call("recv", options, () => ({
      dtype: this.#dtype("recv", tensor, "tensor", options),
      root: peer === ANY_SOURCE ? this.#anySource("recv") : checkPeer("recv", peer, this),
      tensor,
      count: tensor.length,
    }));
  }

  batchIsendIrecv(ops: readonly P2POp[], options: CallOptions = NO_OPTIONS): W[] {
    const what = "batchIsendIrecv";
    if (!Array.isArray(ops) || ops.length === 0) {
      throw new TypeError(
        `Cannot ${what}: expected a non-empty array of { op: "send" | "recv", tensor, peer }, found ` +
          describeValue(ops),
      );
    }
    // Every op is checked before any is issued, so a bad one sends nothing.
    ops.forEach((o, i) => {
      if (o === null || typeof o !== "object" || (o.op !== "send" && o.op !== "recv")) {
        throw new TypeError(
          `Cannot ${what}: expected ops[${i}] to be { op: "send" | "recv", tensor, peer }, found ` +
            describeValue(o?.op ?? o),
        );
      }
      const which = `${what} (ops[${i}], a ${o.op})`;
      if (o.op === "recv" && o.peer === ANY_SOURCE) this.#anySource(which);
      else checkPeer(which, o.peer, this);
      this.#dtype(`${what} (ops[${i}], a ${o.op})`, o.tensor, "tensor", { dtype: o.dtype ?? options.dtype });
    });
    return this.runBatch(ops, options);
  }

  /** Checks a receive from {@linkcode ANY_SOURCE}: the backend has one, and the group another rank. */
  #anySource(what: string): number {
    if (!this.receivesFromAnySource) {
      throw new UnsupportedError(
        `Cannot ${what} from ANY_SOURCE: the ${this.backend} backend has no receive from any rank; name the peer`,
      );
    }
    if (this.size < 2) {
      throw new RangeError(`Cannot ${what} from ANY_SOURCE: the group has no rank but this one`);
    }
    return ANY_SOURCE;
  }

  /**
   * Issues a checked batch of sends and receives: by default each as its own call, in order (they
   * overlap: none waits for another); the nccl backend groups them (`ncclGroupStart`/`ncclGroupEnd`),
   * which NCCL needs for sends and receives that pair up both ways.
   *
   * @param ops The checked operations.
   * @param options Their common options.
   * @returns One Work per operation.
   */
  protected runBatch(ops: readonly P2POp[], options: CallOptions): W[] {
    return ops.map((o) => {
      const own = o.dtype === undefined ? options : { ...options, dtype: o.dtype };
      return o.op === "send" ? this.send(o.tensor, o.peer, own) : this.recv(o.tensor, o.peer, own);
    });
  }

  /**
   * A plain all-reduce (no algorithm asked for, no codec, no signal) whose arguments the front checked:
   * the backend runs it now, before any record is made, or returns `undefined` to have it run as every
   * other call.
   *
   * @param _tensor The tensor.
   * @param _dtype Its dtype.
   * @param _op The op.
   * @param _timeoutMs The call's timeout.
   * @returns Its Work, or `undefined`.
   */
  protected quickAllReduce(
    _tensor: AnyTensor,
    _dtype: DType,
    _op: ReduceOp,
    _timeoutMs: number,
  ): W | undefined {
    return undefined;
  }

  abstract newGroup(ranks: readonly number[], options?: GroupOptions): Promise<ProcessGroup>;

  /**
   * A sub-group of `ranks` (checked, distinct), numbered in the order given: what `newGroup` does with
   * its sorted ranks, and `split` with ranks in key order. Every rank of this group calls it with the same
   * list, in the same order relative to its other calls.
   *
   * @param ranks The members, as ranks of this group, in the sub-group's order.
   * @param options Its options.
   * @returns The sub-group (rank -1 on the ranks outside it).
   */
  protected abstract groupInOrder(ranks: readonly number[], options: GroupOptions): Promise<ProcessGroup>;

  async split(color: number | null, options: SplitOptions = {}): Promise<ProcessGroup | null> {
    const what = "split";
    if (this.isClosed) throw new DistError(`Cannot ${what}: the process group is closed`);
    if (this.rank < 0) {
      throw new RangeError(`Cannot ${what}: this rank is not a member of ${this.describe()}`);
    }
    const none = color === null || color === undefined || (typeof color === "number" && color < 0);
    if (!none && !(Number.isInteger(color) && (color as number) <= 2 ** 31 - 1)) {
      throw new RangeError(
        `Cannot ${what}: expected color to be an integer >= 0 (or null or < 0 for no group), found ${
          describeValue(color)
        }`,
      );
    }
    const key = options.key ?? 0;
    if (!Number.isInteger(key) || Math.abs(key) > 2 ** 31) {
      throw new RangeError(`Cannot ${what}: expected key to be an integer, found ${describeValue(key)}`);
    }
    // One all-gather of every rank's (color, key): then every rank forms every colour's group, in colour
    // order, and keeps its own.
    const pairs = new Float64Array(2 * this.size);
    await this.allGather(pairs, new Float64Array([none ? -1 : color as number, key]), {
      timeoutMs: options.timeoutMs,
    });
    const colours = [...new Set(Array.from({ length: this.size }, (_, r) => pairs[2 * r]))]
      .filter((c) => c >= 0)
      .sort((a, b) => a - b);
    let mine: ProcessGroup | null = null;
    for (const c of colours) {
      const members = Array.from({ length: this.size }, (_, r) => r)
        .filter((r) => pairs[2 * r] === c)
        .sort((a, b) => pairs[2 * a + 1] - pairs[2 * b + 1] || a - b);
      const group = await this.groupInOrder(members, { timeoutMs: options.groupTimeoutMs });
      if (c === color) mine = group;
    }
    return mine;
  }
  abstract alloc(count: number, options?: AllocOptions): TypedArray;
  abstract release(tensor: TypedArray): void;
  abstract close(): Promise<void>;

  revoke(reason: string = "revoked"): void {
    if (typeof reason !== "string") {
      throw new TypeError(`Cannot revoke: expected a reason string, found ${typeof reason}`);
    }
    this.revokeGroup(reason);
  }

  /**
   * Revokes the group (see `ProcessGroup.revoke`); a backend that can overrides it.
   *
   * @param _reason Why.
   * @throws {UnsupportedError} Here: this backend cannot.
   */
  protected revokeGroup(_reason: string): void {
    throw new UnsupportedError(
      `Cannot revoke a group of the ${this.backend} backend: ${this.faultToleranceUnsupported}`,
    );
  }

  shrink(_options?: ShrinkOptions): Promise<ProcessGroup> {
    return Promise.reject(
      new UnsupportedError(
        `Cannot shrink a group of the ${this.backend} backend: ${this.faultToleranceUnsupported}`,
      ),
    );
  }

  /** Why this backend cannot revoke or shrink a group. */
  protected get faultToleranceUnsupported(): string {
    return "not supported";
  }

  [Symbol.asyncDispose](): Promise<void> {
    return this.close();
  }

  /**
   * The checks every call of an open group shares: this rank a member, the options an object, the
   * timeout (or the group's) and the signal.
   */
  #checkCall(what: string, options: CallOptions): { timeoutMs: number; signal: AbortSignal | undefined } {
    if (this.rank < 0) {
      throw new RangeError(`Cannot ${what}: this rank is not a member of ${this.describe()}`);
    }
    if (options === null || typeof options !== "object") {
      throw new TypeError(`Cannot ${what}: expected an options object, found ${options}`);
    }
    const timeoutMs = options.timeoutMs ?? this.defaultTimeoutMs;
    if (typeof timeoutMs !== "number" || !(timeoutMs > 0)) {
      const found = typeof timeoutMs === "number" ? String(timeoutMs) : describeValue(timeoutMs);
      throw new RangeError(`Cannot ${what}: expected timeoutMs to be a number > 0, found ${found}`);
    }
    const signal = options.signal;
    if (signal !== undefined && !(signal instanceof AbortSignal)) {
      throw new TypeError(
        `Cannot ${what}: expected signal to be an AbortSignal, found ${describeValue(signal)}`,
      );
    }
    return { timeoutMs, signal };
  }

  /** Checks the parts every call shares, then the collective's own (`build`), then runs the record. */
  #call(
    collective: Collective,
    options: CallOptions & { algorithm?: string },
    build: () => Omit<Partial<CallRecord>, "collective" | "dtype"> & { dtype: DType; count: number },
  ): W {
    const what = VERB[collective];
    if (this.isClosed) return this.rejected(new DistError(`Cannot ${what}: the process group is closed`));
    const { timeoutMs, signal } = this.#checkCall(what, options);
    const parts = build();
    const algorithm = options.algorithm ?? "auto";
    if (typeof algorithm !== "string") {
      throw new TypeError(
        `Cannot ${what}: expected algorithm to be a string, found ${describeValue(algorithm)}`,
      );
    }
    if (algorithm !== "auto") this.checkAlgorithm(collective, algorithm);
    if (
      collective === "allReduce" && algorithm === "auto" && signal === undefined &&
      parts.compression === undefined && parts.commDtype === undefined && parts.servers === undefined
    ) {
      // A plain all-reduce, checked: the backend may run it to its end on this thread at once.
      const work = this.quickAllReduce(parts.tensor as AnyTensor, parts.dtype, parts.op ?? "sum", timeoutMs);
      if (work !== undefined) {
        const seq = this.flight.record(
          collective,
          parts.dtype,
          parts.count,
          0,
          parts.op ?? "sum",
          algorithm,
          work,
        );
        if (debugOn("detail")) this.#debugCall(collective, seq, parts.dtype, parts.count, work);
        if (timelineOn()) timelineRecord(this.flight.key, seq, collective, parts.dtype, parts.count, work);
        return work;
      }
    }
    if (signal?.aborted) {
      return this.rejected(new DistError(`Aborted before it started: ${signal.reason}`, { code: "ABORTED" }));
    }
    if (!this.codecThread) {
      if (parts.commDtype !== undefined) throw narrowUnsupported(this.backend);
      if (parts.compression !== undefined) throw compressionUnsupported(this.backend);
    }
    const work = this.execute({
      collective,
      op: "sum",
      root: 0,
      ...parts,
      algorithm,
      timeoutMs,
      signal,
      options,
    });
    const seq = this.flight.record(
      collective,
      parts.dtype,
      parts.count,
      parts.root ?? 0,
      parts.op ?? "sum",
      algorithm,
      work,
    );
    if (debugOn("detail")) this.#debugCall(collective, seq, parts.dtype, parts.count, work);
    if (timelineOn()) timelineRecord(this.flight.key, seq, collective, parts.dtype, parts.count, work);
    return work;
  }

  /** `DCOMM_DEBUG=detail`: a call's line when it ends. */
  #debugCall(collective: Collective, seq: number, dtype: DType, count: number, work: W): void {
    const me = { rank: this.rank, size: this.size };
    const what = `${VERB[collective]} #${seq} ${dtype} × ${count}`;
    work.wait().then(
      (report) =>
        debugLog(
          "detail",
          me,
          report === undefined
            ? `${what}: done`
            : `${what}: ${report.algorithm} over ${report.transport}, ${
              (report.timeMs * 1000).toFixed(1)
            } µs`,
        ),
      (e) => debugLog("detail", me, `${what}: failed: ${(e as Error)?.message ?? e}`),
    );
  }

  /** This group's flight recorder (made at its first call, or its first dump). */
  protected get flight(): FlightRecorder {
    return this.#flight ??= new FlightRecorder(this.ranks, this.rank, this.backend, () => this.isClosed);
  }

  dump(): FlightDump {
    void this.flight;
    const dump = flightDump("dump()");
    writeFlightDump("dump()", dump);
    return dump;
  }

  /** The dtype of one tensor, after the backend's and the buffer's checks. */
  #dtype(what: string, tensor: AnyTensor, name: string, options: CallOptions): DType {
    // The tensor of the last call again (a loop of calls on one tensor): only its buffer can have changed
    // (detached); its class, its buffer's resizability and so its dtype cannot.
    if (tensor === this.#lastTensor && tensor !== undefined && options.dtype === this.#lastAsked) {
      if (((tensor as TypedArray).buffer as ArrayBuffer).detached) throw detached(what, name);
      return this.#lastDtype;
    }
    if (tensor === null || typeof tensor !== "object") {
      throw new TypeError(
        `Cannot ${what}: expected ${name} to be a TypedArray, found ${describeValue(tensor)}`,
      );
    }
    this.checkTensor(what, tensor, name);
    if (isDeviceTensor(tensor)) {
      if (options.dtype !== undefined && options.dtype !== tensor.dtype) {
        throw new TypeError(`Cannot ${what}: ${name} holds ${tensor.dtype}, found dtype ${options.dtype}`);
      }
      return tensor.dtype;
    }
    const buffer = (tensor as TypedArray).buffer as ArrayBuffer;
    if (buffer?.detached) throw detached(what, name);
    if (buffer?.resizable) {
      throw new TypeError(
        `Cannot ${what}: expected ${name} over a fixed-length buffer, found a resizable ArrayBuffer (it can ` +
          `move while the call uses it)`,
      );
    }
    let dtype: DType;
    try {
      dtype = dtypeOf(tensor as TypedArray, options.dtype);
    } catch (e) {
      throw new TypeError(`Cannot ${what}: ${(e as Error).message}`);
    }
    // Kept for the next call only for small tensors: the group holds on to it until then.
    if ((tensor as TypedArray).byteLength <= KEPT_TENSOR_BYTES) {
      this.#lastTensor = tensor;
      this.#lastAsked = options.dtype;
      this.#lastDtype = dtype;
    }
    return dtype;
  }

  /**
   * Checks a v-form's `counts` and its tensors: this rank's block holds `counts[rank]` elements, the
   * n-block buffer (where this rank has it) their sum.
   */
  #counts(
    what: string,
    counts: readonly number[],
    ownName: string,
    own: AnyTensor,
    wholeName: string,
    whole: AnyTensor | undefined,
  ): readonly number[] {
    const checked = checkCounts(what, "counts", counts, this.size);
    checkCountLength(what, ownName, own, checked[this.rank], `counts[${this.rank}]`);
    checkCountLength(what, wholeName, whole, countsSum(checked), "the sum of counts");
    return checked;
  }

  /**
   * Checks a reducing call's op against its dtype (the same TypeError on every backend), `premulSum`'s
   * factor, and then whether the backend runs the op (an UnsupportedError in one set of words).
   *
   * @returns The factor, for `premulSum`.
   */
  #reduction(what: string, dtype: DType, op: ReduceOp, options: { factor?: number }): number | undefined {
    let factor: number | undefined;
    try {
      checkOpDType(op, dtype);
      factor = checkFactor(op, options.factor, dtype);
    } catch (e) {
      const Kind = e instanceof RangeError ? RangeError : TypeError;
      throw new Kind(`Cannot ${what}: ${(e as Error).message}`);
    }
    if (!this.supportsOp(op, dtype)) throw opUnsupported(this.backend, what, op, dtype);
    return factor;
  }

  /**
   * Whether a reducing call runs in deterministic mode: its option, or the group's default; true only
   * for sums, averages and products of floats (integers wrap and min/max do not depend on the order).
   */
  #deterministic(
    what: string,
    dtype: DType,
    op: ReduceOp,
    options: { deterministic?: boolean },
  ): boolean | undefined {
    const asked = options.deterministic ?? this.deterministicDefault;
    if (typeof asked !== "boolean") {
      throw new TypeError(
        `Cannot ${what}: expected deterministic to be a boolean, found ${describeValue(asked)}`,
      );
    }
    if (!asked || !isFloat(dtype) || op === "min" || op === "max") return undefined;
    if (!this.foldsInOrder) throw deterministicUnsupported(this.backend, what);
    return true;
  }

  /** The dtype of an out-of-place pair: both checked, and the same. */
  #pair(what: string, output: AnyTensor, input: AnyTensor, options: CallOptions): DType {
    const a = this.#dtype(what, input, "input", options);
    const b = this.#dtype(what, output, "output", options);
    if (a !== b) throw new TypeError(`Cannot ${what}: input is ${a} but output is ${b}`);
    return a;
  }
}

/** The largest tensor whose checks the front keeps for the next call (it keeps the tensor alive too). */
const KEPT_TENSOR_BYTES = 65536;

/** The error of a call on a tensor whose buffer was detached. */
function detached(what: string, name: string): TypeError {
  return new TypeError(
    `Cannot ${what}: expected ${name} over a live buffer, found its ArrayBuffer detached (transferred ` +
      `to another thread or resized away)`,
  );
}

/**
 * The error of a backend that cannot narrow an all-reduce's dtype on its communication thread.
 *
 * @param backend The backend's name.
 * @returns The error to throw.
 */
export function narrowUnsupported(backend: string): UnsupportedError {
  return new UnsupportedError(
    `Cannot all-reduce with commDtype: the ${backend} backend reduces in the tensor's own dtype; cast the ` +
      `tensor yourself, or use the cpu backend`,
  );
}

/**
 * The error of a backend that cannot run a compressed all-reduce.
 *
 * @param backend The backend's name.
 * @returns The error to throw.
 */
export function compressionUnsupported(backend: string): UnsupportedError {
  return new UnsupportedError(
    `Cannot all-reduce with compression: the ${backend} backend has no communication thread to run the ` +
      `codec's kernels on; use the cpu backend, or an all-reduce without compression`,
  );
}

/**
 * Checks the tensor that a rooted collective takes on its root only (gather's output, scatter's input):
 * given there, `null` (or omitted) elsewhere, as torch's `gather_list` and `scatter_list`.
 */
function rootOnly(what: string, name: string, tensor: AnyTensor | null, atRoot: boolean, root: number): void {
  const given = tensor !== null && tensor !== undefined;
  if (atRoot && !given) {
    throw new TypeError(`Cannot ${what}: the root (rank ${root}) needs an ${name}, found ${tensor}`);
  }
  if (!atRoot && given) {
    throw new TypeError(
      `Cannot ${what}: only the root (rank ${root}) takes an ${name}; pass null on the other ranks, found ` +
        describeValue(tensor),
    );
  }
}

/**
 * The error of a backend that cannot fold reductions in rank order (deterministic mode).
 *
 * @param backend The backend's name.
 * @param what The call, as messages name it (or `init`).
 * @returns The error to throw.
 */
export function deterministicUnsupported(backend: string, what: string): UnsupportedError {
  return new UnsupportedError(
    `Cannot ${what} deterministically: the ${backend} backend reduces in its library's own order; use the ` +
      `cpu backend, or leave deterministic off`,
  );
}

/**
 * The error of a backend that cannot run a reduce op (the nccl backend's bitwise ops): the same words on
 * every backend that refuses one.
 *
 * @param backend The backend's name.
 * @param what The call, as messages name it.
 * @param op The op.
 * @param dtype The dtype.
 * @returns The error to throw.
 */
export function opUnsupported(backend: string, what: string, op: ReduceOp, dtype: DType): UnsupportedError {
  return new UnsupportedError(
    `Cannot ${what} ${dtype} with op "${op}": the ${backend} backend cannot reduce with it; use the cpu or ` +
      `mpi backend, which run every op`,
  );
}

/** Refuses `commDtype` and `compression` on a reducing call other than an all-reduce. */
function onlyAllReduce(what: string, options: { commDtype?: DType; compression?: unknown }): void {
  for (const name of ["commDtype", "compression"] as const) {
    if (options[name] !== undefined) {
      throw new TypeError(`Cannot ${what}: ${name} is an option of allReduce only`);
    }
  }
}

/** What `commDtype` may narrow each dtype to. */
const NARROWER: Readonly<Partial<Record<DType, readonly DType[]>>> = {
  float32: ["float16", "bfloat16"],
};

/** The checked `commDtype` of an all-reduce of `dtype` (undefined when it is the tensor's own). */
function commDtypeOf(dtype: DType, commDtype: DType | undefined): DType | undefined {
  if (commDtype === undefined || commDtype === dtype) return undefined;
  const allowed = NARROWER[dtype] ?? [];
  if (!allowed.includes(commDtype)) {
    throw new TypeError(
      `Cannot all-reduce: commDtype must be ${
        allowed.length ? `one of ${allowed.join(", ")} (or ${dtype})` : `the tensor's own dtype`
      } for a ${dtype} tensor, found ${describeValue(commDtype)}`,
    );
  }
  return commDtype;
}

/** The op of a reducing call (`sum` when none is given). */
function opOf(what: string, options: { op?: ReduceOp }): ReduceOp {
  try {
    return checkOp(options.op ?? "sum");
  } catch (e) {
    throw new TypeError(`Cannot ${what}: ${(e as Error).message}`);
  }
}

/** A value as a message shows it: its class or type, and a short rendering. */
function describeValue(v: unknown): string {
  if (v === null) return "null";
  if (typeof v === "object") {
    const name = (v as object).constructor?.name;
    if (name === undefined || name === "Object") return "an object";
    return /^[AEIOU]/.test(name) ? `an ${name}` : `a ${name}`;
  }
  if (typeof v === "string") return JSON.stringify(v);
  return `${typeof v} ${String(v)}`;
}
