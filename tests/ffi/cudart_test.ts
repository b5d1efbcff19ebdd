import assert from "node:assert/strict";
import { CudaError } from "../../core/errors.ts";
import { CudaErrorCode } from "../../ffi/cudart/constants.ts";
import {
  check,
  cudartPath,
  deviceCount,
  driverVersion,
  errorName,
  errorString,
  formatCudaVersion,
  mallocDevice,
  runtimeVersion,
} from "../../ffi/cudart/cudart.ts";
import { CUDA_POINTER_ATTRIBUTES } from "../../ffi/cudart/layout.ts";
import { DeviceBuffer } from "../../gpu/device_buffer.ts";
import { cudaStatus } from "../../gpu/device.ts";
import { gatedTest } from "../_util/skip.ts";
import { CUDART_MISSING, GPU_PRESENT } from "../_util/gpu.ts";

// CI has no CUDA toolkit it installs itself: a missing libcudart is a skip there too.
const cudart = { missing: CUDART_MISSING, ciCanSatisfy: false };
const noDriver = { missing: GPU_PRESENT, ciCanSatisfy: false };

const INSUFFICIENT_DRIVER =
  "cudaErrorInsufficientDriver (35): CUDA driver version is insufficient for CUDA runtime version";

gatedTest("runtimeVersion() reads the runtime's version without a GPU", cudart, () => {
  const v = runtimeVersion();
  assert.ok(v >= 11000 && v < 100000 && v % 10 === 0, `runtime version ${v}`);
  assert.match(formatCudaVersion(v), /^1\d\.\d$/);
  assert.match(cudartPath(), /libcudart\.so/);
});

gatedTest("formatCudaVersion() writes major.minor", cudart, () => {
  assert.equal(formatCudaVersion(13000), "13.0");
  assert.equal(formatCudaVersion(12040), "12.4");
});

gatedTest("errorName() and errorString() are CUDA's own", cudart, () => {
  assert.equal(errorName(0), "cudaSuccess");
  assert.equal(errorName(CudaErrorCode.NotReady), "cudaErrorNotReady");
  assert.equal(errorName(CudaErrorCode.InsufficientDriver), "cudaErrorInsufficientDriver");
  assert.equal(
    errorString(CudaErrorCode.InsufficientDriver),
    "CUDA driver version is insufficient for CUDA runtime version",
  );
});

gatedTest("check() passes cudaSuccess and turns any other code into a CudaError", cudart, () => {
  check(0, "cudaNothing");
  assert.throws(
    () => check(CudaErrorCode.MemoryAllocation, "cudaMalloc(1)"),
    (e: unknown) =>
      e instanceof CudaError && e.status === 2 && e.code === "CUDA" &&
      e.message === "cudaMalloc(1) failed: cudaErrorMemoryAllocation (2): out of memory",
  );
});

gatedTest("deviceCount() without a driver throws CudaError 35 with its name and string", noDriver, () => {
  assert.throws(
    () => deviceCount(),
    (e: unknown) =>
      e instanceof CudaError && e.status === 35 &&
      e.message === `cudaGetDeviceCount failed: ${INSUFFICIENT_DRIVER}`,
  );
  // The error is sticky: a second call fails the same way.
  assert.throws(() => deviceCount(), (e: unknown) => e instanceof CudaError && e.status === 35);
});

gatedTest("driverVersion() is 0 without a driver", noDriver, () => {
  assert.equal(driverVersion(), 0);
});

gatedTest("cudaStatus() says why CUDA cannot run, without throwing", noDriver, () => {
  const status = cudaStatus();
  assert.equal(status.available, false);
  assert.equal(status.deviceCount, 0);
  assert.ok(status.reason?.includes(INSUFFICIENT_DRIVER), status.reason);
  assert.match(status.runtimeVersion ?? "", /^\d+\.\d$/);
  assert.equal(status.driverVersion, "none");
});

gatedTest("mallocDevice() and DeviceBuffer.alloc() without a driver throw CudaError 35", noDriver, () => {
  assert.throws(() => mallocDevice(1024), (e: unknown) => e instanceof CudaError && e.status === 35);
  assert.throws(
    () => DeviceBuffer.alloc(16),
    (e: unknown) => e instanceof CudaError && e.status === 35 && /cudaGetDevice/.test(e.message),
  );
});

gatedTest("mallocDevice(0) allocates nothing and needs no driver", cudart, () => {
  assert.equal(mallocDevice(0), null);
});

Deno.test("CUDA_POINTER_ATTRIBUTES covers 88 bytes without gaps", () => {
  let end = 0;
  for (const [name, f] of Object.entries(CUDA_POINTER_ATTRIBUTES.fields)) {
    assert.equal(f.offset, end, `${name} starts at ${f.offset}, expected ${end}`);
    end = f.offset + f.size;
  }
  assert.equal(end, CUDA_POINTER_ATTRIBUTES.size);
  assert.equal(CUDA_POINTER_ATTRIBUTES.size, 88);
});
