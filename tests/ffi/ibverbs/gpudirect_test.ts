/**
 * How GPU memory registration chooses between dma-buf and the peer-memory module (`_gpudirect.ts`), from
 * facts as `gpuDirectStatus()` gathers them, for machines this one is not (a GPU, a NIC, each driver).
 */
import assert from "node:assert/strict";
import { decideGpuPath, type GpuDirectFacts } from "../../../ffi/ibverbs/_gpudirect.ts";

/** An H100 node with DOCA-OFED, open kernel modules and CUDA 12.4: everything works. */
const everything: GpuDirectFacts = {
  peerMemory: { file: "/sys/module/nvidia_peermem/version", version: "550.54.15" },
  rdmaCoreDmaBuf: true,
  kernelDmaBuf: "supported",
  kernelDetail: "ibv_reg_dmabuf_mr(pd, 0, 0, 0, -1, 0) on mlx5_0 failed with errno 9 (EBADF: supported)",
  driverVersion: 12040,
  driverProblem: undefined,
  gpus: [{ ordinal: 0, dmaBuf: true, gpuDirectRdma: true }, {
    ordinal: 1,
    dmaBuf: true,
    gpuDirectRdma: true,
  }],
};

Deno.test("decideGpuPath() prefers dma-buf when every prerequisite holds, as NCCL does", () => {
  assert.deepEqual(decideGpuPath(everything, 1), { path: "dma-buf", missing: [] });
});

Deno.test("decideGpuPath() falls back to the peer-memory module, saying why dma-buf is out", () => {
  const oldDriver = decideGpuPath({ ...everything, driverVersion: 11040 }, 0);
  assert.equal(oldDriver.path, "peer-memory");
  assert.deepEqual(oldDriver.missing, [
    "dma-buf: the CUDA driver is 11.4, cuMemGetHandleForAddressRange needs 11.7",
  ]);
  const closedModules = decideGpuPath({
    ...everything,
    gpus: [{ ordinal: 0, dmaBuf: false, gpuDirectRdma: true }],
  }, 0);
  assert.equal(closedModules.path, "peer-memory");
  assert.match(closedModules.missing[0], /^dma-buf: GPU 0 has CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED = 0/);
  const inboxKernel = decideGpuPath(
    { ...everything, kernelDmaBuf: "unsupported", kernelDetail: "errno 95" },
    0,
  );
  assert.equal(inboxKernel.path, "peer-memory");
  assert.deepEqual(inboxKernel.missing, [
    "dma-buf: the kernel's RDMA stack does not take dma-bufs (errno 95)",
  ]);
  const oldRdmaCore = decideGpuPath({ ...everything, rdmaCoreDmaBuf: false, kernelDmaBuf: "unsupported" }, 0);
  assert.match(oldRdmaCore.missing[0], /needs rdma-core 34 or newer/);
});

Deno.test("decideGpuPath() lists every missing prerequisite when neither path works", () => {
  const here: GpuDirectFacts = {
    peerMemory: undefined,
    rdmaCoreDmaBuf: true,
    kernelDmaBuf: "not probed",
    kernelDetail: "not probed: No RDMA devices: ibv_get_device_list failed with ENOSYS",
    driverVersion: undefined,
    driverProblem: "libcuda.so.1 not found: no NVIDIA driver",
    gpus: [],
  };
  const { path, missing } = decideGpuPath(here, 0);
  assert.equal(path, "none");
  assert.deepEqual(missing, [
    "dma-buf: the kernel's dma-buf support could not be probed (not probed: No RDMA devices: " +
    "ibv_get_device_list failed with ENOSYS)",
    "dma-buf: no usable CUDA driver (libcuda.so.1 not found: no NVIDIA driver)",
    "peer-memory: no peer-memory module is loaded (none of /sys/module/nvidia_peermem/version, " +
    "/sys/kernel/mm/memory_peers/nv_mem/version, /sys/kernel/mm/memory_peers/nvidia-peermem/version, " +
    "/sys/module/nv_peer_mem/version exists: modprobe nvidia-peermem, which needs MLNX_OFED/DOCA-OFED)",
  ]);
  assert.equal(decideGpuPath({ ...everything, peerMemory: undefined }, 7).path, "none");
  assert.match(decideGpuPath({ ...everything, peerMemory: undefined }, 7).missing[0], /sees no GPU 7/);
});
