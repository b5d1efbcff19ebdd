/**
 * Values of the CUDA runtime's enums and flags that dcomm uses (CUDA 13.0 headers; unchanged since CUDA 11
 * for every value listed). All of them are `int` / `unsigned` in C: i32 / u32 through FFI.
 *
 * @module
 */

/** `cudaError_t` values dcomm names or tests for. */
export const CudaErrorCode = {
  /** The call succeeded. */
  Success: 0,
  /** An argument is out of range. */
  InvalidValue: 1,
  /** Out of device (or pinned host) memory. */
  MemoryAllocation: 2,
  /** The runtime could not initialize. */
  InitializationError: 3,
  /** The runtime is being unloaded (process exit). */
  CudartUnloading: 4,
  /** A pointer is not a valid device pointer. */
  InvalidDevicePointer: 17,
  /** The driver is a stub library (a container without the real driver mounted). */
  StubLibrary: 34,
  /** No driver, or one older than the runtime. */
  InsufficientDriver: 35,
  /** The call needs a newer driver. */
  CallRequiresNewerDriver: 36,
  /** No CUDA-capable device. */
  NoDevice: 100,
  /** The device index is out of range. */
  InvalidDevice: 101,
  /** A stream or event handle is invalid. */
  InvalidResourceHandle: 400,
  /** The queried work has not finished yet (not an error for queries). */
  NotReady: 600,
  /** A kernel accessed an illegal address; the context is unusable (sticky). */
  IllegalAddress: 700,
  /** `cudaHostRegister` on memory that is already registered. */
  HostMemoryAlreadyRegistered: 712,
  /** `cudaHostUnregister` on memory that is not registered. */
  HostMemoryNotRegistered: 713,
  /** A kernel failed; the context is unusable (sticky). */
  LaunchFailure: 719,
  /** The operation is not supported on this device or system. */
  NotSupported: 801,
  /** The driver and the kernel module disagree. */
  SystemDriverMismatch: 803,
  /** An unknown internal error. */
  Unknown: 999,
} as const;

/** `enum cudaMemcpyKind`. */
export const MemcpyKind = {
  /** Host to host. */
  HostToHost: 0,
  /** Host to device. */
  HostToDevice: 1,
  /** Device to host. */
  DeviceToHost: 2,
  /** Device to device. */
  DeviceToDevice: 3,
  /** Inferred from the pointers (needs unified addressing, which every 64-bit platform has). */
  Default: 4,
} as const;

/** `enum cudaDeviceAttr` values dcomm reads. */
export const DeviceAttr = {
  /** Maximum threads per block. */
  MaxThreadsPerBlock: 1,
  /** Warp size in threads. */
  WarpSize: 10,
  /** Peak clock in kHz. */
  ClockRate: 13,
  /** Number of streaming multiprocessors. */
  MultiProcessorCount: 16,
  /** PCI bus id. */
  PciBusId: 33,
  /** PCI device (slot) id. */
  PciDeviceId: 34,
  /** Whether the device shares one address space with the host. */
  UnifiedAddressing: 41,
  /** PCI domain id. */
  PciDomainId: 50,
  /** Compute capability, major part. */
  ComputeCapabilityMajor: 75,
  /** Compute capability, minor part. */
  ComputeCapabilityMinor: 76,
  /** Whether `cudaHostRegister` is supported. */
  HostRegisterSupported: 99,
  /** Whether stream-ordered allocation is supported. */
  MemoryPoolsSupported: 115,
  /** Whether GPUDirect RDMA is supported. */
  GPUDirectRDMASupported: 116,
} as const;

/** `enum cudaMemoryType`, as `cudaPointerGetAttributes` reports it. */
export const MemoryType = {
  /** Host memory not known to CUDA. */
  Unregistered: 0,
  /** Pinned or registered host memory. */
  Host: 1,
  /** Device memory. */
  Device: 2,
  /** Managed (unified) memory. */
  Managed: 3,
} as const;

/** Flags of `cudaHostRegister`. */
export const HostRegisterFlags = {
  /** Page-locked, for the current context. */
  Default: 0,
  /** Page-locked for every context. */
  Portable: 1,
  /** Mapped into the device's address space. */
  Mapped: 2,
  /** The memory is I/O memory (e.g. a PCI BAR). */
  IoMemory: 4,
  /** The device only reads it. */
  ReadOnly: 8,
} as const;

/** Flags of `cudaStreamCreateWithFlags`. */
export const StreamFlags = {
  /** Synchronizes with the legacy default stream. */
  Default: 0,
  /** Runs concurrently with the legacy default stream. */
  NonBlocking: 1,
} as const;

/** Flags of `cudaEventCreateWithFlags`. */
export const EventFlags = {
  /** Records timing; waits spin. */
  Default: 0,
  /** `cudaEventSynchronize` yields the thread instead of spinning. */
  BlockingSync: 1,
  /** No timing: cheaper to record and to wait on. */
  DisableTiming: 2,
  /** Shareable across processes (needs DisableTiming). */
  Interprocess: 4,
} as const;

/** The special `cudaStream_t` values. */
export const SpecialStream = {
  /** The legacy default stream (`cudaStreamLegacy`). */
  Legacy: 0x1n,
  /** The calling thread's default stream (`cudaStreamPerThread`). */
  PerThread: 0x2n,
} as const;
