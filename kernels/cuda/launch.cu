#include <atomic>
#include <cstdlib>
#include <cstring>

#include "cuda/common.h"
#include "cuda/launch.cuh"

namespace nereid::kernels::cuda {

bool PdlEnabled() {
  static const bool allowed = [] {
    const char* env = std::getenv("NEREID_CUDA_PDL");
    return env != nullptr && std::strcmp(env, "1") == 0;
  }();
  if (!allowed) return false;
  static std::atomic<int> capable[kMaxDevices];  // 1: compute capability 9.0 or later, 2: not
  return PerDevice(capable, [](int dev) {
           int major = 0;
           cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
           return major >= 9 ? 1 : 2;
         }) == 1;
}

}  // namespace nereid::kernels::cuda
