// The GPU convolution and pooling kernels (kernels/cuda/conv.h) against float64 references on the
// host, per element type: the tensor-core implicit GEMM, the depthwise and the generic kernels with
// every fused epilogue, the pools, and the layout transposes.
#include "cuda/conv.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "cpu/gemm_int8.h"
#include "cuda/depth_cursor.h"
#include "cuda/gemm.h"
#include "gpu_test_util.h"

namespace nereid::gpu_test {
namespace {

namespace kc = kernels::cuda;
using kc::Activation;
using kc::ConvActivation;
using kc::GemmProblem;
using kernels::Conv2dGeometry;

double Activate(ConvActivation act, double v, double a, double b) {
  switch (act) {
    case ConvActivation::kRelu:
      return std::max(v, 0.0);
    case ConvActivation::kClip:
      return std::min(std::max(v, a), b);
    case ConvActivation::kLeakyRelu:
      return v >= 0 ? v : v * a;
    case ConvActivation::kHardSigmoid:
      return std::max(0.0, std::min(1.0, a * v + b));
    case ConvActivation::kHardSwish:
      return v * std::max(0.0, std::min(1.0, v / 6 + 0.5));
    default:
      return v;
  }
}

// f(iy, ix, ky, kx) for each tap of output pixel (oy, ox)'s window that lies inside the image.
template <typename F>
void ForEachTapInside(const Conv2dGeometry& g, int64_t oy, int64_t ox, F&& f) {
  for (int64_t ky = 0; ky < g.kh; ++ky)
    for (int64_t kx = 0; kx < g.kw; ++kx) {
      const int64_t iy = oy * g.stride_h - g.pad_top + ky * g.dilation_h;
      const int64_t ix = ox * g.stride_w - g.pad_left + kx * g.dilation_w;
      if (iy >= 0 && iy < g.h && ix >= 0 && ix < g.w) f(iy, ix, ky, kx);
    }
}

struct ConvCase {
  Conv2dGeometry g;
  ConvActivation act = ConvActivation::kNone;
  float a = 0.f, b = 0.f;
  bool bias = true, residual = false;
};

// Output size for symmetric padding 'pad'.
Conv2dGeometry Geometry(int64_t n, int64_t h, int64_t w, int64_t c_in, int64_t c_out, int64_t k,
                        int64_t stride, int64_t pad, int64_t groups = 1, int64_t dilation = 1) {
  Conv2dGeometry g;
  g.n = n, g.h = h, g.w = w, g.c_in = c_in, g.c_out = c_out, g.kh = g.kw = k;
  g.stride_h = g.stride_w = stride, g.pad_top = g.pad_left = pad, g.groups = groups;
  g.dilation_h = g.dilation_w = dilation;
  g.oh = (h + 2 * pad - dilation * (k - 1) - 1) / stride + 1;
  g.ow = (w + 2 * pad - dilation * (k - 1) - 1) / stride + 1;
  return g;
}

std::vector<ConvCase> ConvCases() {
  using A = ConvActivation;
  return {
      {Geometry(2, 9, 9, 16, 24, 3, 1, 1), A::kRelu, 0, 0, true, true},          // a ResNet block
      {Geometry(1, 20, 20, 3, 64, 7, 2, 3), A::kRelu},                           // a stem: c_in 3
      {Geometry(3, 7, 7, 64, 72, 1, 2, 0), A::kClip, 0.f, 6.f},                  // 1x1, stride 2
      {Geometry(2, 14, 14, 64, 128, 3, 1, 1), A::kNone, 0, 0, false, true},      // many depth steps
      {Geometry(1, 11, 13, 32, 32, 3, 2, 1, 32), A::kHardSwish},                 // depthwise
      {Geometry(2, 8, 8, 16, 8, 3, 1, 1, 4), A::kLeakyRelu, 0.1f},               // grouped
      {Geometry(1, 12, 12, 8, 16, 3, 1, 2, 1, 2), A::kHardSigmoid, 0.2f, 0.5f},  // dilated
      {Geometry(5, 3, 3, 40, 136, 3, 1, 1), A::kRelu, 0, 0, true, true},         // c_out not x64
      {Geometry(1, 7, 7, 256, 64, 3, 1, 1), A::kRelu, 0, 0, true, true},     // split over blocks
      {Geometry(2, 5, 5, 16, 20, 3, 1, 1), A::kClip, 0.f, 6.f, true, true},  // c_out not x8
  };
}

std::string Describe(const ConvCase& c, ElemType t) {
  const Conv2dGeometry& g = c.g;
  return std::string(kc::ElemTypeName(t)) + " n" + std::to_string(g.n) + " " + std::to_string(g.h) +
         "x" + std::to_string(g.w) + "x" + std::to_string(g.c_in) + " -> " +
         std::to_string(g.c_out) + " k" + std::to_string(g.kh) + " s" + std::to_string(g.stride_h) +
         " g" + std::to_string(g.groups);
}

// A case's operands: random x, w (in [-0.3, 0.3]), bias and residual (drawn in that order from
// 'seed' on), on the device in 't' and rounded to it for the reference, and the problem reading
// them (the bias and residual as the case asks, no workspace).
struct ConvOperands {
  ConvOperands(const ConvCase& c, ElemType t, uint64_t* seed)
      : c(c),
        x(Random(c.g.n * c.g.h * c.g.w * c.g.c_in, (*seed)++)),
        w(Random(c.g.c_out * (c.g.c_in / c.g.groups) * c.g.kh * c.g.kw, (*seed)++, -0.3f, 0.3f)),
        bias(Random(c.g.c_out, (*seed)++)),
        res(Random(c.g.n * c.g.oh * c.g.ow * c.g.c_out, (*seed)++)),
        rx(Rounded(x, t)),
        rw(Rounded(w, t)),
        rr(Rounded(res, t)),
        dx(Encode(x, t)),
        db(Encode(bias, ElemType::kF32)),
        dr(Encode(res, t)),
        dy(res.size() * kc::ElemSize(t)) {
    p.g = c.g, p.type = t, p.act = c.act, p.act_a = c.a, p.act_b = c.b;
    dw = std::make_unique<DeviceBuffer>(Encode(kc::ConvWeightsLayout(p, w.data()), t));
    p.x = dx.get(), p.w = dw->get(), p.y = dy.get();
    p.bias = c.bias ? static_cast<const float*>(db.get()) : nullptr;
    p.residual = c.residual ? dr.get() : nullptr;
  }

  // Output pixel 'px', channel 'co' from the rounded operands, in double.
  double Reference(int64_t px, int64_t co) const {
    const Conv2dGeometry& g = c.g;
    const int64_t cin_g = g.c_in / g.groups, grp = co / (g.c_out / g.groups);
    const int64_t b = px / (g.oh * g.ow), oy = px / g.ow % g.oh, ox = px % g.ow;
    double acc = c.bias ? bias[co] : 0.0;
    ForEachTapInside(g, oy, ox, [&](int64_t iy, int64_t ix, int64_t ky, int64_t kx) {
      for (int64_t ci = 0; ci < cin_g; ++ci)
        acc += rx[((b * g.h + iy) * g.w + ix) * g.c_in + grp * cin_g + ci] *
               rw[((co * cin_g + ci) * g.kh + ky) * g.kw + kx];
    });
    if (c.residual) acc += rr[px * g.c_out + co];
    return Activate(c.act, acc, c.a, c.b);
  }

  const ConvCase& c;
  std::vector<float> x, w, bias, res;
  std::vector<double> rx, rw, rr;
  DeviceBuffer dx, db, dr, dy;
  std::unique_ptr<DeviceBuffer> dw;  // after the problem, whose kernel picks the weights' layout
  kc::ConvProblem p;
};

// The tensor-core kernel's place in the depth, moved by additions, against the divisions that give
// it from k, for every thread's first depth index of every split (steps of 32 and 64 elements,
// pieces of 8 and 16): channel counts below, at and above the step, windows 1 to 7 wide. Host
// only (no GPU needed).
TEST(CudaConv, DepthCursorKeepsTheTapAndChannelOfEachStep) {
  int checked = 0;
  for (int64_t c_in : {8, 16, 24, 32, 48, 64, 256})
    for (int64_t kw : {1, 3, 4, 7})
      for (int64_t kh : {1, 3})
        for (auto [step, vec] : {std::pair{32, 8}, {64, 16}}) {
          if (c_in % vec != 0) continue;
          const int64_t depth = kh * kw * c_in, steps = (depth + step - 1) / step;
          for (int64_t first = 0; first < steps; ++first)
            for (int piece = 0; piece < step / vec; ++piece) {
              kc::DepthCursor at(first * step + piece * vec, depth, c_in, kw);
              for (int64_t s = first; s < steps; ++s, at.Advance(step, c_in, kw)) {
                const int64_t k = s * step + piece * vec;
                ASSERT_EQ(at.k, k);
                if (k >= depth) break;
                const int64_t tap = k / c_in;
                ASSERT_EQ(at.ci, k % c_in) << "c_in " << c_in << " kw " << kw << " k " << k;
                ASSERT_EQ(at.kx, tap % kw) << "c_in " << c_in << " kw " << kw << " k " << k;
                ASSERT_EQ(at.ky, tap / kw) << "c_in " << c_in << " kw " << kw << " k " << k;
                ++checked;
              }
            }
        }
  EXPECT_GT(checked, 100000);
}

TEST(CudaConv, MatchesFloat64ReferenceOnEveryKernel) {
  NEREID_REQUIRE_GPU();
  uint64_t seed = 1;
  int kernels_seen[3] = {0, 0, 0}, split = 0;
  DeviceBuffer workspace(kc::kConvWorkspaceFloats * sizeof(float));
  for (const ConvCase& c : ConvCases())
    for (ElemType t : {ElemType::kF32, ElemType::kBF16, ElemType::kF16}) {
      const Conv2dGeometry& g = c.g;
      ConvOperands o(c, t, &seed);
      kc::ConvProblem& p = o.p;
      p.workspace = static_cast<float*>(workspace.get());
      split += kc::ConvSplits(p) > 1;
      const kc::ConvKernel kernel = kc::ChooseConvKernel(p);
      ++kernels_seen[static_cast<int>(kernel)];
      if (t != ElemType::kF32 && g.groups == 1 && g.c_in % 8 == 0) {
        EXPECT_EQ(kernel, kc::ConvKernel::kTensorCore) << Describe(c, t);
      }
      // The reference: the same rounded operands, in double.
      std::vector<double> ref;
      for (int64_t px = 0; px < g.n * g.oh * g.ow; ++px)
        for (int64_t co = 0; co < g.c_out; ++co) ref.push_back(o.Reference(px, co));
      const double tol = t == ElemType::kF32 ? 1e-5 : t == ElemType::kF16 ? 3e-3 : 2e-2;
      // A split depth both ways: on a cluster (where the GPU has them) and through the workspace.
      for (bool clusters : {true, false}) {
        p.clusters = clusters;
        if (!clusters && kc::ConvSplits(p) == 1) break;
        CUDA_OK(cudaMemset(o.dy.get(), 0xFF, o.dy.size()));  // NaN: every value must be written
        ASSERT_EQ(kc::Conv2dNhwc(p, nullptr), cudaSuccess) << Describe(c, t);
        CUDA_OK(cudaDeviceSynchronize());
        const double err = RelativeError(Decode(o.dy.Read(), t), ref);
        EXPECT_LE(err, tol) << Describe(c, t) << " on " << kc::ConvKernelName(kernel)
                            << (clusters ? "" : ", split through the workspace");
      }
    }
  for (int k = 0; k < 3; ++k)
    EXPECT_GT(kernels_seen[k], 0) << kc::ConvKernelName(static_cast<kc::ConvKernel>(k));
  EXPECT_GT(split, 0) << "no case split its depth over blocks";
}

// One NaN pixel (every channel of image 0's pixel (1, 1)): every output whose window holds it is
// NaN, with every activation (Relu, Clip, HardSigmoid and HardSwish once dropped it: fmaxf and
// fminf return the other operand) and on every kernel; every other output stays finite.
TEST(CudaConv, ANaNPixelReachesEveryOutputOfItsWindowsAndNoOther) {
  NEREID_REQUIRE_GPU();
  uint64_t seed = 70;
  DeviceBuffer workspace(kc::kConvWorkspaceFloats * sizeof(float));
  for (const ConvCase& c : ConvCases())
    for (ElemType t : {ElemType::kF32, ElemType::kBF16, ElemType::kF16}) {
      const Conv2dGeometry& g = c.g;
      ConvCase nan_case = c;
      nan_case.residual = false;  // (a residual of NaN would be another test)
      ConvOperands o(nan_case, t, &seed);
      for (int64_t ch = 0; ch < g.c_in; ++ch) o.x[(1 * g.w + 1) * g.c_in + ch] = NAN;
      DeviceBuffer dx(Encode(o.x, t));
      o.p.x = dx.get();
      o.p.workspace = static_cast<float*>(workspace.get());
      const kc::ConvKernel kernel = kc::ChooseConvKernel(o.p);
      ASSERT_EQ(kc::Conv2dNhwc(o.p, nullptr), cudaSuccess) << Describe(c, t);
      CUDA_OK(cudaDeviceSynchronize());
      const std::vector<double> y = Decode(o.dy.Read(), t);
      for (int64_t px = 0; px < g.n * g.oh * g.ow; ++px) {
        const int64_t b = px / (g.oh * g.ow), oy = px / g.ow % g.oh, ox = px % g.ow;
        bool reached = false;
        ForEachTapInside(g, oy, ox, [&](int64_t iy, int64_t ix, int64_t, int64_t) {
          reached = reached || (b == 0 && iy == 1 && ix == 1);
        });
        for (int64_t co = 0; co < g.c_out; ++co) {
          const double v = y[px * g.c_out + co];
          ASSERT_EQ(std::isnan(v), reached)
              << Describe(c, t) << " on " << kc::ConvKernelName(kernel) << " pixel " << px
              << " channel " << co << ": " << v;
        }
      }
    }
}

// GemmSm90's implicit GEMM (the windows gathered by cp.async into wgmma's swizzled tiles) against
// float64, on both of its tiles: ragged pixel and channel counts, strides, dilation, a strided 1x1,
// a stem of 8 channels and a depth that ends inside a K block, the residual before the Relu; and
// one layer of more tiles than a Hopper GPU has SMs through Conv2dNhwc, which then picks it
// (checked on every fifth pixel).
TEST(CudaConv, Sm90ImplicitGemmMatchesFloat64Reference) {
  NEREID_REQUIRE_GPU();
  if (kc::Sm90SmCount() == 0) GTEST_SKIP() << "GemmSm90 needs a Hopper GPU and an sm_90a build";
  using A = ConvActivation;
  struct Sm90Case {
    ConvCase c;
    ElemType t;
    bool dispatch;  // through Conv2dNhwc (which must choose the implicit GEMM), else GemmSm90
  };
  const Sm90Case cases[] = {
      {{Geometry(2, 9, 9, 64, 136, 3, 1, 1), A::kRelu, 0, 0, true, true}, ElemType::kBF16, false},
      {{Geometry(3, 15, 15, 128, 256, 3, 2, 1), A::kNone, 0, 0, false, false},
       ElemType::kF16,
       false},
      {{Geometry(1, 10, 12, 64, 64, 1, 2, 0), A::kRelu}, ElemType::kBF16, false},
      {{Geometry(2, 12, 12, 64, 128, 3, 1, 2, 1, 2), A::kNone, 0, 0, true, true},
       ElemType::kF16,
       false},
      {{Geometry(2, 13, 11, 8, 64, 7, 2, 3), A::kRelu}, ElemType::kBF16, false},  // a stem
      {{Geometry(1, 6, 6, 24, 72, 3, 1, 1), A::kNone}, ElemType::kF16, false},    // k = 216: a part
      {{Geometry(24, 28, 28, 64, 128, 3, 1, 1), A::kRelu, 0, 0, true, true}, ElemType::kBF16, true},
  };
  uint64_t seed = 100;
  for (const Sm90Case& sc : cases) {
    const ConvCase& c = sc.c;
    const ElemType t = sc.t;
    const Conv2dGeometry& g = c.g;
    const int64_t pixels = g.n * g.oh * g.ow, y_n = pixels * g.c_out;
    ConvOperands o(c, t, &seed);
    const DeviceBuffer& dy = o.dy;
    const int64_t every = sc.dispatch ? 5 : 1;
    std::vector<double> ref;
    for (int64_t px = 0; px < pixels; px += every)
      for (int64_t co = 0; co < g.c_out; ++co) ref.push_back(o.Reference(px, co));
    auto check = [&](const std::string& how) {
      CUDA_OK(cudaDeviceSynchronize());
      const std::vector<double> y = Decode(dy.Read(), t);
      std::vector<double> got;
      for (int64_t px = 0; px < pixels; px += every)
        got.insert(got.end(), y.begin() + px * g.c_out, y.begin() + (px + 1) * g.c_out);
      const double tol = t == ElemType::kF16 ? 3e-3 : 2e-2;
      EXPECT_LE(RelativeError(got, ref), tol) << Describe(c, t) << " " << how;
      CUDA_OK(cudaMemset(dy.get(), 0xFF, y_n * kc::ElemSize(t)));  // NaNs for the next run
    };
    if (sc.dispatch) {
      ASSERT_EQ(kc::Conv2dNhwc(o.p, nullptr), cudaSuccess) << Describe(c, t);
      check("Conv2dNhwc");
      continue;
    }
    const GemmProblem q = kc::ImplicitGemm(o.p);
    for (kc::Sm90Tile tile :
         {kc::Sm90Tile::k128x128, kc::Sm90Tile::k128x256, kc::Sm90Tile::k128x64}) {
      if (tile == kc::Sm90Tile::k128x64 && g.c_out > 64) continue;  // (refused: wider outputs)
      const kc::Sm90Config config{tile, 1};
      ASSERT_TRUE(kc::Sm90Supported(q, config)) << Describe(c, t);
      ASSERT_EQ(kc::GemmSm90(q, nullptr, config), cudaSuccess) << Describe(c, t);
      check(config.Name());
    }
    // What it refuses: 64-row tiles, c_in of part of a 16-byte piece, groups; the small-M
    // kernels too.
    EXPECT_FALSE(kc::Sm90Supported(q, {kc::Sm90Tile::k64x128, 1}));
    GemmProblem bad = q;
    bad.image.c_in = 12, bad.k = g.kh * g.kw * 12;
    EXPECT_FALSE(kc::Sm90Supported(bad, {kc::Sm90Tile::k128x128, 1}));
    bad = q, bad.image.groups = 2;
    EXPECT_FALSE(kc::Sm90Supported(bad, {kc::Sm90Tile::k128x128, 1}));
    for (auto v : kc::kSmallMVariants) EXPECT_FALSE(kc::SmallMSupported(q, v));
  }
}

// The int8 form of the tensor-core kernel: x quantized per image and w per output channel on the
// host with the engine's arithmetic (kernels::QuantizeRowsInt8), the reference the exact integer
// sums scaled in double; bf16 and fp16 outputs, split and unsplit depths, residuals.
TEST(CudaConv, Int8MatchesTheQuantizedReference) {
  NEREID_REQUIRE_GPU();
  using A = ConvActivation;
  const ConvCase cases[] = {
      {Geometry(2, 9, 9, 16, 24, 3, 1, 1), A::kRelu, 0, 0, true, true},
      {Geometry(3, 7, 7, 64, 72, 1, 2, 0), A::kClip, 0.f, 6.f},
      {Geometry(2, 14, 14, 64, 128, 3, 1, 1), A::kNone, 0, 0, false, true},
      {Geometry(5, 3, 3, 48, 136, 3, 1, 1), A::kRelu, 0, 0, true, true},
      {Geometry(1, 7, 7, 256, 64, 3, 1, 1), A::kRelu, 0, 0, true, true},  // split over blocks
      // Tiles that fill a Hopper GPU: GemmSm90's int8 implicit GEMM (bf16 out) on 128 x 64,
      // 128 x 256 and (strided) 128 x 128 tiles, 147 row tiles of 128 pixels across 6 images.
      {Geometry(6, 56, 56, 64, 64, 3, 1, 1), A::kRelu, 0, 0, true, true},
      {Geometry(6, 56, 56, 64, 256, 1, 1, 0), A::kNone, 0, 0, true, true},
      {Geometry(6, 112, 112, 32, 128, 3, 2, 1), A::kRelu, 0, 0, true, false},
  };
  DeviceBuffer workspace(kc::kConvWorkspaceFloats * sizeof(float));
  uint64_t seed = 50;
  int split = 0, sm90 = 0;
  for (const ConvCase& c : cases)
    for (ElemType t : {ElemType::kBF16, ElemType::kF16}) {
      const Conv2dGeometry& g = c.g;
      const int64_t image = g.h * g.w * g.c_in, depth = g.kh * g.kw * g.c_in;
      const size_t y_n = g.n * g.oh * g.ow * g.c_out;
      const std::vector<float> x = Random(g.n * image, seed++, -2.f, 2.f);
      const std::vector<float> w = Random(g.c_out * depth, seed++, -0.3f, 0.3f);
      const std::vector<float> bias = Random(g.c_out, seed++), res = Random(y_n, seed++);
      kc::ConvProblem p;
      p.g = g, p.type = t, p.act = c.act, p.act_a = c.a, p.act_b = c.b, p.int8 = true;
      const std::vector<float> wl = kc::ConvWeightsLayout(p, w.data());  // [co][ky][kx][ci]
      std::vector<int8_t> xq(x.size()), wq(wl.size());
      std::vector<float> xs(g.n), ws(g.c_out);
      kernels::QuantizeRowsInt8(x.data(), g.n, image, image, xq.data(), xs.data());
      kernels::QuantizeRowsInt8(wl.data(), g.c_out, depth, depth, wq.data(), ws.data());
      auto bytes = [](const auto& v) {
        return std::vector<uint8_t>(reinterpret_cast<const uint8_t*>(v.data()),
                                    reinterpret_cast<const uint8_t*>(v.data() + v.size()));
      };
      DeviceBuffer dx(bytes(xq)), dw(bytes(wq)), dxs(bytes(xs)), dws(bytes(ws)),
          db(Encode(bias, ElemType::kF32)), dr(Encode(res, t)), dy(y_n * kc::ElemSize(t));
      p.x = dx.get(), p.w = dw.get(), p.y = dy.get();
      p.x_scale = static_cast<const float*>(dxs.get());
      p.w_scale = static_cast<const float*>(dws.get());
      p.bias = c.bias ? static_cast<const float*>(db.get()) : nullptr;
      p.residual = c.residual ? dr.get() : nullptr;
      p.workspace = static_cast<float*>(workspace.get());
      ASSERT_TRUE(kc::Int8ConvSupported(p)) << Describe(c, t);
      split += kc::ConvSplits(p) > 1;
      sm90 += kc::ConvOnSm90(p);
      const std::vector<double> rr = Rounded(res, t);
      std::vector<double> ref(y_n);
      for (int64_t b = 0; b < g.n; ++b)
        for (int64_t oy = 0; oy < g.oh; ++oy)
          for (int64_t ox = 0; ox < g.ow; ++ox)
            for (int64_t co = 0; co < g.c_out; ++co) {
              int64_t sum = 0;
              ForEachTapInside(g, oy, ox, [&](int64_t iy, int64_t ix, int64_t ky, int64_t kx) {
                for (int64_t ci = 0; ci < g.c_in; ++ci)
                  sum += int64_t{xq[b * image + (iy * g.w + ix) * g.c_in + ci]} *
                         wq[co * depth + (ky * g.kw + kx) * g.c_in + ci];
              });
              double acc = static_cast<double>(sum) * xs[b] * ws[co] + (c.bias ? bias[co] : 0.0);
              const int64_t at = ((b * g.oh + oy) * g.ow + ox) * g.c_out + co;
              if (c.residual) acc += rr[at];
              ref[at] = Activate(c.act, acc, c.a, c.b);
            }
      // Only the output's rounding to 16 bits and fp32 scaling differ from the reference. A split
      // depth both ways: on a cluster (where the GPU has them) and through the workspace.
      const double tol = t == ElemType::kF16 ? 2e-3 : 1e-2;
      for (bool clusters : {true, false}) {
        p.clusters = clusters;
        if (!clusters && kc::ConvSplits(p) == 1) break;
        CUDA_OK(cudaMemset(dy.get(), 0xFF, dy.size()));
        ASSERT_EQ(kc::Conv2dNhwc(p, nullptr), cudaSuccess) << Describe(c, t);
        CUDA_OK(cudaDeviceSynchronize());
        EXPECT_LE(RelativeError(Decode(dy.Read(), t), ref), tol)
            << "int8 " << Describe(c, t) << (clusters ? "" : ", split through the workspace");
      }
    }
  EXPECT_GT(split, 0) << "no int8 case split its depth over blocks";
  // bf16 outputs of the three large cases (GemmSm90 writes int8 products to bf16 only).
  if (kc::Sm90SmCount() > 0) {
    EXPECT_EQ(sm90, 3) << "int8 convolutions on GemmSm90";
  }
  // What the int8 kernel cannot take: c_in not a multiple of 16, groups, no scales.
  kc::ConvProblem bad;
  bad.g = Geometry(1, 4, 4, 8, 8, 3, 1, 1), bad.type = ElemType::kBF16, bad.int8 = true;
  DeviceBuffer buf(1 << 12);
  bad.x = bad.w = bad.y = buf.get();
  bad.x_scale = bad.w_scale = static_cast<const float*>(buf.get());
  EXPECT_FALSE(kc::Int8ConvSupported(bad));
  EXPECT_EQ(kc::Conv2dNhwc(bad, nullptr), cudaErrorInvalidValue);
  bad.g = Geometry(1, 4, 4, 16, 16, 3, 1, 1), bad.x_scale = nullptr;
  EXPECT_EQ(kc::Conv2dNhwc(bad, nullptr), cudaErrorInvalidValue);
  cudaGetLastError();
}

// GEMMs as 1x1 convolutions on the tensor-core kernel (the GEMM tuner's candidate for batch-1
// layers): bf16, fp16 and int8 operands, the row counts of ResNet-50's batch-1 stages (split
// depths among them: one cluster per tile on a Hopper GPU), bias, residual before Relu.
TEST(CudaConv, GemmAsConvMatchesTheReference) {
  NEREID_REQUIRE_GPU();
  struct Shape {
    int64_t m, n, k;
    bool residual;
    Activation act;
  };
  const Shape shapes[] = {{49, 512, 2048, true, Activation::kRelu},
                          {196, 1024, 256, true, Activation::kRelu},
                          {3136, 64, 64, false, Activation::kRelu},
                          {1, 136, 96, false, Activation::kNone},
                          {300, 72, 1024, true, Activation::kNone}};
  uint64_t seed = 90;
  int split = 0;
  for (const Shape& s : shapes)
    for (ElemType t : {ElemType::kBF16, ElemType::kF16, ElemType::kI8}) {
      const bool int8 = t == ElemType::kI8;
      const ElemType out = int8 ? ElemType::kBF16 : t;
      const std::vector<float> x = Random(s.m * s.k, seed++),
                               w = Random(s.n * s.k, seed++, -0.3f, 0.3f);
      const std::vector<float> bias = Random(s.n, seed++), res = Random(s.m * s.n, seed++);
      std::vector<double> rx, rw;
      std::vector<int8_t> xq(x.size()), wq(w.size());
      std::vector<float> xs(s.m), ws(s.n);
      if (int8) {  // the reference reads the quantized values
        kernels::QuantizeRowsInt8(x.data(), s.m, s.k, s.k, xq.data(), xs.data());
        kernels::QuantizeRowsInt8(w.data(), s.n, s.k, s.k, wq.data(), ws.data());
        for (int64_t i = 0; i < s.m * s.k; ++i)
          rx.push_back(static_cast<double>(xq[i]) * xs[i / s.k]);
        for (int64_t i = 0; i < s.n * s.k; ++i)
          rw.push_back(static_cast<double>(wq[i]) * ws[i / s.k]);
      } else {
        rx = Rounded(x, t), rw = Rounded(w, t);
      }
      auto bytes = [](const auto& v) {
        return std::vector<uint8_t>(reinterpret_cast<const uint8_t*>(v.data()),
                                    reinterpret_cast<const uint8_t*>(v.data() + v.size()));
      };
      DeviceBuffer dx(int8 ? bytes(xq) : Encode(x, t)), dw(int8 ? bytes(wq) : Encode(w, t)),
          dxs(bytes(xs)), dws(bytes(ws)), db(Encode(bias, ElemType::kF32)), dr(Encode(res, out)),
          dy(s.m * s.n * kc::ElemSize(out));
      GemmProblem p;
      p.m = s.m, p.n = s.n, p.k = s.k, p.ab_type = t, p.out_type = out;
      p.x = dx.get(), p.w = dw.get(), p.y = dy.get(), p.act = s.act, p.residual_first = true;
      p.bias = static_cast<const float*>(db.get());
      p.residual = s.residual ? dr.get() : nullptr;
      if (int8) {
        p.x_scale = static_cast<const float*>(dxs.get());
        p.w_scale = static_cast<const float*>(dws.get());
      }
      ASSERT_TRUE(kc::GemmAsConvSupported(p));
      split += kc::ConvSplits(kc::GemmAsConvProblem(p)) > 1;
      ASSERT_EQ(kc::GemmAsConv(p, nullptr), cudaSuccess);
      CUDA_OK(cudaDeviceSynchronize());
      const std::vector<double> rr = Rounded(res, out);
      std::vector<double> ref(s.m * s.n);
      for (int64_t i = 0; i < s.m; ++i)
        for (int64_t j = 0; j < s.n; ++j) {
          double acc = bias[j];
          for (int64_t l = 0; l < s.k; ++l) acc += rx[i * s.k + l] * rw[j * s.k + l];
          if (s.residual) acc += rr[i * s.n + j];
          ref[i * s.n + j] = s.act == Activation::kRelu ? std::max(acc, 0.0) : acc;
        }
      const double tol = t == ElemType::kF16 ? 3e-3 : 2e-2;
      EXPECT_LE(RelativeError(Decode(dy.Read(), out), ref), tol)
          << kc::ElemTypeName(t) << " " << s.m << "x" << s.n << "x" << s.k;
    }
  if (kc::ClusterLaunch()) {
    EXPECT_GT(split, 0) << "no GEMM split its depth";
  }
  // What it refuses: an activation after the residual, alpha, fp32, misaligned k.
  GemmProblem bad;
  bad.m = bad.n = bad.k = 64, bad.ab_type = bad.out_type = ElemType::kBF16;
  DeviceBuffer buf(1 << 16);
  bad.x = bad.w = bad.residual = bad.y = buf.get(), bad.act = Activation::kRelu;
  EXPECT_FALSE(kc::GemmAsConvSupported(bad));
  bad.residual_first = true;
  EXPECT_TRUE(kc::GemmAsConvSupported(bad));
  bad.alpha = 0.5f;
  EXPECT_FALSE(kc::GemmAsConvSupported(bad));
  bad.alpha = 1.f, bad.k = 60;
  EXPECT_FALSE(kc::GemmAsConvSupported(bad));
  bad.k = 64, bad.ab_type = bad.out_type = ElemType::kF32;
  EXPECT_FALSE(kc::GemmAsConvSupported(bad));
  EXPECT_EQ(kc::GemmAsConv(bad, nullptr), cudaErrorInvalidValue);
}

TEST(CudaConv, PoolsMatchTheReference) {
  NEREID_REQUIRE_GPU();
  struct PoolCase {
    kc::PoolKind kind;
    Conv2dGeometry g;
    int64_t pad_bottom, pad_right;
    bool count_include_pad;
  };
  Conv2dGeometry resnet = Geometry(2, 12, 12, 24, 24, 3, 2, 1);
  Conv2dGeometry ceil = Geometry(1, 7, 8, 8, 8, 3, 2, 0);  // ceil_mode: one more output each way
  ceil.oh += 1, ceil.ow += 1;
  const std::vector<PoolCase> cases = {
      {kc::PoolKind::kMax, resnet, 1, 1, false},
      {kc::PoolKind::kAverage, Geometry(2, 9, 9, 16, 16, 3, 1, 1), 1, 1, false},
      {kc::PoolKind::kAverage, Geometry(2, 9, 9, 16, 16, 3, 1, 1), 1, 1, true},
      {kc::PoolKind::kAverage, ceil, 2, 1, true},
      {kc::PoolKind::kMax, ceil, 2, 1, false},
      // 6 channels: no whole 16 bytes, the kernel of one channel per thread
      {kc::PoolKind::kMax, Geometry(1, 7, 7, 6, 6, 3, 2, 1), 1, 1, false},
      {kc::PoolKind::kAverage, Geometry(1, 7, 7, 6, 6, 3, 2, 1), 1, 1, true},
  };
  uint64_t seed = 100;
  for (const PoolCase& c : cases)
    for (ElemType t : {ElemType::kF32, ElemType::kBF16}) {
      const Conv2dGeometry& g = c.g;
      const std::vector<float> x = Random(g.n * g.h * g.w * g.c_in, seed++);
      const size_t y_n = g.n * g.oh * g.ow * g.c_in;
      DeviceBuffer dx(Encode(x, t)), dy(y_n * kc::ElemSize(t));
      ASSERT_EQ(kc::Pool2dNhwc(c.kind, g, c.pad_bottom, c.pad_right, c.count_include_pad, t,
                               dx.get(), dy.get(), nullptr),
                cudaSuccess);
      CUDA_OK(cudaDeviceSynchronize());
      const std::vector<double> rx = Rounded(x, t);
      std::vector<double> ref(y_n);
      for (int64_t b = 0; b < g.n; ++b)
        for (int64_t oy = 0; oy < g.oh; ++oy)
          for (int64_t ox = 0; ox < g.ow; ++ox)
            for (int64_t ch = 0; ch < g.c_in; ++ch) {
              const int64_t y0 = oy * g.stride_h - g.pad_top, x0 = ox * g.stride_w - g.pad_left;
              double v = c.kind == kc::PoolKind::kMax ? -INFINITY : 0.0;
              int64_t inside = 0;
              for (int64_t iy = y0; iy < y0 + g.kh; ++iy)
                for (int64_t ix = x0; ix < x0 + g.kw; ++ix) {
                  if (iy < 0 || iy >= g.h || ix < 0 || ix >= g.w) continue;
                  const double e = rx[((b * g.h + iy) * g.w + ix) * g.c_in + ch];
                  v = c.kind == kc::PoolKind::kMax ? std::max(v, e) : v + e;
                  ++inside;
                }
              if (c.kind == kc::PoolKind::kAverage) {
                const int64_t rows = std::min(y0 + g.kh, g.h + c.pad_bottom) - y0;
                const int64_t cols = std::min(x0 + g.kw, g.w + c.pad_right) - x0;
                v /= static_cast<double>(c.count_include_pad ? rows * cols : inside);
              }
              ref[((b * g.oh + oy) * g.ow + ox) * g.c_in + ch] = v;
            }
      EXPECT_LE(RelativeError(Decode(dy.Read(), t), ref), t == ElemType::kF32 ? 1e-6 : 1e-2)
          << (c.kind == kc::PoolKind::kMax ? "max " : "average ") << kc::ElemTypeName(t);
    }
  // Global pools: [n, hw, c] -> [n, c].
  const int64_t n = 3, hw = 49, ch = 300;
  const std::vector<float> x = Random(n * hw * ch, 7);
  for (kc::PoolKind kind : {kc::PoolKind::kMax, kc::PoolKind::kAverage}) {
    DeviceBuffer dx(Encode(x, ElemType::kF32)), dy(n * ch * 4);
    ASSERT_EQ(kc::GlobalPoolNhwc(kind, n, hw, ch, ElemType::kF32, dx.get(), dy.get(), nullptr),
              cudaSuccess);
    CUDA_OK(cudaDeviceSynchronize());
    std::vector<double> ref(n * ch, kind == kc::PoolKind::kMax ? -INFINITY : 0.0);
    for (int64_t b = 0; b < n; ++b)
      for (int64_t p = 0; p < hw; ++p)
        for (int64_t c = 0; c < ch; ++c) {
          const double e = x[(b * hw + p) * ch + c];
          double& r = ref[b * ch + c];
          r = kind == kc::PoolKind::kMax ? std::max(r, e) : r + e / hw;
        }
    EXPECT_LE(RelativeError(Decode(dy.Read(), ElemType::kF32), ref), 1e-6);
  }
}

TEST(CudaConv, LayoutTransposesRoundTrip) {
  NEREID_REQUIRE_GPU();
  const int64_t n = 2, c = 5, hw = 7 * 3;
  const std::vector<float> x = Random(n * c * hw, 9);
  for (ElemType t : {ElemType::kF32, ElemType::kF16}) {
    const std::vector<uint8_t> bytes = Encode(x, t);
    DeviceBuffer dx(bytes), last(bytes.size()), back(bytes.size());
    ASSERT_EQ(kc::ChannelsLast(t, dx.get(), n, c, hw, last.get(), nullptr), cudaSuccess);
    ASSERT_EQ(kc::ChannelsFirst(t, last.get(), n, c, hw, back.get(), nullptr), cudaSuccess);
    CUDA_OK(cudaDeviceSynchronize());
    const std::vector<double> nhwc = Decode(last.Read(), t), ref = Rounded(x, t);
    for (int64_t b = 0; b < n; ++b)
      for (int64_t ch = 0; ch < c; ++ch)
        for (int64_t p = 0; p < hw; ++p)
          ASSERT_EQ(nhwc[(b * hw + p) * c + ch], ref[(b * c + ch) * hw + p]);
    EXPECT_EQ(back.Read(), bytes);
    // Padded to 8 channels: the extra ones zero.
    DeviceBuffer wide(n * 8 * hw * kc::ElemSize(t));
    ASSERT_EQ(kc::ChannelsLast(t, dx.get(), n, c, hw, wide.get(), nullptr, 8), cudaSuccess);
    CUDA_OK(cudaDeviceSynchronize());
    const std::vector<double> padded = Decode(wide.Read(), t);
    for (int64_t b = 0; b < n; ++b)
      for (int64_t p = 0; p < hw; ++p)
        for (int64_t ch = 0; ch < 8; ++ch)
          ASSERT_EQ(padded[(b * hw + p) * 8 + ch], ch < c ? ref[(b * c + ch) * hw + p] : 0.0);
  }
}

// Space to depth (a strided first convolution's input): every output channel is the pixel its
// definition names, zero outside the image and past s^2 c_in channels; odd sizes and padding on
// one side only, 2- and 4-byte types; refused where the channels do not fit or pack.
TEST(CudaConv, SpaceToDepthPlacesEachPixelOfItsBlock) {
  NEREID_REQUIRE_GPU();
  kernels::Conv2dGeometry g;
  g.n = 2, g.c_in = 3, g.h = 11, g.w = 9, g.stride_h = g.stride_w = 2;
  g.pad_top = 3, g.pad_left = 0, g.oh = 8, g.ow = 6, g.c_out = 16;
  const std::vector<float> x = Random(g.n * g.c_in * g.h * g.w, 21);
  // (bf16 from fp32: a model's input converted on the way)
  for (auto [t, xt] : {std::pair{ElemType::kBF16, ElemType::kBF16},
                       {ElemType::kF32, ElemType::kF32},
                       {ElemType::kBF16, ElemType::kF32}}) {
    DeviceBuffer dx(Encode(x, xt)), dy(g.n * g.oh * g.ow * g.c_out * kc::ElemSize(t));
    ASSERT_EQ(kc::SpaceToDepth(t, dx.get(), g, dy.get(), nullptr, xt), cudaSuccess);
    CUDA_OK(cudaDeviceSynchronize());
    const std::vector<double> y = Decode(dy.Read(), t), ref = Rounded(x, t);
    for (int64_t b = 0; b < g.n; ++b)
      for (int64_t by = 0; by < g.oh; ++by)
        for (int64_t bx = 0; bx < g.ow; ++bx)
          for (int64_t ch = 0; ch < g.c_out; ++ch) {
            const int64_t tap = ch / g.c_in, ci = ch % g.c_in;
            const int64_t row = by * 2 + tap / 2 - g.pad_top, col = bx * 2 + tap % 2 - g.pad_left;
            const bool inside = ch < 4 * g.c_in && row >= 0 && row < g.h && col >= 0 && col < g.w;
            ASSERT_EQ(y[((b * g.oh + by) * g.ow + bx) * g.c_out + ch],
                      inside ? ref[((b * g.c_in + ci) * g.h + row) * g.w + col] : 0.0)
                << "image " << b << " block (" << by << ", " << bx << ") channel " << ch;
          }
  }
  DeviceBuffer buf(1 << 16);
  kernels::Conv2dGeometry bad = g;
  bad.c_out = 8;  // fewer than 4 x 3
  EXPECT_EQ(kc::SpaceToDepth(ElemType::kBF16, buf.get(), bad, buf.get(), nullptr, ElemType::kBF16),
            cudaErrorInvalidValue);
  bad = g, bad.c_out = 12;  // 24 bytes: not whole 16-byte pieces
  EXPECT_EQ(kc::SpaceToDepth(ElemType::kBF16, buf.get(), bad, buf.get(), nullptr, ElemType::kBF16),
            cudaErrorInvalidValue);
  bad = g, bad.stride_w = 1;
  EXPECT_EQ(kc::SpaceToDepth(ElemType::kBF16, buf.get(), bad, buf.get(), nullptr, ElemType::kBF16),
            cudaErrorInvalidValue);
  EXPECT_EQ(kc::SpaceToDepth(ElemType::kBF16, buf.get(), g, buf.get(), nullptr, ElemType::kF16),
            cudaErrorInvalidValue);  // only fp32 converts on the way
}

TEST(CudaConv, RefusesWhatItCannotRun) {
  NEREID_REQUIRE_GPU();
  DeviceBuffer buf(1 << 16);
  kc::ConvProblem p;
  p.g = Geometry(1, 4, 4, 6, 4, 3, 1, 1, 4);  // 4 groups do not divide 6 channels
  p.x = p.w = p.y = buf.get();
  EXPECT_EQ(kc::Conv2dNhwc(p, nullptr), cudaErrorInvalidValue);
  p.g = Geometry(1, 4, 4, 8, 8, 3, 1, 1);
  p.g.stride_h = 0;
  EXPECT_EQ(kc::Conv2dNhwc(p, nullptr), cudaErrorInvalidValue);
  p.g = Geometry(1, 4, 4, 8, 8, 3, 1, 1);
  p.type = ElemType::kI32;
  EXPECT_EQ(kc::Conv2dNhwc(p, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(kc::GlobalPoolNhwc(kc::PoolKind::kMax, 0, 4, 4, ElemType::kF32, buf.get(), buf.get(),
                               nullptr),
            cudaErrorInvalidValue);
  EXPECT_EQ(kc::ChannelsLast(ElemType::kI64, buf.get(), 1, 2, 2, buf.get(), nullptr),
            cudaErrorInvalidValue);
  cudaGetLastError();
}

}  // namespace
}  // namespace nereid::gpu_test
