// The geometry of a 2-D convolution or pooling window on NHWC tensors, shared by the CPU
// (cpu/conv.h) and CUDA (cuda/conv.h) kernels. 1-D windows use h = kh = 1.
#pragma once

#include <cstdint>

namespace nereid::kernels {

struct Conv2dGeometry {
  int64_t n = 1, h = 1, w = 1, c_in = 1;  // input, NHWC
  int64_t oh = 1, ow = 1, c_out = 1;      // output, NHWC
  int64_t kh = 1, kw = 1;                 // window
  int64_t stride_h = 1, stride_w = 1;
  int64_t dilation_h = 1, dilation_w = 1;
  int64_t pad_top = 0, pad_left = 0;  // bottom/right padding follows from oh, ow
  int64_t groups = 1;
};

}  // namespace nereid::kernels
