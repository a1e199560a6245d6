// The instruction-set parts of the int8 GEMM (gemm_int8.cc picks among them at run time): each
// lives in the folder of its architecture (kernels/cpu/x86, kernels/cpu/arm), built only there.
// Internal to the kernels library.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "cpu/gemm.h"
#include "cpu/gemm_int8.h"

namespace nereid::kernels::int8 {

constexpr int64_t kPanel = 16;  // output channels per packed panel

// A row's largest magnitude so far and one more value: NaN once any was (a row with a NaN gets a
// NaN scale, so its outputs are NaN as in fp32, not the products of zeros it quantizes to);
// std::max keeps its first operand against NaN.
inline float AbsMaxKeepingNaN(float acc, float v) { return MaxKeepingNaN(acc, std::fabs(v)); }

// v * inv rounded to nearest even, clamped to [-127, 127]; NaN (a row whose scale is NaN) as 0,
// not cast (undefined behaviour).
inline int8_t QuantizeScalar(float v, float inv) {
  const float t = std::nearbyint(v * inv);
  return t != t ? int8_t{0} : static_cast<int8_t>(t < -127.f ? -127.f : (t > 127.f ? 127.f : t));
}
constexpr int kMaxRows = 4;  // rows of x per micro-kernel call

inline int32_t Load4(const void* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

// f(std::integral_constant<int, rows>) for rows 1 .. kMaxRows.
template <typename F>
void ForRows(int rows, const F& f) {
  switch (rows) {
    case 1:
      f(std::integral_constant<int, 1>{});
      break;
    case 2:
      f(std::integral_constant<int, 2>{});
      break;
    case 3:
      f(std::integral_constant<int, 3>{});
      break;
    default:
      f(std::integral_constant<int, 4>{});
  }
}

// The micro-kernels: acc[r][c] = sum of x row r times panel column c, rows < 'rows' (at most
// kMaxRows), over k4 groups of 4 bytes, rows of x 'stride' bytes apart.
// x86-64 (x86/gemm_int8_x86.cc): avx512-vnni takes x as q + 128 and one or two panels (p1 may be
// null); avx2 one panel, x signed.
void MicroVnni(int rows, const uint8_t* x, int64_t stride, int64_t k4, const int8_t* p0,
               const int8_t* p1, int32_t (*acc)[2 * kPanel]);
void MicroAvx2(int rows, const int8_t* x, int64_t stride, int64_t k4, const int8_t* p0,
               int32_t (*acc)[2 * kPanel]);
// AArch64 (arm/gemm_int8_arm.cc): SDOT, and SMULL/SADALP on Armv8.0; one panel, x signed.
void MicroNeonDot(int rows, const int8_t* x, int64_t stride, int64_t k4, const int8_t* p0,
                  int32_t (*acc)[2 * kPanel]);
void MicroNeon(int rows, const int8_t* x, int64_t stride, int64_t k4, const int8_t* p0,
               int32_t (*acc)[2 * kPanel]);

// One row quantized (QuantizeRowsInt8's arithmetic): its scale, q into 'q'.
float QuantizeRowAvx2(const float* row, int64_t k, int8_t* q);
float QuantizeRowAvx512(const float* row, int64_t k, int8_t* q);
// m rows (ldx apart) quantized into rows of 'stride' bytes, a multiple of 16 (the bytes from k
// on 0, or all as q + 128 when 'offset'), scale[i] each row's: QuantizeRowAvx512's arithmetic,
// the rows in one call.
void QuantizeRowsStridedAvx512(const float* x, int64_t m, int64_t ldx, int64_t k, int8_t* q,
                               int64_t stride, float* scale, bool offset);
float QuantizeRowNeon(const float* row, int64_t k, int8_t* q);

// GemmInt8Fused's bodies on x86-64: rows already quantized ('xs' their scales), rows 'stride'
// bytes apart, y's columns [j_begin, j_end) (j_begin a multiple of 32). Vnni: x as q + 128, tiles
// of 12 rows x 32 channels in registers. Amx: x signed, its rows padded with zeros to a multiple
// of 32 and k to whole 64-byte tiles.
void FusedVnni(int64_t m, const uint8_t* xq, int64_t stride, const float* xs, const PackedInt8W& w,
               float* y, int64_t ldy, const GemmEpilogue& ep, int64_t j_begin, int64_t j_end);
// GemmInt8FusedTaps's body: tiles of 12 rows x 32 channels, each piece's int32 sums scaled
// into fp32 sums held in memory.
void FusedVnniTaps(int64_t m, const uint8_t* xq, int64_t stride, const float* xs, int64_t taps,
                   const PackedInt8W& w, const int32_t* tap_offset, float* y, int64_t ldy,
                   const GemmEpilogue& ep, int64_t j_begin, int64_t j_end);
void FusedAmx(int64_t m, const int8_t* xq, int64_t stride, const float* xs, const PackedInt8W& w,
              float* y, int64_t ldy, const GemmEpilogue& ep, int64_t j_begin, int64_t j_end);

}  // namespace nereid::kernels::int8
