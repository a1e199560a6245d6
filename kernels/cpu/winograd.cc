#include "cpu/winograd.h"

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "cpu/cpu_features.h"
#include "cpu/parallel.h"

namespace nereid::kernels {

WinogradWeights::WinogradWeights(const float* w, int64_t c_out, int64_t c_in) {
  // u[p][ci][co], p = 4 * row + column of the 4x4 transform.
  std::vector<float> u(static_cast<size_t>(16 * c_in * c_out));
  for (int64_t co = 0; co < c_out; ++co)
    for (int64_t ci = 0; ci < c_in; ++ci) {
      const float* g = w + (co * c_in + ci) * 9;
      float gg[4][3];  // G g: G = [1 0 0; 1/2 1/2 1/2; 1/2 -1/2 1/2; 0 0 1]
      for (int c = 0; c < 3; ++c) {
        gg[0][c] = g[c];
        gg[1][c] = 0.5f * (g[c] + g[3 + c] + g[6 + c]);
        gg[2][c] = 0.5f * (g[c] - g[3 + c] + g[6 + c]);
        gg[3][c] = g[6 + c];
      }
      for (int r = 0; r < 4; ++r) {  // (G g) G^T
        const float v[4] = {gg[r][0], 0.5f * (gg[r][0] + gg[r][1] + gg[r][2]),
                            0.5f * (gg[r][0] - gg[r][1] + gg[r][2]), gg[r][2]};
        for (int c = 0; c < 4; ++c) u[((4 * r + c) * c_in + ci) * c_out + co] = v[c];
      }
    }
  for (int p = 0; p < 16; ++p)
    u_[static_cast<size_t>(p)] = std::make_unique<PackedMatrixB>(
        false, c_in, c_out, u.data() + static_cast<size_t>(p) * c_in * c_out, c_out);
}

bool WinogradFits(const Conv2dGeometry& g) {
  return g.kh == 3 && g.kw == 3 && g.stride_h == 1 && g.stride_w == 1 && g.dilation_h == 1 &&
         g.dilation_w == 1 && g.groups == 1;
}

bool WinogradEnabled() {
  static const bool enabled = [] {
    const char* v = std::getenv("NEREID_CONV_WINOGRAD");
    return v == nullptr || std::string(v) != "0";
  }();
  return enabled;
}

namespace {

// V = B^T d B for 'c' channels of one tile: d's 16 input pixels (rows of the window, a row of
// zeros where the window leaves the image), V's position p at out + p * step.
// B^T = [1 0 -1 0; 0 1 1 0; 0 -1 1 0; 0 1 0 -1].
NEREID_VECTOR_CLONES void InputTransform(const float* const* d, int64_t c, float* out,
                                         int64_t step) {
#pragma GCC ivdep
  for (int64_t ch = 0; ch < c; ++ch) {
    float t[4][4];  // B^T d: rows combined
    for (int col = 0; col < 4; ++col) {
      const float d0 = d[col][ch], d1 = d[4 + col][ch], d2 = d[8 + col][ch], d3 = d[12 + col][ch];
      t[0][col] = d0 - d2;
      t[1][col] = d1 + d2;
      t[2][col] = d2 - d1;
      t[3][col] = d1 - d3;
    }
    for (int r = 0; r < 4; ++r) {  // then columns
      float* o = out + 4 * r * step + ch;
      o[0] = t[r][0] - t[r][2];
      o[step] = t[r][1] + t[r][2];
      o[2 * step] = t[r][2] - t[r][1];
      o[3 * step] = t[r][1] - t[r][3];
    }
  }
}

// Y = A^T M A + bias + residual for 'c' channels of one tile: M's position p at m + p * step,
// the four output pixels (row-major 2x2) at y[0..3] with their residuals at res[0..3].
// A^T = [1 1 1 0; 0 1 -1 -1].
NEREID_VECTOR_CLONES void OutputTransform(const float* m, int64_t step, int64_t c,
                                          const float* bias, const float* const* res,
                                          float* const* y) {
#pragma GCC ivdep
  for (int64_t ch = 0; ch < c; ++ch) {
    float s[2][4];  // A^T M: rows combined
    for (int col = 0; col < 4; ++col) {
      const float m0 = m[col * step + ch], m1 = m[(4 + col) * step + ch],
                  m2 = m[(8 + col) * step + ch], m3 = m[(12 + col) * step + ch];
      s[0][col] = m0 + m1 + m2;
      s[1][col] = m1 - m2 - m3;
    }
    for (int r = 0; r < 2; ++r) {
      y[2 * r][ch] = s[r][0] + s[r][1] + s[r][2] + bias[ch] + res[2 * r][ch];
      y[2 * r + 1][ch] = s[r][1] - s[r][2] - s[r][3] + bias[ch] + res[2 * r + 1][ch];
    }
  }
}

}  // namespace

namespace {

// This thread's n zeros (the image's padding) and n floats to write into (outputs past its edge).
// Function-local thread_locals: each thread that calls constructs its own (a thread_local of
// WinogradNhwc's own scope is never constructed, nor freed, in the team's workers, which run
// only its lambdas).
const float* Zeros(size_t n) {
  thread_local std::vector<float> zeros;
  if (zeros.size() < n) zeros.assign(n, 0.f);
  return zeros.data();
}
float* Sink(size_t n) {
  thread_local Scratch<float> sink;
  return sink.Get(n);
}

}  // namespace

void WinogradNhwc(const Conv2dGeometry& g, const float* x, const WinogradWeights& w,
                  const float* bias, const float* residual, const GemmEpilogue& act, float* y) {
  const int64_t ci = g.c_in, co = g.c_out;
  const int64_t th = (g.oh + 1) / 2, tw = (g.ow + 1) / 2, tiles = g.n * th * tw;
  const size_t widest = static_cast<size_t>(std::max(ci, co));
  // Tile t's 16 transformed inputs into v (position p at v + p * stride), t0 the first of v's.
  auto transform_in = [&](int64_t t, int64_t t0, float* v, int64_t stride) {
    const float* zeros = Zeros(widest);
    const int64_t tx = t % tw, ty = t / tw % th, b = t / (tw * th);
    const float* d[16];
    for (int r = 0; r < 4; ++r)
      for (int c = 0; c < 4; ++c) {
        const int64_t iy = 2 * ty - g.pad_top + r, ix = 2 * tx - g.pad_left + c;
        d[4 * r + c] = iy >= 0 && iy < g.h && ix >= 0 && ix < g.w
                           ? x + ((b * g.h + iy) * g.w + ix) * ci
                           : zeros;
      }
    InputTransform(d, ci, v + (t - t0) * ci, stride);
  };
  // Tile t's 2 x 2 outputs from its 16 products in m, with bias, residual and activation.
  auto transform_out = [&](int64_t t, int64_t t0, const float* m, int64_t stride) {
    const float* zeros = Zeros(widest);
    float* sink = Sink(widest);
    const int64_t tx = t % tw, ty = t / tw % th, b = t / (tw * th);
    float* out[4];
    const float* res[4];
    for (int r = 0; r < 2; ++r)
      for (int c = 0; c < 2; ++c) {
        const int64_t oy = 2 * ty + r, ox = 2 * tx + c;
        const bool inside = oy < g.oh && ox < g.ow;
        const int64_t pixel = (b * g.oh + oy) * g.ow + ox;
        out[2 * r + c] = inside ? y + pixel * co : sink;
        res[2 * r + c] = inside && residual != nullptr ? residual + pixel * co : zeros;
      }
    OutputTransform(m + (t - t0) * co, stride, co, bias != nullptr ? bias : zeros, res, out);
    if (act.activation != GemmEpilogue::kNone)
      for (float* o : out) ActivateEpilogueRow(o, co, act);
  };
  // position p's product: nt transformed rows of v times its weights, into m (its columns
  // [c0, c1) only where given).
  auto product = [&](int p, const float* v, int64_t nt, float* m, int64_t c0 = 0,
                     int64_t c1 = INT64_MAX) {
    const float* vp = v + p * nt * ci;
    SgemmPackedFused(
        nt,
        [vp, ci](int64_t i0, int64_t, int64_t pc, int64_t, float*, int64_t* lda) {
          *lda = ci;
          return vp + i0 * ci + pc;
        },
        w.position(p), m + p * nt * co, co, GemmEpilogue{}, {}, c0, c1);
  };
  const int threads = ParallelThreads();
  // Few tiles for the team (fewer than 12, one GEMM tile of rows, per block at two blocks a
  // thread: a 7x7 layer's 16 tiles on 16 threads were 16 blocks of one tile, each reading all
  // 16 positions' weights for one row): the three phases over all tiles in turn, the team
  // splitting each; the 16 products as one loop over positions and parts of their columns (two
  // items a thread at least), each item one thread's whole product of all tiles, instead of 16
  // products each split over the team (16 hand-offs, each with its rows copied first).
  if (threads > 1 && tiles < 12 * 2 * threads) {
    thread_local Scratch<float> v, m;  // (this thread's: the team's workers get pointers)
    float* pv = v.Get(static_cast<size_t>(16 * tiles * ci));
    float* pm = m.Get(static_cast<size_t>(16 * tiles * co));
    ParallelForWork(tiles, tiles * 16 * ci * 4,
                    [&](int64_t t) { transform_in(t, 0, pv, tiles * ci); });
    const int64_t nr = w.position(0).nr(), panels = (co + nr - 1) / nr;
    const int64_t parts = std::min(panels, (2 * int64_t{threads} + 15) / 16);
    ParallelForWork(16 * parts, 16 * tiles * ci * co, [&](int64_t item) {
      const int64_t part = item % parts;
      product(static_cast<int>(item / parts), pv, tiles, pm, panels * part / parts * nr,
              panels * (part + 1) / parts * nr);
    });
    ParallelForWork(tiles, tiles * 16 * co * 4,
                    [&](int64_t t) { transform_out(t, 0, pm, tiles * co); });
    return;
  }
  // Blocks of tiles whose 16 transformed inputs and products stay within about 512 KB (the
  // GEMMs read each position's rows while they are in cache), two at least per thread, each
  // block through all three phases on one thread.
  const int64_t per_block = std::max<int64_t>(12, 8192 / std::max(ci, co));
  const int64_t blocks = std::min(
      tiles, std::max((tiles + per_block - 1) / per_block, int64_t{threads > 1 ? 2 * threads : 1}));
  ParallelForWork(blocks, tiles * 16 * ci * co, [&](int64_t block) {
    const int64_t t0 = tiles * block / blocks, t1 = tiles * (block + 1) / blocks, nt = t1 - t0;
    thread_local Scratch<float> v, m;
    float* pv = v.Get(static_cast<size_t>(16 * nt * ci));
    float* pm = m.Get(static_cast<size_t>(16 * nt * co));
    for (int64_t t = t0; t < t1; ++t) transform_in(t, t0, pv, nt * ci);
    for (int p = 0; p < 16; ++p) product(p, pv, nt, pm);
    for (int64_t t = t0; t < t1; ++t) transform_out(t, t0, pm, nt * co);
  });
}

}  // namespace nereid::kernels
