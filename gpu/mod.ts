/**
 * GPU memory and streams for dcomm, through the CUDA runtime (loaded on first use, so importing this
 * module needs no GPU): {@linkcode DeviceBuffer} (device memory of a dtype, the tensor the `nccl`
 * backend reduces in place), {@linkcode PinnedBuffer} and {@linkcode HostRegistration} (page-locked host
 * memory), {@linkcode Stream} and {@linkcode Event}, and what the runtime says about the machine
 * ({@linkcode cudaStatus}, {@linkcode deviceInfo}).
 *
 * @example A gradient copied to the GPU on a stream (without a usable GPU, `cudaStatus` says why)
 * ```ts
 * import { cudaStatus, DeviceBuffer, Stream } from "@dcomm/dcomm/gpu";
 * const status = cudaStatus();
 * if (status.available) {
 *   using stream = Stream.create();
 *   using grad = DeviceBuffer.from(new Float32Array(1024), { stream });
 *   await stream.done();
 *   console.log(String(grad));
 * } else {
 *   console.log(`No GPU: ${status.reason}`);
 * }
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
