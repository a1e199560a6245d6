// What the CPU can run, checked once: the kernels pick their code paths from it at run time.
#pragma once

namespace nereid::kernels {

bool HasAvx2Fma();     // AVX2 and FMA
bool HasAvx512F();     // AVX-512F, with AVX2 and FMA
bool HasAvx512Vnni();  // AVX-512F, BW and VNNI (vpdpbusd on 512-bit registers)

}  // namespace nereid::kernels
