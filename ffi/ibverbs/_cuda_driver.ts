/**
 * The few CUDA driver API calls (libcuda.so.1, installed by the NVIDIA driver) that GPUDirect RDMA over
 * dma-buf needs: the driver version, two device attributes (dma-buf and GPUDirect RDMA support), and
 * `cuMemGetHandleForAddressRange`, which exports GPU memory as a dma-buf file descriptor for
 * `ibv_reg_dmabuf_mr`. Optional: on machines without the driver (CI), {@linkcode cudaDriver} says why.
 *
 * Private to the ibverbs binding; the CUDA runtime binding lives in `ffi/cudart/`.
 *
 * @module
 */
import { CudaError, UnsupportedError } from "../../core/errors.ts";
import { type LibrarySpec, openLibrary } from "../locate.ts";

/** How the locator finds libcuda. */
export const CUDA_DRIVER_LIBRARY: LibrarySpec = {
  name: "the CUDA driver library (libcuda)",
  envVar: "DCOMM_CUDA_DRIVER_PATH",
  sonames: ["libcuda.so.1", "libcuda.so"],
  fix: "install the NVIDIA driver (it ships libcuda.so.1)",
};

const SYMBOLS = {
  cuInit: {
    // CUresult cuInit(unsigned int Flags);
    parameters: ["u32"], // unsigned int Flags (0)
    result: "i32",
  },
  cuDriverGetVersion: {
    // CUresult cuDriverGetVersion(int *driverVersion);
    parameters: ["buffer"], // int *driverVersion (e.g. 13000)
    result: "i32",
  },
  cuDeviceGetCount: {
    // CUresult cuDeviceGetCount(int *count);
    parameters: ["buffer"], // int *count
    result: "i32",
  },
  cuDeviceGet: {
    // CUresult cuDeviceGet(CUdevice *device, int ordinal);
    parameters: [
      "buffer", // CUdevice *device (an int)
      "i32", // int ordinal
    ],
    result: "i32",
  },
  cuDeviceGetAttribute: {
    // CUresult cuDeviceGetAttribute(int *pi, CUdevice_attribute attrib, CUdevice dev);
    parameters: [
      "buffer", // int *pi
      "i32", // CUdevice_attribute attrib
      "i32", // CUdevice dev
    ],
    result: "i32",
  },
  cuCtxGetCurrent: {
    // CUresult cuCtxGetCurrent(CUcontext *pctx);
    parameters: ["buffer"], // CUcontext *pctx
    result: "i32",
  },
  cuCtxSetCurrent: {
    // CUresult cuCtxSetCurrent(CUcontext ctx);
    parameters: ["pointer"], // CUcontext ctx
    result: "i32",
  },
  cuDevicePrimaryCtxRetain: {
    // CUresult cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev);
    parameters: [
      "buffer", // CUcontext *pctx
      "i32", // CUdevice dev
    ],
    result: "i32",
  },
  cuMemGetHandleForAddressRange: {
    // CUresult cuMemGetHandleForAddressRange(void *handle, CUdeviceptr dptr, size_t size,
    //                                        CUmemRangeHandleType handleType, unsigned long long flags);
    // (CUDA 11.7 and newer.)
    parameters: [
      "buffer", // void *handle (an int: the dma-buf fd)
      "u64", // CUdeviceptr dptr (page aligned)
      "usize", // size_t size (page aligned)
      "i32", // CUmemRangeHandleType handleType (CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD = 1)
      "u64", // unsigned long long flags
    ],
    result: "i32",
    optional: true,
  },
  cuGetErrorName: {
    // CUresult cuGetErrorName(CUresult error, const char **pStr);
    parameters: [
      "i32", // CUresult error
      "buffer", // const char **pStr
    ],
    result: "i32",
  },
} as const satisfies Deno.ForeignLibraryInterface;

/** `CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_SUPPORTED`. */
export const CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_SUPPORTED = 116;
/** `CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED`. */
export const CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED = 124;
/** `CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD`. */
export const CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD = 1;
/** The first driver (CUDA 11.7, as `cuDriverGetVersion` says it) with `cuMemGetHandleForAddressRange`. */
export const DMA_BUF_MIN_DRIVER = 11070;

/** The bound driver symbols. */
export type CudaDriverSymbols = Deno.DynamicLibrary<typeof SYMBOLS>["symbols"];

let opened: CudaDriverSymbols | undefined;
let failure: Error | undefined;

/**
 * The driver API, opened and initialised on first use.
 *
 * @returns The symbols.
 * @throws {LibraryNotFoundError} If libcuda is not installed (no NVIDIA driver).
 * @throws {CudaError} If `cuInit` fails (e.g. no GPU: CUDA_ERROR_NO_DEVICE).
 */
export function cudaDriver(): CudaDriverSymbols {
  if (opened !== undefined) return opened;
  if (failure !== undefined) throw failure;
  try {
    const { lib } = openLibrary(CUDA_DRIVER_LIBRARY, SYMBOLS);
    checkCu(lib.symbols, lib.symbols.cuInit(0), "cuInit(0)");
    opened = lib.symbols;
    return opened;
  } catch (error) {
    failure = error instanceof Error ? error : new Error(String(error));
    throw failure;
  }
}

/**
 * Throws a {@linkcode CudaError} naming the call and the result's name if `rc` is not CUDA_SUCCESS.
 *
 * @param cu The symbols.
 * @param rc The CUresult.
 * @param call The call, as `name(arguments)`.
 * @throws {CudaError} If `rc` is not 0.
 */
export function checkCu(cu: CudaDriverSymbols, rc: number, call: string): void {
  if (rc === 0) return;
  const name = new BigUint64Array(1);
  let text = `CUresult ${rc}`;
  if (cu.cuGetErrorName(rc, name) === 0 && name[0] !== 0n) {
    text = Deno.UnsafePointerView.getCString(Deno.UnsafePointer.create(name[0]) as Deno.PointerObject);
  }
  throw new CudaError(`${call} failed with ${text}`, { status: rc });
}

/**
 * The driver's CUDA version.
 *
 * @returns For example 13000 for CUDA 13.0.
 * @throws {CudaError | LibraryNotFoundError} If the driver is unusable.
 */
export function driverVersion(): number {
  const cu = cudaDriver();
  const out = new Int32Array(1);
  checkCu(cu, cu.cuDriverGetVersion(out), "cuDriverGetVersion");
  return out[0];
}

/**
 * How many GPUs the driver sees.
 *
 * @returns The count.
 * @throws {CudaError | LibraryNotFoundError} If the driver is unusable.
 */
export function deviceCount(): number {
  const cu = cudaDriver();
  const out = new Int32Array(1);
  checkCu(cu, cu.cuDeviceGetCount(out), "cuDeviceGetCount");
  return out[0];
}

/**
 * One integer attribute of a GPU.
 *
 * @param ordinal The GPU.
 * @param attribute A `CUdevice_attribute`.
 * @returns Its value.
 * @throws {CudaError | LibraryNotFoundError} If the driver is unusable or the query fails.
 */
export function deviceAttribute(ordinal: number, attribute: number): number {
  const cu = cudaDriver();
  const device = new Int32Array(1);
  checkCu(cu, cu.cuDeviceGet(device, ordinal), `cuDeviceGet(${ordinal})`);
  const out = new Int32Array(1);
  checkCu(
    cu,
    cu.cuDeviceGetAttribute(out, attribute, device[0]),
    `cuDeviceGetAttribute(${attribute}, ${ordinal})`,
  );
  return out[0];
}

/**
 * Exports a page-aligned range of GPU memory as a dma-buf (`cuMemGetHandleForAddressRange`), making the
 * GPU's primary context current first if no context is (the call needs one).
 *
 * @param ordinal The GPU holding the memory.
 * @param address The range's first byte (page aligned).
 * @param bytes The range's length (page aligned).
 * @returns The dma-buf file descriptor; the caller closes it.
 * @throws {UnsupportedError} If the driver is older than CUDA 11.7.
 * @throws {CudaError} If the export fails.
 */
export function exportDmaBuf(ordinal: number, address: bigint, bytes: number): number {
  const cu = cudaDriver();
  const get = cu.cuMemGetHandleForAddressRange;
  if (get === null) {
    throw new UnsupportedError(
      "Cannot export GPU memory as a dma-buf: libcuda has no cuMemGetHandleForAddressRange (CUDA 11.7+ driver)",
    );
  }
  const current = new BigUint64Array(1);
  checkCu(cu, cu.cuCtxGetCurrent(current), "cuCtxGetCurrent");
  if (current[0] === 0n) {
    const device = new Int32Array(1);
    checkCu(cu, cu.cuDeviceGet(device, ordinal), `cuDeviceGet(${ordinal})`);
    const primary = new BigUint64Array(1);
    checkCu(cu, cu.cuDevicePrimaryCtxRetain(primary, device[0]), `cuDevicePrimaryCtxRetain(${ordinal})`);
    checkCu(cu, cu.cuCtxSetCurrent(Deno.UnsafePointer.create(primary[0])), "cuCtxSetCurrent");
  }
  const fd = new Int32Array([-1]);
  checkCu(
    cu,
    get(fd, address, BigInt(bytes), CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD, 0n),
    `cuMemGetHandleForAddressRange(0x${address.toString(16)}, ${bytes} bytes, DMA_BUF_FD)`,
  );
  return fd[0];
}
