// INT8 GEMM for the native engine's CPU path: y = x_scale[i] * w_scale[j] * (xq[i] . wq[j]) + bias,
// with w (a Linear layer's weight, n x k) quantized once per output channel and x per row at run
// time, both symmetric (q = round_half_even(v * 127 / absmax), clamped to [-127, 127], scale =
// absmax / 127: the GPU path's arithmetic, bit for bit). Products accumulate exactly in int32.
// Micro-kernels, picked at run time from what the CPU has:
//  - avx512-vnni: vpdpbusd, 64 multiply-adds per instruction. It multiplies unsigned by signed
//    bytes, so x goes in as q + 128 and 128 * sum(w row) comes off each sum (exact).
//  - amx-int8 (GemmInt8Fused only; GemmInt8 runs avx512-vnni there): tdpbssd on 16 x 64-byte
//    tiles of signed bytes, 16 x 16 x 64 multiply-adds per instruction, the weights' panels
//    being the B tiles as they lie.
//  - avx2: vpmaddubsw on |x| and w with x's sign, then vpmaddwd: pairs of products stay within
//    int16 (2 * 127 * 127 < 32767), so nothing saturates; 4 instructions per 32 multiply-adds,
//    which on CPUs without VNNI is about what fp32's FMAs do: int8 then saves memory, not time.
//  - neon-dotprod (AArch64 with Armv8.2's DotProd): SDOT, 16 multiply-adds of signed bytes per
//    instruction, x's groups taken by lane.
//  - neon (any AArch64): SMULL into int16 products, SADALP into int32 pairs (no saturation).
//  - portable: plain C++.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "cpu/gemm.h"

namespace nereid::kernels {

// q (rows x k, row-major) and scale (rows) from in (rows x k, leading dimension ld).
void QuantizeRowsInt8(const float* in, int64_t rows, int64_t k, int64_t ld, int8_t* q,
                      float* scale);

// w quantized per output channel and packed for the micro-kernels: panels of 16 channels, each
// k4 x 16 x 4 bytes (4 consecutive k of each channel together), zero padded. Immutable; shared by
// every instance thread.
class PackedInt8W {
 public:
  // From w (n x k, row-major with leading dimension ldw). 'smooth' (k factors, or null): the
  // activations' per-channel smoothing (SmoothQuant's migration of outlier channels into the
  // weights): column l of w is multiplied by smooth[l] before it is quantized, and x's column l by
  // 1 / smooth[l] before each row is (x_multiplier()); the product is unchanged in exact
  // arithmetic, but a channel that is always large no longer sets every row's scale alone.
  PackedInt8W(const float* w, int64_t n, int64_t k, int64_t ldw, const float* smooth = nullptr);
  int64_t n() const { return n_; }
  int64_t k() const { return k_; }
  int64_t k4() const { return k4_; }  // k in groups of 4, rounded up to 16 groups (one tile)
  // The groups of 4 that hold k: the rest of k4 is zeros, padding for AMX's 64-byte tiles, which
  // the other kernels skip (a depth of 24 would run 16 groups for 6).
  int64_t groups() const { return (k_ + 3) / 4; }
  const int8_t* Panel(int64_t p) const { return data_.get() + p * k4_ * 64; }
  const float* scale() const { return scale_.data(); }
  // 128 * sum of each channel's int8 weights (what the u8 offset of avx512-vnni adds).
  const int32_t* offset() const { return offset_.data(); }
  // k factors x's columns are multiplied by before quantization; null without smoothing.
  const float* x_multiplier() const { return x_mult_.empty() ? nullptr : x_mult_.data(); }
  // The int8 weights and scales as quantized (tests).
  const std::vector<int8_t>& quantized() const { return quantized_; }
  // For GemmInt8FusedTaps, k being 'taps' pieces of k / taps: 128 * the sum of each channel's
  // weights within each piece, [taps][tap_offset_ld()] (zeros past n).
  std::vector<int32_t> TapOffsets(int64_t taps) const;
  int64_t tap_offset_ld() const { return (n_ + 31) / 32 * 32; }  // n rounded up to 32

 private:
  int64_t n_, k_, k4_;
  std::shared_ptr<int8_t[]> data_;
  std::vector<float> scale_;
  std::vector<int32_t> offset_;
  std::vector<int8_t> quantized_;
  std::vector<float> x_mult_;
};

// How 'threads' split 'groups' int8 products of m rows x n columns each: blocks of 64 rows where
// that makes four or more a thread (and on one thread); else blocks of 'block' rows (at least 8,
// 32 with AMX's 32-row tiles), each in 'parts' of 'part' columns (a multiple of 32), so that the
// busiest thread has the least to do.
struct Int8Split {
  int64_t block, blocks, part, parts;
};
Int8Split SplitInt8Work(int64_t m, int64_t n, int64_t groups, int threads);

// y (m x n, leading dimension ldy) = alpha * x_scale * w_scale * (x w^T) + bias (n, or null)
// (+ y's own values when 'accumulate'); x is m x k floats (leading dimension ldx), quantized per
// row here. This and GemmInt8Fused split over the current thread team (SplitInt8Work) where the
// product is worth waking it for.
void GemmInt8(int64_t m, const float* x, int64_t ldx, const PackedInt8W& w, const float* bias,
              float* y, int64_t ldy, float alpha = 1.f, bool accumulate = false);

// y (m x n, leading dimension ldy) = act(x_scale * w_scale * (x w^T) + ep.bias + ep.residual)
// (GemmEpilogue's arithmetic, the residual with its own leading dimension): the form a
// convolution's implicit GEMM takes, with many rows. On avx512-vnni, tiles of 12 rows x 32
// channels keep their sums in registers and finish them there (bias, residual, Relu/Clip in
// vector form); other kernels run GemmInt8 and the epilogue after it.
// col_begin / col_end (a multiple of 32; -1: n): only y's columns [col_begin, col_end), so that a
// team can split one product by columns (y, bias and residual still point at column 0).
void GemmInt8Fused(int64_t m, const float* x, int64_t ldx, const PackedInt8W& w, float* y,
                   int64_t ldy, const GemmEpilogue& ep, int64_t col_begin = 0,
                   int64_t col_end = -1);

// A convolution's input pixels (m rows of k channels, ldx floats apart; 'mult': k factors or
// null, x_multiplier()'s first k), each quantized on its own (QuantizeRowsInt8's arithmetic; its
// scale into scale[i]) as q + 128 into rows of 'stride' bytes (a multiple of 16; 0x80 past k):
// GemmInt8FusedTaps's operand, each pixel quantized once instead of once in every window it
// falls in.
void QuantizePixelsInt8(const float* x, int64_t m, int64_t ldx, int64_t k, uint8_t* q,
                        int64_t stride, const float* mult, float* scale);

// Whether GemmInt8FusedTaps runs here: the avx512-vnni kernel is the one selected.
bool GemmInt8TapsAvailable();

// y (m x n) = act(sum over t of xs[i * taps + t] * w_scale * (x_t w_t^T) + ep.bias + ep.residual):
// each row of xq (q + 128 bytes, rows 'stride' apart) is a window of 'taps' pieces of k / taps
// bytes (a multiple of 4), each quantized with its own scale (a pixel's, QuantizePixelsInt8; 0
// where the window leaves the image, its bytes 0x80); w packed from the same depth order and
// tap_offset its TapOffsets(taps). Each piece's products sum exactly in int32 and are scaled in
// fp32 before the next: avx512-vnni's tiles where GemmInt8TapsAvailable(), plain loops elsewhere.
// Columns as GemmInt8Fused's.
void GemmInt8FusedTaps(int64_t m, const uint8_t* xq, int64_t stride, const float* xs, int64_t taps,
                       const PackedInt8W& w, const int32_t* tap_offset, float* y, int64_t ldy,
                       const GemmEpilogue& ep, int64_t col_begin = 0, int64_t col_end = -1);

// The micro-kernel GemmInt8 uses ("avx512-vnni", "avx2", "neon-dotprod", "neon", "portable"):
// the best this CPU has, unless NEREID_INT8_KERNEL names one.
const char* GemmInt8KernelName();
std::vector<std::string> GemmInt8Kernels();
// Makes 'name' the kernel for later calls (tests and benchmarks); false if not supported here.
bool UseGemmInt8Kernel(const std::string& name);

}  // namespace nereid::kernels
