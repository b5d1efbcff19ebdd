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
import { checkBlocks, checkGroupRanks, checkPeer, checkRank } from "../_checks.ts";
import { checkOp, type DType, dtypeOf, dtypeSize, type ReduceOp, type TypedArray } from "../../core/dtype.ts";
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
import { ncclDataType, ncclRedOp, scalarBytes } from "./_mapping.ts";
import type {
  NcclAlgorithmOptions,
  NcclCallOptions,
  NcclReduceOptions,
  NcclRootOptions,
  NcclRootReduceOptions,
  NcclRunContext,
} from "./options.ts";
import { hasFeature, requireFeature } from "../../ffi/nccl/features.ts";
import { checkStarted, ncclError } from "../../ffi/nccl/nccl.ts";
import type { NcclSymbols } from "../../ffi/nccl/symbols.ts";
import type { NcclConfigOptions } from "../../ffi/nccl/config.ts";
import { DeviceBuffer } from "../../gpu/device_buffer.ts";
import { Stream } from "../../gpu/stream.ts";
import {
  type AllocOptions,
  type AnyTensor,
  type CallOptions,
  type DeviceTensor,
  type GroupOptions,
  isDeviceTensor,
  type ProcessGroup,
} from "../process_group.ts";
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

const COLLECTIVE_WORDS: Readonly<Record<string, string>> = {
  allReduce: "all-reduce",
  broadcast: "broadcast",
  reduce: "reduce",
  allGather: "all-gather",
  reduceScatter: "reduce-scatter",
  allToAll: "all-to-all",
  barrier: "barrier",
  send: "send",
  recv: "recv",
};

/** A process group of the `nccl` backend. */
export class NcclProcessGroup implements ProcessGroup {
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
    this.#ctx = init.rank;
    this.#id = init.id;
    this.ranks = init.ranks;
    this.size = init.ranks.length;
    this.rank = init.ranks.indexOf(init.globalRank);
    this.#comm = init.comm;
    this.#timeoutMs = init.timeoutMs;
    this.#onClose = init.onClose;
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

  allReduce(tensor: AnyTensor, options: NcclReduceOptions = {}): NcclWork {
    const what = "all-reduce";
    const dtype = this.#dtype(what, tensor, options);
    const op = this.#op(what, options);
    const inout = this.#operand(what, tensor, dtype, { upload: true, download: true });
    const n = this.size;
    return this.#launch("allReduce", dtype, tensor.length, [inout], options, (s, comm, stream) => {
      return this.#withOp(
        what,
        dtype,
        op,
        options.scale,
        comm,
        (redOp) =>
          s.ncclAllReduce(
            inout.pointer,
            inout.pointer,
            BigInt(tensor.length),
            ncclDataType(dtype),
            redOp,
            comm,
            stream,
          ),
      );
    }, (2 * (n - 1) / n) * inout.bytes);
  }

  broadcast(tensor: AnyTensor, options: NcclRootOptions = {}): NcclWork {
    const what = "broadcast";
    const dtype = this.#dtype(what, tensor, options);
    const root = this.#rankArg(what, "root", options.root ?? 0);
    const isRoot = root === this.rank;
    const inout = this.#operand(what, tensor, dtype, { upload: isRoot, download: !isRoot });
    return this.#launch("broadcast", dtype, tensor.length, [inout], options, (s, comm, stream) => {
      return s.ncclBroadcast(
        inout.pointer,
        inout.pointer,
        BigInt(tensor.length),
        ncclDataType(dtype),
        root,
        comm,
        stream,
      );
    }, this.size > 1 ? inout.bytes : 0);
  }

  reduce(tensor: AnyTensor, options: NcclRootReduceOptions = {}): NcclWork {
    const what = "reduce";
    const dtype = this.#dtype(what, tensor, options);
    const op = this.#op(what, options);
    const root = this.#rankArg(what, "root", options.root ?? 0);
    const inout = this.#operand(what, tensor, dtype, { upload: true, download: root === this.rank });
    return this.#launch("reduce", dtype, tensor.length, [inout], options, (s, comm, stream) => {
      return this.#withOp(
        what,
        dtype,
        op,
        options.scale,
        comm,
        (redOp) =>
          s.ncclReduce(
            inout.pointer,
            inout.pointer,
            BigInt(tensor.length),
            ncclDataType(dtype),
            redOp,
            root,
            comm,
            stream,
          ),
      );
    }, this.size > 1 ? inout.bytes : 0);
  }

  allGather(output: AnyTensor, input: AnyTensor, options: NcclAlgorithmOptions = {}): NcclWork {
    const what = "all-gather";
    const dtype = this.#pairDtypes(what, output, input, options);
    checkBlocks("allGather", output, input, this.size);
    const inp = this.#operand(what, input, dtype, { upload: true, download: false });
    const out = this.#operand(what, output, dtype, { upload: false, download: true });
    return this.#launch("allGather", dtype, input.length, [inp, out], options, (s, comm, stream) => {
      return s.ncclAllGather(
        inp.pointer,
        out.pointer,
        BigInt(input.length),
        ncclDataType(dtype),
        comm,
        stream,
      );
    }, (this.size - 1) * inp.bytes);
  }

  reduceScatter(output: AnyTensor, input: AnyTensor, options: NcclReduceOptions = {}): NcclWork {
    const what = "reduce-scatter";
    const dtype = this.#pairDtypes(what, output, input, options);
    const op = this.#op(what, options);
    checkBlocks("reduceScatter", output, input, this.size);
    const inp = this.#operand(what, input, dtype, { upload: true, download: false });
    const out = this.#operand(what, output, dtype, { upload: false, download: true });
    return this.#launch("reduceScatter", dtype, input.length, [inp, out], options, (s, comm, stream) => {
      return this.#withOp(
        what,
        dtype,
        op,
        options.scale,
        comm,
        (redOp) =>
          s.ncclReduceScatter(
            inp.pointer,
            out.pointer,
            BigInt(output.length),
            ncclDataType(dtype),
            redOp,
            comm,
            stream,
          ),
      );
    }, (this.size - 1) * out.bytes);
  }

  allToAll(output: AnyTensor, input: AnyTensor, options: NcclAlgorithmOptions = {}): NcclWork {
    const what = "all-to-all";
    const dtype = this.#pairDtypes(what, output, input, options);
    checkBlocks("allToAll", output, input, this.size);
    const { version, symbols } = this.#ctx.library;
    const native = hasFeature("alltoall", version, symbols);
    if (!native) requireFeature("sendRecv", version, { what, symbols });
    const inp = this.#operand(what, input, dtype, { upload: true, download: false });
    const out = this.#operand(what, output, dtype, { upload: false, download: true });
    const count = input.length / this.size;
    const block = count * dtypeSize(dtype);
    const t = ncclDataType(dtype);
    return this.#launch("allToAll", dtype, input.length, [inp, out], options, (s, comm, stream) => {
      if (native && s.ncclAlltoAll) {
        return s.ncclAlltoAll(inp.pointer, out.pointer, BigInt(count), t, comm, stream);
      }
      // Before 2.28: one group of a send and a receive per peer, which NCCL runs as one operation.
      return this.#grouped(s, () => {
        for (let p = 0; p < this.size; p++) {
          const rc1 = s.ncclSend(offset(inp.pointer, p * block), BigInt(count), t, p, comm, stream);
          if (rc1 !== NcclResult.Success) return rc1;
          const rc2 = s.ncclRecv(offset(out.pointer, p * block), BigInt(count), t, p, comm, stream);
          if (rc2 !== NcclResult.Success) return rc2;
        }
        return NcclResult.Success;
      });
    }, ((this.size - 1) / this.size) * inp.bytes);
  }

  barrier(options: NcclCallOptions = {}): NcclWork {
    this.#member("barrier");
    this.#barrier ??= DeviceBuffer.alloc(1, { dtype: "int32", device: this.#ctx.device });
    const buf = this.#barrier;
    const operand: Operand = { pointer: buf.pointer, bytes: 4 };
    return this.#launch("barrier", "int32", 1, [operand], options, (s, comm, stream) => {
      return s.ncclAllReduce(buf.pointer, buf.pointer, 1n, NcclDataType.Int32, NcclRedOp.Sum, comm, stream);
    }, this.size > 1 ? 8 : 0);
  }

  send(tensor: AnyTensor, peer: number, options: NcclCallOptions = {}): NcclWork {
    const what = "send";
    const dtype = this.#dtype(what, tensor, options);
    const to = this.#peer(what, peer);
    requireFeature("sendRecv", this.#ctx.library.version, { what, symbols: this.#ctx.library.symbols });
    const inp = this.#operand(what, tensor, dtype, { upload: true, download: false });
    return this.#launch("send", dtype, tensor.length, [inp], options, (s, comm, stream) => {
      return s.ncclSend(inp.pointer, BigInt(tensor.length), ncclDataType(dtype), to, comm, stream);
    }, inp.bytes);
  }

  recv(tensor: AnyTensor, peer: number, options: NcclCallOptions = {}): NcclWork {
    const what = "recv";
    const dtype = this.#dtype(what, tensor, options);
    const from = this.#peer(what, peer);
    requireFeature("sendRecv", this.#ctx.library.version, { what, symbols: this.#ctx.library.symbols });
    const out = this.#operand(what, tensor, dtype, { upload: false, download: true });
    return this.#launch("recv", dtype, tensor.length, [out], options, (s, comm, stream) => {
      return s.ncclRecv(out.pointer, BigInt(tensor.length), ncclDataType(dtype), from, comm, stream);
    }, 0);
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
   * @example A grouped exchange with the next rank
   * ```ts ignore
   * pg.run("ring-exchange", ({ comm, stream, symbols }) => {
   *   symbols.ncclGroupStart();
   *   symbols.ncclSend(a.pointer, a.length, 7, (pg.rank + 1) % pg.size, comm, stream);
   *   symbols.ncclRecv(b.pointer, b.length, 7, (pg.rank + pg.size - 1) % pg.size, comm, stream);
   *   return symbols.ncclGroupEnd();
   * });
   * ```
   */
  run(name: string, fn: (context: NcclRunContext) => number | void, options: NcclCallOptions = {}): NcclWork {
    this.#member(name);
    return this.#launch(name, "uint8", 0, [], options, (s, comm, stream) => {
      return fn({ comm, stream, symbols: s }) ?? NcclResult.Success;
    }, 0);
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

  async newGroup(ranks: readonly number[], options: GroupOptions = {}): Promise<NcclProcessGroup> {
    this.#member("create a group");
    const sorted = checkGroupRanks(ranks, this.size);
    const { version, symbols } = this.#ctx.library;
    requireFeature("commSplit", version, { what: "create a group", symbols });
    const comm = this.#ready("create a group");
    const timeoutMs = options.timeoutMs ?? this.#timeoutMs;
    const member = sorted.includes(this.rank);
    setDevice(this.#ctx.device);
    // Pending collectives of the parent must be queued before the split (NCCL orders them itself).
    // The child gets the same config fields (CTA counts, ...) as the world.
    const config = this.#ctx.tuning.config as NcclConfigOptions;
    const child = await comm.split(member, this.rank, { config, timeoutMs });
    const me = this.ranks[this.rank];
    const group = new NcclProcessGroup({
      rank: this.#ctx,
      id: this.#id * 1000 + this.#children.length + 1,
      ranks: sorted.map((r) => this.ranks[r]),
      globalRank: me,
      comm: child,
      timeoutMs,
    });
    this.#children.push(group);
    return group;
  }

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

  /** Closes the group, as {@linkcode NcclProcessGroup.close}, for `await using`. */
  [Symbol.asyncDispose](): Promise<void> {
    return this.close();
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

  #dtype(what: string, tensor: AnyTensor, options: CallOptions): DType {
    this.#member(what);
    let dtype: DType;
    if (isDeviceTensor(tensor)) {
      dtype = tensor.dtype;
      if (options.dtype !== undefined && options.dtype !== dtype) {
        throw new TypeError(`Cannot ${what}: the device tensor holds ${dtype}, found dtype ${options.dtype}`);
      }
    } else {
      try {
        dtype = dtypeOf(tensor, options.dtype);
      } catch (e) {
        throw new TypeError(`Cannot ${what}: ${(e as Error).message}`);
      }
    }
    if (dtype === "bfloat16") {
      requireFeature("bfloat16", this.#ctx.library.version, { what: `${what} bfloat16` });
    }
    return dtype;
  }

  #pairDtypes(what: string, output: AnyTensor, input: AnyTensor, options: CallOptions): DType {
    const a = this.#dtype(what, input, options);
    const b = this.#dtype(what, output, options);
    if (a !== b) throw new TypeError(`Cannot ${what}: input is ${a} but output is ${b}`);
    return a;
  }

  #op(what: string, options: NcclReduceOptions): ReduceOp {
    const op = checkOp(options.op ?? "sum");
    if (op === "avg") requireFeature("avg", this.#ctx.library.version, { what: `${what} with op "avg"` });
    if (options.scale !== undefined) {
      if (op !== "sum") {
        throw new RangeError(`Cannot ${what}: scale works with op "sum" only, found op "${op}"`);
      }
      if (typeof options.scale !== "number" || !Number.isFinite(options.scale)) {
        throw new TypeError(`Cannot ${what}: scale must be a finite number, found ${String(options.scale)}`);
      }
      const { version, symbols } = this.#ctx.library;
      requireFeature("preMulSum", version, { what: `${what} with a scale`, symbols });
    }
    return op;
  }

  #rankArg(what: string, name: string, r: number): number {
    return checkRank(what, name, r, this.size);
  }

  #peer(what: string, peer: number): number {
    return checkPeer(what, peer, this);
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

  #launch(
    collective: string,
    dtype: DType,
    count: number,
    operands: readonly Operand[],
    options: NcclCallOptions,
    call: (symbols: NcclSymbols, comm: Deno.PointerValue, stream: Deno.PointerValue) => number,
    bytesSent: number,
  ): NcclWork {
    const word = COLLECTIVE_WORDS[collective] ?? collective;
    const where = `on NCCL group ${this.#id} (rank ${this.rank} of ${this.size})`;
    const describe = collective in COLLECTIVE_WORDS
      ? `${word} of ${count} ${dtype} ${where}`
      : `${word} ${where}`;
    const timeoutMs = options.timeoutMs ?? this.#timeoutMs;
    const release = (): void => {
      for (const o of operands) if (o.host) this.#ctx.staging.release(o.host.slot);
    };
    if (!(timeoutMs > 0)) {
      release();
      throw new RangeError(`Invalid timeoutMs: expected a number > 0, found ${timeoutMs}`);
    }
    const completion: CompletionEvent = { event: null };
    let comm: Communicator;
    try {
      comm = this.#ready(word);
      if (options.signal?.aborted) {
        throw new DistError(`Aborted before it started: ${String(options.signal.reason)}`);
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
      if (options.waitFor) {
        const marker = ctx.acquireEvent();
        recordEvent(marker, options.waitFor.pointer);
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
      const rc = call(s, comm.handle, stream);
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
          collective,
          algorithm: ctx.tuning.env["NCCL_ALGO"] ?? "nccl",
          transport: "nccl",
          bytes: operands[0]?.bytes ?? 0,
          bytesSent: Math.round(bytesSent),
          timeMs: gpuTimeMs,
          startedAt,
          finishedAt: Date.now(),
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
