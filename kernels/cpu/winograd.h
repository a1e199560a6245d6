// 3x3 stride-1 convolutions by Winograd's minimal filtering F(2x2, 3x3) on NHWC float tensors:
// each 2x2 block of output pixels (a tile) from its 4x4 input window, transformed (V = B^T d B),
// multiplied per position of the 4x4 transform by the transformed weights (U = G g G^T) as 16
// GEMMs over the channels, and transformed back (Y = A^T M A): 16 products per tile and channel
// pair where the direct form takes 36 (2.25x fewer). The transforms take only additions and
// halves; in fp32 the answers stay within a few ulps of the direct sum's (bench/RESULTS.md).
#pragma once

#include <array>
#include <cstdint>
#include <memory>

#include "conv_geometry.h"
#include "cpu/gemm.h"

namespace nereid::kernels {

// U = G g G^T of a 3x3 convolution's weights ([c_out][c_in][3][3], ONNX's layout), one
// c_in x c_out matrix per position of the 4x4 transform, packed for the GEMM.
class WinogradWeights {
 public:
  WinogradWeights(const float* w, int64_t c_out, int64_t c_in);
  const PackedMatrixB& position(int p) const { return *u_[static_cast<size_t>(p)]; }

 private:
  std::array<std::unique_ptr<PackedMatrixB>, 16> u_;
};

// Whether WinogradNhwc runs 'g' (3x3, stride 1, dilation 1, one group).
bool WinogradFits(const Conv2dGeometry& g);
// False where NEREID_CONV_WINOGRAD=0: the engine then prepares 3x3 convolutions as implicit
// GEMMs (bench/ab_native.py compares the two in one build).
bool WinogradEnabled();

// y = act(conv(x, w) + bias + residual) for a geometry WinogradFits takes; bias and residual as
// ConvNhwc's (null where absent). Blocks of tiles split over the intra-op team.
void WinogradNhwc(const Conv2dGeometry& g, const float* x, const WinogradWeights& w,
                  const float* bias, const float* residual, const GemmEpilogue& act, float* y);

}  // namespace nereid::kernels
