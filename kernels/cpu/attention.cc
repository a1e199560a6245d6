#include "cpu/attention.h"

#include "cpu/cpu_features.h"

namespace nereid::kernels {

#if defined(__x86_64__)
// cpu/x86/attention_x86.cc: y (rows x n) = x (rows x k) b (k x n), row-major.
void AttentionProductAvx512(const float* x, int64_t rows, int64_t k, const float* b, int64_t n,
                            float* y);
#endif

bool AttentionScores(const float* q, int64_t s, int64_t d, const float* kt, int64_t t,
                     float* scores) {
#if defined(__x86_64__)
  if (HasAvx512F()) {
    AttentionProductAvx512(q, s, d, kt, t, scores);
    return true;
  }
#endif
  return false;
}

bool AttentionContext(const float* p, int64_t s, int64_t t, const float* v, int64_t dv,
                      float* out) {
#if defined(__x86_64__)
  if (HasAvx512F()) {
    AttentionProductAvx512(p, s, t, v, dv, out);
    return true;
  }
#endif
  return false;
}

}  // namespace nereid::kernels
