/**
 * The layout of `struct cudaPointerAttributes` (CUDA 13 headers, measured; the layout tests re-measure it
 * against `cuda_runtime_api.h`). CUDA 11 and early CUDA 12 end the struct after `hostPointer` (24 bytes);
 * passing 88 zeroed bytes serves both.
 *
 * @module
 */
import type { StructLayout } from "../_layout.ts";

/** `struct cudaPointerAttributes`: type, device, devicePointer, hostPointer, `long reserved[8]`. */
export const CUDA_POINTER_ATTRIBUTES: StructLayout = {
  name: "cudaPointerAttributes",
  size: 88,
  fields: [
    { name: "type", offset: 0, size: 4, kind: "i32" },
    { name: "device", offset: 4, size: 4, kind: "i32" },
    { name: "devicePointer", offset: 8, size: 8, kind: "pointer" },
    { name: "hostPointer", offset: 16, size: 8, kind: "pointer" },
    { name: "reserved", offset: 24, size: 64, kind: "bytes" },
  ],
};
