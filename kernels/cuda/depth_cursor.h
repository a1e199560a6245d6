// A thread's place in a convolution's depth, for the tensor-core implicit GEMM (conv.cu): depth
// index k = (ky * kw + kx) * c_in + ci of a [kh][kw][c_in] window, moved a whole step at a time
// (the loads come in step order) by additions instead of the four divisions that give it from k.
// Host and device, so the host tests check it against the divisions.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define NEREID_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define NEREID_HOST_DEVICE inline
#endif

namespace nereid::kernels::cuda {

struct DepthCursor {
  int64_t k = 0;
  int ci = 0, kx = 0, ky = 0;  // k's channel and tap, valid while k < depth

  // At depth index 'k0' of a window 'kw' taps wide over 'c_in' channels ('depth' its size: past
  // it the place is left at 0 and never read).
  NEREID_HOST_DEVICE DepthCursor(int64_t k0, int64_t depth, int64_t c_in, int64_t kw) : k(k0) {
    if (k0 < depth) {
      const int64_t tap = k0 / c_in;
      ci = static_cast<int>(k0 % c_in), kx = static_cast<int>(tap % kw);
      ky = static_cast<int>(tap / kw);
    }
  }
  // k += step: the channel wraps into the next tap (several, where c_in < step) and the tap into
  // the next window row.
  NEREID_HOST_DEVICE void Advance(int step, int c_in, int kw) {
    k += step;
    for (ci += step; ci >= c_in; ci -= c_in)
      if (++kx == kw) kx = 0, ++ky;
  }
};

}  // namespace nereid::kernels::cuda
