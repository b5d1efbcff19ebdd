/**
 * What the CUDA runtime says about this machine: whether CUDA can run here and why not, and each GPU's
 * compute capability, SM count, PCI bus id and memory. Nothing here throws when CUDA is missing:
 * {@linkcode cudaStatus} reports the reason instead, so `doctor` and test gates can print it.
 *
 * @module
 */
import { DeviceAttr } from "../ffi/cudart/constants.ts";
import {
  cudartPath,
  deviceAttribute,
  deviceCount,
  driverVersion,
  formatCudaVersion,
  getDevice,
  memGetInfo,
  pciBusId,
  runtimeVersion,
  setDevice,
} from "../ffi/cudart/cudart.ts";

/**
 * Whether CUDA can run here.
 *
 * @example Gating GPU work, and saying why it is skipped
 * ```ts
 * import { type CudaStatus, cudaStatus } from "@dcomm/dcomm/gpu";
 * import assert from "node:assert/strict";
 * const status: CudaStatus = cudaStatus();
 * if (status.available) console.log(`${status.deviceCount} GPU(s), CUDA runtime ${status.runtimeVersion}`);
 * else console.log(`No GPU work here: ${status.reason}`);
 * assert.equal(status.available, status.deviceCount > 0);
 * ```
 */
export interface CudaStatus {
  /** Whether the runtime loaded and sees at least one GPU. */
  readonly available: boolean;
  /** Why not, when it cannot. */
  readonly reason?: string;
  /** Where libcudart was found. */
  readonly path?: string;
  /** The runtime's version, e.g. `"13.0"`. */
  readonly runtimeVersion?: string;
  /** The newest CUDA the driver supports, e.g. `"13.0"`, or `"none"` without a driver. */
  readonly driverVersion?: string;
  /** The number of GPUs. */
  readonly deviceCount: number;
}

/**
 * Probes the CUDA runtime: loads it, reads the versions and counts the GPUs.
 *
 * @returns The status; never throws.
 *
 * @example
 * ```ts
 * import { cudaStatus } from "@dcomm/dcomm/gpu";
 * import assert from "node:assert/strict";
 * const { available, reason, deviceCount } = cudaStatus();
 * if (available) assert.ok(deviceCount >= 1 && reason === undefined);
 * else assert.ok(deviceCount === 0 && reason !== undefined);
 * ```
 */
export function cudaStatus(): CudaStatus {
  let path: string;
  try {
    path = cudartPath();
  } catch (e) {
    return { available: false, reason: firstLine(e), deviceCount: 0 };
  }
  let runtime: string | undefined;
  let driver: string | undefined;
  try {
    runtime = formatCudaVersion(runtimeVersion());
    const d = driverVersion();
    driver = d === 0 ? "none" : formatCudaVersion(d);
  } catch (e) {
    return { available: false, reason: firstLine(e), path, deviceCount: 0 };
  }
  try {
    const count = deviceCount();
    if (count === 0) {
      return {
        available: false,
        reason: "cudaGetDeviceCount found no GPU",
        path,
        runtimeVersion: runtime,
        driverVersion: driver,
        deviceCount: 0,
      };
    }
    return { available: true, path, runtimeVersion: runtime, driverVersion: driver, deviceCount: count };
  } catch (e) {
    return {
      available: false,
      reason: firstLine(e),
      path,
      runtimeVersion: runtime,
      driverVersion: driver,
      deviceCount: 0,
    };
  }
}

function firstLine(e: unknown): string {
  return (e instanceof Error ? e.message : String(e)).split("\n")[0];
}

/**
 * One GPU, as the runtime describes it.
 *
 * @example Every GPU of the machine
 * ```ts
 * import { cudaStatus, type DeviceInfo, deviceInfo } from "@dcomm/dcomm/gpu";
 * import assert from "node:assert/strict";
 * const { deviceCount } = cudaStatus(); // 0 without a usable GPU
 * const gpus: DeviceInfo[] = Array.from({ length: deviceCount }, (_, i) => deviceInfo(i));
 * for (const gpu of gpus) console.log(`GPU ${gpu.index}: sm_${gpu.sm}, ${gpu.multiProcessors} SMs`);
 * assert.equal(gpus.length, deviceCount);
 * ```
 */
export interface DeviceInfo {
  /** The device index. */
  readonly index: number;
  /** Compute capability, e.g. `"9.0"`. */
  readonly computeCapability: string;
  /** Compute capability as `major * 10 + minor` (90 for sm_90). */
  readonly sm: number;
  /** Streaming multiprocessors. */
  readonly multiProcessors: number;
  /** PCI bus id, e.g. `"0000:19:00.0"`. */
  readonly pciBusId: string;
  /** Total memory in bytes, when asked for. */
  readonly totalMemory?: number;
  /** Free memory in bytes, when asked for. */
  readonly freeMemory?: number;
}

/**
 * Options of {@linkcode deviceInfo}.
 *
 * @example Free and total memory of GPU 0
 * ```ts
 * import { cudaStatus, deviceInfo, type DeviceInfoOptions } from "@dcomm/dcomm/gpu";
 * import assert from "node:assert/strict";
 * const options: DeviceInfoOptions = { memory: true };
 * if (cudaStatus().available) {
 *   const { freeMemory = 0, totalMemory = 0 } = deviceInfo(0, options);
 *   assert.ok(freeMemory > 0 && freeMemory <= totalMemory);
 * }
 * ```
 */
export interface DeviceInfoOptions {
  /** Also read free and total memory (this creates the device's context: slow, and it takes memory). @default false */
  memory?: boolean;
}

/**
 * Describes one GPU.
 *
 * @param index The device index.
 * @param options Whether to read memory too.
 * @returns The description.
 * @throws {CudaError} If the runtime cannot describe it.
 *
 * @example
 * ```ts
 * import { cudaStatus, deviceInfo } from "@dcomm/dcomm/gpu";
 * import { DistError } from "@dcomm/dcomm";
 * import assert from "node:assert/strict";
 * if (cudaStatus().available) {
 *   const info = deviceInfo(0);
 *   assert.equal(info.sm, Number(info.computeCapability.replace(".", "")));
 * } else {
 *   assert.throws(() => deviceInfo(0), DistError); // CudaError or LibraryNotFoundError
 * }
 * ```
 */
export function deviceInfo(index: number, options: DeviceInfoOptions = {}): DeviceInfo {
  const major = deviceAttribute(DeviceAttr.ComputeCapabilityMajor, index);
  const minor = deviceAttribute(DeviceAttr.ComputeCapabilityMinor, index);
  const info: DeviceInfo = {
    index,
    computeCapability: `${major}.${minor}`,
    sm: major * 10 + minor,
    multiProcessors: deviceAttribute(DeviceAttr.MultiProcessorCount, index),
    pciBusId: pciBusId(index),
  };
  if (!options.memory) return info;
  const memory = withDevice(index, memGetInfo);
  return { ...info, totalMemory: memory.total, freeMemory: memory.free };
}

/**
 * Runs `fn` with `device` current on this thread, then restores the previous device.
 *
 * @param device The device index.
 * @param fn What to run.
 * @returns What `fn` returns.
 * @throws {CudaError} If the device cannot be made current.
 *
 * @example Allocating on the last GPU, whichever is current
 * ```ts
 * import { cudaStatus, DeviceBuffer, withDevice } from "@dcomm/dcomm/gpu";
 * import assert from "node:assert/strict";
 * const { available, deviceCount } = cudaStatus();
 * if (available) {
 *   const last = deviceCount - 1;
 *   using buf = withDevice(last, () => DeviceBuffer.alloc(16));
 *   assert.equal(buf.device, last);
 * }
 * ```
 */
export function withDevice<T>(device: number, fn: () => T): T {
  const previous = getDevice();
  if (previous === device) return fn();
  setDevice(device);
  try {
    return fn();
  } finally {
    setDevice(previous);
  }
}
