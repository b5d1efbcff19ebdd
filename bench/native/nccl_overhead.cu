// The C side of the per-call overhead measurement in bench/nccl.ts (--overhead --native): the same
// 1-element float32 sum all-reduce on a one-rank communicator, created the same way (non-blocking
// config), called in the same batches, timed the same way (host time of the call loop, median over
// batches; GPU time between two events). Prints one line:
//   host_us_per_call <us> gpu_us_per_call <us> calls <n> batches <n> nccl <version>
// Build: nvcc -O2 -I$NCCL_INCLUDE bench/native/nccl_overhead.cu -L$NCCL_LIB -l:libnccl.so.2 -o nccl_overhead
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>
#include <cuda_runtime.h>
#include <nccl.h>

#define CUDA(call)                                                                          \
  do {                                                                                      \
    cudaError_t e = (call);                                                                 \
    if (e != cudaSuccess) {                                                                 \
      std::fprintf(stderr, "%s failed: %s (%d): %s\n", #call, cudaGetErrorName(e), (int)e,  \
                   cudaGetErrorString(e));                                                  \
      std::exit(1);                                                                         \
    }                                                                                       \
  } while (0)

static void settle(ncclComm_t comm, ncclResult_t rc, const char* what) {
  while (rc == ncclInProgress) {
    ncclResult_t state;
    ncclCommGetAsyncError(comm, &state);
    rc = state;
  }
  if (rc != ncclSuccess) {
    std::fprintf(stderr, "%s failed: %s. NCCL: %s\n", what, ncclGetErrorString(rc), ncclGetLastError(comm));
    std::exit(1);
  }
}

int main(int argc, char** argv) {
  const int calls = argc > 1 ? std::atoi(argv[1]) : 500;
  const int batches = argc > 2 ? std::atoi(argv[2]) : 11;
  CUDA(cudaSetDevice(0));
  ncclUniqueId id;
  settle(nullptr, ncclGetUniqueId(&id), "ncclGetUniqueId");
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  ncclComm_t comm = nullptr;
  ncclResult_t rc = ncclCommInitRankConfig(&comm, 1, id, 0, &config);
  settle(comm, rc, "ncclCommInitRankConfig");
  cudaStream_t stream;
  CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamDefault));
  float* buf;
  CUDA(cudaMalloc(&buf, sizeof(float)));
  cudaEvent_t start, end;
  CUDA(cudaEventCreate(&start));
  CUDA(cudaEventCreate(&end));
  for (int i = 0; i < 50; i++) settle(comm, ncclAllReduce(buf, buf, 1, ncclFloat32, ncclSum, comm, stream), "warmup");
  CUDA(cudaStreamSynchronize(stream));
  std::vector<double> host, gpu;
  for (int b = 0; b < batches; b++) {
    CUDA(cudaEventRecord(start, stream));
    auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < calls; i++) {
      settle(comm, ncclAllReduce(buf, buf, 1, ncclFloat32, ncclSum, comm, stream), "ncclAllReduce");
    }
    auto t1 = std::chrono::steady_clock::now();
    CUDA(cudaEventRecord(end, stream));
    CUDA(cudaStreamSynchronize(stream));
    float ms = 0;
    CUDA(cudaEventElapsedTime(&ms, start, end));
    host.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count() / calls);
    gpu.push_back(ms * 1000.0 / calls);
  }
  std::sort(host.begin(), host.end());
  std::sort(gpu.begin(), gpu.end());
  int version = 0;
  ncclGetVersion(&version);
  std::printf("host_us_per_call %.3f gpu_us_per_call %.3f calls %d batches %d nccl %d\n", host[host.size() / 2],
              gpu[gpu.size() / 2], calls, batches, version);
  cudaFree(buf);
  ncclCommDestroy(comm);
  return 0;
}
