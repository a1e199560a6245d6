#include "cpu/cpu_features.h"

namespace nereid::kernels {

bool HasAvx2Fma() {
  // __builtin_cpu_init first: callers may run before the constructors that would do it.
  static const bool has =
      (__builtin_cpu_init(), __builtin_cpu_supports("avx2")) && __builtin_cpu_supports("fma");
  return has;
}

bool HasAvx512F() {
  static const bool has = HasAvx2Fma() && __builtin_cpu_supports("avx512f");
  return has;
}

bool HasAvx512Vnni() {
  static const bool has =
      HasAvx512F() && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vnni");
  return has;
}

}  // namespace nereid::kernels
