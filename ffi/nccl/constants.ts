/**
 * NCCL's constants and enums (`nccl.h` 2.30.7; every value is stable since the version noted), and the
 * version code arithmetic of `NCCL_VERSION(X,Y,Z)`. All enums are 4-byte ints: i32 through FFI.
 *
 * @module
 */

/** `NCCL_UNIQUE_ID_BYTES`: the size of `ncclUniqueId`, passed by value to the init functions. */
export const NCCL_UNIQUE_ID_BYTES = 128;
/** `NCCL_SPLIT_NOCOLOR`: the color of a rank that joins no sub-communicator in `ncclCommSplit`. */
export const NCCL_SPLIT_NOCOLOR = -1;
/** `NCCL_CONFIG_UNDEF_INT` (`INT_MIN`): "use the library's default" in an `ncclConfig_t` int field. */
export const NCCL_CONFIG_UNDEF_INT = -2147483648;
/** `NCCL_API_MAGIC`: the `magic` of an `ncclConfig_t`. */
export const NCCL_API_MAGIC = 0xcafebeef;

/** `ncclResult_t`. */
export const NcclResult = {
  /** No error. */
  Success: 0,
  /** A CUDA call failed (often: no GPU or driver). */
  UnhandledCudaError: 1,
  /** A system call failed (sockets, shared memory, ...). */
  SystemError: 2,
  /** An internal NCCL error. */
  InternalError: 3,
  /** An argument is invalid. */
  InvalidArgument: 4,
  /** NCCL was used incorrectly. */
  InvalidUsage: 5,
  /** A remote process exited or the network failed (2.13). */
  RemoteError: 6,
  /** A non-blocking operation is still in progress (2.14). */
  InProgress: 7,
  /** An operation timed out (2.30). */
  Timeout: 8,
  /** The number of results. */
  NumResults: 9,
} as const;

/** The names of {@linkcode NcclResult} values, for messages. */
export const NCCL_RESULT_NAMES: Readonly<Record<number, string>> = {
  0: "ncclSuccess",
  1: "ncclUnhandledCudaError",
  2: "ncclSystemError",
  3: "ncclInternalError",
  4: "ncclInvalidArgument",
  5: "ncclInvalidUsage",
  6: "ncclRemoteError",
  7: "ncclInProgress",
  8: "ncclTimeout",
};

/** `ncclRedOp_t`'s built-in operators; dynamic ones (PreMulSum) are numbered from `NumOps`. */
export const NcclRedOp = {
  /** Sum. */
  Sum: 0,
  /** Product. */
  Prod: 1,
  /** Maximum. */
  Max: 2,
  /** Minimum. */
  Min: 3,
  /** Average: sum divided by the number of ranks (2.10). */
  Avg: 4,
  /** The number of built-in operators, and the first dynamic one. */
  NumOps: 5,
  /** The largest valid operator value. */
  MaxRedOp: 0x7fffffff,
} as const;

/** `ncclDataType_t`. */
export const NcclDataType = {
  /** int8_t (also `ncclChar`). */
  Int8: 0,
  /** uint8_t. */
  Uint8: 1,
  /** int32_t (also `ncclInt`). */
  Int32: 2,
  /** uint32_t. */
  Uint32: 3,
  /** int64_t. */
  Int64: 4,
  /** uint64_t. */
  Uint64: 5,
  /** IEEE half (also `ncclHalf`). */
  Float16: 6,
  /** float (also `ncclFloat`). */
  Float32: 7,
  /** double (also `ncclDouble`). */
  Float64: 8,
  /** bfloat16 (2.10). */
  Bfloat16: 9,
  /** FP8 E4M3 (2.24). */
  Float8e4m3: 10,
  /** FP8 E5M2 (2.24). */
  Float8e5m2: 11,
  /** The number of types (2.24). */
  NumTypes: 12,
} as const;

/** `ncclScalarResidence_t`: where the scalar of `ncclRedOpCreatePreMulSum` lives. */
export const NcclScalarResidence = {
  /** A device pointer, read while the collective runs. */
  Device: 0,
  /** A host value, read before `ncclRedOpCreatePreMulSum` returns. */
  HostImmediate: 1,
} as const;

/** A parsed NCCL version. */
export interface NcclVersion {
  /** Major version (2). */
  readonly major: number;
  /** Minor version. */
  readonly minor: number;
  /** Patch level. */
  readonly patch: number;
  /** The code as `ncclGetVersion` returns it (23007 for 2.30.7, 2804 for 2.8.4). */
  readonly code: number;
  /** `"major.minor.patch"`. */
  readonly text: string;
}

/**
 * `NCCL_VERSION(X,Y,Z)`: X·1000+Y·100+Z when X ≤ 2 and Y ≤ 8, otherwise X·10000+Y·100+Z.
 *
 * @param major X.
 * @param minor Y.
 * @param patch Z. @default 0
 * @returns The version code.
 *
 * @example
 * ```ts
 * import { ncclVersionCode } from "./constants.ts";
 * import assert from "node:assert/strict";
 * assert.equal(ncclVersionCode(2, 30, 7), 23007);
 * assert.equal(ncclVersionCode(2, 8, 4), 2804);
 * ```
 */
export function ncclVersionCode(major: number, minor: number, patch = 0): number {
  return major <= 2 && minor <= 8 ? major * 1000 + minor * 100 + patch : major * 10000 + minor * 100 + patch;
}

/**
 * Parses a version code from `ncclGetVersion` (either encoding of `NCCL_VERSION`).
 *
 * @param code The code.
 * @returns The version.
 * @throws {RangeError} If `code` is not a positive integer.
 *
 * @example
 * ```ts
 * import { parseNcclVersion } from "./constants.ts";
 * import assert from "node:assert/strict";
 * assert.equal(parseNcclVersion(23007).text, "2.30.7");
 * assert.equal(parseNcclVersion(2804).text, "2.8.4");
 * ```
 */
export function parseNcclVersion(code: number): NcclVersion {
  if (!Number.isInteger(code) || code <= 0) {
    throw new RangeError(`Invalid NCCL version code: expected a positive integer, found ${code}`);
  }
  const wide = code >= 10000;
  const major = wide ? Math.floor(code / 10000) : Math.floor(code / 1000);
  const minor = wide ? Math.floor((code % 10000) / 100) : Math.floor((code % 1000) / 100);
  const patch = code % 100;
  return { major, minor, patch, code, text: `${major}.${minor}.${patch}` };
}

/**
 * Orders two versions.
 *
 * @param a A version (or code).
 * @param b Another.
 * @returns A negative number, 0 or a positive number as `a` is older, equal or newer.
 */
export function compareNcclVersions(a: NcclVersion | number, b: NcclVersion | number): number {
  const x = typeof a === "number" ? parseNcclVersion(a) : a;
  const y = typeof b === "number" ? parseNcclVersion(b) : b;
  return (x.major - y.major) || (x.minor - y.minor) || (x.patch - y.patch);
}
