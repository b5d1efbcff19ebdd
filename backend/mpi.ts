/**
 * The mpi backend: a {@linkcode ProcessGroup} over MPI (MPICH's ABI) through FFI, for jobs started by
 * `mpiexec` or `srun`. Every collective maps to MPI's non-blocking call (`MPI_Iallreduce`, `MPI_Ibcast`,
 * ...) on the rank's main thread, and `MPI_Test` polling completes it (see `mpi/_progress.ts`), so
 * awaiting never blocks the event loop and a collective not awaited runs while the caller computes (it
 * advances whenever the event loop turns: MPICH has no progress thread of its own).
 *
 * - dtypes: integers and float32/float64 use MPI's own types and ops. float16 and bfloat16 travel as
 *   `MPI_UINT16_T` and reduce through a user-defined MPI op that runs the WASM kernel (computed in float32,
 *   rounded to the 16-bit format at every step of MPI's reduction tree). MPICH 4.0.0-4.0.2 computes
 *   MPI_MIN/MPI_MAX of unsigned integers as if they were signed (pmodels/mpich#6083): each unsigned
 *   min/max is probed once with `MPI_Reduce_local` and, where the library is wrong, reduced through the
 *   WASM kernel the same way.
 * - avg: MPI's sum, then a division by the group size on the result (truncating for integers, as NCCL).
 * - algorithms: MPI chooses (tune with MPICH's `MPIR_CVAR_*_ALGORITHM` variables); `algorithm` may be
 *   `"auto"` or `"mpi"`, anything else is an UnsupportedError.
 * - timeouts and aborts: a receive is cancelled (`MPI_Cancel`) and fails with a TimeoutError, and the
 *   group stays usable. MPI cannot cancel a collective or a send: that call fails with a TimeoutError (or
 *   the abort reason) and the backend becomes unusable (every later call fails with a DistError coded
 *   `MPI_BROKEN`; close skips `MPI_Finalize`, which would wait forever). With `abortOnTimeout` the rank
 *   calls `MPI_Abort` instead, which ends the whole job.
 * - sub-groups: `MPI_Comm_split`, after an `MPI_Ibarrier` on the parent so that the blocking split runs
 *   only once every rank has arrived.
 * - counts: allReduce, broadcast, reduce, send and recv split tensors beyond 2^30 elements into several
 *   calls; allGather, reduceScatter and allToAll take at most 2^31 - 1 elements per rank (a C int).
 *
 * Buffers: MPI reads and writes the TypedArray's own memory, no copy; the group holds the array until MPI
 * is done with it. Do not transfer or resize it meanwhile (resizable ArrayBuffers are refused).
 *
 * Launch the deno binary itself under mpiexec, not `npx deno`: npx runs deno from a node process that does
 * not pass on the PMI socket mpiexec opened for each rank (`PMI_FD`), so MPICH's `MPI_Init` would talk to
 * whatever deno opened under that number and die ("PMI_Get_appnum returned -1"). The backend checks the
 * descriptor before `MPI_Init` and throws a DistError that says what to run instead:
 *
 * ```sh
 * mpiexec -n 4 "$(npx -y deno@2.9.6 eval 'console.log(Deno.execPath())')" run -A train.ts
 * ```
 *
 * @example All-reduce under mpiexec
 * ```ts ignore
 * import { init } from "../mod.ts";
 * await using pg = await init({ backend: "mpi" });
 * const grad = new Float32Array(1024).fill(pg.rank);
 * await pg.allReduce(grad, { op: "avg" });
 * ```
 *
 * @module
 */
import { checkBlocks, checkGroupRanks, checkPeer, checkRank } from "./_checks.ts";
import { checkOp, type DType, dtypeOf, type TypedArray } from "../core/dtype.ts";
import { DistError, MismatchError, UnsupportedError } from "../core/errors.ts";
import {
  MPI_ERR_TRUNCATE,
  MPI_IN_PLACE_ADDRESS,
  MPI_MAX_COUNT,
  MPI_UNDEFINED,
  MpiComm,
  pointerTo,
} from "../ffi/mpi/constants.ts";
import { check, MpiError } from "../ffi/mpi/mpi.ts";
import { rankInfo } from "./env.ts";
import type { FlightSpec } from "./mpi/_progress.ts";
import { MPI_DATATYPE, MpiRuntime } from "./mpi/_runtime.ts";
import type {
  AlgorithmOptions,
  AllocOptions,
  CallOptions,
  GroupOptions,
  ProcessGroup,
  ReduceOptions,
  RootOptions,
  RootReduceOptions,
  Tensor,
} from "./process_group.ts";
import { Work, type WorkReport } from "./work.ts";
import { allocOrdinary, releaseOrdinary } from "./_alloc.ts";

/** Options of {@linkcode initMpi}. */
export interface MpiInitOptions {
  /** Default timeout of every call, in milliseconds. @default 300000 */
  timeoutMs?: number;
  /** This rank, checked against MPI's. @default MPI's rank in MPI_COMM_WORLD */
  rank?: number;
  /** The number of ranks, checked against MPI's. @default MPI's size of MPI_COMM_WORLD */
  worldSize?: number;
  /**
   * Call `MPI_Abort` (ending every rank of the job) when a collective or a send times out or is aborted,
   * instead of failing it and leaving the backend unusable.
   * @default false
   */
  abortOnTimeout?: boolean;
  /** The longest the poller spins on `MPI_Test` before yielding to the event loop, in µs. @default 1000 */
  spinUs?: number;
  /** How long a call keeps the poller spinning before it backs off to timers, plus 10 ns per byte. @default 50 */
  hotMs?: number;
  /** The environment, for the launcher checks. @default Deno.env.toObject() */
  env?: Readonly<Record<string, string | undefined>>;
}

/** Elements per MPI call for the collectives that split a tensor: 2^30 keeps every count a C int. */
const CHUNK = 1 << 30;
/** The tag of every send and receive (MPI keeps messages between two ranks in order per tag). */
const TAG = 0;
/** Where empty tensors point (MPI touches nothing for a count of 0). */
const EMPTY = new Uint8Array(8);
/** Pointers need --allow-ffi, so they are made on first use, not at import. */
let pointers: { inPlace: Deno.PointerObject; empty: Deno.PointerObject } | undefined;

function constantPointers(): { inPlace: Deno.PointerObject; empty: Deno.PointerObject } {
  return pointers ??= {
    inPlace: pointerTo(MPI_IN_PLACE_ADDRESS),
    empty: Deno.UnsafePointer.of(EMPTY) as Deno.PointerObject,
  };
}

let runtime: MpiRuntime | undefined;
let origin: number | undefined;

/** `performance.timeOrigin`, read once (the getter costs as much as a small call's bookkeeping). */
function timeOrigin(): number {
  return origin ??= performance.timeOrigin;
}
let worldOpen = false;
let finalized = false;

function processEnv(): Readonly<Record<string, string | undefined>> {
  try {
    return Deno.env.toObject();
  } catch {
    return {};
  }
}

/** The base address of each buffer seen: a backing store never moves (resizable buffers are refused). */
const bases = new WeakMap<ArrayBufferLike, Deno.PointerObject>();

/** The address of element `first` of `array`, for MPI (which must not outlive the array). */
function pointerOf(array: TypedArray, first = 0): Deno.PointerObject {
  if (array.byteLength === 0) return constantPointers().empty;
  // Through the ArrayBuffer: that moves a small array's bytes off the JS heap, where GC could move them.
  const buffer = array.buffer;
  let base = bases.get(buffer);
  if (base === undefined) {
    base = Deno.UnsafePointer.of(buffer as ArrayBuffer) as Deno.PointerObject;
    bases.set(buffer, base);
  }
  const offset = array.byteOffset + first * array.BYTES_PER_ELEMENT;
  return offset === 0 ? base : Deno.UnsafePointer.offset(base, offset) as Deno.PointerObject;
}

function overlap(a: TypedArray, b: TypedArray): boolean {
  return a.buffer === b.buffer && a.byteOffset < b.byteOffset + b.byteLength &&
    b.byteOffset < a.byteOffset + a.byteLength;
}

/** What a call does once started: its chunks and how to issue each. */
interface Call {
  readonly collective: string;
  readonly what: () => string;
  readonly options: CallOptions;
  readonly bytes: number;
  readonly keep: readonly unknown[];
  readonly chunks: number;
  readonly issue: (chunk: number, request: Int32Array) => number;
  readonly call: string;
  readonly finish?: () => void;
  readonly cancellable?: boolean;
  readonly onRequestDone?: (index: number, status: Deno.PointerObject) => void;
}

/** How a group is made (internal to {@linkcode MpiProcessGroup}). */
interface GroupInit {
  readonly comm: Int32Array | undefined;
  readonly ranks: readonly number[];
  readonly rank: number;
  readonly timeoutMs: number;
  readonly world: boolean;
}

/** A process group of the mpi backend: one MPI communicator. */
export class MpiProcessGroup implements ProcessGroup {
  /** This rank within the group, or -1 if this rank is not a member. */
  readonly rank: number;
  /** The number of ranks in the group. */
  readonly size: number;
  /** The global ranks of the members, in group order. */
  readonly ranks: readonly number[];
  /** The backend's name: `"mpi"`. */
  readonly backend = "mpi";
  #rt: MpiRuntime;
  #comm: Int32Array | undefined;
  #timeoutMs: number;
  #world: boolean;
  #closed = false;
  /** `ranks [0, 1, ...]`, for messages. */
  #who: string;
  /** Calls of this group not yet settled, and who waits for them to reach 0 (close). */
  #pending = 0;
  #onIdle: (() => void) | undefined;

  private constructor(rt: MpiRuntime, init: GroupInit) {
    this.#rt = rt;
    this.#comm = init.comm;
    this.ranks = init.ranks;
    this.size = init.ranks.length;
    this.rank = init.rank;
    this.#timeoutMs = init.timeoutMs;
    this.#world = init.world;
    this.#who = `ranks [${init.ranks.join(", ")}]`;
  }

  /**
   * Initialises MPI (unless this process already did) and returns the world group. Prefer
   * `init({ backend: "mpi" })`, which calls this.
   *
   * @param options Timeout, checks and tuning.
   * @returns The world group; close it (or `await using` it) when done, which finalises MPI.
   * @throws {LibraryNotFoundError} If no MPI library is found (the message lists every path tried).
   * @throws {UnsupportedError} For Open MPI, or MPI initialised by another thread without thread support.
   * @throws {RangeError} If `rank`/`worldSize` or `timeoutMs` do not fit MPI's world.
   * @throws {DistError} If a world group is already open, MPI was finalised, or the launcher's
   *   variables disagree with MPI's world (a library that does not match the launcher).
   */
  static async init(options: MpiInitOptions = {}): Promise<MpiProcessGroup> {
    const timeoutMs = options.timeoutMs ?? 300_000;
    if (!(timeoutMs > 0)) {
      throw new RangeError(`Invalid timeoutMs: expected a number > 0, found ${timeoutMs}`);
    }
    if (worldOpen) {
      throw new DistError(
        "Cannot initialise the mpi backend: its world group is already open in this process; close it first",
        { code: "MPI" },
      );
    }
    if (finalized) {
      throw new DistError(
        "Cannot initialise the mpi backend again: its world group was closed, which finalised MPI, and MPI " +
          "cannot be initialised twice in one process",
        { code: "MPI" },
      );
    }
    const env = options.env ?? processEnv();
    // Claimed before the first await, so that two concurrent calls cannot both initialise.
    worldOpen = true;
    let rt: MpiRuntime, rank: number, size: number;
    try {
      rt = runtime ??= await MpiRuntime.start({
        env,
        abortOnTimeout: options.abortOnTimeout ?? false,
        poller: { spinUs: options.spinUs, hotMs: options.hotMs },
      });
      const out = new Int32Array(1);
      check(rt.mpi.MPI_Comm_rank(MpiComm.WORLD, out), "MPI_Comm_rank");
      rank = out[0];
      check(rt.mpi.MPI_Comm_size(MpiComm.WORLD, out), "MPI_Comm_size");
      size = out[0];
      checkWorld(rank, size, options, env, rt.library.path);
    } catch (e) {
      worldOpen = false;
      throw e;
    }
    return new MpiProcessGroup(rt, {
      comm: new Int32Array([MpiComm.WORLD]),
      ranks: Array.from({ length: size }, (_, i) => i),
      rank,
      timeoutMs,
      world: true,
    });
  }

  /** The MPI library's version text (`MPI_Get_library_version`). */
  get library(): string {
    return this.#rt.library.version;
  }

  /**
   * Reduces `tensor` across all ranks, in place on every rank (`MPI_Iallreduce` with `MPI_IN_PLACE`).
   *
   * @param tensor The tensor.
   * @param options The op (sum, prod, min, max, avg), dtype, timeout and signal.
   * @returns The call's Work.
   * @throws {TypeError} On an unsupported tensor or dtype, or an unknown op.
   * @throws {RangeError} If this rank is not a member, or on a bad timeout.
   * @throws {UnsupportedError} On an algorithm other than `"auto"`/`"mpi"`.
   */
  allReduce(tensor: Tensor, options: ReduceOptions = {}): Work {
    const what = "all-reduce";
    const dtype = this.#dtype(what, tensor, options);
    const op = checkOp(options.op ?? "sum");
    this.#algorithm(what, options.algorithm);
    const n = tensor.length;
    return this.#start(() => {
      const mpiOp = this.#rt.op(dtype, op);
      const dt = MPI_DATATYPE[dtype];
      const comm = this.#handle();
      return this.#chunked(
        tensor,
        "allReduce",
        "MPI_Iallreduce",
        () => this.#describe(what, n, dtype),
        options,
        (p, count, req) =>
          this.#rt.mpi.MPI_Iallreduce(constantPointers().inPlace, p, count, dt, mpiOp, comm, req),
        { finish: op === "avg" ? () => this.#divide(tensor, dtype) : undefined },
      );
    });
  }

  /**
   * Copies the root's `tensor` into every rank's `tensor` (`MPI_Ibcast`).
   *
   * @param tensor The tensor: the source at the root, the destination elsewhere.
   * @param options The root (in this group), dtype, timeout and signal.
   * @returns The call's Work.
   * @throws {TypeError} On an unsupported tensor or dtype.
   * @throws {RangeError} If the root is not a rank of the group, or this rank is not a member.
   * @throws {UnsupportedError} On an algorithm other than `"auto"`/`"mpi"`.
   */
  broadcast(tensor: Tensor, options: RootOptions = {}): Work {
    const what = "broadcast";
    const dtype = this.#dtype(what, tensor, options);
    const root = this.#rankArg(what, "root", options.root ?? 0);
    this.#algorithm(what, options.algorithm);
    const n = tensor.length;
    return this.#start(() => {
      const dt = MPI_DATATYPE[dtype];
      const comm = this.#handle();
      return this.#chunked(
        tensor,
        "broadcast",
        "MPI_Ibcast",
        () => this.#describe(what, n, dtype, `from root ${root}`),
        options,
        (p, count, req) => this.#rt.mpi.MPI_Ibcast(p, count, dt, root, comm, req),
      );
    });
  }

  /**
   * Reduces every rank's `tensor` into the root's (`MPI_Ireduce`); other ranks' tensors are unchanged.
   *
   * @param tensor The tensor.
   * @param options The op, root (in this group), dtype, timeout and signal.
   * @returns The call's Work.
   * @throws {TypeError} On an unsupported tensor or dtype, or an unknown op.
   * @throws {RangeError} If the root is not a rank of the group, or this rank is not a member.
   * @throws {UnsupportedError} On an algorithm other than `"auto"`/`"mpi"`.
   */
  reduce(tensor: Tensor, options: RootReduceOptions = {}): Work {
    const what = "reduce";
    const dtype = this.#dtype(what, tensor, options);
    const op = checkOp(options.op ?? "sum");
    const root = this.#rankArg(what, "root", options.root ?? 0);
    this.#algorithm(what, options.algorithm);
    const n = tensor.length;
    const atRoot = root === this.rank;
    return this.#start(() => {
      const mpiOp = this.#rt.op(dtype, op);
      const dt = MPI_DATATYPE[dtype];
      const comm = this.#handle();
      return this.#chunked(
        tensor,
        "reduce",
        "MPI_Ireduce",
        () => this.#describe(what, n, dtype, `to root ${root}`),
        options,
        // The receive buffer matters at the root only; elsewhere the tensor is only read.
        (p, count, req) =>
          atRoot
            ? this.#rt.mpi.MPI_Ireduce(constantPointers().inPlace, p, count, dt, mpiOp, root, comm, req)
            : this.#rt.mpi.MPI_Ireduce(p, constantPointers().empty, count, dt, mpiOp, root, comm, req),
        { finish: op === "avg" && atRoot ? () => this.#divide(tensor, dtype) : undefined },
      );
    });
  }

  /**
   * Concatenates every rank's `input` into `output` in rank order (`MPI_Iallgather`).
   *
   * @param output size × input.length elements.
   * @param input This rank's block; if it overlaps `output` it is copied first.
   * @param options The dtype, timeout and signal.
   * @returns The call's Work.
   * @throws {TypeError} On unsupported tensors or different dtypes.
   * @throws {RangeError} On lengths that do not fit, more than 2^31 - 1 elements per rank, or a non-member.
   * @throws {UnsupportedError} On an algorithm other than `"auto"`/`"mpi"`.
   */
  allGather(output: Tensor, input: Tensor, options: AlgorithmOptions = {}): Work {
    const what = "all-gather";
    const dtype = this.#pairDtypes(what, output, input, options);
    checkBlocks("allGather", output, input, this.size);
    this.#intCount(what, input.length);
    this.#algorithm(what, options.algorithm);
    return this.#start(() => {
      const dt = MPI_DATATYPE[dtype];
      const comm = this.#handle();
      return this.#outOfPlace(
        output,
        input,
        "allGather",
        "MPI_Iallgather",
        () => this.#describe(what, input.length, dtype, "per rank"),
        options,
        (src, out, req) =>
          this.#rt.mpi.MPI_Iallgather(src, input.length, dt, out, input.length, dt, comm, req),
      );
    });
  }

  /**
   * Reduces `input` (size × output.length) across ranks; rank r receives block r in `output`
   * (`MPI_Ireduce_scatter_block`).
   *
   * @param output This rank's block of the result.
   * @param input Every rank's blocks; if it overlaps `output` it is copied first.
   * @param options The op, dtype, timeout and signal.
   * @returns The call's Work.
   * @throws {TypeError} On unsupported tensors, different dtypes, or an unknown op.
   * @throws {RangeError} On lengths that do not fit, more than 2^31 - 1 elements per rank, or a non-member.
   * @throws {UnsupportedError} On an algorithm other than `"auto"`/`"mpi"`.
   */
  reduceScatter(output: Tensor, input: Tensor, options: ReduceOptions = {}): Work {
    const what = "reduce-scatter";
    const dtype = this.#pairDtypes(what, output, input, options);
    const op = checkOp(options.op ?? "sum");
    checkBlocks("reduceScatter", output, input, this.size);
    this.#intCount(what, output.length);
    this.#algorithm(what, options.algorithm);
    return this.#start(() => {
      const mpiOp = this.#rt.op(dtype, op);
      const dt = MPI_DATATYPE[dtype];
      const comm = this.#handle();
      return this.#outOfPlace(
        output,
        input,
        "reduceScatter",
        "MPI_Ireduce_scatter_block",
        () => this.#describe(what, output.length, dtype, "per rank"),
        options,
        (src, out, req) =>
          this.#rt.mpi.MPI_Ireduce_scatter_block(src, out, output.length, dt, mpiOp, comm, req),
        op === "avg" ? () => this.#divide(output, dtype) : undefined,
      );
    });
  }

  /**
   * Block j of rank i's `input` lands in block i of rank j's `output` (`MPI_Ialltoall`).
   *
   * @param output size equal blocks.
   * @param input size equal blocks; if it overlaps `output` it is copied first.
   * @param options The dtype, timeout and signal.
   * @returns The call's Work.
   * @throws {TypeError} On unsupported tensors or different dtypes.
   * @throws {RangeError} On lengths that differ or do not divide by the size, blocks over 2^31 - 1
   *   elements, or a non-member.
   * @throws {UnsupportedError} On an algorithm other than `"auto"`/`"mpi"`.
   */
  allToAll(output: Tensor, input: Tensor, options: AlgorithmOptions = {}): Work {
    const what = "all-to-all";
    const dtype = this.#pairDtypes(what, output, input, options);
    checkBlocks("allToAll", output, input, this.size);
    const block = input.length / this.size;
    this.#intCount(what, block);
    this.#algorithm(what, options.algorithm);
    return this.#start(() => {
      const dt = MPI_DATATYPE[dtype];
      const comm = this.#handle();
      return this.#outOfPlace(
        output,
        input,
        "allToAll",
        "MPI_Ialltoall",
        () => this.#describe(what, block, dtype, "per block"),
        options,
        (src, out, req) => this.#rt.mpi.MPI_Ialltoall(src, block, dt, out, block, dt, comm, req),
      );
    });
  }

  /**
   * Resolves once every rank of the group has entered the barrier (`MPI_Ibarrier`).
   *
   * @param options The timeout and signal.
   * @returns The call's Work.
   * @throws {RangeError} If this rank is not a member, or on a bad timeout.
   */
  barrier(options: CallOptions = {}): Work {
    this.#checkCall("barrier", options);
    return this.#start(() => {
      const comm = this.#handle();
      return {
        collective: "barrier",
        what: () => `barrier on ${this.#who}`,
        options,
        bytes: 0,
        keep: [],
        chunks: 1,
        call: "MPI_Ibarrier",
        issue: (_, req) => this.#rt.mpi.MPI_Ibarrier(comm, req),
      };
    });
  }

  /**
   * Sends `tensor` to rank `peer` of the group (`MPI_Isend`). A send cannot be cancelled: its timeout
   * makes the backend unusable.
   *
   * @param tensor The tensor, held until MPI is done with it.
   * @param peer The receiver, as a rank of this group.
   * @param options The dtype, timeout and signal.
   * @returns The call's Work: resolves when MPI no longer needs the tensor.
   * @throws {TypeError} On an unsupported tensor or dtype.
   * @throws {RangeError} If `peer` is not another rank of the group, or this rank is not a member.
   */
  send(tensor: Tensor, peer: number, options: CallOptions = {}): Work {
    const what = "send";
    const dtype = this.#dtype(what, tensor, options);
    this.#peer(what, peer);
    const n = tensor.length;
    return this.#start(() => {
      const dt = MPI_DATATYPE[dtype];
      const comm = this.#handle();
      return this.#chunked(
        tensor,
        "send",
        "MPI_Isend",
        () => this.#describe(what, n, dtype, `to rank ${peer}`),
        options,
        (p, count, req) => this.#rt.mpi.MPI_Isend(p, count, dt, peer, TAG, comm, req),
      );
    });
  }

  /**
   * Receives into `tensor` from rank `peer` of the group (`MPI_Irecv`). On timeout or abort the receive
   * is cancelled and the group stays usable.
   *
   * @param tensor The destination.
   * @param peer The sender, as a rank of this group.
   * @param options The dtype, timeout and signal.
   * @returns The call's Work; it fails with a MismatchError if the message's length differs.
   * @throws {TypeError} On an unsupported tensor or dtype.
   * @throws {RangeError} If `peer` is not another rank of the group, or this rank is not a member.
   */
  recv(tensor: Tensor, peer: number, options: CallOptions = {}): Work {
    const what = "recv";
    const dtype = this.#dtype(what, tensor, options);
    this.#peer(what, peer);
    const n = tensor.length;
    return this.#start(() => {
      const dt = MPI_DATATYPE[dtype];
      const comm = this.#handle();
      const expected = (i: number): number => Math.min(CHUNK, n - i * CHUNK);
      return this.#chunked(
        tensor,
        "recv",
        "MPI_Irecv",
        () => this.#describe(what, n, dtype, `from rank ${peer}`),
        options,
        (p, count, req) => this.#rt.mpi.MPI_Irecv(p, count, dt, peer, TAG, comm, req),
        {
          cancellable: true,
          onRequestDone: (i, status) => {
            const count = this.#rt.scratchInt;
            check(this.#rt.mpi.MPI_Get_count(status, dt, count), "MPI_Get_count");
            if (count[0] !== expected(i)) {
              throw new MismatchError(
                `Cannot recv: rank ${peer} sent ${count[0]} ${dtype} but this rank expected ${expected(i)}`,
              );
            }
          },
        },
      );
    });
  }

  /**
   * Creates a sub-group (`MPI_Comm_split`). Every rank of this group must call it with the same ranks, in
   * the same order relative to its other collectives on this group; ranks outside `ranks` get a group
   * whose `rank` is -1 and whose calls throw.
   *
   * @param ranks The members, as ranks of this group; group order is ascending rank.
   * @param options The new group's default timeout.
   * @returns The sub-group.
   * @throws {RangeError} If `ranks` is empty, lists a rank twice or out of range, or this rank is not a
   *   member of this group.
   * @throws {MismatchError} If the ranks did not all pass the same list.
   * @throws {TimeoutError} If the other ranks do not call it in time.
   */
  /** Ordinary memory: MPI reads the tensor where it is. */
  alloc(count: number, options?: AllocOptions): TypedArray {
    return allocOrdinary(count, options);
  }

  release(tensor: TypedArray): void {
    if (!releaseOrdinary(tensor)) {
      throw new TypeError(`Cannot release: expected a tensor from this backend's alloc() not released yet`);
    }
  }

  async newGroup(ranks: readonly number[], options: GroupOptions = {}): Promise<MpiProcessGroup> {
    this.#member("create a group");
    const sorted = checkGroupRanks(ranks, this.size);
    const timeoutMs = options.timeoutMs ?? this.#timeoutMs;
    if (!(timeoutMs > 0)) {
      throw new RangeError(`Invalid timeoutMs: expected a number > 0, found ${timeoutMs}`);
    }
    // MPI_Comm_split blocks until every rank calls it: meet in a non-blocking barrier first, so the event
    // loop waits in the poller, and only then split.
    await this.barrier({ timeoutMs });
    const key = sorted.indexOf(this.rank);
    const member = key >= 0;
    const comm = new Int32Array(1);
    const rt = this.#rt;
    check(
      rt.mpi.MPI_Comm_split(this.#handle(), member ? 0 : MPI_UNDEFINED, member ? key : 0, comm),
      "MPI_Comm_split",
      `new group of ranks [${sorted.join(", ")}]`,
    );
    if (member) {
      rt.comms.add(comm);
      const out = new Int32Array(1);
      check(rt.mpi.MPI_Comm_size(comm[0], out), "MPI_Comm_size");
      if (out[0] !== sorted.length) {
        throw new MismatchError(
          `Cannot create a group of ranks [${sorted.join(", ")}]: MPI's communicator has ${out[0]} ranks; ` +
            `every rank of the parent group must pass the same ranks`,
        );
      }
    }
    return new MpiProcessGroup(rt, {
      comm: member ? comm : undefined,
      ranks: sorted.map((r) => this.ranks[r]),
      rank: key,
      timeoutMs,
      world: false,
    });
  }

  /**
   * Closes the group once its calls have finished. A sub-group frees its communicator; the world group
   * frees every communicator and finalises MPI (if this module initialised it), after which MPI cannot be
   * used again in this process. A broken backend skips `MPI_Finalize`.
   *
   * @returns Resolves when closed.
   * @throws {MpiError} If MPI fails to finalise.
   */
  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    const rt = this.#rt;
    if (this.#pending > 0) await new Promise<void>((resolve) => (this.#onIdle = resolve));
    if (!this.#world) {
      const comm = this.#comm;
      if (comm && rt.comms.delete(comm) && !finalized) rt.mpi.MPI_Comm_free(comm);
      return;
    }
    // Every group's calls must finish before MPI_Finalize; each has a timeout, so this ends.
    while (rt.poller.busy) await new Promise((resolve) => setTimeout(resolve, 1));
    worldOpen = false;
    finalized = true;
    rt.shutdown();
  }

  /** Closes the group (see {@linkcode MpiProcessGroup.close}). */
  [Symbol.asyncDispose](): Promise<void> {
    return this.close();
  }

  #handle(): number {
    return (this.#comm as Int32Array)[0];
  }

  #describe(what: string, n: number, dtype: DType, extra?: string): string {
    return `${what} of ${n} ${dtype}${extra ? ` ${extra}` : ""} on ${this.#who}`;
  }

  #divide(tensor: TypedArray, dtype: DType): void {
    this.#rt.kernels.divide(tensor, this.size, { dtype });
  }

  #start(prepare: () => Call): Work {
    const rt = this.#rt;
    let call: Call;
    try {
      if (this.#closed || finalized) {
        throw new DistError(`Cannot run a collective: the mpi process group of ${this.#who} is closed`);
      }
      rt.assertUsable();
      call = prepare();
    } catch (e) {
      return new Work(Promise.reject(e));
    }
    const { options } = call;
    if (options.signal?.aborted) {
      return new Work(
        Promise.reject(
          new DistError(`Aborted before it started: ${String(options.signal.reason)}`, { code: "ABORTED" }),
        ),
      );
    }
    const t0 = performance.now();
    const requests: Int32Array[] = [];
    let failure: unknown;
    for (let i = 0; i < call.chunks; i++) {
      const req = rt.poller.request();
      const rc = call.issue(i, req);
      if (rc !== 0) {
        rt.poller.release([req]);
        try {
          check(rc, call.call, call.what());
        } catch (e) {
          failure = e;
        }
        break;
      }
      requests.push(req);
    }
    const spec: FlightSpec<WorkReport> = {
      what: call.what,
      requests,
      keep: call.keep,
      bytes: call.bytes,
      timeoutMs: options.timeoutMs ?? this.#timeoutMs,
      signal: options.signal,
      cancellable: call.cancellable,
      onRequestDone: call.onRequestDone,
      done: (): WorkReport => {
        const timeMs = performance.now() - t0;
        this.#settled();
        const callbackError = rt.takeCallbackError();
        if (callbackError !== undefined) {
          throw new DistError(`The reduction callback failed during ${call.what()}`, {
            cause: callbackError,
          });
        }
        call.finish?.();
        const startedAt = timeOrigin() + t0;
        return {
          collective: call.collective,
          algorithm: "mpi",
          transport: "mpi",
          bytes: call.bytes,
          bytesSent: call.bytes,
          timeMs,
          startedAt,
          finishedAt: startedAt + timeMs,
        };
      },
      failed: (e: unknown): unknown => {
        this.#settled();
        if (e instanceof MpiError && e.errorClass === MPI_ERR_TRUNCATE && call.collective === "recv") {
          return new MismatchError(`Cannot ${call.what()}: the message is longer than the tensor`, {
            cause: e,
          });
        }
        return e;
      },
    };
    if (failure !== undefined) {
      if (requests.length > 0) {
        // Chunks already started cannot be taken back: hold their memory and stop the backend.
        rt.poller.track({ ...spec, timeoutMs: Infinity, done: undefined, failed: undefined }).catch(() => {});
        rt.broken ??= new DistError(`The mpi backend is unusable: ${(failure as Error).message}`, {
          code: "MPI_BROKEN",
          cause: failure,
        });
      }
      return new Work(Promise.reject(failure));
    }
    this.#pending++;
    return new Work(rt.poller.track(spec, t0));
  }

  /**
   * The call of a collective over one tensor, issued in chunks of at most 2^30 elements (a C int count).
   *
   * @param issue Starts chunk `chunk`: `count` elements at `pointer`, its request in `request`.
   * @param extra What only some calls have.
   */
  #chunked(
    tensor: Tensor,
    collective: string,
    call: string,
    what: () => string,
    options: CallOptions,
    issue: (pointer: Deno.PointerObject, count: number, request: Int32Array, chunk: number) => number,
    extra: Pick<Call, "finish" | "cancellable" | "onRequestDone"> = {},
  ): Call {
    const n = tensor.length;
    return {
      collective,
      what,
      options,
      bytes: tensor.byteLength,
      keep: [tensor],
      chunks: Math.max(1, Math.ceil(n / CHUNK)),
      call,
      issue: (i, req) => issue(pointerOf(tensor, i * CHUNK), Math.min(CHUNK, n - i * CHUNK), req, i),
      ...extra,
    };
  }

  /**
   * The call of an out-of-place collective: one MPI call from `input` into `output`, with `input` copied
   * first when the two overlap (MPI forbids it).
   *
   * @param issue Starts it: from `source` into `out`, its request in `request`.
   * @param finish Runs once it is done.
   */
  #outOfPlace(
    output: Tensor,
    input: Tensor,
    collective: string,
    call: string,
    what: () => string,
    options: CallOptions,
    issue: (source: Deno.PointerObject, out: Deno.PointerObject, request: Int32Array) => number,
    finish?: () => void,
  ): Call {
    const source = overlap(input, output) ? input.slice() : input;
    return {
      collective,
      what,
      options,
      bytes: input.byteLength,
      keep: [source, output],
      chunks: 1,
      call,
      issue: (_, req) => issue(pointerOf(source), pointerOf(output), req),
      finish,
    };
  }

  #settled(): void {
    if (--this.#pending === 0 && this.#onIdle) {
      const resolve = this.#onIdle;
      this.#onIdle = undefined;
      resolve();
    }
  }

  #member(what: string): void {
    if (this.rank < 0) {
      throw new RangeError(`Cannot ${what}: this rank is not a member of the group of ${this.#who}`);
    }
  }

  #checkCall(what: string, options: CallOptions): void {
    this.#member(what);
    const timeoutMs = options.timeoutMs;
    if (timeoutMs !== undefined && !(timeoutMs > 0)) {
      throw new RangeError(`Cannot ${what}: expected timeoutMs to be a number > 0, found ${timeoutMs}`);
    }
  }

  #dtype(what: string, tensor: TypedArray, options: CallOptions): DType {
    this.#checkCall(what, options);
    let dtype: DType;
    try {
      dtype = dtypeOf(tensor, options.dtype);
    } catch (e) {
      throw new TypeError(`Cannot ${what}: ${(e as Error).message}`);
    }
    const buffer = tensor.buffer as ArrayBuffer;
    if (buffer.resizable) {
      throw new TypeError(
        `Cannot ${what}: expected a tensor over a fixed-length buffer, found a resizable ArrayBuffer (it can ` +
          `move while MPI uses it)`,
      );
    }
    if (buffer.detached) throw new TypeError(`Cannot ${what}: the tensor's ArrayBuffer is detached`);
    return dtype;
  }

  #pairDtypes(what: string, output: TypedArray, input: TypedArray, options: CallOptions): DType {
    const a = this.#dtype(what, input, options);
    const b = this.#dtype(what, output, options);
    if (a !== b) throw new TypeError(`Cannot ${what}: input is ${a} but output is ${b}`);
    return a;
  }

  #rankArg(what: string, name: string, r: number): number {
    return checkRank(what, name, r, this.size);
  }

  #peer(what: string, peer: number): void {
    checkPeer(what, peer, this);
  }

  #intCount(what: string, n: number): void {
    if (n > MPI_MAX_COUNT) {
      throw new RangeError(
        `Cannot ${what}: expected at most ${MPI_MAX_COUNT} elements per rank (MPI counts are C ints), found ${n}`,
      );
    }
  }

  #algorithm(what: string, algorithm: string | undefined): void {
    if (algorithm === undefined || algorithm === "auto" || algorithm === "mpi") return;
    throw new UnsupportedError(
      `Cannot ${what} with algorithm "${algorithm}": the mpi backend runs MPI's own algorithms (choose them ` +
        `with MPICH's MPIR_CVAR_*_ALGORITHM variables); expected "auto" or "mpi"`,
    );
  }
}

/** Checks MPI's world against explicit options and the launcher's variables. */
function checkWorld(
  rank: number,
  size: number,
  options: MpiInitOptions,
  env: Readonly<Record<string, string | undefined>>,
  path: string,
): void {
  if (options.worldSize !== undefined && options.worldSize !== size) {
    throw new RangeError(
      `Invalid worldSize: MPI's world has ${size} ranks, found worldSize ${options.worldSize}`,
    );
  }
  if (options.rank !== undefined && options.rank !== rank) {
    throw new RangeError(`Invalid rank: MPI says this process is rank ${rank}, found rank ${options.rank}`);
  }
  let info;
  try {
    info = rankInfo(env);
  } catch {
    return;
  }
  // Slurm's variables are left out: under mpiexec inside an allocation every rank sees SLURM_PROCID=0.
  if (info.source === "slurm") return;
  if (info.worldSize !== size || info.rank !== rank) {
    throw new DistError(
      `The launcher and MPI disagree: the ${info.source} variables say rank ${info.rank} of ` +
        `${info.worldSize}, MPI (${path}) says rank ${rank} of ${size}. Launch with the mpiexec of the MPI ` +
        `library dcomm loaded (set DCOMM_MPI_PATH to choose it)` +
        (size === 1 ? ", not with torchrun-style variables alone" : ""),
      { code: "MPI" },
    );
  }
}

/**
 * Joins the MPI job this process was started in (by `mpiexec` or `srun`) and returns its world group.
 * Same as `init({ backend: "mpi" })`.
 *
 * @param options Timeout, checks and tuning.
 * @returns The world group; close it when done, which finalises MPI.
 * @throws {LibraryNotFoundError} If no MPI library is found.
 * @throws {UnsupportedError} For Open MPI.
 * @throws {RangeError} If `rank`/`worldSize` disagree with MPI's world.
 * @throws {DistError} If the world group is already open or MPI was finalised.
 *
 * @example
 * ```ts ignore
 * import { initMpi } from "./mpi.ts";
 * await using world = await initMpi();
 * const even = await world.newGroup(world.ranks.filter((r) => r % 2 === 0));
 * if (even.rank >= 0) await even.allReduce(new Float64Array([world.rank]));
 * ```
 */
export function initMpi(options: MpiInitOptions = {}): Promise<MpiProcessGroup> {
  return MpiProcessGroup.init(options);
}
