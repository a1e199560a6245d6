// What the CPU can run, checked once: the kernels pick their code paths from it at run time.
#pragma once

namespace nereid::kernels {

bool HasAvx2Fma();  // AVX2 and FMA
bool HasAvx512F();  // AVX-512F, with AVX2 and FMA

}  // namespace nereid::kernels
