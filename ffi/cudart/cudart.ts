/**
 * The CUDA runtime binding: the library opens on first use through the one locator (`DCOMM_CUDART_PATH`,
 * `libcudart.so.13`/`.12`/`.11.0`, pip's `nvidia/cu13` and `nvidia/cuda_runtime` wheels, the CUDA
 * folders, then the loader's search), and every wrapper turns a non-zero `cudaError_t` into a
 * {@linkcode CudaError} through {@linkcode check}, whose message carries the call, the code's name and its
 * string: `cudaGetDeviceCount failed: cudaErrorInsufficientDriver (35): CUDA driver version is
 * insufficient for CUDA runtime version`.
 *
 * Thread affinity: the current device is per host thread, so every call of one rank must come from the
 * same thread. All symbols here are synchronous on purpose (never `nonblocking`).
 *
 * @module
 */
import { CudaError } from "../../core/errors.ts";
import { type LibrarySpec, openLibrary } from "../locate.ts";
import { CudaErrorCode } from "./constants.ts";
import { Struct } from "../_struct.ts";
import { CUDA_POINTER_ATTRIBUTES } from "./layout.ts";
import { CUDART_SYMBOLS, type CudartSymbols } from "./symbols.ts";

/** How the CUDA runtime is found. */
export const CUDART_LIBRARY: LibrarySpec = {
  name: "the CUDA runtime (libcudart)",
  envVar: "DCOMM_CUDART_PATH",
  sonames: ["libcudart.so.13", "libcudart.so.12", "libcudart.so.11.0", "libcudart.so"],
  pipPackages: ["cu13", "cuda_runtime"],
  cudaFolders: true,
  fix: "install the CUDA toolkit, or `python3 -m pip install nvidia-cuda-runtime` (CUDA 13) / " +
    "`nvidia-cuda-runtime-cu12` (CUDA 12)",
};

let loaded: { lib: Deno.DynamicLibrary<typeof CUDART_SYMBOLS>; path: string } | undefined;

/**
 * The CUDA runtime's symbols, opening the library on the first call.
 *
 * @returns The bound symbols.
 * @throws {LibraryNotFoundError} If no libcudart can be opened; the message lists every path tried.
 */
export function cudart(): CudartSymbols {
  loaded ??= openLibrary(CUDART_LIBRARY, CUDART_SYMBOLS);
  return loaded.lib.symbols;
}

/**
 * The path the CUDA runtime was opened from (a bare soname when the loader's search found it).
 *
 * @returns The path.
 * @throws {LibraryNotFoundError} If no libcudart can be opened.
 */
export function cudartPath(): string {
  cudart();
  return (loaded as { path: string }).path;
}

function cString(pointer: Deno.PointerValue, fallback: string): string {
  return pointer === null ? fallback : Deno.UnsafePointerView.getCString(pointer);
}

/**
 * The name of a `cudaError_t`, e.g. `"cudaErrorInsufficientDriver"`.
 *
 * @param code The error code.
 * @returns Its name (`cudaGetErrorName`).
 */
export function errorName(code: number): string {
  return cString(cudart().cudaGetErrorName(code), `cudaError ${code}`);
}

/**
 * The description of a `cudaError_t`, e.g. `"CUDA driver version is insufficient for CUDA runtime version"`.
 *
 * @param code The error code.
 * @returns Its string (`cudaGetErrorString`).
 */
export function errorString(code: number): string {
  return cString(cudart().cudaGetErrorString(code), "unknown error");
}

/**
 * Throws a {@linkcode CudaError} unless `rc` is `cudaSuccess`.
 *
 * @param rc What the call returned.
 * @param call The call, for the message, e.g. `"cudaMalloc(4096)"`.
 * @throws {CudaError} With `status` = `rc`, and the code's name and string in the message.
 *
 * @example Counting the GPUs (without a usable GPU, the error says why)
 * ```ts
 * import { check, cudart } from "./cudart.ts";
 * import { DistError } from "../../core/errors.ts";
 * check(0, "cudaDeviceSynchronize"); // cudaSuccess: nothing happens
 * const count = new Int32Array(1);
 * try {
 *   check(cudart().cudaGetDeviceCount(count), "cudaGetDeviceCount");
 *   console.log(`${count[0]} GPU(s)`);
 * } catch (e) {
 *   // A CudaError without a driver ("cudaGetDeviceCount failed: cudaErrorInsufficientDriver (35): ..."),
 *   // or a LibraryNotFoundError from cudart() without the CUDA runtime
 *   if (!(e instanceof DistError)) throw e;
 *   console.log(e.message.split("\n")[0]);
 * }
 * ```
 */
export function check(rc: number, call: string): void {
  if (rc === CudaErrorCode.Success) return;
  throw new CudaError(`${call} failed: ${errorName(rc)} (${rc}): ${errorString(rc)}`, { status: rc });
}

function outInt(fn: (out: Int32Array) => number, call: string): number {
  const out = new Int32Array(1);
  check(fn(out), call);
  return out[0];
}

function outPointer(fn: (out: BigUint64Array) => number, call: string): Deno.PointerValue {
  const out = new BigUint64Array(1);
  check(fn(out), call);
  return Deno.UnsafePointer.create(out[0]);
}

/**
 * Formats a CUDA version number (1000·major + 10·minor) as `"major.minor"`.
 *
 * @param version E.g. 13000.
 * @returns E.g. `"13.0"`.
 */
export function formatCudaVersion(version: number): string {
  return `${Math.floor(version / 1000)}.${Math.floor((version % 1000) / 10)}`;
}

/**
 * The runtime's version, as 1000·major + 10·minor (13000 for CUDA 13.0). Needs no driver.
 *
 * @returns The version.
 * @throws {CudaError} If the call fails.
 */
export function runtimeVersion(): number {
  return outInt((o) => cudart().cudaRuntimeGetVersion(o), "cudaRuntimeGetVersion");
}

/**
 * The newest CUDA version the installed driver supports, or 0 when no driver is installed.
 *
 * @returns The version.
 * @throws {CudaError} If the call fails.
 */
export function driverVersion(): number {
  return outInt((o) => cudart().cudaDriverGetVersion(o), "cudaDriverGetVersion");
}

/**
 * The number of CUDA devices.
 *
 * @returns The count.
 * @throws {CudaError} Without a driver (`cudaErrorInsufficientDriver`, 35) or a device
 * (`cudaErrorNoDevice`, 100).
 */
export function deviceCount(): number {
  return outInt((o) => cudart().cudaGetDeviceCount(o), "cudaGetDeviceCount");
}

/**
 * The calling thread's current device.
 *
 * @returns The device index.
 * @throws {CudaError} If the call fails.
 */
export function getDevice(): number {
  return outInt((o) => cudart().cudaGetDevice(o), "cudaGetDevice");
}

/**
 * Makes `device` the calling thread's current device.
 *
 * @param device The device index.
 * @throws {CudaError} If the call fails (`cudaErrorInvalidDevice` for an index out of range).
 */
export function setDevice(device: number): void {
  check(cudart().cudaSetDevice(device), `cudaSetDevice(${device})`);
}

/**
 * One attribute of a device.
 *
 * @param attribute A `cudaDeviceAttr` value (see `DeviceAttr`).
 * @param device The device index.
 * @returns The value.
 * @throws {CudaError} If the call fails.
 */
export function deviceAttribute(attribute: number, device: number): number {
  return outInt(
    (o) => cudart().cudaDeviceGetAttribute(o, attribute, device),
    `cudaDeviceGetAttribute(${attribute}, ${device})`,
  );
}

/**
 * A device's PCI bus id.
 *
 * @param device The device index.
 * @returns E.g. `"0000:19:00.0"`.
 * @throws {CudaError} If the call fails.
 */
export function pciBusId(device: number): string {
  const buf = new Uint8Array(64);
  check(cudart().cudaDeviceGetPCIBusId(buf, buf.length, device), `cudaDeviceGetPCIBusId(${device})`);
  const end = buf.indexOf(0);
  return new TextDecoder().decode(buf.subarray(0, end < 0 ? buf.length : end));
}

/**
 * Free and total memory of the current device. Creates the device's primary context if it has none.
 *
 * @returns Bytes free and total.
 * @throws {CudaError} If the call fails.
 */
export function memGetInfo(): { free: number; total: number } {
  const free = new BigUint64Array(1);
  const total = new BigUint64Array(1);
  check(cudart().cudaMemGetInfo(free, total), "cudaMemGetInfo");
  return { free: Number(free[0]), total: Number(total[0]) };
}

/**
 * Waits for all work on the current device.
 *
 * @throws {CudaError} If the call or any earlier asynchronous work failed.
 */
export function synchronizeDevice(): void {
  check(cudart().cudaDeviceSynchronize(), "cudaDeviceSynchronize");
}

/**
 * Returns and clears the last error of the calling thread (sticky errors are not cleared).
 *
 * @returns The `cudaError_t`.
 */
export function getLastError(): number {
  return cudart().cudaGetLastError();
}

/**
 * Allocates device memory on the current device.
 *
 * @param bytes How many bytes; 0 gives `null`.
 * @returns The device pointer.
 * @throws {CudaError} If the allocation fails.
 */
export function mallocDevice(bytes: number): Deno.PointerValue {
  if (bytes === 0) return null;
  return outPointer((o) => cudart().cudaMalloc(o, BigInt(bytes)), `cudaMalloc(${bytes})`);
}

/**
 * Frees device memory from {@linkcode mallocDevice}.
 *
 * @param pointer The device pointer; `null` is a no-op.
 * @throws {CudaError} If the call fails.
 */
export function freeDevice(pointer: Deno.PointerValue): void {
  if (pointer === null) return;
  check(cudart().cudaFree(pointer), "cudaFree");
}

/**
 * Allocates page-locked (pinned) host memory.
 *
 * @param bytes How many bytes; 0 gives `null`.
 * @returns The host pointer.
 * @throws {CudaError} If the allocation fails.
 */
export function mallocHost(bytes: number): Deno.PointerValue {
  if (bytes === 0) return null;
  return outPointer((o) => cudart().cudaMallocHost(o, BigInt(bytes)), `cudaMallocHost(${bytes})`);
}

/**
 * Frees memory from {@linkcode mallocHost}.
 *
 * @param pointer The host pointer; `null` is a no-op.
 * @throws {CudaError} If the call fails.
 */
export function freeHost(pointer: Deno.PointerValue): void {
  if (pointer === null) return;
  check(cudart().cudaFreeHost(pointer), "cudaFreeHost");
}

/**
 * Page-locks an existing host range so that the device can copy it asynchronously.
 *
 * @param pointer The range's start.
 * @param bytes Its length.
 * @param flags `HostRegisterFlags`. @default 0
 * @throws {CudaError} If the call fails (`cudaErrorHostMemoryAlreadyRegistered`, 712, when it is).
 */
export function hostRegister(pointer: Deno.PointerValue, bytes: number, flags = 0): void {
  check(cudart().cudaHostRegister(pointer, BigInt(bytes), flags), `cudaHostRegister(${bytes} bytes)`);
}

/**
 * Undoes {@linkcode hostRegister}.
 *
 * @param pointer The range's start, as registered.
 * @throws {CudaError} If the call fails.
 */
export function hostUnregister(pointer: Deno.PointerValue): void {
  check(cudart().cudaHostUnregister(pointer), "cudaHostUnregister");
}

/**
 * Copies `bytes` and waits for the copy.
 *
 * @param dst The destination.
 * @param src The source.
 * @param bytes How many bytes; 0 is a no-op.
 * @param kind A `MemcpyKind`.
 * @throws {CudaError} If the copy fails.
 */
export function memcpy(dst: Deno.PointerValue, src: Deno.PointerValue, bytes: number, kind: number): void {
  if (bytes === 0) return;
  check(cudart().cudaMemcpy(dst, src, BigInt(bytes), kind), `cudaMemcpy(${bytes} bytes, kind ${kind})`);
}

/**
 * Queues a copy of `bytes` on `stream`. Copies to pageable host memory return only when done (CUDA's
 * rule); use pinned memory for a copy that overlaps.
 *
 * @param dst The destination.
 * @param src The source.
 * @param bytes How many bytes; 0 is a no-op.
 * @param kind A `MemcpyKind`.
 * @param stream The stream (`null`: the legacy default stream).
 * @throws {CudaError} If queuing fails.
 */
export function memcpyAsync(
  dst: Deno.PointerValue,
  src: Deno.PointerValue,
  bytes: number,
  kind: number,
  stream: Deno.PointerValue,
): void {
  if (bytes === 0) return;
  check(
    cudart().cudaMemcpyAsync(dst, src, BigInt(bytes), kind, stream),
    `cudaMemcpyAsync(${bytes} bytes, kind ${kind})`,
  );
}

/**
 * Sets `bytes` bytes of device memory to `value` and waits.
 *
 * @param pointer The device pointer.
 * @param value The byte value (0..255).
 * @param bytes How many bytes; 0 is a no-op.
 * @throws {CudaError} If the call fails.
 */
export function memset(pointer: Deno.PointerValue, value: number, bytes: number): void {
  if (bytes === 0) return;
  check(cudart().cudaMemset(pointer, value, BigInt(bytes)), `cudaMemset(${bytes} bytes)`);
}

/**
 * Queues a memset on `stream`.
 *
 * @param pointer The device pointer.
 * @param value The byte value (0..255).
 * @param bytes How many bytes; 0 is a no-op.
 * @param stream The stream.
 * @throws {CudaError} If queuing fails.
 */
export function memsetAsync(
  pointer: Deno.PointerValue,
  value: number,
  bytes: number,
  stream: Deno.PointerValue,
): void {
  if (bytes === 0) return;
  check(cudart().cudaMemsetAsync(pointer, value, BigInt(bytes), stream), `cudaMemsetAsync(${bytes} bytes)`);
}

/**
 * Creates a stream on the current device.
 *
 * @param flags `StreamFlags`. @default 0
 * @returns The `cudaStream_t`.
 * @throws {CudaError} If the call fails.
 */
export function createStream(flags = 0): Deno.PointerValue {
  return outPointer((o) => cudart().cudaStreamCreateWithFlags(o, flags), "cudaStreamCreateWithFlags");
}

/**
 * Destroys a stream (its pending work still runs).
 *
 * @param stream The stream.
 * @throws {CudaError} If the call fails.
 */
export function destroyStream(stream: Deno.PointerValue): void {
  check(cudart().cudaStreamDestroy(stream), "cudaStreamDestroy");
}

/**
 * Blocks the calling thread until `stream` is idle.
 *
 * @param stream The stream.
 * @throws {CudaError} If the call or the stream's work failed.
 */
export function synchronizeStream(stream: Deno.PointerValue): void {
  check(cudart().cudaStreamSynchronize(stream), "cudaStreamSynchronize");
}

/**
 * Whether all work queued on `stream` is done; never blocks.
 *
 * @param stream The stream.
 * @returns `true` when idle, `false` while work is pending.
 * @throws {CudaError} If the call or the stream's work failed.
 */
export function queryStream(stream: Deno.PointerValue): boolean {
  const rc = cudart().cudaStreamQuery(stream);
  if (rc === CudaErrorCode.NotReady) return false;
  check(rc, "cudaStreamQuery");
  return true;
}

/**
 * Makes `stream` wait, on the device, for the work recorded in `event`; the host does not wait.
 *
 * @param stream The waiting stream.
 * @param event The event.
 * @throws {CudaError} If the call fails.
 */
export function streamWaitEvent(stream: Deno.PointerValue, event: Deno.PointerValue): void {
  check(cudart().cudaStreamWaitEvent(stream, event, 0), "cudaStreamWaitEvent");
}

/**
 * Creates an event.
 *
 * @param flags `EventFlags`. @default 0 (timing enabled)
 * @returns The `cudaEvent_t`.
 * @throws {CudaError} If the call fails.
 */
export function createEvent(flags = 0): Deno.PointerValue {
  return outPointer((o) => cudart().cudaEventCreateWithFlags(o, flags), "cudaEventCreateWithFlags");
}

/**
 * Records `event` at the current end of `stream`.
 *
 * @param event The event.
 * @param stream The stream.
 * @throws {CudaError} If the call fails.
 */
export function recordEvent(event: Deno.PointerValue, stream: Deno.PointerValue): void {
  check(cudart().cudaEventRecord(event, stream), "cudaEventRecord");
}

/**
 * Whether the work recorded in `event` is done; never blocks. An event never recorded counts as done.
 *
 * @param event The event.
 * @returns `true` when done, `false` while pending.
 * @throws {CudaError} If the call or the recorded work failed.
 */
export function queryEvent(event: Deno.PointerValue): boolean {
  const rc = cudart().cudaEventQuery(event);
  if (rc === CudaErrorCode.NotReady) return false;
  check(rc, "cudaEventQuery");
  return true;
}

/**
 * Blocks the calling thread until the work recorded in `event` is done.
 *
 * @param event The event.
 * @throws {CudaError} If the call or the recorded work failed.
 */
export function synchronizeEvent(event: Deno.PointerValue): void {
  check(cudart().cudaEventSynchronize(event), "cudaEventSynchronize");
}

/**
 * Destroys an event.
 *
 * @param event The event.
 * @throws {CudaError} If the call fails.
 */
export function destroyEvent(event: Deno.PointerValue): void {
  check(cudart().cudaEventDestroy(event), "cudaEventDestroy");
}

/**
 * Milliseconds between two completed timing events (about 0.5 µs resolution).
 *
 * @param start The earlier event.
 * @param end The later event.
 * @returns The time.
 * @throws {CudaError} If either is pending (`cudaErrorNotReady`) or was created without timing.
 */
export function eventElapsedMs(start: Deno.PointerValue, end: Deno.PointerValue): number {
  const ms = new Float32Array(1);
  check(cudart().cudaEventElapsedTime(ms, start, end), "cudaEventElapsedTime");
  return ms[0];
}

/** What `cudaPointerGetAttributes` says about a pointer. */
export interface PointerAttributes {
  /** A `MemoryType`: 0 unregistered host, 1 pinned host, 2 device, 3 managed. */
  readonly type: number;
  /** The device the memory belongs to (meaningful for device and managed memory). */
  readonly device: number;
  /** The address the device uses, as a number (0 if none). */
  readonly devicePointer: bigint;
  /** The address the host uses, as a number (0 if none). */
  readonly hostPointer: bigint;
}

/**
 * Where a pointer's memory lives.
 *
 * @param pointer Any pointer.
 * @returns Its attributes (`type` 0 for memory CUDA does not know).
 * @throws {CudaError} If the call fails.
 */
export function pointerAttributes(pointer: Deno.PointerValue): PointerAttributes {
  const attributes = new Struct(CUDA_POINTER_ATTRIBUTES);
  check(cudart().cudaPointerGetAttributes(attributes.bytes, pointer), "cudaPointerGetAttributes");
  return {
    type: attributes.getInt("type"),
    device: attributes.getInt("device"),
    devicePointer: attributes.getBig("devicePointer"),
    hostPointer: attributes.getBig("hostPointer"),
  };
}
