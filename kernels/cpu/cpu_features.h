// What the CPU can run, checked once: the kernels pick their code paths from it at run time. Each
// answers false on the other architecture (x86-64 or AArch64).
#pragma once

namespace nereid::kernels {

bool HasAvx2Fma();      // AVX2 and FMA
bool HasAvx512F();      // AVX-512F, with AVX2 and FMA
bool HasAvx512Vnni();   // AVX-512F, BW and VNNI (vpdpbusd on 512-bit registers)
bool HasNeon();         // AArch64 Advanced SIMD (every AArch64 Linux CPU)
bool HasNeonDotProd();  // AArch64 SDOT/UDOT (Armv8.2-A DotProd: Cortex-A55/A76 and later)

}  // namespace nereid::kernels
