// What the CPU can run, checked once: the kernels pick their code paths from it at run time. Each
// answers false on the other architecture (x86-64 or AArch64).
#pragma once

namespace nereid::kernels {

bool HasAvx2Fma();     // AVX2 and FMA
bool HasAvx512F();     // AVX-512F, with AVX2 and FMA
bool HasAvx512Vnni();  // AVX-512F, BW and VNNI (vpdpbusd on 512-bit registers)
// AMX-TILE and AMX-INT8 (Sapphire Rapids and later), with AVX-512 VNNI, and the kernel's
// permission for this process to use the tile data (asked for on the first call).
bool HasAmxInt8();
bool HasNeon();         // AArch64 Advanced SIMD (every AArch64 Linux CPU)
bool HasNeonDotProd();  // AArch64 SDOT/UDOT (Armv8.2-A DotProd: Cortex-A55/A76 and later)

}  // namespace nereid::kernels

// Plain C++ loops the compiler vectorizes: on x86-64 a function marked so is compiled for AVX-512,
// AVX2 and the baseline, the CPU picking one when the library loads (NEON is AArch64's baseline).
// (Not under ThreadSanitizer: the clones' resolver runs while the dynamic loader relocates, before
// TSan's runtime starts, and its instrumented code crashes there.)
#if defined(__x86_64__) && !defined(__SANITIZE_THREAD__)
#define NEREID_VECTOR_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define NEREID_VECTOR_CLONES
#endif
