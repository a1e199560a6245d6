#include "cpu/gemm_int8.h"

#if defined(__x86_64__)
#include <immintrin.h>
// GCC 12 at -O3 warns that its own unmasked max/min/cvt intrinsics read an uninitialized '__Y'
// (their undefined passthrough): a false positive.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#elif defined(__aarch64__)
#include <arm_neon.h>
#endif

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <type_traits>
#include <utility>

#include "cpu/cpu_features.h"

namespace nereid::kernels {
namespace {

constexpr int64_t kPanel = 16;  // output channels per packed panel
constexpr int kMaxRows = 4;     // rows of x per micro-kernel call

// Slower to faster within an architecture: the last one supported is the default.
enum class Kernel { kPortable = 0, kAvx2, kVnni, kNeon, kNeonDot, kAmx, kCount };
const char* const kNames[] = {"portable", "avx2",         "avx512-vnni",
                              "neon",     "neon-dotprod", "amx-int8"};
constexpr int kKernelCount = static_cast<int>(Kernel::kCount);

bool Supported(Kernel k) {
  switch (k) {
    case Kernel::kVnni:
      return HasAvx512Vnni();
    case Kernel::kAmx:
      return HasAmxInt8();
    case Kernel::kAvx2:
      return HasAvx2Fma();
    case Kernel::kNeon:
      return HasNeon();
    case Kernel::kNeonDot:
      return HasNeonDotProd();
    default:
      return true;
  }
}

std::atomic<int>& Selected() {
  static std::atomic<int> selected = [] {
    if (const char* env = std::getenv("NEREID_INT8_KERNEL"))
      for (int k = 0; k < kKernelCount; ++k)
        if (env == std::string(kNames[k]) && Supported(static_cast<Kernel>(k))) return k;
    for (int k = kKernelCount - 1; k > 0; --k)
      if (Supported(static_cast<Kernel>(k))) return k;
    return 0;
  }();
  return selected;
}

int32_t Load4(const void* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

#if defined(__x86_64__)

// acc[r][c] for rows r < R of x (each k4 groups of 4 bytes, rows 'stride' bytes apart) against one
// or two panels (16 channels each); 'x' is q + 128 as unsigned bytes.
template <int R>
__attribute__((target("avx512f,avx512bw,avx512vnni"))) void KernelVnni(const uint8_t* x,
                                                                       int64_t stride, int64_t k4,
                                                                       const int8_t* p0,
                                                                       const int8_t* p1,
                                                                       int32_t (*acc)[2 * kPanel]) {
  __m512i a[R][2];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) a[r][0] = a[r][1] = _mm512_setzero_si512();
  if (p1 != nullptr) {
    for (int64_t g = 0; g < k4; ++g) {
      const __m512i w0 = _mm512_loadu_si512(p0 + g * 64), w1 = _mm512_loadu_si512(p1 + g * 64);
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r) {
        const __m512i xb = _mm512_set1_epi32(Load4(x + r * stride + 4 * g));
        a[r][0] = _mm512_dpbusd_epi32(a[r][0], xb, w0);
        a[r][1] = _mm512_dpbusd_epi32(a[r][1], xb, w1);
      }
    }
  } else {
    for (int64_t g = 0; g < k4; ++g) {
      const __m512i w0 = _mm512_loadu_si512(p0 + g * 64);
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r)
        a[r][0] =
            _mm512_dpbusd_epi32(a[r][0], _mm512_set1_epi32(Load4(x + r * stride + 4 * g)), w0);
    }
  }
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) {
    _mm512_storeu_si512(acc[r], a[r][0]);
    _mm512_storeu_si512(acc[r] + kPanel, a[r][1]);
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

#elif defined(__aarch64__)

// acc[r][c] for rows r < R of x (signed bytes) against one panel with SDOT: each instruction adds
// four 4-byte dot products, one per channel of a quarter panel (the packing's 4 consecutive k of a
// channel are exactly SDOT's groups). x is read 16 bytes (four groups) at a time and used by lane.
template <int R, int Lane>
__attribute__((target("arch=armv8.2-a+dotprod"), always_inline)) inline void DotGroup(
    int32x4_t (*a)[4], const int8_t* w, const int8x16_t* xv) {
  const int8x16_t w0 = vld1q_s8(w), w1 = vld1q_s8(w + 16), w2 = vld1q_s8(w + 32),
                  w3 = vld1q_s8(w + 48);
  for (int r = 0; r < R; ++r) {
    a[r][0] = vdotq_laneq_s32(a[r][0], w0, xv[r], Lane);
    a[r][1] = vdotq_laneq_s32(a[r][1], w1, xv[r], Lane);
    a[r][2] = vdotq_laneq_s32(a[r][2], w2, xv[r], Lane);
    a[r][3] = vdotq_laneq_s32(a[r][3], w3, xv[r], Lane);
  }
}

template <int R>
__attribute__((target("arch=armv8.2-a+dotprod"))) void KernelNeonDot(const int8_t* x,
                                                                     int64_t stride, int64_t k4,
                                                                     const int8_t* p0,
                                                                     int32_t (*acc)[2 * kPanel]) {
  int32x4_t a[R][4];
  for (auto& row : a)
    for (auto& v : row) v = vdupq_n_s32(0);
  int8x16_t xv[R];
  int64_t g = 0;
  for (; g + 4 <= k4; g += 4) {
    for (int r = 0; r < R; ++r) xv[r] = vld1q_s8(x + r * stride + 4 * g);
    const int8_t* w = p0 + g * 64;
    DotGroup<R, 0>(a, w, xv);
    DotGroup<R, 1>(a, w + 64, xv);
    DotGroup<R, 2>(a, w + 128, xv);
    DotGroup<R, 3>(a, w + 192, xv);
  }
  for (; g < k4; ++g) {  // the last groups: x's four bytes in lane 0
    for (int r = 0; r < R; ++r)
      xv[r] = vreinterpretq_s8_s32(vdupq_n_s32(Load4(x + r * stride + 4 * g)));
    DotGroup<R, 0>(a, p0 + g * 64, xv);
  }
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < 4; ++v) vst1q_s32(acc[r] + 4 * v, a[r][v]);
}

// The same without SDOT (Armv8.0: Cortex-A53/A72): SMULL/SMULL2 multiply 8 bytes into int16
// products (|p| <= 127 * 127, no saturation) and SADALP adds neighbouring pairs into int32, so each
// accumulator holds two channels as two partial sums, paired up at the end. 8 accumulators a row:
// two rows at a time fit the registers.
template <int R>
void KernelNeon(const int8_t* x, int64_t stride, int64_t k4, const int8_t* p0,
                int32_t (*acc)[2 * kPanel]) {
  static_assert(R <= 2);
  int32x4_t a[R][8];
  for (auto& row : a)
    for (auto& v : row) v = vdupq_n_s32(0);
  for (int64_t g = 0; g < k4; ++g) {
    int8x16_t w[4];
    for (int v = 0; v < 4; ++v) w[v] = vld1q_s8(p0 + g * 64 + 16 * v);
    for (int r = 0; r < R; ++r) {
      const int8x16_t xb = vreinterpretq_s8_s32(vdupq_n_s32(Load4(x + r * stride + 4 * g)));
      for (int v = 0; v < 4; ++v) {
        a[r][2 * v] = vpadalq_s16(a[r][2 * v], vmull_s8(vget_low_s8(w[v]), vget_low_s8(xb)));
        a[r][2 * v + 1] = vpadalq_s16(a[r][2 * v + 1], vmull_high_s8(w[v], xb));
      }
    }
  }
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < 4; ++v) vst1q_s32(acc[r] + 4 * v, vpaddq_s32(a[r][2 * v], a[r][2 * v + 1]));
}

#endif

void KernelPortable(int rows, const int8_t* x, int64_t stride, int64_t k4, const int8_t* p0,
                    int32_t (*acc)[2 * kPanel]) {
  for (int r = 0; r < rows; ++r)
    for (int64_t c = 0; c < kPanel; ++c) {
      int32_t s = 0;
      for (int64_t g = 0; g < k4; ++g)
        for (int t = 0; t < 4; ++t)
          s += int32_t{x[r * stride + 4 * g + t]} * p0[g * 64 + c * 4 + t];
      acc[r][c] = s;
    }
}

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

}  // namespace

namespace {

// One row: absmax, then q = clamp(round_half_even(v * inv)); the AVX2 form converts with the
// default rounding mode (nearest, ties to even), so both give the same bits.
float QuantizeRowPortable(const float* row, int64_t k, int8_t* q) {
  float absmax = 0.f;
  for (int64_t l = 0; l < k; ++l) absmax = std::max(absmax, std::fabs(row[l]));
  const float inv = absmax > 0.f ? 127.f / absmax : 0.f;
  for (int64_t l = 0; l < k; ++l)
    q[l] = static_cast<int8_t>(std::clamp(std::nearbyint(row[l] * inv), -127.f, 127.f));
  return absmax / 127.f;
}

#if defined(__x86_64__)
__attribute__((target("avx2,fma"))) float QuantizeRowAvx2(const float* row, int64_t k, int8_t* q) {
  const __m256 sign = _mm256_set1_ps(-0.f);
  __m256 vmax = _mm256_setzero_ps();
  int64_t l = 0;
  for (; l + 8 <= k; l += 8)
    vmax = _mm256_max_ps(vmax, _mm256_andnot_ps(sign, _mm256_loadu_ps(row + l)));
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, vmax);
  float absmax = 0.f;
  for (float v : lanes) absmax = std::max(absmax, v);
  for (; l < k; ++l) absmax = std::max(absmax, std::fabs(row[l]));
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
  for (; l < k; ++l)
    q[l] = static_cast<int8_t>(std::clamp(std::nearbyint(row[l] * inv), -127.f, 127.f));
  return absmax / 127.f;
}

// The same 16 at a time (vcvtps2dq rounds to nearest even, as the others do), tails masked.
__attribute__((target("avx512f"))) float QuantizeRowAvx512(const float* row, int64_t k, int8_t* q) {
  __m512 vmax = _mm512_setzero_ps();
  int64_t l = 0;
  for (; l + 16 <= k; l += 16) vmax = _mm512_max_ps(vmax, _mm512_abs_ps(_mm512_loadu_ps(row + l)));
  const __mmask16 tail = static_cast<__mmask16>((1u << (k - l)) - 1);
  if (tail != 0) vmax = _mm512_max_ps(vmax, _mm512_abs_ps(_mm512_maskz_loadu_ps(tail, row + l)));
  const float absmax = _mm512_reduce_max_ps(vmax);
  const float inv = absmax > 0.f ? 127.f / absmax : 0.f;
  const __m512 vinv = _mm512_set1_ps(inv);
  const __m512i lo = _mm512_set1_epi32(-127), hi = _mm512_set1_epi32(127);
  for (l = 0; l + 16 <= k; l += 16) {
    const __m512i v = _mm512_min_epi32(
        _mm512_max_epi32(_mm512_cvtps_epi32(_mm512_mul_ps(_mm512_loadu_ps(row + l), vinv)), lo),
        hi);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(q + l), _mm512_cvtepi32_epi8(v));
  }
  if (tail != 0) {
    const __m512i v = _mm512_min_epi32(
        _mm512_max_epi32(
            _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_maskz_loadu_ps(tail, row + l), vinv)), lo),
        hi);
    _mm512_mask_cvtepi32_storeu_epi8(q + l, tail, v);
  }
  return absmax / 127.f;
}
#elif defined(__aarch64__)
// FCVTNS rounds to nearest, ties to even: the scalar form's bits.
float QuantizeRowNeon(const float* row, int64_t k, int8_t* q) {
  float32x4_t vmax = vdupq_n_f32(0.f);
  int64_t l = 0;
  for (; l + 4 <= k; l += 4) vmax = vmaxq_f32(vmax, vabsq_f32(vld1q_f32(row + l)));
  float absmax = vmaxvq_f32(vmax);
  for (; l < k; ++l) absmax = std::max(absmax, std::fabs(row[l]));
  const float inv = absmax > 0.f ? 127.f / absmax : 0.f;
  const int32x4_t lo = vdupq_n_s32(-127), hi = vdupq_n_s32(127);
  for (l = 0; l + 8 <= k; l += 8) {
    const int32x4_t v0 =
        vminq_s32(vmaxq_s32(vcvtnq_s32_f32(vmulq_n_f32(vld1q_f32(row + l), inv)), lo), hi);
    const int32x4_t v1 =
        vminq_s32(vmaxq_s32(vcvtnq_s32_f32(vmulq_n_f32(vld1q_f32(row + l + 4), inv)), lo), hi);
    const int16x8_t w = vcombine_s16(vmovn_s32(v0), vmovn_s32(v1));
    vst1_s8(q + l, vmovn_s16(w));
  }
  for (; l < k; ++l)
    q[l] = static_cast<int8_t>(std::clamp(std::nearbyint(row[l] * inv), -127.f, 127.f));
  return absmax / 127.f;
}
#endif

float QuantizeRow(const float* row, int64_t k, int8_t* q) {
#if defined(__x86_64__)
  if (HasAvx512F()) return QuantizeRowAvx512(row, k, q);
  if (HasAvx2Fma()) return QuantizeRowAvx2(row, k, q);
#elif defined(__aarch64__)
  return QuantizeRowNeon(row, k, q);
#endif
  return QuantizeRowPortable(row, k, q);
}

}  // namespace

void QuantizeRowsInt8(const float* in, int64_t rows, int64_t k, int64_t ld, int8_t* q,
                      float* scale) {
  for (int64_t r = 0; r < rows; ++r) scale[r] = QuantizeRow(in + r * ld, k, q + r * k);
}

PackedInt8W::PackedInt8W(const float* w, int64_t n, int64_t k, int64_t ldw)
    : n_(n), k_(k), k4_(((k + 3) / 4 + 15) / 16 * 16), scale_(n), offset_(n), quantized_(n * k) {
  QuantizeRowsInt8(w, n, k, ldw, quantized_.data(), scale_.data());
  const int64_t panels = (n + kPanel - 1) / kPanel;
  const size_t bytes = static_cast<size_t>(std::max<int64_t>(panels * k4_ * 64, 64));
  data_ = std::shared_ptr<int8_t[]>(static_cast<int8_t*>(std::aligned_alloc(64, bytes)),
                                    [](int8_t* p) { std::free(p); });
  std::memset(data_.get(), 0, bytes);
  for (int64_t j = 0; j < n; ++j) {
    int8_t* panel = data_.get() + (j / kPanel) * k4_ * 64 + (j % kPanel) * 4;
    int32_t sum = 0;
    for (int64_t l = 0; l < k; ++l) {
      const int8_t v = quantized_[j * k + l];
      panel[(l / 4) * 64 + l % 4] = v;
      sum += v;
    }
    offset_[j] = 128 * sum;
  }
}

void GemmInt8(int64_t m, const float* x, int64_t ldx, const PackedInt8W& w, const float* bias,
              float* y, int64_t ldy, float alpha, bool accumulate) {
  const auto kernel = static_cast<Kernel>(Selected().load(std::memory_order_relaxed));
  const int64_t k = w.k(), k4 = w.k4(), stride = 4 * k4, n = w.n();
  // x quantized per row into rows of k4 groups (zero padded; as q + 128 for vpdpbusd).
  thread_local std::vector<int8_t> xq;
  thread_local std::vector<float> xs;
  xq.assign(static_cast<size_t>(m * stride), 0);
  xs.resize(static_cast<size_t>(m));
  for (int64_t i = 0; i < m; ++i)
    QuantizeRowsInt8(x + i * ldx, 1, k, ldx, xq.data() + i * stride, &xs[i]);
  const bool vnni = kernel == Kernel::kVnni || kernel == Kernel::kAmx;
  if (vnni)
    for (auto& b : xq) b = static_cast<int8_t>(static_cast<uint8_t>(b) ^ 0x80);  // q + 128
  const int64_t panels = (n + kPanel - 1) / kPanel;
  alignas(64) int32_t acc[kMaxRows][2 * kPanel];
  // Panels outside, row blocks inside: each panel of weights streams from memory once and stays
  // in L1 while every block of rows uses it.
  const int64_t step = vnni ? 2 : 1;
  for (int64_t p = 0; p < panels; p += step) {
    const bool two = vnni && p + 1 < panels;
    const int64_t j0 = p * kPanel, cols = std::min<int64_t>((two ? 2 : 1) * kPanel, n - j0);
    for (int64_t i0 = 0; i0 < m; i0 += kMaxRows) {
      const int rows = static_cast<int>(std::min<int64_t>(kMaxRows, m - i0));
      const int8_t* xr = xq.data() + i0 * stride;
      switch (kernel) {
#if defined(__x86_64__)
        case Kernel::kVnni:
        case Kernel::kAmx:
          ForRows(rows, [&](auto r) {
            KernelVnni<decltype(r)::value>(reinterpret_cast<const uint8_t*>(xr), stride, k4,
                                           w.Panel(p), two ? w.Panel(p + 1) : nullptr, acc);
          });
          break;
        case Kernel::kAvx2:
          ForRows(rows,
                  [&](auto r) { KernelAvx2<decltype(r)::value>(xr, stride, k4, w.Panel(p), acc); });
          break;
#elif defined(__aarch64__)
        case Kernel::kNeonDot:
          ForRows(rows, [&](auto r) {
            KernelNeonDot<decltype(r)::value>(xr, stride, k4, w.Panel(p), acc);
          });
          break;
        case Kernel::kNeon:
          // Two rows at a time (the registers): rows 0-1, then 2-3.
          for (int r0 = 0; r0 < rows; r0 += 2) {
            if (rows - r0 >= 2)
              KernelNeon<2>(xr + r0 * stride, stride, k4, w.Panel(p), acc + r0);
            else
              KernelNeon<1>(xr + r0 * stride, stride, k4, w.Panel(p), acc + r0);
          }
          break;
#endif
        default:
          KernelPortable(rows, xr, stride, k4, w.Panel(p), acc);
      }
      for (int r = 0; r < rows; ++r) {
        float* yr = y + (i0 + r) * ldy + j0;
        const float sx = alpha * xs[i0 + r];
        for (int64_t c = 0; c < cols; ++c) {
          const int32_t dot = acc[r][c] - (vnni ? w.offset()[j0 + c] : 0);
          const float v =
              static_cast<float>(dot) * sx * w.scale()[j0 + c] + (bias ? bias[j0 + c] : 0.f);
          yr[c] = accumulate ? yr[c] + v : v;
        }
      }
    }
  }
}

namespace {

#if defined(__x86_64__)
constexpr int kFusedRows = 12;  // 24 accumulators, two weight vectors, one broadcast: 27 of 32

// Columns c0 .. c0 + width (at most 16) of one row of y from their exact int32 dot products:
// dot * x_scale * w_scale + bias (+ residual), then the activation (Relu and Clip in vector form,
// the others after the store).
__attribute__((target("avx512f,avx512bw"))) inline void FinishRow16(
    __m512i dot, float x_scale, const PackedInt8W& w, int64_t c0, int64_t width, float* y_row,
    const GemmEpilogue& ep, const float* residual_row) {
  const __mmask16 mask = static_cast<__mmask16>((1u << width) - 1);
  const __m512 scale = _mm512_maskz_loadu_ps(mask, w.scale() + c0);
  const __m512 bias =
      ep.bias != nullptr ? _mm512_maskz_loadu_ps(mask, ep.bias + c0) : _mm512_setzero_ps();
  __m512 v =
      _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), _mm512_mul_ps(_mm512_set1_ps(x_scale), scale), bias);
  if (residual_row != nullptr) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(mask, residual_row + c0));
  if (ep.activation == GemmEpilogue::kRelu)
    v = _mm512_max_ps(v, _mm512_setzero_ps());
  else if (ep.activation == GemmEpilogue::kClip)
    v = _mm512_min_ps(_mm512_max_ps(v, _mm512_set1_ps(ep.lo)), _mm512_set1_ps(ep.hi));
  float* out = y_row + c0;
  _mm512_mask_storeu_ps(out, mask, v);
  if (ep.activation != GemmEpilogue::kNone && ep.activation != GemmEpilogue::kRelu &&
      ep.activation != GemmEpilogue::kClip)
    for (int64_t c = 0; c < width; ++c) out[c] = Activate(ep, out[c]);
}

// Rows r < R of xq (q + 128, rows 'stride' bytes apart) against panels p and p + 1 (or p alone),
// finished in registers into y's columns j0 .. j0 + cols.
template <int R>
__attribute__((target("avx512f,avx512bw,avx512vnni"))) void FusedTileVnni(
    const uint8_t* xq, int64_t stride, const float* xs, const PackedInt8W& w, int64_t p,
    int64_t cols, float* y, int64_t ldy, const GemmEpilogue& ep, const float* residual) {
  const int64_t k4 = w.k4(), j0 = p * kPanel;
  const int halves = cols > kPanel ? 2 : 1;
  const int8_t* p0 = w.Panel(p);
  const int8_t* p1 = halves == 2 ? w.Panel(p + 1) : p0;
  __m512i a[R][2];
  for (int r = 0; r < R; ++r) a[r][0] = a[r][1] = _mm512_setzero_si512();
  for (int64_t g = 0; g < k4; ++g) {
    const __m512i w0 = _mm512_loadu_si512(p0 + g * 64), w1 = _mm512_loadu_si512(p1 + g * 64);
#pragma GCC unroll 12
    for (int r = 0; r < R; ++r) {
      const __m512i xb = _mm512_set1_epi32(Load4(xq + r * stride + 4 * g));
      a[r][0] = _mm512_dpbusd_epi32(a[r][0], xb, w0);
      a[r][1] = _mm512_dpbusd_epi32(a[r][1], xb, w1);
    }
  }
  for (int h = 0; h < halves; ++h) {
    const int64_t c0 = j0 + h * kPanel;
    const int64_t width = std::min<int64_t>(kPanel, j0 + cols - c0);
    const __mmask16 mask = static_cast<__mmask16>((1u << width) - 1);
    const __m512i offset = _mm512_maskz_loadu_epi32(mask, w.offset() + c0);
    for (int r = 0; r < R; ++r)
      FinishRow16(_mm512_sub_epi32(a[r][h], offset), xs[r], w, c0, width, y + r * ldy, ep,
                  residual != nullptr ? residual + r * ep.ld_residual : nullptr);
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

__attribute__((target("amx-tile,amx-int8,avx512f,avx512bw"))) void FusedAmx(
    int64_t m, const int8_t* xq, int64_t stride, const float* xs, const PackedInt8W& w, float* y,
    int64_t ldy, const GemmEpilogue& ep) {
  TileConfig config;
  for (int t = 0; t < 8; ++t) config.rows[t] = 16, config.colsb[t] = 64;
  _tile_loadconfig(&config);
  const int64_t n = w.n(), panels = (n + kPanel - 1) / kPanel, blocks = w.k4() / 16;
  alignas(64) int32_t acc[32][2 * kPanel];
  for (int64_t i0 = 0; i0 < m; i0 += 32) {  // xq has rows to a multiple of 32 (zeros past m)
    const int8_t* x0 = xq + i0 * stride;
    const int8_t* x1 = x0 + 16 * stride;
    for (int64_t p = 0; p < panels; p += 2) {
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
      const int64_t j0 = p * kPanel, cols = std::min<int64_t>(2 * kPanel, n - j0);
      const int64_t rows = std::min<int64_t>(32, m - i0);
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t h = 0; h * kPanel < cols; ++h)
          FinishRow16(_mm512_load_si512(&acc[r][h * kPanel]), xs[i0 + r], w, j0 + h * kPanel,
                      std::min<int64_t>(kPanel, cols - h * kPanel), y + (i0 + r) * ldy, ep,
                      ep.residual != nullptr ? ep.residual + (i0 + r) * ep.ld_residual : nullptr);
    }
  }
  _tile_release();
}
#endif

}  // namespace

void GemmInt8Fused(int64_t m, const float* x, int64_t ldx, const PackedInt8W& w, float* y,
                   int64_t ldy, const GemmEpilogue& ep) {
  const auto kernel = static_cast<Kernel>(Selected().load(std::memory_order_relaxed));
#if defined(__x86_64__)
  // Clip with NaN bounds or a NaN input would differ from Activate's order of comparisons only
  // for NaN; the vector min/max pair is kept for finite bounds (ONNX Clip's case).
  const bool finite_clip =
      !(ep.activation == GemmEpilogue::kClip && (std::isnan(ep.lo) || std::isnan(ep.hi)));
  if (kernel == Kernel::kAmx && finite_clip) {
    const int64_t k = w.k(), stride = 4 * w.k4(), rows = (m + 31) / 32 * 32;
    thread_local std::vector<int8_t> xq;
    thread_local std::vector<float> xs;
    xq.assign(static_cast<size_t>(rows * stride), 0);  // zero padding: k to whole tiles, rows to 32
    xs.resize(static_cast<size_t>(m));
    for (int64_t i = 0; i < m; ++i)
      QuantizeRowsInt8(x + i * ldx, 1, k, ldx, &xq[i * stride], &xs[i]);
    FusedAmx(m, xq.data(), stride, xs.data(), w, y, ldy, ep);
    return;
  }
  if (kernel == Kernel::kVnni && finite_clip) {
    const int64_t k = w.k(), stride = 4 * w.k4(), n = w.n();
    thread_local std::vector<uint8_t> xq;
    thread_local std::vector<float> xs;
    xq.assign(static_cast<size_t>(m * stride), 0x80);  // zero padding, as q + 128
    xs.resize(static_cast<size_t>(m));
    for (int64_t i = 0; i < m; ++i) {
      int8_t* row = reinterpret_cast<int8_t*>(xq.data() + i * stride);
      QuantizeRowsInt8(x + i * ldx, 1, k, ldx, row, &xs[i]);
      for (int64_t l = 0; l < k; ++l)
        row[l] = static_cast<int8_t>(static_cast<uint8_t>(row[l]) ^ 0x80);
    }
    const int64_t panels = (n + kPanel - 1) / kPanel;
    for (int64_t i0 = 0; i0 < m; i0 += kFusedRows) {
      const int rows = static_cast<int>(std::min<int64_t>(kFusedRows, m - i0));
      for (int64_t p = 0; p < panels; p += 2) {
        const int64_t cols = std::min<int64_t>(2 * kPanel, n - p * kPanel);
        const float* res = ep.residual != nullptr ? ep.residual + i0 * ep.ld_residual : nullptr;
        float* yt = y + i0 * ldy;
        const uint8_t* xt = xq.data() + i0 * stride;
        FusedRows(rows, [&](auto r) {
          FusedTileVnni<decltype(r)::value>(xt, stride, xs.data() + i0, w, p, cols, yt, ldy, ep,
                                            res);
        });
      }
    }
    return;
  }
#endif
  (void)kernel;
  const int64_t n = w.n();
  if (ep.residual != nullptr)
    for (int64_t i = 0; i < m; ++i)
      std::memcpy(y + i * ldy, ep.residual + i * ep.ld_residual, static_cast<size_t>(n) * 4);
  GemmInt8(m, x, ldx, w, ep.bias, y, ldy, 1.f, ep.residual != nullptr);
  if (ep.activation != GemmEpilogue::kNone)
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) y[i * ldy + j] = Activate(ep, y[i * ldy + j]);
}

const char* GemmInt8KernelName() { return kNames[Selected().load(std::memory_order_relaxed)]; }

std::vector<std::string> GemmInt8Kernels() {
  std::vector<std::string> out;
  for (int k = 0; k < kKernelCount; ++k)
    if (Supported(static_cast<Kernel>(k))) out.emplace_back(kNames[k]);
  return out;
}

bool UseGemmInt8Kernel(const std::string& name) {
  for (int k = 0; k < kKernelCount; ++k)
    if (name == kNames[k] && Supported(static_cast<Kernel>(k))) {
      Selected().store(k, std::memory_order_relaxed);
      return true;
    }
  return false;
}

}  // namespace nereid::kernels
