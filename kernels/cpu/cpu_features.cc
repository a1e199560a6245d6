#include "cpu/cpu_features.h"

#if defined(__aarch64__)
#include <sys/auxv.h>
#endif

namespace nereid::kernels {

#if defined(__x86_64__)

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

bool HasNeon() { return false; }
bool HasNeonDotProd() { return false; }

#else

bool HasAvx2Fma() { return false; }
bool HasAvx512F() { return false; }
bool HasAvx512Vnni() { return false; }

#if defined(__aarch64__)
bool HasNeon() { return true; }  // mandatory in the AArch64 Linux ABI

bool HasNeonDotProd() {
  // The kernel's hwcap bit for SDOT/UDOT (asm/hwcap.h HWCAP_ASIMDDP).
  constexpr unsigned long kAsimdDp = 1UL << 20;
  static const bool has = (getauxval(AT_HWCAP) & kAsimdDp) != 0;
  return has;
}
#else
bool HasNeon() { return false; }
bool HasNeonDotProd() { return false; }
#endif

#endif

}  // namespace nereid::kernels
