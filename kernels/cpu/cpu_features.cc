#include "cpu/cpu_features.h"

#if defined(__aarch64__)
#include <sys/auxv.h>
#elif defined(__x86_64__)
#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>
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
      HasAvx512F() && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
      __builtin_cpu_supports("avx512vnni");  // (VL: the 256-bit vpdpbusd of narrow tiles)
  return has;
}

bool HasAmxInt8() {
  static const bool has = [] {
    unsigned a = 0, b = 0, c = 0, d = 0;
    if (!HasAvx512Vnni() || !__get_cpuid_count(7, 0, &a, &b, &c, &d)) return false;
    const bool tile = (d >> 24) & 1, int8 = (d >> 25) & 1;
    if (!tile || !int8) return false;
    // Linux 5.16+: tile data (XFEATURE_XTILEDATA, 18) is off until the process asks for it
    // (ARCH_REQ_XCOMP_PERM); older kernels, or a seccomp filter, refuse and AMX stays unused.
    constexpr long kReqXcompPerm = 0x1023, kXtileData = 18;
    return syscall(SYS_arch_prctl, kReqXcompPerm, kXtileData) == 0;
  }();
  return has;
}

bool HasNeon() { return false; }
bool HasNeonDotProd() { return false; }

#else

bool HasAmxInt8() { return false; }

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
