// Resize's plan, shared by the CPU op (ops/resize.cc) and the GPU compiler: the output shape and,
// per spatial axis, each output index's two source indices and the second's weight.
#pragma once

#include <vector>

#include "ops/op.h"

namespace nereid::native {

struct ResizePlan {
  struct Tap {
    int64_t i0, i1;
    float f;  // nearest modes: i0 == i1, f 0
  };
  std::vector<int64_t> out_shape;
  std::vector<Tap> taps_y;  // one tap {0, 0, 0} for rank 3
  std::vector<Tap> taps_x;
};

// For a Resize node with inputs 'in' (X first; scales and sizes read from them) on an input of
// 'shape' (rank 3 or 4, NCHW); refuses what the op does not support, naming it.
StatusOr<ResizePlan> PlanResize(const OpNode& node, const std::vector<const Tensor*>& in,
                                const std::vector<int64_t>& shape);

}  // namespace nereid::native
