// Shared by the CUDA kernels of kernels/cuda: element types, activations, and launch helpers. Every
// entry point returns cudaError_t (the launch's own error, cudaGetLastError after it) and never
// synchronizes: callers own the stream and check errors at their boundary.
#pragma once

#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>

namespace nereid::kernels::cuda {

enum class ElemType { kF32, kBF16, kF16, kI32, kI64, kI8 };
// Activation applied in a fused epilogue (or on its own): ONNX Relu, Sigmoid, Tanh and Gelu (the
// exact erf form).
enum class Activation { kNone, kRelu, kSigmoid, kTanh, kGelu };

size_t ElemSize(ElemType t);
const char* ElemTypeName(ElemType t);
const char* ActivationName(Activation a);

// Whether 'p' is 16-byte aligned (what vector loads and TMA need).
inline bool Aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

// Per-device facts the kernels' entry points check on every call, worked out once per device.
constexpr int kMaxDevices = 64;
// 'compute(device)' for the current device, computed on first use and then read from 'cache'
// (compute must not return 0, which marks "not yet known"). 0 where there is no current device
// or its id is kMaxDevices or more.
template <typename Compute>
int PerDevice(std::atomic<int> (&cache)[kMaxDevices], const Compute& compute) {
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= kMaxDevices) return 0;
  int v = cache[dev].load(std::memory_order_relaxed);
  if (v == 0) {
    v = compute(dev);
    cache[dev].store(v, std::memory_order_relaxed);
  }
  return v;
}

// Whether the current device launches thread-block clusters (compute capability 9.0 and later,
// in an sm_90a build), cached per device.
bool ClusterLaunch();

// Blocks of 256 threads, each thread handling 'per_thread' elements, capped so a grid-stride loop
// covers the rest.
inline unsigned GridFor(int64_t n, int per_thread = 4) {
  const int64_t blocks = (n + 256LL * per_thread - 1) / (256LL * per_thread);
  return static_cast<unsigned>(blocks < 1 ? 1 : blocks > 65535 * 16 ? 65535 * 16 : blocks);
}

}  // namespace nereid::kernels::cuda
