// The int8 GEMM's x86-64 parts (gemm_int8_isa.h): the avx512-vnni and avx2 micro-kernels, the
// AVX2 and AVX-512 row quantizers, and GemmInt8Fused's VNNI and AMX bodies.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>
#include <utility>

#include "cpu/gemm_int8_isa.h"

// GCC 12 at -O3 warns that its own unmasked max/min/cvt intrinsics read an uninitialized '__Y'
// (their undefined passthrough): a false positive.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

namespace nereid::kernels::int8 {
namespace {

// The accumulators of 16 channels (512 bits) or 8 (256 bits: a 256-bit vpdpbusd costs half a
// 512-bit one on Zen 4): a dot product step from the broadcast x (a 256-bit one reads its lower
// half), and the load, store and zero of such a vector.
#define NEREID_VNNI __attribute__((target("avx512f,avx512bw,avx512vnni,avx512vl"), always_inline))
NEREID_VNNI inline __m512i Dot(__m512i acc, __m512i x, __m512i w) {
  return _mm512_dpbusd_epi32(acc, x, w);
}
NEREID_VNNI inline __m256i Dot(__m256i acc, __m512i x, __m256i w) {
  return _mm256_dpbusd_epi32(acc, _mm512_castsi512_si256(x), w);
}
template <typename V>
NEREID_VNNI inline V LoadVector(const int8_t* p) {
  if constexpr (sizeof(V) == 64)
    return _mm512_loadu_si512(p);
  else
    return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
}
NEREID_VNNI inline void StoreVector(int32_t* to, __m512i v) { _mm512_store_si512(to, v); }
NEREID_VNNI inline void StoreVector(int32_t* to, __m256i v) {
  _mm256_store_si256(reinterpret_cast<__m256i*>(to), v);
}
template <typename V>
NEREID_VNNI inline V Zero() {
  if constexpr (sizeof(V) == 64)
    return _mm512_setzero_si512();
  else
    return _mm256_setzero_si256();
}

// Rows r < R of x (q + 128, rows 'stride' bytes apart, k4 groups of 4 bytes) against the first
// kCols (8, 16, 24 or 32) channels of panels p0 and p1, with vpdpbusd: lo[r] p0's 16 channels (its
// first 8 at kCols 8), hi[r] p1's 16 (32) or first 8 (24; untouched at 16 and less). A panel's
// group of 4 bytes per channel lies channel by channel, so its first 8 channels are its first 32
// bytes: two full panels for every tile did a third to a half of the products for nothing in
// narrow layers (RapidOCR's detector's 96 -> 24 3x3 layers, MobileNetV2's outputs of 16, 24 and
// 160). Rows are addressed from one pointer per three (row + 0, + stride, + 2 stride fit x86's
// scaled index): twelve row addresses of their own took more registers than x86 has, reloaded
// from the stack every step. (The two halves are arrays of their own types: as 512-bit vectors
// used 256 bits at a time, GCC spilled them.)
template <bool kFull>  // (a trait, not std::conditional_t: vector types as template arguments
struct SumsOf {        // lose their attributes)
  using type = __m512i;
};
template <>
struct SumsOf<false> {
  using type = __m256i;
};
template <int kCols>
using LoSums = typename SumsOf<(kCols >= 16)>::type;
template <int kCols>
using HiSums = typename SumsOf<(kCols == 32)>::type;
template <int R, int kCols>
NEREID_VNNI inline void DotPanels(LoSums<kCols> (&lo)[R], HiSums<kCols> (&hi)[R], const uint8_t* x,
                                  int64_t stride, int64_t k4, const int8_t* p0, const int8_t* p1) {
  static_assert(kCols == 8 || kCols == 16 || kCols == 24 || kCols == 32);
  using Lo = LoSums<kCols>;
  using Hi = HiSums<kCols>;
  constexpr bool kSecond = kCols > 16;
  // Every loop over R unrolled and every index a constant, here and where the sums are read: an
  // index known only at run time kept the accumulators in memory, stored each step.
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r) lo[r] = Zero<Lo>(), hi[r] = Zero<Hi>();
  constexpr int kBases = (R + 2) / 3;
  const uint8_t* base[kBases];
#pragma GCC unroll 4
  for (int i = 0; i < kBases; ++i) base[i] = x + 3 * i * stride;
  for (int64_t g = 0; g < k4; ++g) {
    const Lo w0 = LoadVector<Lo>(p0 + g * 64);
    const Hi w1 = kSecond ? LoadVector<Hi>(p1 + g * 64) : Zero<Hi>();
#pragma GCC unroll 12
    for (int r = 0; r < R; ++r) {
      const __m512i xb = _mm512_set1_epi32(Load4(base[r / 3] + (r % 3) * stride));
      lo[r] = Dot(lo[r], xb, w0);
      if constexpr (kSecond) hi[r] = Dot(hi[r], xb, w1);
    }
#pragma GCC unroll 4
    for (int i = 0; i < kBases; ++i) base[i] += 4;
  }
}

// The fp32 sums at 'to' (16 or 8 lanes) plus float(sums - off) * s: a window piece's exact
// int32 products scaled by its pixel's scale.
#define NEREID_VNNI_FMA \
  __attribute__((target("avx512f,avx512bw,avx512vnni,avx512vl,fma"), always_inline))
NEREID_VNNI_FMA inline void AddScaled(float* to, __m512i sums, __m512i off, __m512 s) {
  _mm512_store_ps(
      to, _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(sums, off)), s, _mm512_load_ps(to)));
}
NEREID_VNNI_FMA inline void AddScaled(float* to, __m256i sums, __m256i off, __m512 s) {
  _mm256_store_ps(to, _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(sums, off)),
                                      _mm512_castps512_ps256(s), _mm256_load_ps(to)));
}

#undef NEREID_VNNI
#undef NEREID_VNNI_FMA

// The same, the sums stored to sums[r][0 .. kCols) (the fused tiles finish them from there: with
// the finish's registers live around the loop, GCC spilled six accumulators to the stack and
// copied the others between registers every step); the columns past kCols are left as they were.
template <int R, int kCols>
__attribute__((target("avx512f,avx512bw,avx512vnni,avx512vl"), noinline)) void DotPanelsToMemory(
    int32_t (*sums)[2 * kPanel], const uint8_t* x, int64_t stride, int64_t k4, const int8_t* p0,
    const int8_t* p1) {
  LoSums<kCols> lo[R];
  HiSums<kCols> hi[R];
  DotPanels<R, kCols>(lo, hi, x, stride, k4, p0, p1);
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r) {
    StoreVector(sums[r], lo[r]);
    if constexpr (kCols > 16) StoreVector(sums[r] + kPanel, hi[r]);
  }
}

// GemmInt8FusedTaps's sums: per piece t of the window (piece_groups groups of 4 bytes, the
// weights' groups t * piece_groups on), DotPanelsToMemory's int32 sums, less the piece's offsets
// (offset + t * offset_ld: 128 * its weights' sums from column j0 on), times the row's scale for
// the piece (xs[r * taps + t]), added into sums[r][0 .. kCols) in fp32. Both kinds of sums pass
// through memory (L1): with the piece's loop around DotPanels, GCC kept its accumulators on the
// stack, twice the time of the products alone.
template <int R, int kCols>
__attribute__((target("avx512f,avx512bw,avx512vnni,avx512vl,fma"), noinline)) void DotTapsToMemory(
    float (*sums)[2 * kPanel], const uint8_t* x, int64_t stride, const float* xs, int64_t taps,
    int64_t piece_groups, const int8_t* p0, const int8_t* p1, const int32_t* offset,
    int64_t offset_ld) {
  using Lo = LoSums<kCols>;
  using Hi = HiSums<kCols>;
  constexpr bool kSecond = kCols > 16;
  alignas(64) int32_t piece[R][2 * kPanel];
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r) {
    _mm512_store_ps(sums[r], _mm512_setzero_ps());
    _mm512_store_ps(sums[r] + kPanel, _mm512_setzero_ps());
  }
  for (int64_t t = 0; t < taps; ++t) {
    const int64_t first = t * piece_groups;
    DotPanelsToMemory<R, kCols>(piece, x + 4 * first, stride, piece_groups, p0 + first * 64,
                                p1 + first * 64);
    const int8_t* off = reinterpret_cast<const int8_t*>(offset + t * offset_ld);
    const Lo off_lo = LoadVector<Lo>(off);
    const Hi off_hi = kSecond ? LoadVector<Hi>(off + 4 * kPanel) : Zero<Hi>();
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      const __m512 scale = _mm512_set1_ps(xs[r * taps + t]);
      const int8_t* sum = reinterpret_cast<const int8_t*>(piece[r]);
      AddScaled(sums[r], LoadVector<Lo>(sum), off_lo, scale);
      if constexpr (kSecond)
        AddScaled(sums[r] + kPanel, LoadVector<Hi>(sum + 4 * kPanel), off_hi, scale);
    }
  }
}

// acc[r][c] for rows r < R of x (each k4 groups of 4 bytes, rows 'stride' bytes apart) against one
// or two panels (16 channels each); 'x' is q + 128 as unsigned bytes.
template <int R>
__attribute__((target("avx512f,avx512bw,avx512vnni,avx512vl"))) void KernelVnni(
    const uint8_t* x, int64_t stride, int64_t k4, const int8_t* p0, const int8_t* p1,
    int32_t (*acc)[2 * kPanel]) {
  __m512i lo[R], hi[R];
  if (p1 != nullptr) {
    DotPanels<R, 32>(lo, hi, x, stride, k4, p0, p1);
  } else {
    __m256i unused[R];
    DotPanels<R, 16>(lo, unused, x, stride, k4, p0, p1);
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) hi[r] = _mm512_setzero_si512();
  }
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r) {
    _mm512_storeu_si512(acc[r], lo[r]);
    _mm512_storeu_si512(acc[r] + kPanel, hi[r]);
  }
}

// The same for one panel with AVX2: x as signed bytes; |x| times w with x's sign, so that
// vpmaddubsw's pairs of products stay within int16.
template <int R>
__attribute__((target("avx2"))) void KernelAvx2(const int8_t* x, int64_t stride, int64_t k4,
                                                const int8_t* p0, int32_t (*acc)[2 * kPanel]) {
  __m256i a[R][2];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) a[r][0] = a[r][1] = _mm256_setzero_si256();
  const __m256i ones = _mm256_set1_epi16(1);
  for (int64_t g = 0; g < k4; ++g) {
    const __m256i wa = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p0 + g * 64));
    const __m256i wb = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p0 + g * 64 + 32));
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      const __m256i xb = _mm256_set1_epi32(Load4(x + r * stride + 4 * g));
      const __m256i ax = _mm256_abs_epi8(xb);
      a[r][0] = _mm256_add_epi32(
          a[r][0], _mm256_madd_epi16(_mm256_maddubs_epi16(ax, _mm256_sign_epi8(wa, xb)), ones));
      a[r][1] = _mm256_add_epi32(
          a[r][1], _mm256_madd_epi16(_mm256_maddubs_epi16(ax, _mm256_sign_epi8(wb, xb)), ones));
    }
  }
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(acc[r]), a[r][0]);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(acc[r] + 8), a[r][1]);
  }
}

__attribute__((target("avx2,fma"))) float QuantizeAvx2(const float* row, int64_t k, int8_t* q) {
  const __m256 sign = _mm256_set1_ps(-0.f);
  __m256 vmax = _mm256_setzero_ps(), nan = _mm256_setzero_ps();
  int64_t l = 0;
  for (; l + 8 <= k; l += 8) {
    const __m256 v = _mm256_loadu_ps(row + l);
    vmax = _mm256_max_ps(vmax, _mm256_andnot_ps(sign, v));
    nan = _mm256_or_ps(nan, _mm256_cmp_ps(v, v, _CMP_UNORD_Q));  // (max drops NaN)
  }
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, vmax);
  float absmax = _mm256_movemask_ps(nan) != 0 ? std::numeric_limits<float>::quiet_NaN() : 0.f;
  for (float v : lanes) absmax = AbsMaxKeepingNaN(absmax, v);
  for (; l < k; ++l) absmax = AbsMaxKeepingNaN(absmax, row[l]);
  const float inv = absmax > 0.f ? 127.f / absmax : 0.f;
  const __m256 vinv = _mm256_set1_ps(inv);
  const __m256i lo = _mm256_set1_epi32(-127), hi = _mm256_set1_epi32(127);
  for (l = 0; l + 8 <= k; l += 8) {
    __m256i v = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(row + l), vinv));
    v = _mm256_min_epi32(_mm256_max_epi32(v, lo), hi);
    const __m128i w = _mm_packs_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    const __m128i b = _mm_packs_epi16(w, w);
    std::memcpy(q + l, &b, 8);
  }
  for (; l < k; ++l) q[l] = QuantizeScalar(row[l], inv);
  return absmax / 127.f;
}

// The largest magnitude of a row of k floats, 16 at a time, its tail masked; NaN if any is (max
// drops NaN: an unordered compare of each vector with itself tracks them).
__attribute__((target("avx512f"))) inline float AbsMaxAvx512(const float* row, int64_t k) {
  __m512 vmax = _mm512_setzero_ps();
  __mmask16 nan = 0;
  int64_t l = 0;
  if (k >= 64) {  // four chains: one max a vector waited on the last (a 3x3's 864-value windows)
    __m512 m1 = vmax, m2 = vmax, m3 = vmax;
    for (; l + 64 <= k; l += 64) {
      const __m512 v0 = _mm512_loadu_ps(row + l), v1 = _mm512_loadu_ps(row + l + 16);
      const __m512 v2 = _mm512_loadu_ps(row + l + 32), v3 = _mm512_loadu_ps(row + l + 48);
      vmax = _mm512_max_ps(vmax, _mm512_abs_ps(v0));
      m1 = _mm512_max_ps(m1, _mm512_abs_ps(v1));
      m2 = _mm512_max_ps(m2, _mm512_abs_ps(v2));
      m3 = _mm512_max_ps(m3, _mm512_abs_ps(v3));
      nan = _mm512_kor(nan, _mm512_kor(_mm512_kor(_mm512_cmp_ps_mask(v0, v0, _CMP_UNORD_Q),
                                                  _mm512_cmp_ps_mask(v1, v1, _CMP_UNORD_Q)),
                                       _mm512_kor(_mm512_cmp_ps_mask(v2, v2, _CMP_UNORD_Q),
                                                  _mm512_cmp_ps_mask(v3, v3, _CMP_UNORD_Q))));
    }
    vmax = _mm512_max_ps(_mm512_max_ps(vmax, m1), _mm512_max_ps(m2, m3));
  }
  for (; l + 16 <= k; l += 16) {
    const __m512 v = _mm512_loadu_ps(row + l);
    vmax = _mm512_max_ps(vmax, _mm512_abs_ps(v));
    nan = _mm512_kor(nan, _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q));
  }
  const __mmask16 tail = static_cast<__mmask16>((1u << (k - l)) - 1);
  if (tail != 0) {
    const __m512 v = _mm512_maskz_loadu_ps(tail, row + l);
    vmax = _mm512_max_ps(vmax, _mm512_abs_ps(v));
    nan = _mm512_kor(nan, _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q));
  }
  return nan != 0 ? std::numeric_limits<float>::quiet_NaN() : _mm512_reduce_max_ps(vmax);
}

// 16 values times 'inv', rounded to nearest even (vcvtps2dq, as the others do) and clamped to
// [-127, 127].
__attribute__((target("avx512f"))) inline __m512i QuantizeLanes(__m512 v, __m512 inv) {
  return _mm512_min_epi32(
      _mm512_max_epi32(_mm512_cvtps_epi32(_mm512_mul_ps(v, inv)), _mm512_set1_epi32(-127)),
      _mm512_set1_epi32(127));
}

// The same 16 at a time, tails masked.
__attribute__((target("avx512f"))) float QuantizeAvx512(const float* row, int64_t k, int8_t* q) {
  const float absmax = AbsMaxAvx512(row, k);
  const __m512 vinv = _mm512_set1_ps(absmax > 0.f ? 127.f / absmax : 0.f);
  int64_t l = 0;
  for (; l + 16 <= k; l += 16)
    _mm_storeu_si128(reinterpret_cast<__m128i*>(q + l),
                     _mm512_cvtepi32_epi8(QuantizeLanes(_mm512_loadu_ps(row + l), vinv)));
  const __mmask16 tail = static_cast<__mmask16>((1u << (k - l)) - 1);
  if (tail != 0)
    _mm512_mask_cvtepi32_storeu_epi8(q + l, tail,
                                     QuantizeLanes(_mm512_maskz_loadu_ps(tail, row + l), vinv));
  return absmax / 127.f;
}

constexpr int kFusedRows = 12;  // 24 accumulators, two weight vectors, one broadcast: 27 of 32

// Columns c0 .. c0 + width (at most 16) of 'rows' rows of y from their exact int32 dot products
// (acc, ld apart; less 'offset' per column where given: the VNNI kernels' x + 128 times w):
// dot * x_scale * w_scale + bias (+ residual), or from fp32 sums already scaled per row
// (GemmInt8FusedTaps's; xs unused): sum * w_scale + bias (+ residual); then the activation (Relu,
// Clip, HardSwish, HardSigmoid and LeakyRelu in vector form, NaN kept; GELU after the store). The
// scales, bias and activation are loaded once for the block, not per row: AMX's 32-row tiles and
// the VNNI tiles of 1x1 convolutions of 16 to 32 channels (MobileNetV2's 16 -> 96: 4 dot products
// per output vector) spent more in a per-row finish than in the tiles.
template <typename Sum>
__attribute__((target("avx512f,avx512bw"))) inline void FinishRows16(
    const Sum* acc, int64_t ld, int64_t rows, const float* xs, const PackedInt8W& w, int64_t c0,
    int64_t width, float* y, int64_t ldy, const GemmEpilogue& ep, const float* residual,
    const int32_t* offset = nullptr) {
  const __mmask16 mask = static_cast<__mmask16>((1u << width) - 1);
  const __m512i off =
      offset != nullptr ? _mm512_maskz_loadu_epi32(mask, offset + c0) : _mm512_setzero_si512();
  const __m512 scale = _mm512_maskz_loadu_ps(mask, w.scale() + c0);
  const __m512 bias =
      ep.bias != nullptr ? _mm512_maskz_loadu_ps(mask, ep.bias + c0) : _mm512_setzero_ps();
  const __m512 lo = _mm512_set1_ps(ep.lo), hi = _mm512_set1_ps(ep.hi);
  const int activation = ep.activation;
  const int64_t ld_residual = ep.ld_residual;
  auto finish = [&](auto act) __attribute__((target("avx512f,avx512bw"), always_inline)) {
    constexpr int kAct = decltype(act)::value;
    for (int64_t r = 0; r < rows; ++r) {
      __m512 v;
      if constexpr (std::is_same_v<Sum, float>) {
        v = _mm512_fmadd_ps(_mm512_maskz_load_ps(mask, acc + r * ld), scale, bias);
      } else {
        const __m512i dot = _mm512_sub_epi32(_mm512_maskz_load_epi32(mask, acc + r * ld), off);
        v = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), _mm512_mul_ps(_mm512_set1_ps(xs[r]), scale),
                            bias);
      }
      if (residual != nullptr)
        v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(mask, residual + r * ld_residual + c0));
      // (NaN kept: max/min return their second operand where either is NaN.)
      if constexpr (kAct == GemmEpilogue::kRelu) v = _mm512_max_ps(_mm512_setzero_ps(), v);
      if constexpr (kAct == GemmEpilogue::kClip) v = _mm512_min_ps(hi, _mm512_max_ps(lo, v));
      if constexpr (kAct == GemmEpilogue::kHardSwish || kAct == GemmEpilogue::kHardSigmoid) {
        const __m512 t = kAct == GemmEpilogue::kHardSwish
                             ? _mm512_fmadd_ps(v, _mm512_set1_ps(1.f / 6.f), _mm512_set1_ps(0.5f))
                             : _mm512_fmadd_ps(lo, v, hi);
        const __m512 clamped =
            _mm512_min_ps(_mm512_set1_ps(1.f), _mm512_max_ps(_mm512_setzero_ps(), t));
        v = kAct == GemmEpilogue::kHardSwish ? _mm512_mul_ps(v, clamped) : clamped;
      }
      if constexpr (kAct == GemmEpilogue::kLeakyRelu)
        v = _mm512_mask_mul_ps(v, _mm512_cmp_ps_mask(v, _mm512_setzero_ps(), _CMP_LT_OQ), v, lo);
      float* out = y + r * ldy + c0;
      _mm512_mask_storeu_ps(out, mask, v);
      if constexpr (kAct == -1) ActivateEpilogueRow(out, width, ep);  // the others, after the store
    }
  };
  switch (activation) {
    case GemmEpilogue::kNone:
      return finish(std::integral_constant<int, GemmEpilogue::kNone>{});
    case GemmEpilogue::kRelu:
      return finish(std::integral_constant<int, GemmEpilogue::kRelu>{});
    case GemmEpilogue::kClip:
      return finish(std::integral_constant<int, GemmEpilogue::kClip>{});
    case GemmEpilogue::kHardSwish:
      return finish(std::integral_constant<int, GemmEpilogue::kHardSwish>{});
    case GemmEpilogue::kHardSigmoid:
      return finish(std::integral_constant<int, GemmEpilogue::kHardSigmoid>{});
    case GemmEpilogue::kLeakyRelu:
      return finish(std::integral_constant<int, GemmEpilogue::kLeakyRelu>{});
    default:
      return finish(std::integral_constant<int, -1>{});
  }
}

// A window's pieces with scales of their own (GemmInt8FusedTaps): 'taps' pieces, their offsets
// [taps][ld]; taps 0: one scale per row (GemmInt8Fused).
struct Pieces {
  int64_t taps = 0, ld = 0;
  const int32_t* offset = nullptr;
};

// Rows r < R of xq (q + 128, rows 'stride' bytes apart) against panels p and p + 1 (or p alone),
// finished into y's columns j0 .. j0 + cols; products only as wide as the columns (8, 16, 24 or
// 32).
template <int R>
__attribute__((target("avx512f,avx512bw,avx512vnni,avx512vl"))) void FusedTileVnni(
    const uint8_t* xq, int64_t stride, const float* xs, const PackedInt8W& w, int64_t p,
    int64_t cols, float* y, int64_t ldy, const GemmEpilogue& ep, const float* residual,
    const Pieces& pieces) {
  const int64_t groups = w.groups(), j0 = p * kPanel;
  const int halves = cols > kPanel ? 2 : 1;
  const int8_t* p0 = w.Panel(p);
  const int8_t* p1 = halves == 2 ? w.Panel(p + 1) : p0;
  alignas(64) int32_t sums[R][2 * kPanel];
  alignas(64) float scaled[R][2 * kPanel];
  auto dot = [&](auto width) {
    constexpr int kCols = decltype(width)::value;
    if (pieces.taps == 0)
      DotPanelsToMemory<R, kCols>(sums, xq, stride, groups, p0, p1);
    else
      DotTapsToMemory<R, kCols>(scaled, xq, stride, xs, pieces.taps, groups / pieces.taps, p0, p1,
                                pieces.offset + j0, pieces.ld);
  };
  if (cols > kPanel + 8)
    dot(std::integral_constant<int, 32>{});
  else if (cols > kPanel)
    dot(std::integral_constant<int, 24>{});
  else if (cols > 8)
    dot(std::integral_constant<int, 16>{});
  else
    dot(std::integral_constant<int, 8>{});
#pragma GCC unroll 2
  for (int h = 0; h < 2; ++h) {
    if (h == halves) break;
    const int64_t c0 = j0 + h * kPanel, width = std::min<int64_t>(kPanel, j0 + cols - c0);
    if (pieces.taps == 0)
      FinishRows16(sums[0] + h * kPanel, 2 * kPanel, R, xs, w, c0, width, y, ldy, ep, residual,
                   w.offset());
    else
      FinishRows16(scaled[0] + h * kPanel, 2 * kPanel, R, nullptr, w, c0, width, y, ldy, ep,
                   residual);
  }
}

// f(std::integral_constant<int, rows>) for rows 1 .. kFusedRows.
template <typename F>
void FusedRows(int rows, F&& f) {
  [&]<int... R>(std::integer_sequence<int, R...>) {
    ((rows == R + 1 ? (f(std::integral_constant<int, R + 1>{}), 0) : 0), ...);
  }
  (std::make_integer_sequence<int, kFusedRows>{});
}

// AMX: blocks of 32 rows x 32 channels as four 16 x 16 int32 tiles (tmm0-3), fed per 64 bytes of
// k by two tiles of x's rows (tmm4-5, signed bytes, rows 'stride' apart) and two of the weights
// (tmm6-7: a panel's 16 groups of 4 bytes x 16 channels, 64 bytes per group, as it lies).
struct alignas(64) TileConfig {
  uint8_t palette = 1, start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

__attribute__((target("amx-tile,amx-int8,avx512f,avx512bw"))) void TilesAmx(
    int64_t m, const int8_t* xq, int64_t stride, const float* xs, const PackedInt8W& w, float* y,
    int64_t ldy, const GemmEpilogue& ep, int64_t j_begin, int64_t j_end) {
  // (A local copy: read through 'ep', its fields would be reloaded after every store to y.)
  const GemmEpilogue local = ep;
  TileConfig config;
  for (int t = 0; t < 8; ++t) config.rows[t] = 16, config.colsb[t] = 64;
  _tile_loadconfig(&config);
  const int64_t panels = (j_end + kPanel - 1) / kPanel, blocks = w.k4() / 16;
  alignas(64) int32_t acc[32][2 * kPanel];
  for (int64_t i0 = 0; i0 < m; i0 += 32) {  // xq has rows to a multiple of 32 (zeros past m)
    const int8_t* x0 = xq + i0 * stride;
    const int8_t* x1 = x0 + 16 * stride;
    for (int64_t p = j_begin / kPanel; p < panels; p += 2) {
      const int8_t* w0 = w.Panel(p);
      const int8_t* w1 = p + 1 < panels ? w.Panel(p + 1) : w0;  // (its columns unused)
      _tile_zero(0);
      _tile_zero(1);
      _tile_zero(2);
      _tile_zero(3);
      for (int64_t b = 0; b < blocks; ++b) {
        _tile_loadd(4, x0 + b * 64, stride);
        _tile_loadd(5, x1 + b * 64, stride);
        _tile_loadd(6, w0 + b * 1024, 64);
        _tile_loadd(7, w1 + b * 1024, 64);
        _tile_dpbssd(0, 4, 6);
        _tile_dpbssd(1, 4, 7);
        _tile_dpbssd(2, 5, 6);
        _tile_dpbssd(3, 5, 7);
      }
      _tile_stored(0, &acc[0][0], 2 * kPanel * 4);
      _tile_stored(1, &acc[0][kPanel], 2 * kPanel * 4);
      _tile_stored(2, &acc[16][0], 2 * kPanel * 4);
      _tile_stored(3, &acc[16][kPanel], 2 * kPanel * 4);
      const int64_t j0 = p * kPanel, cols = std::min<int64_t>(2 * kPanel, j_end - j0);
      const int64_t rows = std::min<int64_t>(32, m - i0);
      for (int64_t h = 0; h * kPanel < cols; ++h)
        FinishRows16(&acc[0][h * kPanel], 2 * kPanel, rows, xs + i0, w, j0 + h * kPanel,
                     std::min<int64_t>(kPanel, cols - h * kPanel), y + i0 * ldy, ldy, local,
                     local.residual != nullptr ? local.residual + i0 * local.ld_residual : nullptr);
    }
  }
  _tile_release();
}

}  // namespace

void MicroVnni(int rows, const uint8_t* x, int64_t stride, int64_t k4, const int8_t* p0,
               const int8_t* p1, int32_t (*acc)[2 * kPanel]) {
  ForRows(rows, [&](auto r) { KernelVnni<decltype(r)::value>(x, stride, k4, p0, p1, acc); });
}

void MicroAvx2(int rows, const int8_t* x, int64_t stride, int64_t k4, const int8_t* p0,
               int32_t (*acc)[2 * kPanel]) {
  ForRows(rows, [&](auto r) { KernelAvx2<decltype(r)::value>(x, stride, k4, p0, acc); });
}

float QuantizeRowAvx2(const float* row, int64_t k, int8_t* q) { return QuantizeAvx2(row, k, q); }
float QuantizeRowAvx512(const float* row, int64_t k, int8_t* q) {
  return QuantizeAvx512(row, k, q);
}

// Each row in two passes over its floats (its largest magnitude, then the bytes), the second
// writing all 'stride' bytes 16 at a time: past k, zeros loaded give q = 0 (0x80 as q + 128).
// Quantizing a row and then padding and flipping its bytes in passes of their own took 10% of
// MobileNetV2's int8 run (rows of 16-320 values).
__attribute__((target("avx512f,avx512bw"))) void QuantizeRowsStridedAvx512(
    const float* x, int64_t m, int64_t ldx, int64_t k, int8_t* q, int64_t stride, float* scale,
    bool offset) {
  const __m512i shift = _mm512_set1_epi32(offset ? 128 : 0);
  const __mmask16 tail = static_cast<__mmask16>((1u << (k % 16)) - 1);
  // 64 values at a time: their int32s narrowed by two saturating packs (the clamp to 127 with
  // them, -127 after) and put back in order by one permute, instead of a clamp and a vpmovdb per
  // 16 (the same bytes: a NaN's INT_MIN saturates to -127 either way).
  const __m512i flip = _mm512_set1_epi8(offset ? static_cast<char>(0x80) : 0);  // q + 128
  const __m512i low = _mm512_set1_epi8(-127);
  const __m512i order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
  static const bool bw = __builtin_cpu_supports("avx512bw");  // (the packs; every AVX-512 Xeon)
  for (int64_t i = 0; i < m; ++i) {
    const float* row = x + i * ldx;
    const float absmax = AbsMaxAvx512(row, k);
    const __m512 vinv = _mm512_set1_ps(absmax > 0.f ? 127.f / absmax : 0.f);
    scale[i] = absmax / 127.f;
    int8_t* out = q + i * stride;
    int64_t l = 0;
    for (; bw && l + 64 <= k; l += 64) {
      const __m512i a = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_loadu_ps(row + l), vinv));
      const __m512i b = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_loadu_ps(row + l + 16), vinv));
      const __m512i c = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_loadu_ps(row + l + 32), vinv));
      const __m512i d = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_loadu_ps(row + l + 48), vinv));
      __m512i bytes = _mm512_packs_epi16(_mm512_packs_epi32(a, b), _mm512_packs_epi32(c, d));
      bytes = _mm512_permutexvar_epi32(order, _mm512_max_epi8(bytes, low));
      _mm512_storeu_si512(out + l, _mm512_xor_si512(bytes, flip));
    }
    for (; l < stride; l += 16) {
      const __mmask16 mask = l + 16 <= k ? static_cast<__mmask16>(0xffff) : l < k ? tail : 0;
      const __m512i v = QuantizeLanes(_mm512_maskz_loadu_ps(mask, row + l), vinv);
      _mm_storeu_si128(reinterpret_cast<__m128i*>(out + l),
                       _mm512_cvtepi32_epi8(_mm512_add_epi32(v, shift)));
    }
  }
}

namespace {

void FusedTilesVnni(int64_t m, const uint8_t* xq, int64_t stride, const float* xs,
                    const PackedInt8W& w, float* y, int64_t ldy, const GemmEpilogue& ep,
                    const Pieces& pieces, int64_t j_begin, int64_t j_end) {
  const int64_t panels = (j_end + kPanel - 1) / kPanel;
  const int64_t scales = std::max<int64_t>(pieces.taps, 1);  // per row
  for (int64_t i0 = 0; i0 < m; i0 += kFusedRows) {
    const int rows = static_cast<int>(std::min<int64_t>(kFusedRows, m - i0));
    for (int64_t p = j_begin / kPanel; p < panels; p += 2) {
      const int64_t cols = std::min<int64_t>(2 * kPanel, j_end - p * kPanel);
      const float* res = ep.residual != nullptr ? ep.residual + i0 * ep.ld_residual : nullptr;
      float* yt = y + i0 * ldy;
      const uint8_t* xt = xq + i0 * stride;
      FusedRows(rows, [&](auto r) {
        FusedTileVnni<decltype(r)::value>(xt, stride, xs + i0 * scales, w, p, cols, yt, ldy, ep,
                                          res, pieces);
      });
    }
  }
}

}  // namespace

void FusedVnni(int64_t m, const uint8_t* xq, int64_t stride, const float* xs, const PackedInt8W& w,
               float* y, int64_t ldy, const GemmEpilogue& ep, int64_t j_begin, int64_t j_end) {
  FusedTilesVnni(m, xq, stride, xs, w, y, ldy, ep, Pieces{}, j_begin, j_end);
}

void FusedVnniTaps(int64_t m, const uint8_t* xq, int64_t stride, const float* xs, int64_t taps,
                   const PackedInt8W& w, const int32_t* tap_offset, float* y, int64_t ldy,
                   const GemmEpilogue& ep, int64_t j_begin, int64_t j_end) {
  FusedTilesVnni(m, xq, stride, xs, w, y, ldy, ep, Pieces{taps, w.tap_offset_ld(), tap_offset},
                 j_begin, j_end);
}

void FusedAmx(int64_t m, const int8_t* xq, int64_t stride, const float* xs, const PackedInt8W& w,
              float* y, int64_t ldy, const GemmEpilogue& ep, int64_t j_begin, int64_t j_end) {
  TilesAmx(m, xq, stride, xs, w, y, ldy, ep, j_begin, j_end);
}

}  // namespace nereid::kernels::int8
