/**
 * The process-wide state of the mpi backend: the library, whether this module initialised MPI (and so
 * finalises it), the poller, and the mapping of dcomm dtypes and ops to MPI handles, with the user-defined
 * ops that reduce float16 and bfloat16 through the WASM kernels.
 *
 * @module
 */
import {
  boolOpAsUint8,
  type DType,
  DTYPE_ARRAY,
  dtypeSize,
  type ReduceOp,
  type TypedArray,
} from "../../core/dtype.ts";
import { DistError, UnsupportedError } from "../../core/errors.ts";
import { MpiComm, MpiDatatype, MpiErrhandler, MpiOp, MpiThreadLevel } from "../../ffi/mpi/constants.ts";
import { check, mpi, MPI_USER_FUNCTION, type MpiLibrary, type MpiSymbols } from "../../ffi/mpi/mpi.ts";
import { type Kernels, kernels } from "../../wasm/kernels.ts";
import { Poller, type PollerOptions } from "./_progress.ts";
import { pmiSocketProblem } from "../_pmi_socket.ts";

/**
 * The MPI datatype that carries each dtype (float16 and bfloat16 travel as 16-bit integers, bool as
 * bytes).
 */
export const MPI_DATATYPE: Readonly<Record<DType, number>> = {
  int8: MpiDatatype.INT8_T,
  uint8: MpiDatatype.UINT8_T,
  int32: MpiDatatype.INT32_T,
  uint32: MpiDatatype.UINT32_T,
  int64: MpiDatatype.INT64_T,
  uint64: MpiDatatype.UINT64_T,
  float16: MpiDatatype.UINT16_T,
  bfloat16: MpiDatatype.UINT16_T,
  float32: MpiDatatype.FLOAT,
  float64: MpiDatatype.DOUBLE,
  bool: MpiDatatype.UINT8_T,
};

/**
 * MPI's predefined op for each dcomm op; avg is a sum followed by a division, premulSum a sum of inputs
 * each rank scaled first (`../_premul.ts`).
 */
const MPI_OP: Readonly<Record<ReduceOp, number>> = {
  sum: MpiOp.SUM,
  prod: MpiOp.PROD,
  min: MpiOp.MIN,
  max: MpiOp.MAX,
  avg: MpiOp.SUM,
  band: MpiOp.BAND,
  bor: MpiOp.BOR,
  bxor: MpiOp.BXOR,
  premulSum: MpiOp.SUM,
};

/** Whether MPI has no op of its own for `dtype` (a 16-bit float). */
function isHalf(dtype: DType): boolean {
  return dtype === "float16" || dtype === "bfloat16";
}

/**
 * For each unsigned dtype, two values and their min and max: MPICH 4.0.0-4.0.2 compares unsigned integers
 * as signed in MPI_MIN/MPI_MAX (pmodels/mpich#6083; unsigned long long again in #7507), which these catch.
 */
const UNSIGNED_PROBES: Partial<
  Record<DType, () => { a: TypedArray; b: TypedArray; min: bigint; max: bigint }>
> = {
  uint8: () => ({ a: new Uint8Array([0xea]), b: new Uint8Array([5]), min: 5n, max: 0xean }),
  uint32: () => ({ a: new Uint32Array([0xcb8c_2e5d]), b: new Uint32Array([5]), min: 5n, max: 0xcb8c_2e5dn }),
  uint64: () => ({
    a: new BigUint64Array([0xffff_ffff_ffff_fff0n]),
    b: new BigUint64Array([5n]),
    min: 5n,
    max: 0xffff_ffff_ffff_fff0n,
  }),
};

/** How the process's MPI is started. */
export interface RuntimeOptions {
  /** The environment, for the checks of how the process was launched. */
  env: Readonly<Record<string, string | undefined>>;
  /** Calls `MPI_Abort` on a timeout instead of failing the call. */
  abortOnTimeout: boolean;
  /** The poller's tuning. */
  poller?: PollerOptions;
}

/** MPI in this process. */
export class MpiRuntime {
  /** The library. */
  readonly library: MpiLibrary;
  /** Its symbols. */
  readonly mpi: MpiSymbols;
  /** Completes the non-blocking calls. */
  readonly poller: Poller;
  /** The WASM kernels (16-bit float reductions, avg's division). */
  readonly kernels: Kernels;
  /** Whether this module called `MPI_Init_thread` (and so calls `MPI_Finalize`). */
  readonly ownsInit: boolean;
  /** Why the backend cannot be used any more, once a call that cannot be undone failed. */
  broken: Error | undefined;
  /** Sub-communicators still alive, freed when the world closes. */
  readonly comms: Set<Int32Array> = new Set();
  #ops = new Map<string, { op: Int32Array; callback: Deno.UnsafeCallback<typeof MPI_USER_FUNCTION> }>();
  #native = new Map<string, boolean>();
  #callbackError: unknown;
  /**
   * An int for MPI to write into (e.g. `MPI_Get_count`), read right after the call: one for the whole
   * runtime, as a small TypedArray costs about a microsecond to allocate in Deno.
   */
  readonly scratchInt: Int32Array = new Int32Array(1);

  private constructor(library: MpiLibrary, k: Kernels, ownsInit: boolean, options: RuntimeOptions) {
    this.library = library;
    this.mpi = library.symbols;
    this.kernels = k;
    this.ownsInit = ownsInit;
    this.poller = new Poller(this.mpi, (error) => this.#stuck(error, options.abortOnTimeout), options.poller);
  }

  /**
   * Opens MPI and initialises it (unless something in this process already did).
   *
   * @param options The environment and the timeout policy.
   * @returns The runtime.
   * @throws {LibraryNotFoundError} If no MPI library is found.
   * @throws {UnsupportedError} For Open MPI, or MPI initialised by another thread without thread support.
   * @throws {DistError} If MPI was already finalised, or the PMI socket is unusable.
   */
  static async start(options: RuntimeOptions): Promise<MpiRuntime> {
    const library = mpi();
    const m = library.symbols;
    const k = await kernels();
    const flag = new Int32Array(1);
    check(m.MPI_Finalized(flag), "MPI_Finalized");
    if (flag[0]) {
      throw new DistError(
        "Cannot initialise MPI: it was already finalised in this process, and MPI cannot be initialised twice",
        { code: "MPI" },
      );
    }
    check(m.MPI_Initialized(flag), "MPI_Initialized");
    let ownsInit = false;
    const provided = new Int32Array(1);
    if (!flag[0]) {
      checkPmiSocket(options.env);
      // Every MPI call comes from this thread: the poller and the reduction callbacks run on it.
      check(m.MPI_Init_thread(null, null, MpiThreadLevel.FUNNELED, provided), "MPI_Init_thread");
      ownsInit = true;
    } else {
      check(m.MPI_Query_thread(provided), "MPI_Query_thread");
      check(m.MPI_Is_thread_main(flag), "MPI_Is_thread_main");
      if (!flag[0] && provided[0] < MpiThreadLevel.SERIALIZED) {
        throw new UnsupportedError(
          `Cannot use MPI from this thread: it was initialised by another thread with thread level ` +
            `${provided[0]}; expected MPI_THREAD_SERIALIZED (2) or more, or the mpi backend on that thread`,
        );
      }
    }
    // Errors come back as codes (the default, MPI_ERRORS_ARE_FATAL, aborts the job); split
    // communicators inherit the handler.
    check(m.MPI_Comm_set_errhandler(MpiComm.WORLD, MpiErrhandler.RETURN), "MPI_Comm_set_errhandler");
    return new MpiRuntime(library, k, ownsInit, options);
  }

  /** Throws the reason the backend is unusable, if it is. */
  assertUsable(): void {
    if (this.broken) throw this.broken;
  }

  /**
   * The MPI op that reduces `dtype` with `op`: MPI's predefined op, or a user-defined op whose function runs
   * the WASM kernel: for float16/bfloat16 (over `MPI_UINT16_T`), and for unsigned min/max where the library
   * gets them wrong (probed once with `MPI_Reduce_local`). User-defined ops are created on first use and
   * freed at close.
   *
   * @param dtype The dtype (bool reduces as uint8, by the op that computes `op` on 0/1 bytes).
   * @param op The dcomm op (avg and premulSum map to sum; the caller divides, or scaled first).
   * @returns The `MPI_Op` handle.
   */
  op(dtype: DType, op: ReduceOp): number {
    if (dtype === "bool") return this.op("uint8", boolOpAsUint8(op));
    const base = op === "avg" || op === "premulSum" ? "sum" : op;
    if (!isHalf(dtype) && this.#nativeWorks(dtype, base)) return MPI_OP[base];
    const key = `${dtype}:${base}`;
    const known = this.#ops.get(key);
    if (known) return known.op[0];
    const k = this.kernels;
    const options = { op: base, dtype } as const;
    const Bits = DTYPE_ARRAY[dtype];
    const bytes = dtypeSize(dtype);
    // MPI calls this synchronously inside MPI_Test on this thread: inoutvec = invec op inoutvec.
    const callback = new Deno.UnsafeCallback(MPI_USER_FUNCTION, (invec, inoutvec, lenPtr) => {
      try {
        if (invec === null || inoutvec === null || lenPtr === null) return;
        const n = new Deno.UnsafePointerView(lenPtr).getInt32();
        if (n <= 0) return;
        const src = new Bits(Deno.UnsafePointerView.getArrayBuffer(invec, n * bytes));
        const dst = new Bits(Deno.UnsafePointerView.getArrayBuffer(inoutvec, n * bytes));
        k.reduce(dst, src, options);
      } catch (e) {
        // A throw must not unwind through MPI's C frames; the call that triggered it reports it.
        this.#callbackError ??= e;
      }
    });
    const handle = new Int32Array(1);
    try {
      check(this.mpi.MPI_Op_create(callback.pointer, 1, handle), "MPI_Op_create", `${dtype} ${base}`);
    } catch (e) {
      callback.close();
      throw e;
    }
    this.#ops.set(key, { op: handle, callback });
    return handle[0];
  }

  /** Whether MPI's own op gives the right answer for `dtype` (only unsigned min/max are in doubt). */
  #nativeWorks(dtype: DType, op: ReduceOp): boolean {
    const probe = UNSIGNED_PROBES[dtype];
    if (probe === undefined || (op !== "min" && op !== "max")) return true;
    const key = `${dtype}:${op}`;
    let works = this.#native.get(key);
    if (works === undefined) {
      const { a, b, min, max } = probe();
      const rc = this.mpi.MPI_Reduce_local(a, b, 1, MPI_DATATYPE[dtype], MPI_OP[op]);
      works = rc === 0 && BigInt(b[0]) === (op === "min" ? min : max);
      this.#native.set(key, works);
    }
    return works;
  }

  /**
   * The first error a reduction callback threw since the last call, cleared.
   *
   * @returns The error, or undefined.
   */
  takeCallbackError(): unknown {
    const e = this.#callbackError;
    this.#callbackError = undefined;
    return e;
  }

  /**
   * Frees the user-defined ops and the sub-communicators, then finalises MPI if this module initialised it.
   * Skips `MPI_Finalize` when the backend is broken: a collective MPI cannot cancel is still in flight, and
   * finalising would wait for it forever.
   */
  shutdown(): void {
    const m = this.mpi;
    for (const comm of this.comms) m.MPI_Comm_free(comm);
    this.comms.clear();
    if (this.broken) return;
    for (const { op } of this.#ops.values()) m.MPI_Op_free(op);
    if (this.ownsInit) check(m.MPI_Finalize(), "MPI_Finalize");
    for (const { callback } of this.#ops.values()) callback.close();
    this.#ops.clear();
  }

  #stuck(error: Error, abort: boolean): void {
    this.broken ??= new DistError(
      `The mpi backend is unusable: ${error.message}. MPI cannot cancel a collective or a send once ` +
        `started, so this rank's communicators are out of step with the other ranks'; close the group ` +
        `and restart the job`,
      { code: "MPI_BROKEN", cause: error },
    );
    if (abort) {
      console.error(`dcomm: ${error.message}; calling MPI_Abort (abortOnTimeout is set)`);
      this.mpi.MPI_Abort(MpiComm.WORLD, 1);
    }
  }
}

function checkPmiSocket(env: Readonly<Record<string, string | undefined>>): void {
  const problem = pmiSocketProblem(env);
  if (problem !== undefined) throw new DistError(problem, { code: "MPI" });
}
