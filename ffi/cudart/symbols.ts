/**
 * The symbol table of the CUDA runtime (`libcudart.so.13`, `.12`, `.11`): every function dcomm calls, with
 * its C declaration. Plain names are bound (the `_ptds`/`_ptsz` variants exist only for programs compiled
 * with a per-thread default stream). Every function returns `cudaError_t` (i32) unless noted.
 *
 * @module
 */

/** The symbols bound from the CUDA runtime, each parameter commented with its C declaration. */
export const CUDART_SYMBOLS = {
  cudaRuntimeGetVersion: {
    // cudaError_t cudaRuntimeGetVersion(int *runtimeVersion);
    parameters: [
      "buffer", // int *runtimeVersion
    ],
    result: "i32",
  },
  cudaDriverGetVersion: {
    // cudaError_t cudaDriverGetVersion(int *driverVersion);  (0 when no driver is installed)
    parameters: [
      "buffer", // int *driverVersion
    ],
    result: "i32",
  },
  cudaGetDeviceCount: {
    // cudaError_t cudaGetDeviceCount(int *count);
    parameters: [
      "buffer", // int *count
    ],
    result: "i32",
  },
  cudaGetDevice: {
    // cudaError_t cudaGetDevice(int *device);
    parameters: [
      "buffer", // int *device
    ],
    result: "i32",
  },
  cudaSetDevice: {
    // cudaError_t cudaSetDevice(int device);
    parameters: [
      "i32", // int device
    ],
    result: "i32",
  },
  cudaDeviceGetAttribute: {
    // cudaError_t cudaDeviceGetAttribute(int *value, enum cudaDeviceAttr attr, int device);
    parameters: [
      "buffer", // int *value
      "i32", // enum cudaDeviceAttr attr
      "i32", // int device
    ],
    result: "i32",
  },
  cudaDeviceGetPCIBusId: {
    // cudaError_t cudaDeviceGetPCIBusId(char *pciBusId, int len, int device);  ("dddd:bb:dd.f", NUL-terminated)
    parameters: [
      "buffer", // char *pciBusId
      "i32", // int len
      "i32", // int device
    ],
    result: "i32",
  },
  cudaMemGetInfo: {
    // cudaError_t cudaMemGetInfo(size_t *free, size_t *total);  (of the current device; creates its context)
    parameters: [
      "buffer", // size_t *free
      "buffer", // size_t *total
    ],
    result: "i32",
  },
  cudaDeviceSynchronize: {
    // cudaError_t cudaDeviceSynchronize(void);
    parameters: [],
    result: "i32",
  },
  cudaGetLastError: {
    // cudaError_t cudaGetLastError(void);  (returns and clears the last non-sticky error)
    parameters: [],
    result: "i32",
  },
  cudaPeekAtLastError: {
    // cudaError_t cudaPeekAtLastError(void);  (returns it without clearing)
    parameters: [],
    result: "i32",
  },
  cudaGetErrorName: {
    // const char *cudaGetErrorName(cudaError_t error);
    parameters: [
      "i32", // cudaError_t error
    ],
    result: "pointer",
  },
  cudaGetErrorString: {
    // const char *cudaGetErrorString(cudaError_t error);
    parameters: [
      "i32", // cudaError_t error
    ],
    result: "pointer",
  },
  cudaMalloc: {
    // cudaError_t cudaMalloc(void **devPtr, size_t size);
    parameters: [
      "buffer", // void **devPtr
      "usize", // size_t size
    ],
    result: "i32",
  },
  cudaFree: {
    // cudaError_t cudaFree(void *devPtr);
    parameters: [
      "pointer", // void *devPtr
    ],
    result: "i32",
  },
  cudaMallocHost: {
    // cudaError_t cudaMallocHost(void **ptr, size_t size);  (page-locked host memory)
    parameters: [
      "buffer", // void **ptr
      "usize", // size_t size
    ],
    result: "i32",
  },
  cudaFreeHost: {
    // cudaError_t cudaFreeHost(void *ptr);
    parameters: [
      "pointer", // void *ptr
    ],
    result: "i32",
  },
  cudaHostRegister: {
    // cudaError_t cudaHostRegister(void *ptr, size_t size, unsigned int flags);
    parameters: [
      "pointer", // void *ptr
      "usize", // size_t size
      "u32", // unsigned int flags
    ],
    result: "i32",
  },
  cudaHostUnregister: {
    // cudaError_t cudaHostUnregister(void *ptr);
    parameters: [
      "pointer", // void *ptr
    ],
    result: "i32",
  },
  cudaMemcpy: {
    // cudaError_t cudaMemcpy(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind);
    parameters: [
      "pointer", // void *dst
      "pointer", // const void *src
      "usize", // size_t count
      "i32", // enum cudaMemcpyKind kind
    ],
    result: "i32",
  },
  cudaMemcpyAsync: {
    // cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind,
    //                             cudaStream_t stream);
    parameters: [
      "pointer", // void *dst
      "pointer", // const void *src
      "usize", // size_t count
      "i32", // enum cudaMemcpyKind kind
      "pointer", // cudaStream_t stream
    ],
    result: "i32",
  },
  cudaMemset: {
    // cudaError_t cudaMemset(void *devPtr, int value, size_t count);
    parameters: [
      "pointer", // void *devPtr
      "i32", // int value
      "usize", // size_t count
    ],
    result: "i32",
  },
  cudaMemsetAsync: {
    // cudaError_t cudaMemsetAsync(void *devPtr, int value, size_t count, cudaStream_t stream);
    parameters: [
      "pointer", // void *devPtr
      "i32", // int value
      "usize", // size_t count
      "pointer", // cudaStream_t stream
    ],
    result: "i32",
  },
  cudaStreamCreateWithFlags: {
    // cudaError_t cudaStreamCreateWithFlags(cudaStream_t *pStream, unsigned int flags);
    parameters: [
      "buffer", // cudaStream_t *pStream
      "u32", // unsigned int flags
    ],
    result: "i32",
  },
  cudaStreamDestroy: {
    // cudaError_t cudaStreamDestroy(cudaStream_t stream);
    parameters: [
      "pointer", // cudaStream_t stream
    ],
    result: "i32",
  },
  cudaStreamSynchronize: {
    // cudaError_t cudaStreamSynchronize(cudaStream_t stream);
    parameters: [
      "pointer", // cudaStream_t stream
    ],
    result: "i32",
  },
  cudaStreamQuery: {
    // cudaError_t cudaStreamQuery(cudaStream_t stream);  (cudaErrorNotReady while work is pending)
    parameters: [
      "pointer", // cudaStream_t stream
    ],
    result: "i32",
  },
  cudaStreamWaitEvent: {
    // cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned int flags);
    parameters: [
      "pointer", // cudaStream_t stream
      "pointer", // cudaEvent_t event
      "u32", // unsigned int flags (0)
    ],
    result: "i32",
  },
  cudaEventCreateWithFlags: {
    // cudaError_t cudaEventCreateWithFlags(cudaEvent_t *event, unsigned int flags);
    parameters: [
      "buffer", // cudaEvent_t *event
      "u32", // unsigned int flags
    ],
    result: "i32",
  },
  cudaEventRecord: {
    // cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream);
    parameters: [
      "pointer", // cudaEvent_t event
      "pointer", // cudaStream_t stream
    ],
    result: "i32",
  },
  cudaEventQuery: {
    // cudaError_t cudaEventQuery(cudaEvent_t event);  (cudaErrorNotReady while the recorded work is pending)
    parameters: [
      "pointer", // cudaEvent_t event
    ],
    result: "i32",
  },
  cudaEventSynchronize: {
    // cudaError_t cudaEventSynchronize(cudaEvent_t event);
    parameters: [
      "pointer", // cudaEvent_t event
    ],
    result: "i32",
  },
  cudaEventDestroy: {
    // cudaError_t cudaEventDestroy(cudaEvent_t event);
    parameters: [
      "pointer", // cudaEvent_t event
    ],
    result: "i32",
  },
  cudaEventElapsedTime: {
    // cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t start, cudaEvent_t end);
    parameters: [
      "buffer", // float *ms
      "pointer", // cudaEvent_t start
      "pointer", // cudaEvent_t end
    ],
    result: "i32",
  },
  cudaPointerGetAttributes: {
    // cudaError_t cudaPointerGetAttributes(struct cudaPointerAttributes *attributes, const void *ptr);
    // (88 bytes in CUDA 13; 24 in CUDA 11 and early 12: always pass 88 zeroed bytes)
    parameters: [
      "buffer", // struct cudaPointerAttributes *attributes
      "pointer", // const void *ptr
    ],
    result: "i32",
  },
} as const satisfies Deno.ForeignLibraryInterface;

/** The loaded symbols of the CUDA runtime. */
export type CudartSymbols = Deno.DynamicLibrary<typeof CUDART_SYMBOLS>["symbols"];
