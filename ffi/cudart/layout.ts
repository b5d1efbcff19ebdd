/**
 * The layout of `struct cudaPointerAttributes` (CUDA 13 headers, measured; the layout tests re-measure it
 * against `cuda_runtime_api.h`). CUDA 11 and early CUDA 12 end the struct after `hostPointer` (24 bytes);
 * passing 88 zeroed bytes serves both.
 *
 * @module
 */
import { type StructLayout, structLayout } from "../_layout.ts";

/** `struct cudaPointerAttributes`: type, device, devicePointer, hostPointer, `long reserved[8]`. */
export const CUDA_POINTER_ATTRIBUTES: StructLayout<
  "type" | "device" | "devicePointer" | "hostPointer" | "reserved"
> = structLayout(
  "struct cudaPointerAttributes",
  88,
  { type: [0, 4], device: [4, 4], devicePointer: [8, 8], hostPointer: [16, 8], reserved: [24, 64] },
);
