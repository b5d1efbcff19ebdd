/**
 * The mpi backend's process group: a {@linkcode ProcessGroup} over MPI (MPICH's ABI) through FFI, for jobs started by
 * `mpiexec` or `srun`. Every collective maps to MPI's non-blocking call (`MPI_Iallreduce`, `MPI_Ibcast`,
 * ...) on the rank's main thread, and `MPI_Test` polling completes it (see `_progress.ts`), so
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
 * - band, bor, bxor: `MPI_BAND`, `MPI_BOR`, `MPI_BXOR`. bool travels as `MPI_UINT8_T` and reduces by the
 *   uint8 op that computes it on 0/1 bytes (sum, max, bor: `MPI_MAX`; prod, min, band: `MPI_MIN`; bxor).
 * - premulSum: MPI has no PreMulSum; each rank scales its own input by its factor with the WASM kernels
 *   (a copy of it for reduce and reduceScatter), then `MPI_SUM` (`../_premul.ts`).
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
 * @example All-reduce under mpiexec: two ranks of a script written here (without mpiexec, it says so)
 * ```ts
 * import assert from "node:assert/strict";
 * const script = await Deno.makeTempFile({ suffix: ".ts" });
 * await Deno.writeTextFile(script, `
 *   import { init } from "${new URL("../../mod.ts", import.meta.url)}";
 *   await using pg = await init({ backend: "mpi" });
 *   const grad = new Float32Array(1024).fill(pg.rank);
 *   await pg.allReduce(grad, { op: "avg" });
 *   console.log(grad[0]);
 * `);
 * const mpiexec = new Deno.Command("mpiexec", { args: ["-n", "2", Deno.execPath(), "run", "-A", script] });
 * try {
 *   const job = await mpiexec.output();
 *   assert.equal(new TextDecoder().decode(job.stdout), "0.5\n0.5\n", new TextDecoder().decode(job.stderr));
 * } catch (e) {
 *   if (!(e instanceof Deno.errors.NotFound)) throw e;
 *   console.log("No mpiexec here: install MPICH (apt-get install mpich) to run the mpi backend");
 * } finally {
 *   await Deno.remove(script);
 * }
 * ```
 *
 * @module
 */
import { checkGroupRanks } from "../_checks.ts";
import { pinBuffer } from "../_pin.ts";
import { type CallRecord, type Collective, GroupFront, VERB } from "../_front.ts";
import { type DType, dtypeSize, type TypedArray } from "../../core/dtype.ts";
import { DistError, MismatchError, UnsupportedError } from "../../core/errors.ts";
import {
  MPI_ANY_SOURCE,
  MPI_ERR_TRUNCATE,
  MPI_IN_PLACE_ADDRESS,
  MPI_MAX_COUNT,
  MPI_STATUS_SOURCE_OFFSET,
  MPI_UNDEFINED,
  pointerTo,
} from "../../ffi/mpi/constants.ts";
import { check, MpiError } from "../../ffi/mpi/mpi.ts";
import type { FlightSpec } from "./_progress.ts";
import { MPI_DATATYPE, type MpiRuntime } from "./_runtime.ts";
import { type AllocOptions, ANY_SOURCE, type GroupOptions } from "../process_group.ts";
import { Work, type WorkReport, workReport } from "../work.ts";
import { allocOrdinary, releaseOrdinary } from "../_alloc.ts";
import { afterWork, premulAsSum } from "../_premul.ts";

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

let origin: number | undefined;

/** `performance.timeOrigin`, read once (the getter costs as much as a small call's bookkeeping). */
function timeOrigin(): number {
  return origin ??= performance.timeOrigin;
}

/**
 * The process's MPI world: its runtime (started once), whether its world group is open, and whether MPI
 * was finalised (it cannot start again). Shared by `create.ts`, which opens the world, and the groups.
 */
export const mpiWorld: { runtime: MpiRuntime | undefined; open: boolean; finalized: boolean } = {
  runtime: undefined,
  open: false,
  finalized: false,
};

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
    // MPI reads and writes it until the call settles: it must not be detached meanwhile.
    pinBuffer(buffer, Number(Deno.UnsafePointer.value(base)));
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
  readonly options: CallRecord;
  readonly bytes: number;
  readonly keep: readonly unknown[];
  readonly chunks: number;
  readonly issue: (chunk: number, request: Int32Array) => number;
  readonly call: string;
  readonly finish?: () => void;
  readonly cancellable?: boolean;
  readonly onRequestDone?: (index: number, status: Deno.PointerObject) => void;
  /** The other rank of a send or receive, for the report (a receive from any rank's: once it is done). */
  readonly peer?: () => number;
}

/** A collective over one tensor, before {@linkcode MpiProcessGroup}'s `#chunked` cuts it into MPI calls. */
interface ChunkedCall extends
  Pick<
    Call,
    "collective" | "what" | "options" | "call" | "finish" | "cancellable" | "onRequestDone" | "peer"
  > {
  /** Starts chunk `chunk`: `count` elements at `pointer`, its request in `request`. */
  readonly issue: (pointer: Deno.PointerObject, count: number, request: Int32Array, chunk: number) => number;
}

/** How a group is made: by `create.ts` for the world, by `newGroup` for a sub-group. */
export interface MpiGroupInit {
  readonly comm: Int32Array | undefined;
  readonly ranks: readonly number[];
  readonly rank: number;
  readonly timeoutMs: number;
  readonly world: boolean;
}

/** A process group of the mpi backend: one MPI communicator. Its calls are checked by {@linkcode GroupFront}. */
export class MpiProcessGroup extends GroupFront {
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

  /**
   * @param rt The process's MPI runtime.
   * @param init The group's communicator and identity.
   */
  constructor(rt: MpiRuntime, init: MpiGroupInit) {
    super();
    this.#rt = rt;
    this.#comm = init.comm;
    this.ranks = init.ranks;
    this.size = init.ranks.length;
    this.rank = init.rank;
    this.#timeoutMs = init.timeoutMs;
    this.#world = init.world;
    this.#who = `ranks [${init.ranks.join(", ")}]`;
  }

  /** The MPI library's version text (`MPI_Get_library_version`). */
  get library(): string {
    return this.#rt.library.version;
  }

  protected get defaultTimeoutMs(): number {
    return this.#timeoutMs;
  }

  protected get isClosed(): boolean {
    return this.#closed || mpiWorld.finalized;
  }

  protected override describe(): string {
    return `the mpi group of ${this.#who}`;
  }

  /** @internal Revoking and shrinking a communicator are ULFM's (MPIX_Comm_revoke, MPIX_Comm_shrink), not in MPICH 4.0. */
  protected override get faultToleranceUnsupported(): string {
    return "MPI has no revoke or shrink without ULFM (MPIX_Comm_revoke, MPIX_Comm_shrink), which MPICH 4.0 does not have";
  }

  protected checkAlgorithm(collective: Collective, name: string): void {
    if (name === "mpi") return;
    throw new UnsupportedError(
      `Cannot ${VERB[collective]} with algorithm "${name}": the mpi backend runs MPI's own algorithms ` +
        `(choose them with MPICH's MPIR_CVAR_*_ALGORITHM variables); expected "auto" or "mpi"`,
    );
  }

  /**
   * Runs a checked call as MPI's non-blocking call: `MPI_Iallreduce` (with `MPI_IN_PLACE`), `MPI_Ibcast`,
   * `MPI_Ireduce`, `MPI_Iallgather`, `MPI_Ireduce_scatter_block`, `MPI_Ialltoall`, `MPI_Igather`,
   * `MPI_Iscatter`, `MPI_Ibarrier`,
   * `MPI_Isend` (which cannot be cancelled: its timeout makes the backend unusable) or `MPI_Irecv` (cancelled
   * on timeout or abort; a message of another length is a MismatchError).
   *
   * @param call The call.
   * @returns Its Work.
   * @throws {RangeError} If an out-of-place collective has more than 2^31 - 1 elements per rank.
   */
  protected execute(call: CallRecord): Work {
    if (call.op === "premulSum") {
      // MPI has no PreMulSum: this rank scales its own input with the WASM kernels, then MPI_SUM.
      const premul = premulAsSum(call, this.#rt.kernels, this.rank);
      return afterWork(this.execute(premul.call), premul.after);
    }
    switch (call.collective) {
      case "allReduce":
      case "broadcast":
      case "reduce":
      case "send":
      case "recv":
        return this.#inPlace(call);
      case "allGather":
      case "reduceScatter":
      case "allToAll":
        return call.counts === undefined ? this.#blocks(call) : this.#uneven(call);
      case "gather":
      case "scatter":
        return call.counts === undefined ? this.#rooted(call) : this.#uneven(call);
      case "barrier":
        return this.#start(() => {
          const comm = this.#handle();
          return {
            collective: "barrier",
            what: () => `barrier on ${this.#who}`,
            options: call,
            bytes: 0,
            keep: [],
            chunks: 1,
            call: "MPI_Ibarrier",
            issue: (_, req) => this.#rt.mpi.MPI_Ibarrier(comm, req),
          };
        });
    }
  }

  /** The collectives on one tensor, split into calls of at most 2^30 elements. */
  #inPlace(call: CallRecord): Work {
    const tensor = call.tensor as TypedArray;
    const { collective, dtype, op, root } = call;
    const what = VERB[collective];
    const n = tensor.length;
    return this.#start(() => {
      const mpi = this.#rt.mpi;
      const dt = MPI_DATATYPE[dtype];
      const comm = this.#handle();
      const { inPlace, empty } = constantPointers();
      const describe = (extra?: string) => () => this.#describe(what, n, dtype, extra);
      switch (collective) {
        case "allReduce": {
          const mpiOp = this.#rt.op(dtype, op);
          return this.#chunked(tensor, {
            collective,
            call: "MPI_Iallreduce",
            what: describe(),
            options: call,
            issue: (p, count, req) => mpi.MPI_Iallreduce(inPlace, p, count, dt, mpiOp, comm, req),
            finish: op === "avg" ? () => this.#divide(tensor, dtype) : undefined,
          });
        }
        case "broadcast":
          return this.#chunked(tensor, {
            collective,
            call: "MPI_Ibcast",
            what: describe(`from root ${root}`),
            options: call,
            issue: (p, count, req) => mpi.MPI_Ibcast(p, count, dt, root, comm, req),
          });
        case "reduce": {
          const mpiOp = this.#rt.op(dtype, op);
          const atRoot = root === this.rank;
          return this.#chunked(tensor, {
            collective,
            call: "MPI_Ireduce",
            what: describe(`to root ${root}`),
            options: call,
            // The receive buffer matters at the root only; elsewhere the tensor is only read.
            issue: (p, count, req) =>
              atRoot
                ? mpi.MPI_Ireduce(inPlace, p, count, dt, mpiOp, root, comm, req)
                : mpi.MPI_Ireduce(p, empty, count, dt, mpiOp, root, comm, req),
            finish: op === "avg" && atRoot ? () => this.#divide(tensor, dtype) : undefined,
          });
        }
        case "send":
          return this.#chunked(tensor, {
            collective,
            call: "MPI_Isend",
            what: describe(`to rank ${root}`),
            options: call,
            issue: (p, count, req) => mpi.MPI_Isend(p, count, dt, root, TAG, comm, req),
            peer: () => root,
          });
        default: {
          const expected = (i: number): number => Math.min(CHUNK, n - i * CHUNK);
          const any = root === ANY_SOURCE;
          if (any && n > CHUNK) {
            // Each chunk is a receive of its own, and the chunks after the first must come from its sender.
            throw new RangeError(
              `Cannot recv from ANY_SOURCE: the mpi backend receives at most ${CHUNK} elements from any ` +
                `rank in one call, found ${n}; name the peer`,
            );
          }
          let sender = root;
          return this.#chunked(tensor, {
            collective: "recv",
            call: "MPI_Irecv",
            what: describe(any ? "from ANY_SOURCE" : `from rank ${root}`),
            options: call,
            issue: (p, count, req) =>
              mpi.MPI_Irecv(p, count, dt, any ? MPI_ANY_SOURCE : root, TAG, comm, req),
            cancellable: true,
            onRequestDone: (i, status) => {
              if (any) sender = new Deno.UnsafePointerView(status).getInt32(MPI_STATUS_SOURCE_OFFSET);
              const count = this.#rt.scratchInt;
              check(mpi.MPI_Get_count(status, dt, count), "MPI_Get_count");
              if (count[0] !== expected(i)) {
                throw new MismatchError(
                  `Cannot recv: rank ${sender} sent ${count[0]} ${dtype} but this rank expected ${
                    expected(i)
                  }`,
                );
              }
            },
            peer: () => sender,
          });
        }
      }
    });
  }

  /** The out-of-place collectives: one MPI call each, so at most 2^31 - 1 elements per rank or block. */
  #blocks(call: CallRecord): Work {
    const input = call.input as TypedArray;
    const output = call.output as TypedArray;
    const { collective, dtype, op } = call;
    const what = VERB[collective];
    // Elements per rank (all-gather, reduce-scatter) or per block (all-to-all): MPI's count.
    const block = collective === "allGather"
      ? input.length
      : collective === "reduceScatter"
      ? output.length
      : input.length / this.size;
    this.#intCount(what, block);
    return this.#start(() => {
      const mpi = this.#rt.mpi;
      const dt = MPI_DATATYPE[dtype];
      const comm = this.#handle();
      switch (collective) {
        case "allGather":
          return this.#outOfPlace(
            output,
            input,
            collective,
            "MPI_Iallgather",
            () => this.#describe(what, block, dtype, "per rank"),
            call,
            (src, out, req) => mpi.MPI_Iallgather(src, block, dt, out, block, dt, comm, req),
          );
        case "reduceScatter": {
          const mpiOp = this.#rt.op(dtype, op);
          return this.#outOfPlace(
            output,
            input,
            collective,
            "MPI_Ireduce_scatter_block",
            () => this.#describe(what, block, dtype, "per rank"),
            call,
            (src, out, req) => mpi.MPI_Ireduce_scatter_block(src, out, block, dt, mpiOp, comm, req),
            op === "avg" ? () => this.#divide(output, dtype) : undefined,
          );
        }
        default:
          return this.#outOfPlace(
            output,
            input,
            "allToAll",
            "MPI_Ialltoall",
            () => this.#describe(what, block, dtype, "per block"),
            call,
            (src, out, req) => mpi.MPI_Ialltoall(src, block, dt, out, block, dt, comm, req),
          );
      }
    });
  }

  /**
   * Gather and scatter: one `MPI_Igather` or `MPI_Iscatter`, the n-block buffer on the root only (an
   * empty one elsewhere, which MPI does not touch), so at most 2^31 - 1 elements per rank.
   */
  #rooted(call: CallRecord): Work {
    const { collective, dtype, root } = call;
    const what = VERB[collective];
    const block = call.count;
    this.#intCount(what, block);
    return this.#start(() => {
      const mpi = this.#rt.mpi;
      const dt = MPI_DATATYPE[dtype];
      const comm = this.#handle();
      const { empty } = constantPointers();
      const input = call.input as TypedArray | undefined, output = call.output as TypedArray | undefined;
      // MPI forbids overlapping buffers at the root (MPI_IN_PLACE aside): a copy of the input then.
      const source = input && output && overlap(input, output) ? input.slice() : input;
      const at = (t: TypedArray | undefined): Deno.PointerObject => t ? pointerOf(t) : empty;
      const gather = collective === "gather";
      return {
        collective,
        what: () => this.#describe(what, block, dtype, `per rank, root ${root}`),
        options: call,
        bytes: ((gather ? input : output) as TypedArray).byteLength,
        keep: [source, output].filter((t): t is TypedArray => t !== undefined),
        chunks: 1,
        call: gather ? "MPI_Igather" : "MPI_Iscatter",
        issue: (_, req) =>
          gather
            ? mpi.MPI_Igather(at(source), block, dt, at(output), block, dt, root, comm, req)
            : mpi.MPI_Iscatter(at(source), block, dt, at(output), block, dt, root, comm, req),
      };
    });
  }

  /**
   * The v-forms (`counts`): `MPI_Iallgatherv`, `MPI_Ireduce_scatter`, `MPI_Igatherv`, `MPI_Iscatterv`,
   * `MPI_Ialltoallv`, their counts and displacements in C int arrays kept until the call ends (so at most
   * 2^31 - 1 elements in all).
   */
  #uneven(call: CallRecord): Work {
    const { collective, dtype, op, root } = call;
    const what = VERB[collective];
    const counts = call.counts as readonly number[];
    const recvCounts = call.recvCounts ?? counts;
    for (const list of [counts, recvCounts]) this.#intCount(what, list.reduce((a, b) => a + b, 0));
    const ints = (list: readonly number[]): Int32Array => Int32Array.from(list);
    const displs = (list: readonly number[]): Int32Array => {
      const out = new Int32Array(list.length);
      for (let i = 1; i < list.length; i++) out[i] = out[i - 1] + list[i - 1];
      return out;
    };
    return this.#start(() => {
      const mpi = this.#rt.mpi;
      const dt = MPI_DATATYPE[dtype];
      const comm = this.#handle();
      const { empty } = constantPointers();
      const input = call.input as TypedArray | undefined, output = call.output as TypedArray | undefined;
      const source = input && output && overlap(input, output) ? input.slice() : input;
      const at = (t: TypedArray | undefined): Deno.PointerObject => t ? pointerOf(t) : empty;
      const c = ints(counts), d = displs(counts), rc = ints(recvCounts), rd = displs(recvCounts);
      const me = this.rank, mpiOp = collective === "reduceScatter" ? this.#rt.op(dtype, op) : 0;
      const issue = (req: Int32Array): number => {
        switch (collective) {
          case "allGather":
            return mpi.MPI_Iallgatherv(at(source), c[me], dt, at(output), c, d, dt, comm, req);
          case "reduceScatter":
            return mpi.MPI_Ireduce_scatter(at(source), at(output), c, dt, mpiOp, comm, req);
          case "gather":
            return mpi.MPI_Igatherv(at(source), c[me], dt, at(output), c, d, dt, root, comm, req);
          case "scatter":
            return mpi.MPI_Iscatterv(at(source), c, d, dt, at(output), c[me], dt, root, comm, req);
          default:
            return mpi.MPI_Ialltoallv(at(source), c, d, dt, at(output), rc, rd, dt, comm, req);
        }
      };
      const names: Record<string, string> = {
        allGather: "MPI_Iallgatherv",
        reduceScatter: "MPI_Ireduce_scatter",
        gather: "MPI_Igatherv",
        scatter: "MPI_Iscatterv",
        allToAll: "MPI_Ialltoallv",
      };
      const own = collective === "allToAll" ? counts.reduce((a, b) => a + b, 0) : counts[me];
      return {
        collective,
        what: () => this.#describe(what, own, dtype, `of uneven counts [${counts.join(", ")}]`),
        options: call,
        bytes: own * dtypeSize(dtype),
        // The int arrays too: MPI reads them until the call completes.
        keep: [source, output, c, d, rc, rd].filter((t): t is TypedArray => t !== undefined),
        chunks: 1,
        call: names[collective],
        issue: (_, req) => issue(req),
        finish: collective === "reduceScatter" && op === "avg" && output
          ? () => this.#divide(output, dtype)
          : undefined,
      };
    });
  }

  /** Ordinary memory: MPI reads the tensor where it is. */
  alloc(count: number, options?: AllocOptions): TypedArray {
    return allocOrdinary(count, options);
  }

  /** Forgets a tensor from {@linkcode MpiProcessGroup.alloc}. */
  release(tensor: TypedArray): void {
    if (!releaseOrdinary(tensor)) {
      throw new TypeError(`Cannot release: expected a tensor from this backend's alloc() not released yet`);
    }
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
  async newGroup(ranks: readonly number[], options: GroupOptions = {}): Promise<MpiProcessGroup> {
    // (A closed group or a non-member says so first, in groupInOrder.)
    const sorted = this.rank >= 0 && !this.isClosed ? checkGroupRanks(ranks, this.size) : [...ranks];
    return await this.groupInOrder(sorted, options);
  }

  protected override async groupInOrder(
    sorted: readonly number[],
    options: GroupOptions,
  ): Promise<MpiProcessGroup> {
    if (this.isClosed) throw new DistError("Cannot create a group: the process group is closed");
    if (this.rank < 0) {
      throw new RangeError(`Cannot create a group: this rank is not a member of ${this.describe()}`);
    }
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
      if (comm && rt.comms.delete(comm) && !mpiWorld.finalized) rt.mpi.MPI_Comm_free(comm);
      return;
    }
    // Every group's calls must finish before MPI_Finalize; each has a timeout, so this ends.
    while (rt.poller.busy) await new Promise((resolve) => setTimeout(resolve, 1));
    mpiWorld.open = false;
    mpiWorld.finalized = true;
    rt.shutdown();
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
      rt.assertUsable();
      call = prepare();
    } catch (e) {
      return new Work(Promise.reject(e));
    }
    const { options } = call;
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
      timeoutMs: options.timeoutMs,
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
        return workReport({
          collective: call.collective,
          algorithm: "mpi",
          transport: "mpi",
          bytes: call.bytes,
          bytesSent: call.bytes,
          timeMs,
          startedAt,
          finishedAt: startedAt + timeMs,
          peer: call.peer?.(),
        });
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
   * @param tensor The tensor.
   * @param chunked The collective, and how to issue each chunk.
   */
  #chunked(tensor: TypedArray, chunked: ChunkedCall): Call {
    const n = tensor.length;
    const issue = chunked.issue;
    return {
      ...chunked,
      bytes: tensor.byteLength,
      keep: [tensor],
      chunks: Math.max(1, Math.ceil(n / CHUNK)),
      issue: (i, req) => issue(pointerOf(tensor, i * CHUNK), Math.min(CHUNK, n - i * CHUNK), req, i),
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
    output: TypedArray,
    input: TypedArray,
    collective: string,
    call: string,
    what: () => string,
    options: CallRecord,
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

  #intCount(what: string, n: number): void {
    if (n > MPI_MAX_COUNT) {
      throw new RangeError(
        `Cannot ${what}: expected at most ${MPI_MAX_COUNT} elements per rank (MPI counts are C ints), found ${n}`,
      );
    }
  }
}
