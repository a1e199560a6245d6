#include "cpu/attention.h"

#include "cpu/cpu_features.h"

namespace nereid::kernels {

#if defined(__x86_64__)
// cpu/x86/attention_x86.cc.
void AttentionProductAvx512(const float* x, int64_t rows, int64_t k, const float* b, int64_t n,
                            float* y);
#endif

bool AttentionHeadProduct(const float* x, int64_t rows, int64_t k, const float* b, int64_t n,
                          float* y) {
#if defined(__x86_64__)
  if (HasAvx512F()) {
    AttentionProductAvx512(x, rows, k, b, n, y);
    return true;
  }
#endif
  return false;
}

}  // namespace nereid::kernels
