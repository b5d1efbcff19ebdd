/**
 * RDMA memory registration (`@dcomm/dcomm/rdma`), through libibverbs (loaded on first use, so importing
 * this module needs neither the library nor an RDMA device): {@linkcode registerMemory} registers host
 * memory (a TypedArray, DataView or ArrayBuffer) or GPU memory (a `DeviceBuffer` of `@dcomm/dcomm/gpu`, or
 * anything shaped like {@linkcode DeviceMemory}) with an RDMA device (InfiniBand or RoCE) and returns a
 * {@linkcode RegisteredMemory}: the address and keys a peer needs to read or write it. Disposing it
 * deregisters it. {@linkcode rdmaDevices} says which devices there are, or why there are none, without
 * throwing.
 *
 * GPU memory is registered through dma-buf where the machine supports it, else through the peer-memory
 * module (GPUDirect RDMA); where neither works the error ({@linkcode GpuDirectUnavailableError}) lists each
 * missing prerequisite. Without an RDMA device, registering throws {@linkcode NoRdmaDeviceError} saying what
 * was being registered and what `ibv_get_device_list` answered; without libibverbs, the
 * `LibraryNotFoundError` of `@dcomm/dcomm` lists every path tried (`DCOMM_IBVERBS_PATH` chooses the library).
 *
 * @example A receive buffer a peer may write into (without an RDMA device, the error says why)
 * ```ts
 * import { NoRdmaDeviceError, rdmaDevices, registerMemory } from "@dcomm/dcomm/rdma";
 * import { LibraryNotFoundError } from "@dcomm/dcomm";
 * const { devices, problem } = rdmaDevices(); // never throws
 * console.log(problem ?? `RDMA devices: ${devices.map((d) => d.name).join(", ")}`);
 * const inbox = new Uint8Array(1 << 20);
 * try {
 *   using region = registerMemory(inbox, { access: ["remote-write"] });
 *   // What a peer needs to write into `inbox`: send it through your store.
 *   console.log(JSON.stringify({ address: String(region.address), rkey: region.rkey }));
 * } catch (e) {
 *   if (!(e instanceof NoRdmaDeviceError || e instanceof LibraryNotFoundError)) throw e;
 *   console.log(e.message.split("\n")[0]); // "Cannot register 1048576 bytes (1.0 MiB) of host memory: ..."
 * }
 * ```
 *
 * @module
 */
import { type MemoryAccess, type RegisterableMemory, registerMemory as register } from "./register.ts";

export {
  type DeviceMemory,
  GpuDirectUnavailableError,
  type MemoryAccess,
  rdmaDevices,
  type RdmaDevicesSummary,
  type RdmaDeviceSummary,
  type RdmaPortSummary,
  type RegisterableMemory,
} from "./register.ts";
export type { RdmaDeviceInfo } from "./verbs.ts";
export { IbverbsError, NoRdmaDeviceError } from "./ibverbs.ts";
// The classes the errors above extend, defined elsewhere in dcomm.
export { DistError, type DistErrorOptions, UnsupportedError } from "../../core/errors.ts";

/**
 * Options of {@linkcode registerMemory}.
 *
 * @example Memory a peer may write into and read from, on a named device
 * ```ts
 * import type { RegisterMemoryOptions } from "@dcomm/dcomm/rdma";
 * import { rdmaDevices } from "@dcomm/dcomm/rdma";
 * const options: RegisterMemoryOptions = {
 *   access: ["remote-write", "remote-read"], // remote writes imply local-write
 *   device: rdmaDevices().devices[0]?.name, // undefined: the first device
 * };
 * console.log(options);
 * ```
 */
export interface RegisterMemoryOptions {
  /**
   * What the memory may be used for. `"remote-write"` and `"remote-atomic"` imply `"local-write"` (verbs
   * requires it).
   *
   * @default {["local-write"]}
   */
  readonly access?: readonly MemoryAccess[];
  /**
   * The RDMA device to register with, by name (e.g. `"mlx5_0"`, as {@linkcode rdmaDevices} lists them).
   * The region opens the device and a protection domain of its own, and frees both when disposed.
   *
   * @default {the first device}
   */
  readonly device?: string;
}

/**
 * A registered memory region: the address and keys that name it in RDMA work requests. It keeps the buffer
 * it registered alive; disposing it (`using`, or `[Symbol.dispose]()`) deregisters it and frees the device
 * and domain it opened. Disposing it twice does nothing.
 *
 * @example What a peer needs to write into the region, and deregistering it
 * ```ts
 * import { NoRdmaDeviceError, type RegisteredMemory, registerMemory } from "@dcomm/dcomm/rdma";
 * import { LibraryNotFoundError } from "@dcomm/dcomm";
 * const describe = (region: RegisteredMemory): string =>
 *   JSON.stringify({ address: String(region.address), length: region.length, rkey: region.rkey });
 * let region: RegisteredMemory | undefined;
 * try {
 *   region = registerMemory(new Float32Array(1024), { access: ["remote-write"] });
 *   console.log(region.path, describe(region)); // "host" {"address":"...","length":4096,"rkey":...}
 * } catch (e) {
 *   if (!(e instanceof NoRdmaDeviceError || e instanceof LibraryNotFoundError)) throw e;
 *   console.log(`no RDMA here: ${e.message.split("\n")[0]}`);
 * } finally {
 *   region?.[Symbol.dispose](); // deregisters; the Float32Array may go
 * }
 * ```
 */
export interface RegisteredMemory extends Disposable {
  /** The address work requests name its first byte by (for GPU memory, its device address). */
  readonly address: bigint;
  /** Bytes. */
  readonly length: number;
  /** Its local key, for the work requests of this side. */
  readonly lkey: number;
  /** Its remote key, what a peer's RDMA writes and reads name it by. */
  readonly rkey: number;
  /**
   * How it was registered: `"host"` (host memory), `"dma-buf"` or `"peer-memory"` (GPU memory, through
   * dma-buf or the peer-memory module).
   */
  readonly path: "host" | "dma-buf" | "peer-memory";
  /**
   * Deregisters the region, frees the device and domain it opened, and lets the buffer go.
   *
   * @throws {IbverbsError} If deregistration fails.
   */
  [Symbol.dispose](): void;
}

/**
 * Registers memory with an RDMA device, in a protection domain of its own.
 *
 * @param buffer Host memory (TypedArray, DataView, ArrayBuffer) or GPU memory ({@linkcode DeviceMemory},
 * such as a `DeviceBuffer`).
 * @param options What the memory may be used for, and the device.
 * @returns The region; dispose it to deregister.
 * @throws {TypeError | RangeError} If `buffer` or `access` is not valid, or the buffer is empty (checked
 * before any device is opened).
 * @throws {NoRdmaDeviceError} If there is no RDMA device (or none of that name); the message says what was
 * being registered.
 * @throws {GpuDirectUnavailableError} For GPU memory, if neither dma-buf nor the peer-memory module works;
 * it lists each missing prerequisite.
 * @throws {IbverbsError} If a verbs call fails (e.g. `ibv_reg_mr` with ENOMEM past `ulimit -l`).
 * @throws {LibraryNotFoundError} If libibverbs (or, for GPU memory, the CUDA driver) is not installed.
 *
 * @example Registering, or saying why not
 * ```ts
 * import { NoRdmaDeviceError, registerMemory } from "@dcomm/dcomm/rdma";
 * import { LibraryNotFoundError } from "@dcomm/dcomm";
 * import assert from "node:assert/strict";
 * const bytes = new Uint8Array(4 << 20);
 * try {
 *   using region = registerMemory(bytes, { access: ["local-write", "remote-write"] });
 *   assert.equal(region.length, bytes.byteLength);
 * } catch (e) {
 *   if (!(e instanceof NoRdmaDeviceError || e instanceof LibraryNotFoundError)) throw e;
 *   assert.match(e.message, /^Cannot register|^Cannot find libibverbs/);
 * }
 * assert.throws(() => registerMemory(new Uint8Array(0)), RangeError); // checked before any device is opened
 * ```
 */
export function registerMemory(
  buffer: RegisterableMemory,
  options: RegisterMemoryOptions = {},
): RegisteredMemory {
  // Only the public options: a domain of the caller's (the internal `pd`) is for the queue pairs of
  // dcomm's own transport.
  const { access, device } = options;
  return register(buffer, { access, device });
}
