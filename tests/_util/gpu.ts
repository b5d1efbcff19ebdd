/**
 * Gates of the GPU path's tests, computed once per test file: whether NCCL and the CUDA runtime load,
 * whether a GPU is usable, and where the headers are for the layout tests. Each is `undefined` when the
 * thing is there, else the reason, ready for `gatedTest`. The project's own loaders are used, so a
 * gate sees exactly what the code under test would.
 *
 * @module
 */
import { LibraryNotFoundError } from "../../core/errors.ts";
import { cudartPath } from "../../ffi/cudart/cudart.ts";
import { nccl } from "../../ffi/nccl/nccl.ts";
import { cudaStatus } from "../../gpu/device.ts";

function firstLine(e: unknown): string {
  return (e instanceof Error ? e.message : String(e)).split("\n")[0];
}

function isFile(path: string): boolean {
  try {
    return Deno.statSync(path).isFile;
  } catch {
    return false;
  }
}

/** Why libnccl cannot be loaded (CI installs it: `ciCanSatisfy: true`), or `undefined`. */
export const NCCL_MISSING: string | undefined = (() => {
  try {
    nccl();
    return undefined;
  } catch (e) {
    return e instanceof LibraryNotFoundError
      ? "libnccl not found: set DCOMM_NCCL_PATH (python3 -m pip install --target DIR nvidia-nccl-cu13)"
      : `libnccl does not load: ${firstLine(e)}`;
  }
})();

/** Why libcudart cannot be loaded, or `undefined`. */
export const CUDART_MISSING: string | undefined = (() => {
  try {
    cudartPath();
    return undefined;
  } catch (e) {
    return e instanceof LibraryNotFoundError
      ? "libcudart not found: set DCOMM_CUDART_PATH (CUDA toolkit, or pip install nvidia-cuda-runtime)"
      : `libcudart does not load: ${firstLine(e)}`;
  }
})();

/** Why no GPU is usable (CI has none: `ciCanSatisfy: false`), or `undefined`. */
export const GPU_MISSING: string | undefined = (() => {
  const status = cudaStatus();
  return status.available ? undefined : `no GPU: ${status.reason}`;
})();

/** Why the no-GPU behaviour cannot be observed (a GPU is present), or `undefined` when there is no GPU. */
export const GPU_PRESENT: string | undefined = GPU_MISSING === undefined
  ? "a GPU is present, so the no-driver error path cannot be observed"
  : CUDART_MISSING;

/** The folder holding `nccl.h`: `DCOMM_NCCL_INCLUDE`, else `../include` next to the loaded libnccl. */
export const NCCL_INCLUDE: string | undefined = (() => {
  const fromEnv = Deno.env.get("DCOMM_NCCL_INCLUDE");
  if (fromEnv && isFile(`${fromEnv}/nccl.h`)) return fromEnv;
  if (NCCL_MISSING !== undefined) return undefined;
  const path = nccl().path;
  if (!path.includes("/")) return undefined;
  const dir = path.slice(0, path.lastIndexOf("/"));
  const include = `${dir}/../include`;
  return isFile(`${include}/nccl.h`) ? include : undefined;
})();

/** The CUDA include folder (`CUDA_HOME`/`CUDA_PATH`, else /usr/local/cuda/include) if it has the runtime headers. */
export const CUDA_INCLUDE: string | undefined = (() => {
  for (const root of [Deno.env.get("CUDA_HOME"), Deno.env.get("CUDA_PATH"), "/usr/local/cuda"]) {
    if (root && isFile(`${root}/include/cuda_runtime_api.h`)) return `${root}/include`;
  }
  return undefined;
})();
