/**
 * GPU memory and streams for dcomm, through the CUDA runtime (loaded on first use, so importing this
 * module needs no GPU): {@linkcode DeviceBuffer} (device memory of a dtype, the tensor the `nccl`
 * backend reduces in place), {@linkcode PinnedBuffer} and {@linkcode HostRegistration} (page-locked host
 * memory), {@linkcode Stream} and {@linkcode Event}, and what the runtime says about the machine
 * ({@linkcode cudaStatus}, {@linkcode deviceInfo}).
 *
 * @example
 * ```ts ignore
 * import { DeviceBuffer, Stream } from "./mod.ts";
 * using stream = Stream.create();
 * using grad = DeviceBuffer.from(new Float32Array(1024), { stream });
 * await stream.done();
 * ```
 *
 * @module
 */
export {
  type CopyOptions,
  DeviceBuffer,
  type DeviceBufferFromOptions,
  type DeviceBufferOptions,
} from "./device_buffer.ts";
export { HostRegistration, PinnedBuffer } from "./pinned_buffer.ts";
export { Event, type EventOptions, Stream, type StreamOptions } from "./stream.ts";
export {
  type CudaStatus,
  cudaStatus,
  type DeviceInfo,
  deviceInfo,
  type DeviceInfoOptions,
  withDevice,
} from "./device.ts";
export { nextTurn, type PollOptions, pollUntil } from "./poll.ts";
export type { DType, TypedArray } from "../core/dtype.ts";
