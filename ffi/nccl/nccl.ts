/**
 * The NCCL binding: the library opens on first use through the one locator (`DCOMM_NCCL_PATH`,
 * `libnccl.so.2`, pip's `nvidia/nccl` wheel, the CUDA folders, then the loader's search), its version is
 * read at load, and {@linkcode check} turns every failed `ncclResult_t` into an {@linkcode NcclError} that
 * carries the code, `ncclGetErrorString` and NCCL's own reason from `ncclGetLastError`.
 *
 * Thread affinity: NCCL's group state is thread-local and CUDA's current device is per thread, so every
 * call of one communicator must come from the thread that owns it. Every symbol is synchronous.
 *
 * @module
 */
import { NcclError } from "../../core/errors.ts";
import { type LibrarySpec, openLibrary } from "../locate.ts";
import {
  NCCL_RESULT_NAMES,
  NCCL_UNIQUE_ID_BYTES,
  NcclResult,
  type NcclVersion,
  parseNcclVersion,
} from "./constants.ts";
import type { NcclConfig } from "./config.ts";
import { NCCL_SYMBOLS, type NcclSymbols } from "./symbols.ts";

/** How NCCL is found. */
export const NCCL_LIBRARY: LibrarySpec = {
  name: "NCCL (libnccl)",
  envVar: "DCOMM_NCCL_PATH",
  sonames: ["libnccl.so.2", "libnccl.so"],
  pipPackages: ["nccl"],
  cudaFolders: true,
  fix: "`python3 -m pip install nvidia-nccl-cu13` (CUDA 13) or `nvidia-nccl-cu12` (CUDA 12), or install " +
    "libnccl2 from NVIDIA's package repository",
};

/** A loaded NCCL: its symbols, where it came from and its version. */
export interface NcclLibrary {
  /** The bound symbols; optional ones the library lacks are `null`. */
  readonly symbols: NcclSymbols;
  /** The path it was opened from (a bare soname when the loader's search found it). */
  readonly path: string;
  /** Its version, from `ncclGetVersion`. */
  readonly version: NcclVersion;
}

let loaded: NcclLibrary | undefined;

/**
 * NCCL, opening it and reading its version on the first call.
 *
 * @returns The library.
 * @throws {LibraryNotFoundError} If no libnccl can be opened; the message lists every path tried.
 * @throws {NcclError} If `ncclGetVersion` fails.
 */
export function nccl(): NcclLibrary {
  if (loaded) return loaded;
  const { lib, path } = openLibrary(NCCL_LIBRARY, NCCL_SYMBOLS);
  const out = new Int32Array(1);
  const rc = lib.symbols.ncclGetVersion(out);
  if (rc !== NcclResult.Success) {
    lib.close();
    throw new NcclError(`ncclGetVersion failed: ${resultName(rc)} (${rc}) in ${path}`, { status: rc });
  }
  loaded = { symbols: lib.symbols, path, version: parseNcclVersion(out[0]) };
  return loaded;
}

/**
 * The name of an `ncclResult_t`, e.g. `"ncclUnhandledCudaError"`.
 *
 * @param rc The result.
 * @returns Its name, or `"ncclResult <rc>"` for an unknown value.
 */
export function resultName(rc: number): string {
  return NCCL_RESULT_NAMES[rc] ?? `ncclResult ${rc}`;
}

function cString(pointer: Deno.PointerValue): string | undefined {
  return pointer === null ? undefined : Deno.UnsafePointerView.getCString(pointer);
}

/**
 * NCCL's description of a result (`ncclGetErrorString`).
 *
 * @param rc The result.
 * @returns The description.
 */
export function errorString(rc: number): string {
  return cString(nccl().symbols.ncclGetErrorString(rc)) ?? "unknown result";
}

/**
 * NCCL's own text about the last error (`ncclGetLastError`, 2.13), e.g. `"Cuda failure 'CUDA driver
 * version is insufficient for CUDA runtime version'"`.
 *
 * @param comm The communicator, or `null`. @default null
 * @returns The text, or `undefined` when the library lacks the call or has nothing to say.
 */
export function lastError(comm: Deno.PointerValue = null): string | undefined {
  const fn = nccl().symbols.ncclGetLastError;
  if (fn === null) return undefined;
  const text = cString(fn(comm))?.trim();
  return text ? text : undefined;
}

/**
 * Builds the {@linkcode NcclError} of a failed call.
 *
 * @param rc The result.
 * @param call The call, for the message.
 * @param comm The communicator, for `ncclGetLastError`. @default null
 * @returns The error: `"<call> failed: <name> (<rc>): <ncclGetErrorString>. NCCL: <ncclGetLastError>"`.
 */
export function ncclError(rc: number, call: string, comm: Deno.PointerValue = null): NcclError {
  const last = lastError(comm);
  return new NcclError(
    `${call} failed: ${resultName(rc)} (${rc}): ${errorString(rc)}${last ? `. NCCL: ${last}` : ""}`,
    { status: rc },
  );
}

/**
 * Throws an {@linkcode NcclError} unless `rc` is `ncclSuccess`.
 *
 * @param rc The result.
 * @param call The call, for the message.
 * @param comm The communicator, for `ncclGetLastError`. @default null
 * @throws {NcclError} With `status` = `rc`, NCCL's string and its last error in the message.
 */
export function check(rc: number, call: string, comm: Deno.PointerValue = null): void {
  if (rc !== NcclResult.Success) throw ncclError(rc, call, comm);
}

/**
 * Like {@linkcode check}, but accepts `ncclInProgress` (what a non-blocking communicator returns while the
 * operation completes in the background).
 *
 * @param rc The result.
 * @param call The call, for the message.
 * @param comm The communicator. @default null
 * @returns `true` if the operation is still in progress.
 * @throws {NcclError} For any other failure.
 */
export function checkStarted(rc: number, call: string, comm: Deno.PointerValue = null): boolean {
  if (rc === NcclResult.InProgress) return true;
  check(rc, call, comm);
  return false;
}

/**
 * A fresh unique id (rank 0 makes one and gives it to the others). Needs no GPU: it opens NCCL's bootstrap
 * socket.
 *
 * @returns The 128 bytes.
 * @throws {NcclError} If the call fails (e.g. no usable network interface).
 */
export function getUniqueId(): Uint8Array<ArrayBuffer> {
  const id = new Uint8Array(NCCL_UNIQUE_ID_BYTES);
  check(nccl().symbols.ncclGetUniqueId(id), "ncclGetUniqueId");
  return id;
}

function checkId(id: Uint8Array): void {
  // Deno does not length-check struct arguments: a short buffer would be read past its end.
  if (id.length !== NCCL_UNIQUE_ID_BYTES) {
    throw new RangeError(`Invalid ncclUniqueId: expected ${NCCL_UNIQUE_ID_BYTES} bytes, found ${id.length}`);
  }
}

/** A communicator being created: its handle (once set) and whether creation is still in progress. */
export interface StartedComm {
  /** The `ncclComm_t` (`null` until NCCL sets it, e.g. during a non-blocking split). */
  readonly comm: Deno.PointerValue;
  /** Whether `ncclCommGetAsyncError` must be polled until it stops returning `ncclInProgress`. */
  readonly inProgress: boolean;
  /** The out-parameter NCCL writes the handle to (memory that never moves); read it again once creation completes. */
  readonly out: BigUint64Array;
}

/**
 * `ncclCommInitRankConfig`: starts creating this rank's communicator (2.14). With `blocking: 0` in the
 * config it returns at once with `inProgress`.
 *
 * @param nranks The number of ranks.
 * @param id The unique id (128 bytes), the same on every rank.
 * @param rank This rank.
 * @param config The config (from `buildNcclConfig`).
 * @returns The handle and whether creation is still in progress.
 * @throws {NcclError} If the call fails at once (without a GPU: `ncclUnhandledCudaError`).
 * @throws {RangeError} If `id` is not 128 bytes.
 */
export function commInitRankConfig(
  nranks: number,
  id: Uint8Array,
  rank: number,
  config: NcclConfig,
): StartedComm {
  checkId(id);
  const fn = nccl().symbols.ncclCommInitRankConfig;
  if (fn === null) {
    throw ncclError(NcclResult.InvalidUsage, "ncclCommInitRankConfig (missing from this library)");
  }
  const out = new BigUint64Array(1);
  const rc = fn(out, nranks, id, rank, config.bytes);
  const comm = Deno.UnsafePointer.create(out[0]);
  const inProgress = checkStarted(rc, `ncclCommInitRankConfig(nranks ${nranks}, rank ${rank})`, comm);
  return { comm, inProgress, out };
}

/**
 * `ncclCommInitRank`: creates this rank's communicator, blocking until every rank has joined.
 *
 * @param nranks The number of ranks.
 * @param id The unique id (128 bytes).
 * @param rank This rank.
 * @returns The `ncclComm_t`.
 * @throws {NcclError} If the call fails.
 * @throws {RangeError} If `id` is not 128 bytes.
 */
export function commInitRank(nranks: number, id: Uint8Array, rank: number): Deno.PointerValue {
  checkId(id);
  const out = new BigUint64Array(1);
  check(
    nccl().symbols.ncclCommInitRank(out, nranks, id, rank),
    `ncclCommInitRank(nranks ${nranks}, rank ${rank})`,
  );
  return Deno.UnsafePointer.create(out[0]);
}

/**
 * `ncclCommSplit`: starts creating a sub-communicator of the ranks that pass the same `color` (2.18).
 *
 * @param comm The parent.
 * @param color This rank's color, or `NCCL_SPLIT_NOCOLOR` to join none.
 * @param key Orders the ranks within a color.
 * @param config The child's config, or `null` to inherit the parent's.
 * @returns The out-parameter (NCCL sets it when the split completes) and whether it is in progress.
 * @throws {NcclError} If the call fails or the library lacks it.
 */
export function commSplit(
  comm: Deno.PointerValue,
  color: number,
  key: number,
  config: NcclConfig | null,
): StartedComm {
  const fn = nccl().symbols.ncclCommSplit;
  if (fn === null) throw ncclError(NcclResult.InvalidUsage, "ncclCommSplit (missing from this library)");
  // NCCL writes the child's handle from its own thread when a non-blocking split completes, after this
  // call returned: the slot must not move. A typed array made with a length may live on V8's heap, which
  // the garbage collector compacts; an ArrayBuffer's memory never moves.
  const out = new BigUint64Array(new ArrayBuffer(8));
  const rc = fn(comm, color, key, out, config?.bytes ?? null);
  const inProgress = checkStarted(rc, `ncclCommSplit(color ${color}, key ${key})`, comm);
  return { comm: Deno.UnsafePointer.create(out[0]), inProgress, out };
}

/**
 * `ncclCommGetAsyncError`: the communicator's state: `ncclSuccess`, `ncclInProgress` while a non-blocking
 * operation completes, or the error an asynchronous operation hit.
 *
 * @param comm The communicator.
 * @returns The state.
 * @throws {NcclError} If the query itself fails.
 */
export function commGetAsyncError(comm: Deno.PointerValue): number {
  const out = new Int32Array(1);
  check(nccl().symbols.ncclCommGetAsyncError(comm, out), "ncclCommGetAsyncError", comm);
  return out[0];
}

function commInt(
  fn: (comm: Deno.PointerValue, out: Int32Array) => number,
  comm: Deno.PointerValue,
  call: string,
): number {
  const out = new Int32Array(1);
  check(fn(comm, out), call, comm);
  return out[0];
}

/**
 * The number of ranks of a communicator.
 *
 * @param comm The communicator.
 * @returns The count.
 * @throws {NcclError} If the call fails.
 */
export function commCount(comm: Deno.PointerValue): number {
  return commInt(nccl().symbols.ncclCommCount, comm, "ncclCommCount");
}

/**
 * The CUDA device of a communicator.
 *
 * @param comm The communicator.
 * @returns The device index.
 * @throws {NcclError} If the call fails.
 */
export function commCuDevice(comm: Deno.PointerValue): number {
  return commInt(nccl().symbols.ncclCommCuDevice, comm, "ncclCommCuDevice");
}

/**
 * This rank within a communicator.
 *
 * @param comm The communicator.
 * @returns The rank.
 * @throws {NcclError} If the call fails.
 */
export function commUserRank(comm: Deno.PointerValue): number {
  return commInt(nccl().symbols.ncclCommUserRank, comm, "ncclCommUserRank");
}

/**
 * The value of one of NCCL's parameters as NCCL sees it (2.30.4), e.g. `"NCCL_PROTO"`.
 *
 * @param key The parameter's name.
 * @returns Its value, or `undefined` when the library lacks the call or the parameter.
 */
export function ncclParameter(key: string): string | undefined {
  const fn = nccl().symbols.ncclParamGetParameter;
  if (fn === null) return undefined;
  const name = new TextEncoder().encode(key + "\0");
  const value = new BigUint64Array(1);
  const length = new Int32Array(1);
  if (fn(name, value, length) !== NcclResult.Success || value[0] === 0n) return undefined;
  const pointer = Deno.UnsafePointer.create(value[0]);
  return pointer === null ? undefined : Deno.UnsafePointerView.getCString(pointer);
}
