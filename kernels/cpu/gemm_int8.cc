#include "cpu/gemm_int8.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <type_traits>
#include <utility>

#include "cpu/cpu_features.h"
#include "cpu/gemm_int8_isa.h"
#include "cpu/parallel.h"

namespace nereid::kernels {
namespace {

using int8::kMaxRows;
using int8::kPanel;

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

}  // namespace

namespace {

// One row: absmax, then q = clamp(round_half_even(v * inv)); the AVX2 form converts with the
// default rounding mode (nearest, ties to even), so both give the same bits.
float QuantizeRowPortable(const float* row, int64_t k, int8_t* q) {
  float absmax = 0.f;
  for (int64_t l = 0; l < k; ++l) absmax = int8::AbsMaxKeepingNaN(absmax, row[l]);
  const float inv = absmax > 0.f ? 127.f / absmax : 0.f;
  for (int64_t l = 0; l < k; ++l) q[l] = int8::QuantizeScalar(row[l], inv);
  return absmax / 127.f;
}

float QuantizeRow(const float* row, int64_t k, int8_t* q) {
#if defined(__x86_64__)
  if (HasAvx512F()) return int8::QuantizeRowAvx512(row, k, q);
  if (HasAvx2Fma()) return int8::QuantizeRowAvx2(row, k, q);
#elif defined(__aarch64__)
  return int8::QuantizeRowNeon(row, k, q);
#endif
  return QuantizeRowPortable(row, k, q);
}

}  // namespace

void QuantizeRowsInt8(const float* in, int64_t rows, int64_t k, int64_t ld, int8_t* q,
                      float* scale) {
  for (int64_t r = 0; r < rows; ++r) scale[r] = QuantizeRow(in + r * ld, k, q + r * k);
}

PackedInt8W::PackedInt8W(const float* w, int64_t n, int64_t k, int64_t ldw, const float* smooth)
    : n_(n), k_(k), k4_(((k + 3) / 4 + 15) / 16 * 16), scale_(n), offset_(n), quantized_(n * k) {
  if (smooth != nullptr) {
    std::vector<float> scaled(static_cast<size_t>(n * k));
    for (int64_t j = 0; j < n; ++j)
      for (int64_t l = 0; l < k; ++l) scaled[j * k + l] = w[j * ldw + l] * smooth[l];
    x_mult_.resize(static_cast<size_t>(k));
    for (int64_t l = 0; l < k; ++l) x_mult_[l] = 1.f / smooth[l];
    QuantizeRowsInt8(scaled.data(), n, k, k, quantized_.data(), scale_.data());
  } else {
    QuantizeRowsInt8(w, n, k, ldw, quantized_.data(), scale_.data());
  }
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

std::vector<int32_t> PackedInt8W::TapOffsets(int64_t taps) const {
  const int64_t piece = k_ / taps, columns = tap_offset_ld();
  std::vector<int32_t> out(static_cast<size_t>(taps * columns), 0);
  for (int64_t j = 0; j < n_; ++j)
    for (int64_t t = 0; t < taps; ++t) {
      int32_t sum = 0;
      for (int64_t l = t * piece; l < (t + 1) * piece; ++l) sum += quantized_[j * k_ + l];
      out[t * columns + j] = 128 * sum;
    }
  return out;
}

namespace {

// x's m rows quantized per row into q (rows 'stride' bytes apart, zero padded past k) and
// scale, as q + 128 when 'offset' (vpdpbusd's unsigned operand); with 'mult', each row's columns
// multiplied by it first (PackedInt8W's smoothing).
void QuantizeRowsInto(int64_t m, const float* x, int64_t ldx, int64_t k, int8_t* q, int64_t stride,
                      bool offset, const float* mult, float* scale) {
  thread_local Scratch<float> smoothed;                        // one row at a time: it stays in L1
  const int8_t zero = offset ? static_cast<int8_t>(-128) : 0;  // 0 as q + 128 is 0x80
  float* const row_buffer = mult != nullptr ? smoothed.Get(static_cast<size_t>(k)) : nullptr;
  // Row i as quantized: x's, or with 'mult' its columns multiplied first.
  auto row_of = [&](int64_t i) {
    const float* row = x + i * ldx;
    if (mult == nullptr) return row;
    for (int64_t l = 0; l < k; ++l) row_buffer[l] = row[l] * mult[l];
    return static_cast<const float*>(row_buffer);
  };
#if defined(__x86_64__)
  if (HasAvx512F()) {  // the rows in one call (MobileNetV2's 1x1 layers: rows of 16-320 values)
    if (mult == nullptr)
      int8::QuantizeRowsStridedAvx512(x, m, ldx, k, q, stride, scale, offset);
    else
      for (int64_t i = 0; i < m; ++i)
        int8::QuantizeRowsStridedAvx512(row_of(i), 1, k, k, q + i * stride, stride, scale + i,
                                        offset);
    return;
  }
#endif
  for (int64_t i = 0; i < m; ++i) {
    int8_t* row = q + i * stride;
    scale[i] = QuantizeRow(row_of(i), k, row);
    if (offset)
      for (int64_t l = 0; l < k; ++l)
        row[l] = static_cast<int8_t>(static_cast<uint8_t>(row[l]) ^ 0x80);
    std::fill(row + k, row + stride, zero);
  }
}

// x's m rows quantized per row into this thread's buffer: 'rows' rows (those past m zero) of
// 'stride' bytes (QuantizeRowsInto's).
struct QuantizedRows {
  const int8_t* q;
  const float* scale;  // m
};
QuantizedRows QuantizeForKernel(int64_t m, const float* x, int64_t ldx, int64_t k, int64_t stride,
                                int64_t rows, bool offset, const float* mult) {
  thread_local std::vector<int8_t> xq;
  thread_local std::vector<float> xs;
  xq.resize(static_cast<size_t>(rows * stride));  // (every byte written below)
  xs.resize(static_cast<size_t>(m));
  QuantizeRowsInto(m, x, ldx, k, xq.data(), stride, offset, mult, xs.data());
  std::fill(xq.begin() + m * stride, xq.end(), offset ? static_cast<int8_t>(-128) : 0);
  return {xq.data(), xs.data()};
}

// GemmInt8 for y's columns [j_begin, j_end) (j_begin a multiple of 32).
void GemmInt8Columns(int64_t m, const float* x, int64_t ldx, const PackedInt8W& w,
                     const float* bias, float* y, int64_t ldy, float alpha, bool accumulate,
                     int64_t j_begin, int64_t j_end) {
  const auto kernel = static_cast<Kernel>(Selected().load(std::memory_order_relaxed));
  const int64_t k = w.k(), groups = w.groups(), stride = 4 * w.k4();
  const bool vnni = kernel == Kernel::kVnni || kernel == Kernel::kAmx;
  const QuantizedRows xq = QuantizeForKernel(m, x, ldx, k, stride, m, vnni, w.x_multiplier());
  const int64_t panels = (j_end + kPanel - 1) / kPanel;
  alignas(64) int32_t acc[kMaxRows][2 * kPanel];
  // Panels outside, row blocks inside: each panel of weights streams from memory once and stays
  // in L1 while every block of rows uses it.
  const int64_t step = vnni ? 2 : 1;
  for (int64_t p = j_begin / kPanel; p < panels; p += step) {
    const bool two = vnni && p + 1 < panels;
    const int64_t j0 = p * kPanel, cols = std::min<int64_t>((two ? 2 : 1) * kPanel, j_end - j0);
    for (int64_t i0 = 0; i0 < m; i0 += kMaxRows) {
      const int rows = static_cast<int>(std::min<int64_t>(kMaxRows, m - i0));
      const int8_t* xr = xq.q + i0 * stride;
      switch (kernel) {
#if defined(__x86_64__)
        case Kernel::kVnni:
        case Kernel::kAmx:
          int8::MicroVnni(rows, reinterpret_cast<const uint8_t*>(xr), stride, groups, w.Panel(p),
                          two ? w.Panel(p + 1) : nullptr, acc);
          break;
        case Kernel::kAvx2:
          int8::MicroAvx2(rows, xr, stride, groups, w.Panel(p), acc);
          break;
#elif defined(__aarch64__)
        case Kernel::kNeonDot:
          int8::MicroNeonDot(rows, xr, stride, groups, w.Panel(p), acc);
          break;
        case Kernel::kNeon:
          int8::MicroNeon(rows, xr, stride, groups, w.Panel(p), acc);
          break;
#endif
        default:
          KernelPortable(rows, xr, stride, groups, w.Panel(p), acc);
      }
      for (int r = 0; r < rows; ++r) {
        float* yr = y + (i0 + r) * ldy + j0;
        const float sx = alpha * xq.scale[i0 + r];
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

// GemmInt8Fused on this thread.
void FusedColumns(int64_t m, const float* x, int64_t ldx, const PackedInt8W& w, float* y,
                  int64_t ldy, const GemmEpilogue& ep, int64_t col_begin, int64_t col_end) {
  const auto kernel = static_cast<Kernel>(Selected().load(std::memory_order_relaxed));
#if defined(__x86_64__)
  // Clip with NaN bounds or a NaN input would differ from Activate's order of comparisons only
  // for NaN; the vector min/max pair is kept for finite bounds (ONNX Clip's case).
  const bool finite_clip =
      !(ep.activation == GemmEpilogue::kClip && (std::isnan(ep.lo) || std::isnan(ep.hi)));
  if (kernel == Kernel::kAmx && finite_clip) {
    // Rows to a multiple of 32 (the tiles'), k already to whole tiles.
    const int64_t stride = 4 * w.k4();
    const QuantizedRows xq =
        QuantizeForKernel(m, x, ldx, w.k(), stride, (m + 31) / 32 * 32, false, w.x_multiplier());
    int8::FusedAmx(m, xq.q, stride, xq.scale, w, y, ldy, ep, col_begin, col_end);
    return;
  }
  if (kernel == Kernel::kVnni && finite_clip) {
    // Rows of k's groups of 4 bytes to a multiple of 16 bytes, not AMX's 64: MobileNetV2's rows
    // of 16-32 values took 64 bytes each to quantize and to read.
    const int64_t stride = (4 * w.groups() + 15) / 16 * 16;
    const QuantizedRows xq = QuantizeForKernel(m, x, ldx, w.k(), stride, m, true, w.x_multiplier());
    int8::FusedVnni(m, reinterpret_cast<const uint8_t*>(xq.q), stride, xq.scale, w, y, ldy, ep,
                    col_begin, col_end);
    return;
  }
#endif
  (void)kernel;
  const int64_t width = col_end - col_begin;
  if (ep.residual != nullptr && ep.residual != y)  // (y may be the residual, written in place)
    for (int64_t i = 0; i < m; ++i)
      std::memcpy(y + i * ldy + col_begin, ep.residual + i * ep.ld_residual + col_begin,
                  static_cast<size_t>(width) * 4);
  GemmInt8Columns(m, x, ldx, w, ep.bias, y, ldy, 1.f, ep.residual != nullptr, col_begin, col_end);
  if (ep.activation != GemmEpilogue::kNone)
    for (int64_t i = 0; i < m; ++i) ActivateEpilogueRow(y + i * ldy + col_begin, width, ep);
}

// f(i0, rows, j0, j1) over the pieces SplitInt8Work makes of an m x [col_begin, col_end) product,
// across the current team where its multiply-adds are worth it (else in one piece, here).
template <typename F>
void SplitProduct(int64_t m, int64_t k, int64_t col_begin, int64_t col_end, const F& f) {
  const int threads = ParallelThreads();
  const int64_t n = col_end - col_begin;
  if (threads <= 1 || m * n * k < (int64_t{1} << 20)) return f(0, m, col_begin, col_end);
  const Int8Split s = SplitInt8Work(m, n, 1, threads);
  ParallelFor(s.blocks * s.parts, [&](int64_t item) {
    const int64_t i0 = item / s.parts * s.block, j0 = col_begin + item % s.parts * s.part;
    f(i0, std::min(s.block, m - i0), j0, std::min(col_end, j0 + s.part));
  });
}

}  // namespace

Int8Split SplitInt8Work(int64_t m, int64_t n, int64_t groups, int threads) {
  Int8Split best{64, (m + 63) / 64, n, 1};
  const int64_t t = threads;
  // Blocks of 64 rows, four or more a thread: the team's stealing evens them out.
  if (t <= 1 || m <= 0 || n <= 0 || groups * best.blocks >= 4 * t) return best;
  // Else counts of pieces that are multiples of the team (T, 2T, 3T, 4T, or blocks of about 64
  // rows rounded up to one), each divided into blocks x parts, costed as the busiest thread's
  // share plus one piece (a thread late by a piece: other tenants, page faults), each piece
  // (rows + 4) x (columns + 8) for what it does once (its rows' quantization, the tiles' finish).
  // Blocks of 64 alone left threads idle: ResNet-50's 7x7 layers at batch 1 one block of 49 rows
  // on one thread of sixteen; 196 rows (14x14) as 64 + 64 + 64 + 4 ran 1.5x faster on two threads.
  const int64_t least =
      static_cast<Kernel>(Selected().load(std::memory_order_relaxed)) == Kernel::kAmx ? 32 : 8;
  const int64_t tiles = (n + 31) / 32, max_blocks = (m + least - 1) / least;
  const int64_t natural = (groups * best.blocks + t - 1) / t * t;
  double best_cost = -1;
  for (const int64_t items : {t, 2 * t, 3 * t, 4 * t, natural}) {
    const int64_t per_group = std::max<int64_t>(1, items / groups);
    for (int64_t blocks = 1; blocks <= std::min(per_group, max_blocks); ++blocks) {
      const int64_t parts = std::min(tiles, (per_group + blocks - 1) / blocks);
      const int64_t block = (m + blocks - 1) / blocks, part = (tiles + parts - 1) / parts * 32;
      const int64_t count = groups * ((m + block - 1) / block) * ((n + part - 1) / part);
      const double cost = static_cast<double>((count + t - 1) / t + 1) *
                          static_cast<double>((block + 4) * (std::min(part, n) + 8));
      if (best_cost < 0 || cost < best_cost) {
        best_cost = cost;
        best = {block, (m + block - 1) / block, part, (n + part - 1) / part};
      }
    }
  }
  return best;
}

void GemmInt8(int64_t m, const float* x, int64_t ldx, const PackedInt8W& w, const float* bias,
              float* y, int64_t ldy, float alpha, bool accumulate) {
  SplitProduct(m, w.k(), 0, w.n(), [&](int64_t i0, int64_t rows, int64_t j0, int64_t j1) {
    GemmInt8Columns(rows, x + i0 * ldx, ldx, w, bias, y + i0 * ldy, ldy, alpha, accumulate, j0, j1);
  });
}

void GemmInt8Fused(int64_t m, const float* x, int64_t ldx, const PackedInt8W& w, float* y,
                   int64_t ldy, const GemmEpilogue& ep, int64_t col_begin, int64_t col_end) {
  if (col_end < 0) col_end = w.n();
  SplitProduct(m, w.k(), col_begin, col_end, [&](int64_t i0, int64_t rows, int64_t j0, int64_t j1) {
    GemmEpilogue piece = ep;
    if (ep.residual != nullptr) piece.residual = ep.residual + i0 * ep.ld_residual;
    FusedColumns(rows, x + i0 * ldx, ldx, w, y + i0 * ldy, ldy, piece, j0, j1);
  });
}

void QuantizePixelsInt8(const float* x, int64_t m, int64_t ldx, int64_t k, uint8_t* q,
                        int64_t stride, const float* mult, float* scale) {
  QuantizeRowsInto(m, x, ldx, k, reinterpret_cast<int8_t*>(q), stride, true, mult, scale);
}

bool GemmInt8TapsAvailable() {
  return static_cast<Kernel>(Selected().load(std::memory_order_relaxed)) == Kernel::kVnni;
}

void GemmInt8FusedTaps(int64_t m, const uint8_t* xq, int64_t stride, const float* xs, int64_t taps,
                       const PackedInt8W& w, const int32_t* tap_offset, float* y, int64_t ldy,
                       const GemmEpilogue& ep, int64_t col_begin, int64_t col_end) {
  if (col_end < 0) col_end = w.n();
#if defined(__x86_64__)
  if (GemmInt8TapsAvailable()) {
    int8::FusedVnniTaps(m, xq, stride, xs, taps, w, tap_offset, y, ldy, ep, col_begin, col_end);
    return;
  }
#endif
  // Elsewhere the same arithmetic in plain C++ (the engine runs the per-window form there).
  const int64_t piece = w.k() / taps, columns = w.tap_offset_ld();
  const int8_t* const wq = w.quantized().data();
  for (int64_t i = 0; i < m; ++i) {
    float* const yr = y + i * ldy;
    for (int64_t j = col_begin; j < col_end; ++j) {
      float sum = 0.f;
      for (int64_t t = 0; t < taps; ++t) {
        int32_t dot = -tap_offset[t * columns + j];
        for (int64_t l = 0; l < piece; ++l)
          dot += int32_t{xq[i * stride + t * piece + l]} * wq[j * w.k() + t * piece + l];
        sum += static_cast<float>(dot) * xs[i * taps + t];
      }
      yr[j] = sum * w.scale()[j] + (ep.bias != nullptr ? ep.bias[j] : 0.f) +
              (ep.residual != nullptr ? ep.residual[i * ep.ld_residual + j] : 0.f);
    }
    if (ep.activation != GemmEpilogue::kNone)
      ActivateEpilogueRow(yr + col_begin, col_end - col_begin, ep);
  }
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
