/**
 * Which way GPU memory can be registered for RDMA (GPUDirect RDMA), decided from facts gathered about
 * the machine, as NCCL decides it: dma-buf when every prerequisite holds (rdma-core 34+, the kernel's
 * dma-buf support for the NIC, a CUDA 11.7+ driver, and the GPU's dma-buf attribute), else the legacy
 * peer-memory module, else neither, with one line per missing prerequisite. Pure: `register.ts`
 * gathers the facts.
 *
 * @module
 */
import { DMA_BUF_MIN_DRIVER } from "./_cuda_driver.ts";

/** The sysfs files whose presence says that a peer-memory module is loaded (NCCL, NVSHMEM, UCX check these). */
export const PEER_MEMORY_FILES: readonly string[] = [
  "/sys/module/nvidia_peermem/version",
  "/sys/kernel/mm/memory_peers/nv_mem/version",
  "/sys/kernel/mm/memory_peers/nvidia-peermem/version",
  "/sys/module/nv_peer_mem/version",
];

/** The ways GPU memory can be registered. */
export type GpuRegistrationPath = "dma-buf" | "peer-memory" | "none";

/** What was found about the machine. */
export interface GpuDirectFacts {
  /** The first peer-memory file found and its content, or `undefined` when none exists. */
  readonly peerMemory: { readonly file: string; readonly version: string } | undefined;
  /** Whether libibverbs has `ibv_reg_dmabuf_mr` (rdma-core 34+). */
  readonly rdmaCoreDmaBuf: boolean;
  /**
   * NCCL's kernel probe `ibv_reg_dmabuf_mr(pd, 0, 0, 0, -1, 0)`: EBADF means supported, EOPNOTSUPP or
   * EPROTONOSUPPORT unsupported; `"not probed"` when no RDMA device could be opened to probe with.
   */
  readonly kernelDmaBuf: "supported" | "unsupported" | "unknown" | "not probed";
  /** The probe's detail for messages (the errno seen, or why it did not run). */
  readonly kernelDetail: string;
  /** The CUDA driver's version (13000 for 13.0), or `undefined` when the driver is unusable. */
  readonly driverVersion: number | undefined;
  /** Why the CUDA driver is unusable, when it is. */
  readonly driverProblem: string | undefined;
  /** Per GPU: `CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED` and `..._GPU_DIRECT_RDMA_SUPPORTED`. */
  readonly gpus: readonly {
    readonly ordinal: number;
    readonly dmaBuf: boolean;
    readonly gpuDirectRdma: boolean;
  }[];
}

/** The decision for one GPU. */
export interface GpuPathDecision {
  /** The path registration takes. */
  readonly path: GpuRegistrationPath;
  /** Each unmet prerequisite of each path, in words (empty only if both paths are usable). */
  readonly missing: readonly string[];
}

function versionText(code: number): string {
  return `${Math.floor(code / 1000)}.${Math.floor((code % 1000) / 10)}`;
}

/**
 * Decides how memory of one GPU is registered.
 *
 * @param facts What was found.
 * @param ordinal The GPU.
 * @returns The path, and what is missing for the paths not taken.
 */
export function decideGpuPath(facts: GpuDirectFacts, ordinal: number): GpuPathDecision {
  const missing: string[] = [];
  if (!facts.rdmaCoreDmaBuf) {
    missing.push("dma-buf: libibverbs has no ibv_reg_dmabuf_mr (needs rdma-core 34 or newer)");
  }
  if (facts.kernelDmaBuf === "not probed") {
    missing.push(`dma-buf: the kernel's dma-buf support could not be probed (${facts.kernelDetail})`);
  } else if (facts.kernelDmaBuf !== "supported") {
    missing.push(`dma-buf: the kernel's RDMA stack does not take dma-bufs (${facts.kernelDetail})`);
  }
  if (facts.driverVersion === undefined) {
    missing.push(`dma-buf: no usable CUDA driver (${facts.driverProblem ?? "libcuda.so.1 not found"})`);
  } else if (facts.driverVersion < DMA_BUF_MIN_DRIVER) {
    missing.push(
      `dma-buf: the CUDA driver is ${
        versionText(facts.driverVersion)
      }, cuMemGetHandleForAddressRange needs 11.7`,
    );
  } else {
    const gpu = facts.gpus.find((g) => g.ordinal === ordinal);
    if (gpu === undefined) missing.push(`dma-buf: the CUDA driver sees no GPU ${ordinal}`);
    else if (!gpu.dmaBuf) {
      missing.push(
        `dma-buf: GPU ${ordinal} has CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED = 0 (needs the open kernel modules ` +
          "of the NVIDIA driver and a Turing or newer GPU)",
      );
    }
  }
  const dmaBuf = missing.length === 0;
  if (facts.peerMemory === undefined) {
    missing.push(
      `peer-memory: no peer-memory module is loaded (none of ${PEER_MEMORY_FILES.join(", ")} exists: ` +
        "modprobe nvidia-peermem, which needs MLNX_OFED/DOCA-OFED)",
    );
  }
  const path: GpuRegistrationPath = dmaBuf
    ? "dma-buf"
    : facts.peerMemory !== undefined
    ? "peer-memory"
    : "none";
  return { path, missing };
}
