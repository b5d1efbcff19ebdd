/**
 * MPICH's ABI constants, read from its `mpi.h` (MPICH 4.0.2; the values are part of the MPICH ABI, shared
 * by Intel MPI and MVAPICH, and unchanged since MPICH 3.1). MPICH handles (`MPI_Comm`, `MPI_Datatype`,
 * `MPI_Op`, `MPI_Request`, `MPI_Errhandler`) are plain C `int`s: i32 through FFI. Handles MPICH makes at
 * run time (split communicators, user-defined ops) have the top bit set, so they read back negative from
 * an Int32Array; they are passed back exactly as read.
 *
 * `tests/ffi/mpi_test.ts` compiles a C program against the installed `mpi.h` and checks every value here.
 *
 * @module
 */

/** Predefined communicators. */
export const MpiComm = {
  /** `MPI_COMM_WORLD`: every process of the job. */
  WORLD: 0x44000000,
  /** `MPI_COMM_SELF`: this process alone. */
  SELF: 0x44000001,
  /** `MPI_COMM_NULL`: what `MPI_Comm_split` gives a process that passed `MPI_UNDEFINED` as its color. */
  NULL: 0x04000000,
} as const;

/** Predefined datatypes, by the C type they describe. */
export const MpiDatatype = {
  /** `MPI_INT8_T` */
  INT8_T: 0x4c000137,
  /** `MPI_UINT8_T` */
  UINT8_T: 0x4c00013b,
  /** `MPI_INT16_T` */
  INT16_T: 0x4c000238,
  /** `MPI_UINT16_T`: the carrier of float16 and bfloat16 bits. */
  UINT16_T: 0x4c00023c,
  /** `MPI_INT32_T` */
  INT32_T: 0x4c000439,
  /** `MPI_UINT32_T` */
  UINT32_T: 0x4c00043d,
  /** `MPI_INT64_T` */
  INT64_T: 0x4c00083a,
  /** `MPI_UINT64_T` */
  UINT64_T: 0x4c00083e,
  /** `MPI_FLOAT` */
  FLOAT: 0x4c00040a,
  /** `MPI_DOUBLE` */
  DOUBLE: 0x4c00080b,
  /** `MPI_BYTE`: untyped bytes. */
  BYTE: 0x4c00010d,
  /** `MPI_DATATYPE_NULL` */
  NULL: 0x0c000000,
} as const;

/** Predefined reduction operators. */
export const MpiOp = {
  /** `MPI_MAX` */
  MAX: 0x58000001,
  /** `MPI_MIN` */
  MIN: 0x58000002,
  /** `MPI_SUM` */
  SUM: 0x58000003,
  /** `MPI_PROD` */
  PROD: 0x58000004,
  /** `MPI_BAND`: bitwise and. */
  BAND: 0x58000006,
  /** `MPI_BOR`: bitwise or. */
  BOR: 0x58000008,
  /** `MPI_BXOR`: bitwise exclusive or. */
  BXOR: 0x5800000a,
  /** `MPI_OP_NULL`: what `MPI_Op_free` leaves behind. */
  NULL: 0x18000000,
} as const;

/** Predefined error handlers. */
export const MpiErrhandler = {
  /** `MPI_ERRORS_ARE_FATAL`: the default; any error aborts the job. */
  ARE_FATAL: 0x54000000,
  /** `MPI_ERRORS_RETURN`: errors come back as return codes. */
  RETURN: 0x54000001,
} as const;

/** Thread support levels of `MPI_Init_thread`, in increasing order. */
export const MpiThreadLevel = {
  /** `MPI_THREAD_SINGLE`: one thread only. */
  SINGLE: 0,
  /** `MPI_THREAD_FUNNELED`: threads allowed, but only the one that initialised MPI calls it. */
  FUNNELED: 1,
  /** `MPI_THREAD_SERIALIZED`: any thread may call, never two at once. */
  SERIALIZED: 2,
  /** `MPI_THREAD_MULTIPLE`: any thread, any time. */
  MULTIPLE: 3,
} as const;

/** `MPI_REQUEST_NULL`: the value `MPI_Test` leaves in a request once it has completed. */
export const MPI_REQUEST_NULL: number = 0x2c000000;
/** `MPI_SUCCESS` */
export const MPI_SUCCESS: number = 0;
/** `MPI_UNDEFINED`: the color that keeps a process out of every `MPI_Comm_split` result. */
export const MPI_UNDEFINED: number = -32766;
/** `MPI_ERR_TRUNCATE`: a receive buffer was smaller than the message. */
export const MPI_ERR_TRUNCATE: number = 14;
/** `MPI_MAX_ERROR_STRING`: the buffer size `MPI_Error_string` needs. */
export const MPI_MAX_ERROR_STRING: number = 512;
/** `MPI_MAX_LIBRARY_VERSION_STRING`: the buffer size `MPI_Get_library_version` needs. */
export const MPI_MAX_LIBRARY_VERSION_STRING: number = 8192;
/** `sizeof(MPI_Status)` in MPICH: `{ int count_lo, count_hi_and_cancelled, MPI_SOURCE, MPI_TAG, MPI_ERROR; }`. */
export const MPI_STATUS_SIZE: number = 20;
/** `offsetof(MPI_Status, MPI_SOURCE)`: where a completed receive says who sent its message. */
export const MPI_STATUS_SOURCE_OFFSET: number = 8;
/** `MPI_ANY_SOURCE`: the source of a receive that takes a message from any rank. */
export const MPI_ANY_SOURCE: number = -2;
/** The largest `int` count one call takes (`INT_MAX`); larger tensors are split into several calls. */
export const MPI_MAX_COUNT: number = 0x7fff_ffff;

/**
 * The address of `MPI_IN_PLACE`, `(void *)-1`: the send buffer of an in-place collective. A bigint, not a
 * pointer: making a pointer needs `--allow-ffi`, which importing this module must not. See
 * {@linkcode pointerTo}.
 */
export const MPI_IN_PLACE_ADDRESS: bigint = 0xffff_ffff_ffff_ffffn;
/** The address of `MPI_STATUS_IGNORE`, `(MPI_Status *)1`. See {@linkcode pointerTo}. */
export const MPI_STATUS_IGNORE_ADDRESS: bigint = 1n;

/**
 * A pointer constant (`MPI_IN_PLACE`, `MPI_STATUS_IGNORE`) as an FFI pointer.
 *
 * @param address One of the `*_ADDRESS` constants.
 * @returns The pointer.
 * @throws {Deno.errors.NotCapable} Without `--allow-ffi`.
 */
export function pointerTo(address: bigint): Deno.PointerObject {
  return Deno.UnsafePointer.create(address) as Deno.PointerObject;
}

/** MPI error classes (`MPI_Error_class`) dcomm names in messages. */
export const MPI_ERROR_CLASS_NAMES: Readonly<Record<number, string>> = {
  0: "MPI_SUCCESS",
  1: "MPI_ERR_BUFFER",
  2: "MPI_ERR_COUNT",
  3: "MPI_ERR_TYPE",
  4: "MPI_ERR_TAG",
  5: "MPI_ERR_COMM",
  6: "MPI_ERR_RANK",
  7: "MPI_ERR_ROOT",
  8: "MPI_ERR_GROUP",
  9: "MPI_ERR_OP",
  12: "MPI_ERR_ARG",
  13: "MPI_ERR_UNKNOWN",
  14: "MPI_ERR_TRUNCATE",
  15: "MPI_ERR_OTHER",
  16: "MPI_ERR_INTERN",
  17: "MPI_ERR_IN_STATUS",
  18: "MPI_ERR_PENDING",
  19: "MPI_ERR_REQUEST",
  34: "MPI_ERR_NO_MEM",
  76: "MPI_ERR_PROC_ABORTED",
};
