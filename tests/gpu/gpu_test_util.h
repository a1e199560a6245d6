// Helpers for the GPU tests: skip without a device, device buffers, float64 references.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "cuda/common.h"

namespace nereid::gpu_test {

using kernels::cuda::ElemType;

// Why GPU tests cannot run here ("" when a device is present).
inline std::string NoDeviceReason() {
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) return std::string("no CUDA device: ") + cudaGetErrorString(e);
  if (count == 0) return "no CUDA device";
  return "";
}

#define NEREID_REQUIRE_GPU()                                               \
  do {                                                                     \
    const std::string reason = ::nereid::gpu_test::NoDeviceReason();       \
    if (!reason.empty()) GTEST_SKIP() << reason << " (GPU tests skipped)"; \
  } while (0)

#define CUDA_OK(expr)                                                      \
  do {                                                                     \
    const cudaError_t e_ = (expr);                                         \
    ASSERT_EQ(e_, cudaSuccess) << #expr << ": " << cudaGetErrorString(e_); \
  } while (0)

// Host values as the element type's bytes (rounded to nearest even).
inline std::vector<uint8_t> Encode(const std::vector<float>& v, ElemType t) {
  std::vector<uint8_t> out(v.size() * kernels::cuda::ElemSize(t));
  for (size_t i = 0; i < v.size(); ++i) {
    if (t == ElemType::kF32) {
      std::memcpy(out.data() + 4 * i, &v[i], 4);
    } else if (t == ElemType::kBF16) {
      const __nv_bfloat16 b = __float2bfloat16_rn(v[i]);
      std::memcpy(out.data() + 2 * i, &b, 2);
    } else if (t == ElemType::kF16) {
      const __half h = __float2half_rn(v[i]);
      std::memcpy(out.data() + 2 * i, &h, 2);
    } else if (t == ElemType::kI32) {
      const int32_t x = static_cast<int32_t>(v[i]);
      std::memcpy(out.data() + 4 * i, &x, 4);
    } else {
      const int64_t x = static_cast<int64_t>(v[i]);
      std::memcpy(out.data() + 8 * i, &x, 8);
    }
  }
  return out;
}

inline std::vector<double> Decode(const std::vector<uint8_t>& bytes, ElemType t) {
  const size_t n = bytes.size() / kernels::cuda::ElemSize(t);
  std::vector<double> out(n);
  for (size_t i = 0; i < n; ++i) {
    if (t == ElemType::kF32) {
      float f;
      std::memcpy(&f, bytes.data() + 4 * i, 4);
      out[i] = f;
    } else if (t == ElemType::kBF16) {
      __nv_bfloat16 b;
      std::memcpy(&b, bytes.data() + 2 * i, 2);
      out[i] = __bfloat162float(b);
    } else if (t == ElemType::kF16) {
      __half h;
      std::memcpy(&h, bytes.data() + 2 * i, 2);
      out[i] = __half2float(h);
    } else if (t == ElemType::kI32) {
      int32_t x;
      std::memcpy(&x, bytes.data() + 4 * i, 4);
      out[i] = x;
    } else {
      int64_t x;
      std::memcpy(&x, bytes.data() + 8 * i, 8);
      out[i] = static_cast<double>(x);
    }
  }
  return out;
}

// Values as the device will see them after rounding to 't' (the reference uses these).
inline std::vector<double> Rounded(const std::vector<float>& v, ElemType t) {
  return Decode(Encode(v, t), t);
}

// A device buffer; poisoned (all bytes 0xFF: NaN for floats) until written.
class DeviceBuffer {
 public:
  explicit DeviceBuffer(size_t bytes) : bytes_(bytes) {
    if (cudaMalloc(&ptr_, bytes == 0 ? 1 : bytes) == cudaSuccess) cudaMemset(ptr_, 0xFF, bytes);
  }
  DeviceBuffer(const std::vector<uint8_t>& host) : DeviceBuffer(host.size()) {
    cudaMemcpy(ptr_, host.data(), host.size(), cudaMemcpyHostToDevice);
  }
  ~DeviceBuffer() { cudaFree(ptr_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  void* get() const { return ptr_; }
  size_t size() const { return bytes_; }
  std::vector<uint8_t> Read() const {
    std::vector<uint8_t> out(bytes_);
    cudaMemcpy(out.data(), ptr_, bytes_, cudaMemcpyDeviceToHost);
    return out;
  }

 private:
  void* ptr_ = nullptr;
  size_t bytes_;
};

inline std::vector<float> Random(size_t n, uint64_t seed, float lo = -1.f, float hi = 1.f) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

// ||out - ref|| / ||ref||; infinity when any output is NaN (an unwritten element).
inline double RelativeError(const std::vector<double>& out, const std::vector<double>& ref) {
  double num = 0, den = 0;
  for (size_t i = 0; i < out.size(); ++i) {
    if (std::isnan(out[i])) return INFINITY;
    num += (out[i] - ref[i]) * (out[i] - ref[i]);
    den += ref[i] * ref[i];
  }
  return den == 0 ? std::sqrt(num) : std::sqrt(num / den);
}

}  // namespace nereid::gpu_test
