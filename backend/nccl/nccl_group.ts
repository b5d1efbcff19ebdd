/**
 * The `nccl` backend's process group: one rank per GPU, every collective a call into NCCL on the group's
 * own CUDA stream. The calls are synchronous FFI calls from the thread that owns the communicator (NCCL's
 * group state and CUDA's current device are per thread), and they only queue work: the returned
 * {@linkcode NcclWork} settles when the collective's CUDA event completes, which the rank's poller checks
 * between turns of the event loop, so awaiting never blocks it.
 *
 * Tensors: a `DeviceTensor` (e.g. a `DeviceBuffer`) is used in place. A host TypedArray is staged through
 * pinned and device memory (one asynchronous copy each way, queued with the collective) and its Work
 * settles after the result is back in the array. fp16 and bf16 are reduced in their own dtype (never
 * upcast); bf16 and `op: "avg"` need NCCL 2.10.
 *
 * Failure: a collective past its timeout, an aborted signal or an asynchronous NCCL error aborts the
 * group's communicator (`ncclCommAbort`) and fails every collective pending on it; later calls on the
 * group fail at once.
 *
 * @module
 */
import { checkGroupRanks } from "../_checks.ts";
import { type CallRecord, type Collective, GroupFront, VERB } from "../_front.ts";
import type { MonitorStore } from "../_monitored_barrier.ts";
import { type DType, dtypeOf, dtypeSize, type ReduceOp, type TypedArray } from "../../core/dtype.ts";
import { DistError, UnsupportedError } from "../../core/errors.ts";
import { MemcpyKind, MemoryType } from "../../ffi/cudart/constants.ts";
import {
  memcpyAsync,
  pointerAttributes,
  recordEvent,
  setDevice,
  streamWaitEvent,
} from "../../ffi/cudart/cudart.ts";
import { NcclDataType, NcclRedOp, NcclResult, NcclScalarResidence } from "../../ffi/nccl/constants.ts";
import { ncclDataType, ncclOpFor, ncclRedOp, ncclRuns, scalarBytes } from "./_mapping.ts";
import type {
  NcclAlgorithmOptions,
  NcclCallOptions,
  NcclReduceOptions,
  NcclRootOptions,
  NcclRootReduceOptions,
  NcclRunContext,
} from "./options.ts";
import { hasFeature, requireFeature } from "../../ffi/nccl/features.ts";
import { oneRankPremulDropsTail, oneRankPremulPieces } from "./_one_rank.ts";
import { checkStarted, ncclError } from "../../ffi/nccl/nccl.ts";
import type { NcclSymbols } from "../../ffi/nccl/symbols.ts";
import type { NcclConfigOptions } from "../../ffi/nccl/config.ts";
import { DeviceBuffer } from "../../gpu/device_buffer.ts";
import { Stream } from "../../gpu/stream.ts";
import {
  type AllocOptions,
  type AllToAllOptions,
  type AnyTensor,
  type CountsOptions,
  type DeviceTensor,
  type GatherOptions,
  type GroupOptions,
  isDeviceTensor,
  type P2POp,
  type ReduceScatterOptions,
} from "../process_group.ts";
import { workReport } from "../work.ts";
import type { Communicator } from "./_communicator.ts";
import type { NcclRank, PendingOp } from "./_rank.ts";
import type { StagingSlot } from "./_staging.ts";
import { type CompletionEvent, NcclWork, type NcclWorkReport } from "./nccl_work.ts";

/** How a {@linkcode NcclProcessGroup} is made (by `createNcclGroup` and `newGroup`). */
export interface NcclGroupInit {
  /** The rank's shared state. */
  readonly rank: NcclRank;
  /** The group id (0 = world). */
  readonly id: number;
  /** Global ranks of the members, in group order. */
  readonly ranks: readonly number[];
  /** This process's global rank. */
  readonly globalRank: number;
  /** The communicator, or `null` for a rank outside the group. */
  readonly comm: Communicator | null;
  /** Default timeout of calls, in milliseconds. */
  readonly timeoutMs: number;
  /** Runs when the world group closes, after every communicator is destroyed. */
  readonly onClose?: () => Promise<void>;
  /** The world's store and its keys' prefix, where monitored barriers meet. */
  readonly store?: MonitorStore;
}

// A tensor resolved to a device address: a device tensor as it is, or a host array's staging slot.
interface Operand {
  readonly pointer: Deno.PointerValue;
  readonly bytes: number;
  readonly host?: {
    readonly array: ArrayBufferView;
    readonly slot: StagingSlot;
    readonly upload: boolean;
    readonly download: boolean;
  };
}

/** A pointer as NCCL's calls take it. */
type Pointer = Deno.PointerValue;
/** Queues one call's NCCL work on the group's communicator and stream; returns NCCL's result. */
type Issue = (symbols: NcclSymbols, comm: Pointer, stream: Pointer) => number;

/** What one launch of {@linkcode NcclProcessGroup} queues: its NCCL call and what it moves. */
interface Launch {
  /** The collective, or the name `run()` was given: for reports and messages. */
  readonly collective: string;
  /** The dtype messages name. */
  readonly dtype: DType;
  /** The elements messages name. */
  readonly count: number;
  /** The device memory it uses, with the host staging to upload first or download after. */
  readonly operands: readonly Operand[];
  /** Queues the NCCL call on the group's communicator and stream. */
  readonly issue: Issue;
  /** Bytes this rank sends, for the report. */
  readonly bytesSent: number;
  /** The other rank of a send or receive, for the report. */
  readonly peer?: number;
}

/** How {@linkcode NcclProcessGroup}'s calls are launched: settled by the timeout, the signal and the stream waited for. */
interface LaunchOptions {
  readonly timeoutMs: number;
  readonly signal?: AbortSignal;
  readonly waitFor?: Stream;
}

/**
 * A process group of the `nccl` backend.
 *
 * @example What a group reports, and what it refuses (or, without NCCL or a GPU, why `init` fails)
 * ```ts
 * import { DistError, init, UnsupportedError } from "@dcomm/dcomm";
 * import { DeviceBuffer } from "@dcomm/dcomm/gpu";
 * import { ncclBackendMissing, NcclProcessGroup } from "@dcomm/dcomm/nccl";
 * import assert from "node:assert/strict";
 * const options = { backend: "nccl", rank: 0, worldSize: 1, env: {} } as const;
 * if (ncclBackendMissing() === undefined) {
 *   await using pg = await init(options);
 *   assert.ok(pg instanceof NcclProcessGroup);
 *   console.log(`GPU ${pg.device}, NCCL ${pg.ncclVersion} from ${pg.ncclPath}`);
 *   using grad = DeviceBuffer.from(new Float32Array([2, 4]));
 *   await pg.allReduce(grad, { op: "sum", scale: 0.5 });
 *   assert.deepEqual(grad.toArray(), new Float32Array([1, 2]));
 *   assert.throws(() => pg.alloc(16), UnsupportedError); // device memory comes from DeviceBuffer.alloc
 * } else {
 *   await assert.rejects(init(options), DistError); // LibraryNotFoundError or UnsupportedError
 * }
 * ```
 */
export class NcclProcessGroup extends GroupFront<NcclWork> {
  /** This rank within the group, or -1 if this rank is not a member. */
  readonly rank: number;
  /** The number of ranks in the group. */
  readonly size: number;
  /** The global ranks of the members, in group order. */
  readonly ranks: readonly number[];
  /** The backend's name. */
  readonly backend = "nccl";
  #ctx: NcclRank;
  #id: number;
  #comm: Communicator | null;
  #stream: Stream | null;
  #timeoutMs: number;
  #onClose?: () => Promise<void>;
  #store: MonitorStore | undefined;
  #monitor: MonitorStore | undefined;
  #children: NcclProcessGroup[] = [];
  #barrier: DeviceBuffer | undefined;
  #abortReason: Error | undefined;
  #closed = false;

  /**
   * Use `createNcclGroup` (or `init({ backend: "nccl" })`) rather than this constructor.
   *
   * @param init The group's state.
   * @throws {CudaError} If the group's stream cannot be created.
   */
  constructor(init: NcclGroupInit) {
    super();
    this.#ctx = init.rank;
    this.#id = init.id;
    this.ranks = init.ranks;
    this.size = init.ranks.length;
    this.rank = init.ranks.indexOf(init.globalRank);
    this.#comm = init.comm;
    this.#timeoutMs = init.timeoutMs;
    this.#onClose = init.onClose;
    this.#store = init.store;
    this.#stream = init.comm ? Stream.create({ device: init.rank.device }) : null;
  }

  /** The CUDA device of this rank. */
  get device(): number {
    return this.#ctx.device;
  }

  /** The NCCL version, e.g. `"2.30.7"`. */
  get ncclVersion(): string {
    return this.#ctx.library.version.text;
  }

  /** Where NCCL was loaded from. */
  get ncclPath(): string {
    return this.#ctx.library.path;
  }

  /** The tuning in effect. */
  get tuning(): NcclWorkReport["tuning"] {
    return this.#ctx.tuning;
  }

  /**
   * The group's CUDA stream, on which its collectives run.
   *
   * @throws {RangeError} On a rank outside the group.
   */
  get stream(): Stream {
    this.#member("use the stream");
    return this.#stream as Stream;
  }

  /** Why the communicator was aborted, if it was. */
  get abortReason(): Error | undefined {
    return this.#abortReason;
  }

  // The collectives, as GroupFront checks them; restated only for the nccl backend's own options.
  /** See `ProcessGroup.allReduce`; `scale` pre-multiplies each input (with `op: "sum"`). */
  override allReduce(tensor: AnyTensor, options: NcclReduceOptions = {}): NcclWork {
    return super.allReduce(tensor, options);
  }
  /** See `ProcessGroup.broadcast`. */
  override broadcast(tensor: AnyTensor, options: NcclRootOptions = {}): NcclWork {
    return super.broadcast(tensor, options);
  }
  /** See `ProcessGroup.reduce`; `scale` as in {@linkcode NcclProcessGroup.allReduce}. */
  override reduce(tensor: AnyTensor, options: NcclRootReduceOptions = {}): NcclWork {
    return super.reduce(tensor, options);
  }
  /** See `ProcessGroup.allGather` (`counts`: a group of sends and receives). */
  override allGather(
    output: AnyTensor,
    input: AnyTensor,
    options: NcclAlgorithmOptions & CountsOptions = {},
  ): NcclWork {
    return super.allGather(output, input, options);
  }
  /** See `ProcessGroup.reduceScatter`; `scale` as in {@linkcode NcclProcessGroup.allReduce}. */
  override reduceScatter(
    output: AnyTensor,
    input: AnyTensor,
    options: NcclReduceOptions & ReduceScatterOptions = {},
  ): NcclWork {
    return super.reduceScatter(output, input, options);
  }
  /** See `ProcessGroup.allToAll` (`ncclAlltoAll` from 2.28; uneven counts: a group of sends and receives). */
  override allToAll(
    output: AnyTensor,
    input: AnyTensor,
    options: NcclAlgorithmOptions & AllToAllOptions = {},
  ): NcclWork {
    return super.allToAll(output, input, options);
  }
  /** See `ProcessGroup.gather` (`ncclGather` from 2.28, grouped sends and receives before). */
  override gather(
    output: AnyTensor | null,
    input: AnyTensor,
    options: NcclRootOptions & GatherOptions = {},
  ): NcclWork {
    return super.gather(output, input, options);
  }
  /** See `ProcessGroup.scatter` (`ncclScatter` from 2.28, grouped sends and receives before). */
  override scatter(
    output: AnyTensor,
    input: AnyTensor | null,
    options: NcclRootOptions & GatherOptions = {},
  ): NcclWork {
    return super.scatter(output, input, options);
  }
  /** See `ProcessGroup.barrier`: an all-reduce of one int32 on the device. */
  override barrier(options: NcclCallOptions = {}): NcclWork {
    return super.barrier(options);
  }
  /** See `ProcessGroup.send` (NCCL 2.7). */
  override send(tensor: AnyTensor, peer: number, options: NcclCallOptions = {}): NcclWork {
    return super.send(tensor, peer, options);
  }
  /** See `ProcessGroup.recv` (NCCL 2.7). */
  override recv(tensor: AnyTensor, peer: number, options: NcclCallOptions = {}): NcclWork {
    return super.recv(tensor, peer, options);
  }

  /** @internal The timeout of a call that names none: the group's. */
  protected get defaultTimeoutMs(): number {
    return this.#timeoutMs;
  }

  /** @internal Whether the group is closed. */
  protected get isClosed(): boolean {
    return this.#closed;
  }

  /** @internal NCCL has no receive from any rank (`ncclRecv` names its peer). */
  protected override get receivesFromAnySource(): boolean {
    return false;
  }

  /** @internal How error messages name the group. */
  protected override describe(): string {
    return `group ${this.#id} (ranks ${this.ranks.join(", ")})`;
  }

  /** Any device tensor or host TypedArray; a device tensor must be on this rank's device (see #operand). */
  protected override checkTensor(): void {}

  /** @internal NCCL has no bitwise ops (a bool's band and bor are its min and max, which it has). */
  protected override supportsOp(op: ReduceOp, dtype: DType): boolean {
    return ncclRuns(op, dtype);
  }

  /** @internal Monitored barriers meet in the world's store: NCCL's calls on a stream wait in turn. */
  protected override get monitorStore(): MonitorStore | undefined {
    const s = this.#store;
    return this.#monitor ??= s && { store: s.store, prefix: `${s.prefix}/monitored-barrier/${this.#id}` };
  }

  /** @internal ncclCommRevoke (NCCL 2.28.7) and ncclCommShrink (2.27) are not bound yet. */
  protected override get faultToleranceUnsupported(): string {
    return "ncclCommRevoke (NCCL 2.28.7) and ncclCommShrink (2.27) are not bound yet";
  }

  /** @internal Refuses every algorithm name but `"nccl"` (and `"auto"`, which the front lets through). */
  protected checkAlgorithm(collective: Collective, name: string): void {
    if (name === "nccl") return;
    throw new UnsupportedError(
      `Cannot ${VERB[collective]} with algorithm "${name}": the nccl backend runs NCCL's own algorithms ` +
        `(choose them with init({ nccl: { tuning: { algo } } }) or NCCL_ALGO); expected "auto" or "nccl"`,
    );
  }

  /** @internal A Work that failed before it started. */
  protected override rejected(error: Error): NcclWork {
    return new NcclWork(Promise.reject(error), { event: null });
  }

  /**
   * Queues a checked call on the group's stream: what NCCL's version must offer for it (bfloat16 and avg
   * 2.10, a scale or premulSum 2.11, send/recv 2.7; all-to-all, gather and scatter are `ncclAlltoAll`,
   * `ncclGather` and `ncclScatter` from 2.28, grouped sends and receives before), then the operands (host
   * arrays staged), then the NCCL call. A bool reduces as ncclUint8 by max or min; the bitwise ops, which
   * NCCL lacks, were refused at the front.
   *
   * @param call The call.
   * @returns Its Work.
   * @internal
   */
  protected execute(call: CallRecord): NcclWork {
    const { collective, dtype, root } = call;
    const what = VERB[collective];
    // premulSum is NCCL's PreMulSum, as the scale option: a sum with the factor as its scalar.
    const given = (call.options as NcclReduceOptions).scale;
    if (call.op === "premulSum" && given !== undefined) {
      throw new RangeError(
        `Cannot ${what}: scale works with op "sum" only, found op "premulSum" (its factor is the scale)`,
      );
    }
    const scale = call.op === "premulSum" ? call.factor : given;
    const callOp: ReduceOp = call.op === "premulSum" ? "sum" : call.op;
    const { version, symbols } = this.#ctx.library;
    if (dtype === "bfloat16") requireFeature("bfloat16", version, { what: `${what} bfloat16` });
    const t = ncclDataType(dtype);
    const n = this.size;
    /** A reducing NCCL call, with the op (a PreMulSum op made for this call when `scale` is given). */
    const reducing =
      (op: ReduceOp, issue: (s: NcclSymbols, redOp: number, comm: Pointer, stream: Pointer) => number) =>
      (s: NcclSymbols, comm: Pointer, stream: Pointer): number =>
        this.#withOp(what, dtype, op, scale, comm, (redOp) => issue(s, redOp, comm, stream));
    /**
     * A reducing call over `count` elements from `first` (`at` shifts a pointer there); a one-rank
     * PreMulSum on NCCL before 2.29.7 goes in the pieces its kernel covers whole, in one NCCL group.
     */
    const reducingAll = (
      op: ReduceOp,
      count: number,
      issue: (
        s: NcclSymbols,
        redOp: number,
        comm: Pointer,
        stream: Pointer,
        first: number,
        n: bigint,
      ) => number,
    ): Issue => {
      const pieces = scale !== undefined && n === 1 && oneRankPremulDropsTail(version)
        ? oneRankPremulPieces(count, dtypeSize(dtype))
        : [[0, count] as [number, number]];
      if (pieces.length === 1) {
        return reducing(op, (s, redOp, comm, stream) => issue(s, redOp, comm, stream, 0, BigInt(count)));
      }
      return reducing(op, (s, redOp, comm, stream) =>
        this.#grouped(s, () => {
          let rc: number = NcclResult.Success;
          for (const [first, k] of pieces) {
            rc = issue(s, redOp, comm, stream, first, BigInt(k));
            if (rc !== NcclResult.Success && rc !== NcclResult.InProgress) break;
          }
          return rc;
        }));
    };
    const at = (pointer: Pointer, first: number): Pointer =>
      first === 0
        ? pointer
        : Deno.UnsafePointer.offset(pointer as Deno.PointerObject, first * dtypeSize(dtype));
    let operands: Operand[];
    let issue: Issue;
    let bytesSent: number;
    if (call.counts !== undefined) {
      // The v-forms: one group of sends and receives (of ncclReduce calls, one per block, for the
      // reduce-scatter), NCCL having none of its own.
      requireFeature("sendRecv", version, { what, symbols });
      const op = collective === "reduceScatter" ? this.#op(what, callOp, scale, dtype) : "sum";
      const input = call.input as AnyTensor | undefined, output = call.output as AnyTensor | undefined;
      const inp = input && this.#operand(what, input, dtype, { upload: true, download: false });
      let out: Operand | undefined;
      try {
        out = output && this.#operand(what, output, dtype, { upload: false, download: true });
      } catch (e) {
        if (inp?.host) this.#ctx.staging.release(inp.host.slot);
        throw e;
      }
      operands = [inp, out].filter((o): o is Operand => o !== undefined);
      const uneven = { counts: call.counts, recvCounts: call.recvCounts ?? call.counts, root };
      const [src, dst] = [inp?.pointer ?? null, out?.pointer ?? null];
      issue = collective === "reduceScatter"
        ? reducing(
          op,
          (s, redOp, comm, stream) =>
            this.#uneven(s, collective, src, dst, uneven, dtype, comm, stream, redOp),
        )
        : (s, comm, stream) => this.#uneven(s, collective, src, dst, uneven, dtype, comm, stream, 0);
      bytesSent = inp?.bytes ?? 0;
      return this.#launch(
        { collective, dtype, count: call.count, operands, issue, bytesSent },
        this.#how(call),
      );
    }
    switch (collective) {
      case "allReduce":
      case "broadcast":
      case "reduce": {
        const tensor = call.tensor as AnyTensor;
        const count = BigInt(tensor.length);
        const isRoot = root === this.rank;
        const upload = collective !== "broadcast" || isRoot;
        const download = collective === "allReduce" || (collective === "broadcast" ? !isRoot : isRoot);
        // The op is checked before a staging slot is taken (a refused op must not hold one).
        const op = collective === "broadcast" ? "sum" : this.#op(what, callOp, scale, dtype);
        const io = this.#operand(what, tensor, dtype, { upload, download });
        const p = io.pointer;
        operands = [io];
        if (collective === "broadcast") {
          issue = (s, comm, stream) => s.ncclBroadcast(p, p, count, t, root, comm, stream);
          bytesSent = n > 1 ? io.bytes : 0;
        } else {
          issue = collective === "allReduce"
            ? reducingAll(
              op,
              tensor.length,
              (s, redOp, comm, stream, first, k) =>
                s.ncclAllReduce(at(p, first), at(p, first), k, t, redOp, comm, stream),
            )
            : reducingAll(
              op,
              tensor.length,
              (s, redOp, comm, stream, first, k) =>
                s.ncclReduce(at(p, first), at(p, first), k, t, redOp, root, comm, stream),
            );
          bytesSent = collective === "allReduce" ? (2 * (n - 1) / n) * io.bytes : n > 1 ? io.bytes : 0;
        }
        break;
      }
      case "allGather":
      case "reduceScatter":
      case "allToAll": {
        const input = call.input as AnyTensor;
        const output = call.output as AnyTensor;
        const native = collective === "allToAll" && hasFeature("alltoall", version, symbols);
        if (collective === "allToAll" && !native) requireFeature("sendRecv", version, { what, symbols });
        const op = collective === "reduceScatter" ? this.#op(what, callOp, scale, dtype) : "sum";
        const [inp, out] = this.#operands(what, input, output, dtype);
        const [src, dst] = [inp.pointer, out.pointer];
        operands = [inp, out];
        if (collective === "allGather") {
          const count = BigInt(input.length);
          issue = (s, comm, stream) => s.ncclAllGather(src, dst, count, t, comm, stream);
          bytesSent = (n - 1) * inp.bytes;
        } else if (collective === "reduceScatter") {
          issue = reducingAll(
            op,
            output.length,
            (s, redOp, comm, stream, first, k) =>
              s.ncclReduceScatter(at(src, first), at(dst, first), k, t, redOp, comm, stream),
          );
          bytesSent = (n - 1) * out.bytes;
        } else {
          issue = (s, comm, stream) =>
            this.#allToAll(s, native, src, dst, input.length / n, dtype, comm, stream);
          bytesSent = ((n - 1) / n) * inp.bytes;
        }
        break;
      }
      case "gather":
      case "scatter": {
        const gather = collective === "gather";
        const native = hasFeature("gatherScatter", version, symbols);
        if (!native) requireFeature("sendRecv", version, { what, symbols });
        // The n-block buffer is the root's only (gather's output, scatter's input).
        const block = (gather ? call.input : call.output) as AnyTensor;
        const whole = (gather ? call.output : call.input) as AnyTensor | undefined;
        const own = this.#operand(what, block, dtype, { upload: gather, download: !gather });
        let all: Operand | undefined;
        try {
          all = whole && this.#operand(what, whole, dtype, { upload: !gather, download: gather });
        } catch (e) {
          if (own.host) this.#ctx.staging.release(own.host.slot);
          throw e;
        }
        operands = all ? [own, all] : [own];
        const count = block.length;
        const [mine, theirs] = [own.pointer, all?.pointer ?? own.pointer];
        issue = (s, comm, stream) =>
          gather
            ? this.#rooted(s, native, "gather", mine, theirs, count, dtype, root, comm, stream)
            : this.#rooted(s, native, "scatter", theirs, mine, count, dtype, root, comm, stream);
        bytesSent = gather
          ? (root === this.rank ? 0 : own.bytes)
          : root === this.rank
          ? (n - 1) * own.bytes
          : 0;
        break;
      }
      case "barrier": {
        this.#barrier ??= DeviceBuffer.alloc(1, { dtype: "int32", device: this.#ctx.device });
        const p = this.#barrier.pointer;
        const int32 = NcclDataType.Int32;
        return this.#launch({
          collective,
          dtype: "int32",
          count: 1,
          operands: [{ pointer: p, bytes: 4 }],
          issue: (s, comm, stream) => s.ncclAllReduce(p, p, 1n, int32, NcclRedOp.Sum, comm, stream),
          bytesSent: n > 1 ? 8 : 0,
        }, this.#how(call));
      }
      case "send":
      case "recv": {
        const tensor = call.tensor as AnyTensor;
        requireFeature("sendRecv", version, { what, symbols });
        const sending = collective === "send";
        const io = this.#operand(what, tensor, dtype, { upload: sending, download: !sending });
        const [p, count] = [io.pointer, BigInt(tensor.length)];
        operands = [io];
        issue = sending
          ? (s, comm, stream) => s.ncclSend(p, count, t, root, comm, stream)
          : (s, comm, stream) => s.ncclRecv(p, count, t, root, comm, stream);
        bytesSent = sending ? io.bytes : 0;
        break;
      }
    }
    const peer = collective === "send" || collective === "recv" ? root : undefined;
    return this.#launch(
      { collective, dtype, count: call.count, operands, issue, bytesSent, peer },
      this.#how(call),
    );
  }

  /**
   * Gather or scatter: `ncclGather`/`ncclScatter` (2.28), or before them one group of sends and receives
   * (the root's to and from every rank, itself included).
   *
   * @param src The gather's block, or the scatter's n blocks (the root's).
   * @param dst The gather's n blocks (the root's), or the scatter's block.
   * @param count Elements per rank.
   */
  #rooted(
    s: NcclSymbols,
    native: boolean,
    collective: "gather" | "scatter",
    src: Pointer,
    dst: Pointer,
    count: number,
    dtype: DType,
    root: number,
    comm: Pointer,
    stream: Pointer,
  ): number {
    const t = ncclDataType(dtype), n = BigInt(count);
    if (native && collective === "gather" && s.ncclGather) {
      return s.ncclGather(src, dst, n, t, root, comm, stream);
    }
    if (native && collective === "scatter" && s.ncclScatter) {
      return s.ncclScatter(src, dst, n, t, root, comm, stream);
    }
    const block = count * dtypeSize(dtype), atRoot = root === this.rank;
    return this.#grouped(s, () => {
      if (collective === "gather") {
        const rc = s.ncclSend(src, n, t, root, comm, stream);
        if (rc !== NcclResult.Success || !atRoot) return rc;
        for (let p = 0; p < this.size; p++) {
          const rc2 = s.ncclRecv(offset(dst, p * block), n, t, p, comm, stream);
          if (rc2 !== NcclResult.Success) return rc2;
        }
        return NcclResult.Success;
      }
      if (atRoot) {
        for (let p = 0; p < this.size; p++) {
          const rc2 = s.ncclSend(offset(src, p * block), n, t, p, comm, stream);
          if (rc2 !== NcclResult.Success) return rc2;
        }
      }
      return s.ncclRecv(dst, n, t, root, comm, stream);
    });
  }

  /**
   * A v-form as one NCCL group: all-gather, gather and scatter as sends and receives of each block,
   * all-to-all as a send and a receive per peer, reduce-scatter as one `ncclReduce` per block to its rank.
   *
   * @param src The input's device pointer (null where this rank has none).
   * @param dst The output's device pointer (null where this rank has none).
   * @param uneven Elements per rank (`counts`; an all-to-all's send counts, and `recvCounts`), and the root.
   * @param redOp The reduce-scatter's op.
   */
  #uneven(
    s: NcclSymbols,
    collective: Collective,
    src: Pointer,
    dst: Pointer,
    uneven: { counts: readonly number[]; recvCounts: readonly number[]; root: number },
    dtype: DType,
    comm: Pointer,
    stream: Pointer,
    redOp: number,
  ): number {
    const t = ncclDataType(dtype), es = dtypeSize(dtype), me = this.rank, n = this.size;
    const { counts, recvCounts, root } = uneven;
    const starts = (list: readonly number[]): number[] => {
      const out = [0];
      for (let i = 1; i < list.length; i++) out.push(out[i - 1] + list[i - 1]);
      return out;
    };
    const at = starts(counts), rat = starts(recvCounts);
    const ok = NcclResult.Success;
    return this.#grouped(s, () => {
      let rc: number = ok;
      const send = (p: Pointer, count: number, peer: number): void => {
        if (rc === ok && count > 0) rc = s.ncclSend(p, BigInt(count), t, peer, comm, stream);
      };
      const recv = (p: Pointer, count: number, peer: number): void => {
        if (rc === ok && count > 0) rc = s.ncclRecv(p, BigInt(count), t, peer, comm, stream);
      };
      switch (collective) {
        case "allGather":
          for (let p = 0; p < n; p++) {
            send(src, counts[me], p);
            recv(offset(dst, at[p] * es), counts[p], p);
          }
          break;
        case "gather":
          send(src, counts[me], root);
          if (me === root) { for (let p = 0; p < n; p++) recv(offset(dst, at[p] * es), counts[p], p); }
          break;
        case "scatter":
          if (me === root) { for (let p = 0; p < n; p++) send(offset(src, at[p] * es), counts[p], p); }
          recv(dst, counts[me], root);
          break;
        case "allToAll":
          for (let p = 0; p < n; p++) {
            send(offset(src, at[p] * es), counts[p], p);
            recv(offset(dst, rat[p] * es), recvCounts[p], p);
          }
          break;
        default:
          for (let p = 0; p < n && rc === ok; p++) {
            if (counts[p] === 0) continue;
            rc = s.ncclReduce(
              offset(src, at[p] * es),
              p === me ? dst : null,
              BigInt(counts[p]),
              t,
              redOp,
              p,
              comm,
              stream,
            );
          }
      }
      return rc;
    });
  }

  /**
   * @internal A batch of sends and receives as one NCCL group (the front checked them): one launch, so
   * one Work, which every op's place in the result holds.
   */
  protected override runBatch(ops: readonly P2POp[], options: NcclCallOptions): NcclWork[] {
    const what = "batchIsendIrecv";
    this.#member(what);
    const { version, symbols } = this.#ctx.library;
    requireFeature("sendRecv", version, { what, symbols });
    const operands: Operand[] = [];
    const calls: { send: boolean; pointer: Pointer; count: bigint; t: number; peer: number }[] = [];
    let dtype: DType = "float32", count = 0, bytesSent = 0;
    try {
      for (const o of ops) {
        const t = o.tensor;
        dtype = isDeviceTensor(t) ? t.dtype : dtypeOf(t as TypedArray, o.dtype ?? options.dtype);
        const send = o.op === "send";
        const io = this.#operand(what, t, dtype, { upload: send, download: !send });
        operands.push(io);
        calls.push({
          send,
          pointer: io.pointer,
          count: BigInt(t.length),
          t: ncclDataType(dtype),
          peer: o.peer,
        });
        count += t.length;
        if (send) bytesSent += io.bytes;
      }
    } catch (e) {
      for (const io of operands) if (io.host) this.#ctx.staging.release(io.host.slot);
      throw e;
    }
    const work = this.#launch({
      collective: what,
      dtype,
      count,
      operands,
      issue: (s, comm, stream) =>
        this.#grouped(s, () => {
          for (const c of calls) {
            const rc = c.send
              ? s.ncclSend(c.pointer, c.count, c.t, c.peer, comm, stream)
              : s.ncclRecv(c.pointer, c.count, c.t, c.peer, comm, stream);
            if (rc !== NcclResult.Success) return rc;
          }
          return NcclResult.Success;
        }),
      bytesSent,
    }, { timeoutMs: options.timeoutMs ?? this.#timeoutMs, signal: options.signal, waitFor: options.waitFor });
    return ops.map(() => work);
  }

  /** All-to-all: `ncclAlltoAll` (2.28), or before it one group of a send and a receive per peer. */
  #allToAll(
    s: NcclSymbols,
    native: boolean,
    src: Pointer,
    dst: Pointer,
    count: number,
    dtype: DType,
    comm: Pointer,
    stream: Pointer,
  ): number {
    const t = ncclDataType(dtype);
    if (native && s.ncclAlltoAll) return s.ncclAlltoAll(src, dst, BigInt(count), t, comm, stream);
    const block = count * dtypeSize(dtype);
    return this.#grouped(s, () => {
      for (let p = 0; p < this.size; p++) {
        const rc1 = s.ncclSend(offset(src, p * block), BigInt(count), t, p, comm, stream);
        if (rc1 !== NcclResult.Success) return rc1;
        const rc2 = s.ncclRecv(offset(dst, p * block), BigInt(count), t, p, comm, stream);
        if (rc2 !== NcclResult.Success) return rc2;
      }
      return NcclResult.Success;
    });
  }

  /**
   * Runs custom NCCL calls on the group's stream, with the same ordering, completion events, timeout and
   * watchdog as the built-in collectives: e.g. a `ncclGroupStart`/`ncclGroupEnd` block of sends and
   * receives, or a collective the interface lacks. `fn` runs synchronously and returns the last
   * `ncclResult_t` (or nothing); `ncclInProgress` is waited out.
   *
   * @param name A name for reports and messages.
   * @param fn Queues the work.
   * @param options Timeout, abort signal, stream to wait for.
   * @returns The Work.
   * @throws {RangeError} On a rank outside the group.
   *
   * @example A grouped exchange with the next rank (on a world of one: with itself)
   * ```ts
   * import { createNcclGroup, ncclBackendMissing } from "@dcomm/dcomm/nccl";
   * import { DeviceBuffer } from "@dcomm/dcomm/gpu";
   * import { MemoryStore } from "@dcomm/dcomm/store";
   * import assert from "node:assert/strict";
   * if (ncclBackendMissing() === undefined) {
   *   await using store = new MemoryStore();
   *   await using pg = await createNcclGroup({ rank: 0, size: 1, store });
   *   using a = DeviceBuffer.from(new Float32Array([1, 2, 3, 4]));
   *   using b = DeviceBuffer.alloc(4);
   *   const next = (pg.rank + 1) % pg.size, previous = (pg.rank + pg.size - 1) % pg.size;
   *   await pg.run("ring-exchange", ({ comm, stream, symbols }) => {
   *     symbols.ncclGroupStart();
   *     symbols.ncclSend(a.pointer, BigInt(a.length), 7, next, comm, stream); // 7: ncclFloat32
   *     symbols.ncclRecv(b.pointer, BigInt(b.length), 7, previous, comm, stream);
   *     return symbols.ncclGroupEnd();
   *   });
   *   assert.deepEqual(b.toArray(), new Float32Array([1, 2, 3, 4]));
   * }
   * ```
   */
  run(name: string, fn: (context: NcclRunContext) => number | void, options: NcclCallOptions = {}): NcclWork {
    this.#member(name);
    const timeoutMs = options.timeoutMs ?? this.#timeoutMs;
    if (!(timeoutMs > 0)) {
      throw new RangeError(`Cannot ${name}: expected timeoutMs to be a number > 0, found ${timeoutMs}`);
    }
    return this.#launch({
      collective: name,
      dtype: "uint8",
      count: 0,
      operands: [],
      issue: (s, comm, stream) => fn({ comm, stream, symbols: s }) ?? NcclResult.Success,
      bytesSent: 0,
    }, { ...options, timeoutMs });
  }

  /** Refused: the nccl backend's tensors are device memory (`DeviceBuffer.alloc`). */
  alloc(_count: number, _options?: AllocOptions): TypedArray {
    throw new UnsupportedError(
      "Cannot alloc on the nccl backend: its tensors live on the GPU; use DeviceBuffer.alloc(count, { dtype })",
    );
  }

  /** Refused, as {@linkcode NcclProcessGroup.alloc}. */
  release(_tensor: TypedArray): void {
    throw new UnsupportedError(
      "Cannot release on the nccl backend: free a DeviceBuffer with its own dispose",
    );
  }

  /**
   * See `ProcessGroup.newGroup`: a sub-group through `ncclCommSplit` (NCCL 2.18), with the world's config.
   *
   * @param ranks The members, as ranks of this group.
   * @param options The sub-group's default timeout.
   * @returns The sub-group; on a rank outside `ranks`, a group whose `rank` is -1.
   * @throws {RangeError} On a rank outside this group, or a bad list of ranks.
   * @throws {UnsupportedError} If NCCL is older than 2.18.
   */
  async newGroup(ranks: readonly number[], options: GroupOptions = {}): Promise<NcclProcessGroup> {
    this.#member("create a group");
    return await this.groupInOrder(checkGroupRanks(ranks, this.size), options);
  }

  /** @internal A group of `sorted` in that order (`split`'s keys), every rank of this group calling. */
  protected override async groupInOrder(
    sorted: readonly number[],
    options: GroupOptions,
  ): Promise<NcclProcessGroup> {
    this.#member("create a group");
    const { version, symbols } = this.#ctx.library;
    requireFeature("commSplit", version, { what: "create a group", symbols });
    const comm = this.#ready("create a group");
    const timeoutMs = options.timeoutMs ?? this.#timeoutMs;
    const member = sorted.includes(this.rank);
    setDevice(this.#ctx.device);
    // Pending collectives of the parent must be queued before the split (NCCL orders them itself).
    // The child gets the same config fields (CTA counts, ...) as the world.
    const config = this.#ctx.tuning.config as NcclConfigOptions;
    // The key orders the child's ranks: this rank's place in the list.
    const child = await comm.split(member, Math.max(0, sorted.indexOf(this.rank)), { config, timeoutMs });
    const me = this.ranks[this.rank];
    const group = new NcclProcessGroup({
      rank: this.#ctx,
      id: this.#id * 1000 + this.#children.length + 1,
      ranks: sorted.map((r) => this.ranks[r]),
      globalRank: me,
      comm: child,
      timeoutMs,
      store: this.#store,
    });
    this.#children.push(group);
    return group;
  }

  /**
   * Closes the group once its queued collectives are done, then its sub-groups; closing the world group
   * also ends the backend.
   */
  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    // Let queued collectives finish (the watchdog fails the ones that hang).
    await this.#ctx.idle();
    for (const child of this.#children) await child.close();
    this.#barrier?.[Symbol.dispose]();
    if (this.#comm) {
      setDevice(this.#ctx.device);
      await this.#comm.destroy(Math.min(this.#timeoutMs, 30_000));
    }
    this.#stream?.[Symbol.dispose]();
    if (this.#id === 0) {
      this.#ctx[Symbol.dispose]();
      await this.#onClose?.();
    }
  }

  #member(what: string): void {
    if (this.rank < 0) {
      throw new RangeError(
        `Cannot ${what}: this rank is not a member of group ${this.#id} (ranks ${this.ranks.join(", ")})`,
      );
    }
  }

  #ready(what: string): Communicator {
    this.#member(what);
    if (this.#closed) throw new DistError(`Cannot ${what}: the process group is closed`);
    const comm = this.#comm as Communicator;
    if (!comm.ready) {
      throw new DistError(
        `Cannot ${what}: the NCCL communicator of group ${this.#id} was ${comm.state}` +
          (this.#abortReason ? ` (${this.#abortReason.message})` : ""),
        { cause: this.#abortReason },
      );
    }
    return comm;
  }

  #op(what: string, op: ReduceOp, scale: number | undefined, dtype: DType): ReduceOp {
    if (op === "avg") requireFeature("avg", this.#ctx.library.version, { what: `${what} with op "avg"` });
    if (scale !== undefined && dtype === "bool") {
      throw new TypeError(`Cannot ${what}: scale does not apply to bool tensors`);
    }
    if (scale !== undefined) {
      if (op !== "sum") {
        throw new RangeError(`Cannot ${what}: scale works with op "sum" only, found op "${op}"`);
      }
      if (typeof scale !== "number" || !Number.isFinite(scale)) {
        throw new TypeError(`Cannot ${what}: scale must be a finite number, found ${String(scale)}`);
      }
      const { version, symbols } = this.#ctx.library;
      requireFeature("preMulSum", version, { what: `${what} with a scale`, symbols });
    }
    return ncclOpFor(op, dtype);
  }

  /** The input and output of an out-of-place collective; the input's slot is released if the output fails. */
  #operands(what: string, input: AnyTensor, output: AnyTensor, dtype: DType): [Operand, Operand] {
    const inp = this.#operand(what, input, dtype, { upload: true, download: false });
    try {
      return [inp, this.#operand(what, output, dtype, { upload: false, download: true })];
    } catch (e) {
      if (inp.host) this.#ctx.staging.release(inp.host.slot);
      throw e;
    }
  }

  /** The timeout, signal and stream to wait for of a checked call. */
  #how(call: CallRecord): LaunchOptions {
    return {
      timeoutMs: call.timeoutMs,
      signal: call.signal,
      waitFor: (call.options as NcclCallOptions).waitFor,
    };
  }

  #operand(
    what: string,
    tensor: AnyTensor,
    dtype: DType,
    use: { upload: boolean; download: boolean },
  ): Operand {
    const bytes = tensor.length * dtypeSize(dtype);
    if (isDeviceTensor(tensor)) return { pointer: this.#devicePointer(what, tensor), bytes };
    const slot = this.#ctx.staging.acquire(bytes);
    return {
      pointer: slot.device.pointer,
      bytes,
      host: { array: tensor, slot, upload: use.upload, download: use.download },
    };
  }

  #devicePointer(what: string, tensor: DeviceTensor): Deno.PointerValue {
    if (tensor.device !== this.#ctx.device) {
      throw new RangeError(
        `Cannot ${what}: the tensor is on device ${tensor.device} but this rank's communicator uses device ` +
          `${this.#ctx.device}`,
      );
    }
    let pointer: Deno.PointerValue;
    try {
      pointer = tensor.pointer;
    } catch (e) {
      throw new TypeError(`Cannot ${what}: ${(e as Error).message}`, { cause: e });
    }
    if (tensor.byteLength === 0) return pointer;
    if (pointer === null) {
      throw new TypeError(
        `Cannot ${what}: the device tensor of ${tensor.length} elements has a null pointer`,
      );
    }
    // Our own buffers are known good; anything else is checked so a bad pointer fails here, not as a
    // sticky illegal-address error that would end every later CUDA call of the process.
    if (!(tensor instanceof DeviceBuffer)) {
      const attributes = pointerAttributes(pointer);
      const names = ["unregistered host memory", "pinned host memory", "device memory", "managed memory"];
      if (attributes.type !== MemoryType.Device && attributes.type !== MemoryType.Managed) {
        throw new TypeError(
          `Cannot ${what}: the tensor's pointer 0x${
            Deno.UnsafePointer.value(pointer).toString(16)
          } is not device ` +
            `memory (cudaPointerGetAttributes says ${names[attributes.type] ?? `type ${attributes.type}`})`,
        );
      }
      if (attributes.type === MemoryType.Device && attributes.device !== this.#ctx.device) {
        throw new RangeError(
          `Cannot ${what}: the tensor's memory is on device ${attributes.device}, this rank uses device ` +
            `${this.#ctx.device}`,
        );
      }
    }
    return pointer;
  }

  #withOp(
    what: string,
    dtype: DType,
    op: ReduceOp,
    scale: number | undefined,
    comm: Deno.PointerValue,
    call: (redOp: number) => number,
  ): number {
    if (scale === undefined) return call(ncclRedOp(op));
    const s = this.#ctx.library.symbols;
    const create = s.ncclRedOpCreatePreMulSum;
    const destroy = s.ncclRedOpDestroy;
    if (create === null || destroy === null) {
      throw new UnsupportedError(`Cannot ${what} with a scale: this NCCL lacks ncclRedOpCreatePreMulSum`);
    }
    const out = new Int32Array(1);
    const scalar = scalarBytes(dtype, scale);
    const rc = create(
      out,
      Deno.UnsafePointer.of(scalar),
      ncclDataType(dtype),
      NcclScalarResidence.HostImmediate,
      comm,
    );
    if (rc !== NcclResult.Success) throw ncclError(rc, "ncclRedOpCreatePreMulSum", comm);
    try {
      return call(out[0]);
    } finally {
      // An operator may be destroyed as soon as the last call given it has returned.
      destroy(out[0], comm);
    }
  }

  #grouped(s: NcclSymbols, body: () => number): number {
    const start = s.ncclGroupStart();
    if (start !== NcclResult.Success) return start;
    let rc: number = NcclResult.InternalError;
    try {
      rc = body();
    } finally {
      // Group depth is per thread: the group is closed on this thread whatever happened inside it.
      const end = s.ncclGroupEnd();
      if (rc === NcclResult.Success) rc = end;
    }
    return rc;
  }

  #launch(launch: Launch, options: LaunchOptions): NcclWork {
    const { collective, dtype, count, operands, issue, bytesSent } = launch;
    const word = (VERB as Readonly<Record<string, string>>)[collective] ?? collective;
    const where = `on NCCL group ${this.#id} (rank ${this.rank} of ${this.size})`;
    const describe = collective in VERB ? `${word} of ${count} ${dtype} ${where}` : `${word} ${where}`;
    const { timeoutMs, waitFor } = options;
    const release = (): void => {
      for (const o of operands) if (o.host) this.#ctx.staging.release(o.host.slot);
    };
    const completion: CompletionEvent = { event: null };
    let comm: Communicator;
    try {
      comm = this.#ready(word);
      if (options.signal?.aborted) {
        throw new DistError(`Aborted before it started: ${String(options.signal.reason)}`, {
          code: "ABORTED",
        });
      }
    } catch (e) {
      release();
      return new NcclWork(Promise.reject(e), completion);
    }
    const ctx = this.#ctx;
    const stream = (this.#stream as Stream).pointer;
    const startedAt = Date.now();
    const deadline = performance.now() + timeoutMs;
    const events: Deno.PointerValue[] = [];
    const event = (): Deno.PointerValue => {
      const e = ctx.acquireEvent();
      events.push(e);
      return e;
    };
    let start: Deno.PointerValue;
    let end: Deno.PointerValue;
    let done: Deno.PointerValue;
    try {
      setDevice(ctx.device);
      ctx.order(stream);
      if (waitFor) {
        const marker = ctx.acquireEvent();
        recordEvent(marker, waitFor.pointer);
        streamWaitEvent(stream, marker);
        ctx.releaseEvent(marker);
      }
      for (const o of operands) {
        if (!o.host?.upload) continue;
        const view = o.host.array;
        new Uint8Array(o.host.slot.pinned.array("uint8").buffer, 0, o.bytes).set(
          new Uint8Array(view.buffer, view.byteOffset, o.bytes),
        );
        memcpyAsync(o.pointer, o.host.slot.pinned.pointer, o.bytes, MemcpyKind.HostToDevice, stream);
      }
      start = event();
      recordEvent(start, stream);
      const s = ctx.library.symbols;
      const rc = issue(s, comm.handle, stream);
      if (checkStarted(rc, `nccl${collective[0].toUpperCase()}${collective.slice(1)}`, comm.handle)) {
        comm.settle(describe, deadline);
      }
      end = event();
      recordEvent(end, stream);
      done = end;
      const downloads = operands.filter((o) => o.host?.download);
      for (const o of downloads) {
        memcpyAsync(o.host?.slot.pinned.pointer ?? null, o.pointer, o.bytes, MemcpyKind.DeviceToHost, stream);
      }
      if (downloads.length) {
        done = event();
        recordEvent(done, stream);
      }
    } catch (e) {
      // Queued copies may still use the slots: retire them. The events are unused or complete soon.
      for (const o of operands) if (o.host) ctx.staging.quarantine(o.host.slot);
      for (const ev of events) ctx.releaseEvent(ev);
      if (comm.ready && comm.nonblocking && keepsError(comm)) {
        // NCCL kept the error on the communicator (2.28 does, for a bad argument): it refuses every later
        // call, so it is aborted and later calls name this error instead of NCCL's stale one.
        comm.abort();
      }
      if (!comm.ready) this.#abortReason ??= e as Error;
      return new NcclWork(Promise.reject(e), completion);
    }
    completion.event = done;
    const { promise, resolve, reject } = Promise.withResolvers<NcclWorkReport>();
    const op: PendingOp = {
      comm,
      describe,
      start,
      end,
      done,
      deadline,
      timeoutMs,
      signal: options.signal,
      completion,
      finish: (gpuTimeMs: number): void => {
        for (const o of operands) {
          if (!o.host) continue;
          if (o.host.download) {
            const view = o.host.array;
            new Uint8Array(view.buffer, view.byteOffset, o.bytes).set(
              new Uint8Array(o.host.slot.pinned.array("uint8").buffer, 0, o.bytes),
            );
          }
          ctx.staging.release(o.host.slot);
        }
        resolve({
          ...workReport({
            collective,
            algorithm: ctx.tuning.env["NCCL_ALGO"] ?? "nccl",
            transport: "nccl",
            bytes: operands[0]?.bytes ?? 0,
            bytesSent: Math.round(bytesSent),
            timeMs: gpuTimeMs,
            startedAt,
            finishedAt: Date.now(),
            peer: launch.peer,
          }),
          gpuTimeMs,
          dtype,
          count,
          device: ctx.device,
          ncclVersion: ctx.library.version.text,
          staged: operands.some((o) => o.host !== undefined),
          tuning: ctx.tuning,
        });
      },
      fail: (error: Error): void => {
        for (const o of operands) if (o.host) ctx.staging.quarantine(o.host.slot);
        this.#abortReason ??= comm.ready ? undefined : error;
        reject(error);
      },
    };
    ctx.track(op, stream);
    return new NcclWork(promise, completion);
  }
}

function offset(pointer: Deno.PointerValue, bytes: number): Deno.PointerValue {
  return pointer === null || bytes === 0 ? pointer : Deno.UnsafePointer.offset(pointer, bytes);
}

/** Whether a communicator reports an error (not success, not in progress) after a call failed. */
function keepsError(comm: Communicator): boolean {
  try {
    const state = comm.asyncError();
    return state !== NcclResult.Success && state !== NcclResult.InProgress;
  } catch {
    return true;
  }
}
