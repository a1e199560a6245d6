// Conformance of kernels/cuda against float64 references on the CPU: fresh random inputs for every
// case, outputs poisoned with NaN before each run (an unwritten element fails), the error measured
// as ||out - ref|| / ||ref|| against a tolerance stated per precision (int8: against the exact
// integer products of the quantized operands, and against float64 of the operands before
// quantization). Skipped without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <random>

#include "cuda/elementwise.h"
#include "cuda/epilogue.h"
#include "cuda/gemm.h"
#include "cuda/gemm_int8.h"
#include "gpu_test_util.h"

namespace nereid::gpu_test {
namespace {

using kernels::cuda::Activation;
using kernels::cuda::BinaryOp;
using kernels::cuda::CublasGemm;
using kernels::cuda::GemmProblem;

double Act(Activation a, double x) {
  switch (a) {
    case Activation::kRelu:
      return x > 0 ? x : 0;
    case Activation::kSigmoid:
      return 1 / (1 + std::exp(-x));
    case Activation::kTanh:
      return std::tanh(x);
    case Activation::kGelu:
      return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0)));
    default:
      return x;
  }
}

// Tolerance for a result computed from operands of 'ab' and stored as 'out'.
double Tolerance(ElemType ab, ElemType out, bool tf32) {
  double tol = ab == ElemType::kF32 ? (tf32 ? 2e-3 : 1e-5) : ab == ElemType::kF16 ? 3e-3 : 1e-2;
  if (out == ElemType::kBF16) tol += 8e-3;
  if (out == ElemType::kF16) tol += 1e-3;
  return tol;
}

uint64_t seed_counter = 20261130;

TEST(CudaElementwise, BinaryBroadcastsTrailingOperand) {
  NEREID_REQUIRE_GPU();
  for (ElemType t : {ElemType::kF32, ElemType::kBF16, ElemType::kI32, ElemType::kI64}) {
    for (BinaryOp op : {BinaryOp::kAdd, BinaryOp::kSub, BinaryOp::kMul, BinaryOp::kDiv}) {
      const int64_t rows = 37, cols = 129;
      const bool integer = t == ElemType::kI32 || t == ElemType::kI64;
      auto a =
          Random(rows * cols, ++seed_counter, integer ? -1000.f : -2.f, integer ? 1000.f : 2.f);
      auto b = Random(cols, ++seed_counter, integer ? 1.f : 0.5f, integer ? 50.f : 2.f);
      DeviceBuffer da(Encode(a, t)), db(Encode(b, t)),
          dout(rows * cols * kernels::cuda::ElemSize(t));
      CUDA_OK(kernels::cuda::Binary(op, t, da.get(), rows * cols, db.get(), cols, dout.get(),
                                    rows * cols, nullptr));
      CUDA_OK(cudaDeviceSynchronize());
      const auto ra = Rounded(a, t), rb = Rounded(b, t);
      std::vector<double> ref(rows * cols);
      for (int64_t i = 0; i < rows * cols; ++i) {
        const double x = ra[i], y = rb[i % cols];
        double r = op == BinaryOp::kAdd   ? x + y
                   : op == BinaryOp::kSub ? x - y
                   : op == BinaryOp::kMul ? x * y
                                          : (integer ? std::trunc(x / y) : x / y);
        ref[i] = r;
      }
      const double err = RelativeError(Decode(dout.Read(), t), ref);
      EXPECT_LE(err, integer                ? 0.0
                     : t == ElemType::kBF16 ? 8e-3
                                            : 1e-6)
          << kernels::cuda::ElemTypeName(t) << " op " << static_cast<int>(op);
    }
  }
}

TEST(CudaElementwise, IntegerDivisionByZeroIsZero) {
  NEREID_REQUIRE_GPU();
  DeviceBuffer a(Encode({7, -7, 9}, ElemType::kI32)), b(Encode({0, 2, 0}, ElemType::kI32)), out(12);
  CUDA_OK(kernels::cuda::Binary(BinaryOp::kDiv, ElemType::kI32, a.get(), 3, b.get(), 3, out.get(),
                                3, nullptr));
  EXPECT_EQ(Decode(out.Read(), ElemType::kI32), (std::vector<double>{0, -3, 0}));
}

// CopyBytes between device memory and mapped page-locked host memory, at aligned and unaligned
// addresses and sizes: every byte lands, nothing beyond.
TEST(CudaElementwise, CopyBytesThroughMappedHostMemory) {
  NEREID_REQUIRE_GPU();
  constexpr size_t kMax = 70000;
  uint8_t* host = nullptr;
  ASSERT_EQ(cudaHostAlloc(reinterpret_cast<void**>(&host), kMax + 64, cudaHostAllocMapped),
            cudaSuccess);
  void* mapped = nullptr;
  ASSERT_EQ(cudaHostGetDevicePointer(&mapped, host, 0), cudaSuccess);
  DeviceBuffer device(kMax + 64);
  std::mt19937 rng(seed_counter++);
  for (auto [offset, bytes] :
       {std::pair<size_t, size_t>{0, 4096}, {0, 65536}, {3, 1001}, {16, 69984}, {1, 1}}) {
    std::vector<uint8_t> want(bytes);
    for (auto& b : want) b = static_cast<uint8_t>(rng());
    std::memcpy(host + offset, want.data(), bytes);
    CUDA_OK(cudaMemset(device.get(), 0xAB, kMax + 64));
    CUDA_OK(kernels::cuda::CopyBytes(static_cast<uint8_t*>(device.get()) + offset,
                                     static_cast<uint8_t*>(mapped) + offset, bytes, nullptr));
    std::vector<uint8_t> got = device.Read();
    EXPECT_TRUE(std::equal(want.begin(), want.end(), got.begin() + offset)) << bytes;
    EXPECT_EQ(got[offset + bytes], 0xAB) << "wrote past the end, " << bytes << " bytes";
    std::memset(host, 0xCD, kMax + 64);
    CUDA_OK(kernels::cuda::CopyBytes(static_cast<uint8_t*>(mapped) + offset,
                                     static_cast<uint8_t*>(device.get()) + offset, bytes, nullptr));
    CUDA_OK(cudaDeviceSynchronize());
    EXPECT_TRUE(std::equal(want.begin(), want.end(), host + offset)) << bytes;
    EXPECT_EQ(host[offset + bytes], 0xCD) << "wrote past the end, " << bytes << " bytes";
  }
  cudaFreeHost(host);
}

TEST(CudaElementwise, RejectsShapesThatDoNotBroadcast) {
  NEREID_REQUIRE_GPU();
  DeviceBuffer a(40), b(12), out(40);
  EXPECT_EQ(kernels::cuda::Binary(BinaryOp::kAdd, ElemType::kF32, a.get(), 10, b.get(), 3,
                                  out.get(), 10, nullptr),
            cudaErrorInvalidValue);
}

TEST(CudaElementwise, ActivationsAndConversions) {
  NEREID_REQUIRE_GPU();
  const int64_t n = 100003;
  for (ElemType t : {ElemType::kF32, ElemType::kBF16, ElemType::kF16})
    for (Activation act :
         {Activation::kRelu, Activation::kSigmoid, Activation::kTanh, Activation::kGelu}) {
      auto x = Random(n, ++seed_counter, -6.f, 6.f);
      DeviceBuffer in(Encode(x, t)), out(n * kernels::cuda::ElemSize(t));
      CUDA_OK(kernels::cuda::Unary(act, t, in.get(), out.get(), n, nullptr));
      const auto rx = Rounded(x, t);
      std::vector<double> ref(n);
      for (int64_t i = 0; i < n; ++i) ref[i] = Act(act, rx[i]);
      EXPECT_LE(RelativeError(Decode(out.Read(), t), ref), t == ElemType::kF32 ? 1e-6 : 8e-3)
          << kernels::cuda::ElemTypeName(t) << " " << kernels::cuda::ActivationName(act);
    }
  for (ElemType to : {ElemType::kBF16, ElemType::kF16}) {
    auto x = Random(n, ++seed_counter, -100.f, 100.f);
    DeviceBuffer in(Encode(x, ElemType::kF32)), mid(n * 2), back(n * 4);
    CUDA_OK(kernels::cuda::Convert(ElemType::kF32, in.get(), to, mid.get(), n, nullptr));
    CUDA_OK(kernels::cuda::Convert(to, mid.get(), ElemType::kF32, back.get(), n, nullptr));
    // Rounding to nearest even on the device must agree bit for bit with the host's conversion.
    EXPECT_EQ(Decode(mid.Read(), to), Rounded(x, to)) << kernels::cuda::ElemTypeName(to);
    EXPECT_EQ(Decode(back.Read(), ElemType::kF32), Rounded(x, to));
  }
}

// A NaN stays NaN through Relu: alone and as the epilogue of the small-m and sm90 GEMMs (one row
// of x holding a NaN: that row of y all NaN, the others finite).
TEST(CudaElementwise, ReluKeepsNaNAloneAndInGemmEpilogues) {
  NEREID_REQUIRE_GPU();
  for (ElemType t : {ElemType::kF32, ElemType::kBF16, ElemType::kF16}) {
    const std::vector<float> x = {NAN, -1.f, 2.f, -NAN, -0.5f};
    DeviceBuffer in(Encode(x, t)), out(x.size() * kernels::cuda::ElemSize(t));
    CUDA_OK(kernels::cuda::Unary(Activation::kRelu, t, in.get(), out.get(),
                                 static_cast<int64_t>(x.size()), nullptr));
    const std::vector<double> y = Decode(out.Read(), t);
    EXPECT_TRUE(std::isnan(y[0]) && std::isnan(y[3])) << kernels::cuda::ElemTypeName(t);
    EXPECT_EQ(y[1], 0.f);
    EXPECT_EQ(y[2], 2.f);
    EXPECT_EQ(y[4], 0.f);
  }
  int major = 0;
  CUDA_OK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0));
  const int64_t m = 5, n = 64, k = 256;
  for (bool sm90 : {false, true}) {
    if (sm90 && major != 9) continue;
    auto x = Random(m * k, ++seed_counter), w = Random(n * k, ++seed_counter, -0.1f, 0.1f);
    x[2 * k + 17] = NAN;
    DeviceBuffer dx(Encode(x, ElemType::kBF16)), dw(Encode(w, ElemType::kBF16)), dy(m * n * 4);
    GemmProblem p;
    p.m = m, p.n = n, p.k = k, p.ab_type = ElemType::kBF16, p.out_type = ElemType::kF32;
    p.x = dx.get(), p.w = dw.get(), p.y = dy.get(), p.act = Activation::kRelu;
    if (sm90) {
      const kernels::cuda::Sm90Config config;
      const int64_t floats = kernels::cuda::Sm90WorkspaceFloats(p, config);
      DeviceBuffer workspace(std::max<int64_t>(floats, 1) * 4);
      p.workspace = static_cast<float*>(workspace.get()), p.workspace_floats = floats;
      ASSERT_TRUE(kernels::cuda::Sm90Supported(p, config));
      CUDA_OK(kernels::cuda::GemmSm90(p, nullptr, config));
      CUDA_OK(cudaDeviceSynchronize());
    } else {
      ASSERT_TRUE(kernels::cuda::SmallMSupported(p, kernels::cuda::kSmallMVariants[0]));
      CUDA_OK(kernels::cuda::GemmSmallM(p, nullptr, kernels::cuda::kSmallMVariants[0]));
      CUDA_OK(cudaDeviceSynchronize());
    }
    const std::vector<double> y = Decode(dy.Read(), ElemType::kF32);
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j)
        ASSERT_EQ(std::isnan(y[i * n + j]), i == 2)
            << (sm90 ? "sm90" : "small-m") << " " << i << " " << j << ": " << y[i * n + j];
  }
}

struct GemmCase {
  int64_t m, n, k;
  ElemType ab, out;
  bool tf32;
  bool bias, residual;
  Activation act;
  bool residual_first = false;  // act(... + residual): a 1x1 convolution's order
};

std::string Describe(const GemmCase& c) {
  return std::to_string(c.m) + "x" + std::to_string(c.n) + "x" + std::to_string(c.k) + " " +
         kernels::cuda::ElemTypeName(c.ab) + (c.tf32 ? "(tf32)" : "") + "->" +
         kernels::cuda::ElemTypeName(c.out) + " act=" + kernels::cuda::ActivationName(c.act) +
         (c.bias ? " +bias" : "") + (c.residual ? " +residual" : "") +
         (c.residual_first ? " (first)" : "");
}

// Runs one case through 'run' and checks it against the float64 reference.
void CheckGemm(const GemmCase& c, const std::function<void(GemmProblem&)>& run) {
  auto x = Random(c.m * c.k, ++seed_counter), w = Random(c.n * c.k, ++seed_counter, -0.1f, 0.1f);
  auto bias = Random(c.n, ++seed_counter), residual = Random(c.m * c.n, ++seed_counter);
  DeviceBuffer dx(Encode(x, c.ab)), dw(Encode(w, c.ab)), dbias(Encode(bias, ElemType::kF32)),
      dres(Encode(residual, c.out)), dy(c.m * c.n * kernels::cuda::ElemSize(c.out));
  GemmProblem p;
  p.m = c.m, p.n = c.n, p.k = c.k, p.ab_type = c.ab, p.out_type = c.out, p.tf32 = c.tf32;
  p.x = dx.get(), p.w = dw.get(), p.y = dy.get(), p.act = c.act, p.alpha = 0.75f;
  p.bias = c.bias ? static_cast<const float*>(dbias.get()) : nullptr;
  p.residual = c.residual ? dres.get() : nullptr;
  p.residual_first = c.residual_first;
  run(p);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess) << Describe(c);
  const auto rx = Rounded(x, c.ab), rw = Rounded(w, c.ab), rres = Rounded(residual, c.out);
  std::vector<double> ref(c.m * c.n);
  for (int64_t i = 0; i < c.m; ++i)
    for (int64_t j = 0; j < c.n; ++j) {
      double s = 0;
      for (int64_t l = 0; l < c.k; ++l) s += rx[i * c.k + l] * rw[j * c.k + l];
      s = 0.75 * s + (c.bias ? bias[j] : 0.0);
      const double r = c.residual ? rres[i * c.n + j] : 0.0;
      ref[i * c.n + j] = c.residual_first ? Act(c.act, s + r) : Act(c.act, s) + r;
    }
  const double err = RelativeError(Decode(dy.Read(), c.out), ref);
  EXPECT_LE(err, Tolerance(c.ab, c.out, c.tf32)) << Describe(c);
}

// GemmSm90 on 'p' with 'config', its K-split workspace allocated here, finished before return.
void RunSm90(GemmProblem& p, const kernels::cuda::Sm90Config& config, const GemmCase& c) {
  const int64_t floats = kernels::cuda::Sm90WorkspaceFloats(p, config);
  DeviceBuffer workspace(std::max<int64_t>(floats, 1) * 4);
  p.workspace = static_cast<float*>(workspace.get()), p.workspace_floats = floats;
  ASSERT_TRUE(kernels::cuda::Sm90Supported(p, config)) << Describe(c);
  ASSERT_EQ(kernels::cuda::GemmSm90(p, nullptr, config), cudaSuccess)
      << Describe(c) << " " << config.Name();
  // The workspace is freed on return: finish with it first.
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
}

// The configurations GemmSm90 takes by rule: 128 x 64 tiles only for outputs of at most 64 columns
// (Sm90Supported refuses it wider; CudaGemm.Sm90RefusesWhatItCannotRun checks that).
bool Sm90Takes(const kernels::cuda::Sm90Config& config, const GemmCase& c) {
  return config.tile != kernels::cuda::Sm90Tile::k128x64 || c.n <= 64;
}

enum class ShapeSet { kSmallM, kTensorCoreSmallM, kGeneral, kSm90 };

std::vector<GemmCase> GemmCases(ShapeSet set) {
  using Shapes = std::vector<std::array<int64_t, 3>>;
  Shapes shapes;
  switch (set) {
    case ShapeSet::kSmallM:
      shapes = {{1, 1000, 1024}, {3, 257, 512}, {8, 64, 4096}, {16, 130, 136}, {5, 33, 8192}};
      break;
    case ShapeSet::kTensorCoreSmallM:  // every x-tile count (m <= 8, 16, 32, 64), ragged n;
                                       // k in fewer chunks than a cluster has blocks (160)
      shapes = {{1, 1000, 1024}, {7, 257, 512},   {16, 64, 4096},
                {29, 130, 160},  {64, 2048, 256}, {41, 33, 8192}};
      break;
    case ShapeSet::kGeneral:
      shapes = {{1, 1000, 1024}, {33, 129, 72}, {64, 256, 512}, {257, 100, 96}};
      break;
    case ShapeSet::kSm90:  // ragged edges in every dimension, k shorter than one block, more
                           // tiles than SMs (the persistent loop), outputs of at most 64 columns
      shapes = {{1, 1000, 1024},  {77, 129, 136},    {128, 256, 64},
                {257, 300, 520},  {300, 1000, 1024}, {2304, 2048, 64},
                {384, 512, 2048}, {3136, 64, 256},   {100, 40, 72}};
      break;
  }
  std::vector<GemmCase> cases;
  int variant = 0;
  for (const auto& s : shapes)
    for (ElemType ab : {ElemType::kF32, ElemType::kBF16, ElemType::kF16})
      for (bool tf32 : {false, true}) {
        if (tf32 && ab != ElemType::kF32) continue;
        ++variant;
        const ElemType out = variant % 3 == 0 && ab != ElemType::kF32 ? ab : ElemType::kF32;
        const Activation act = static_cast<Activation>(variant % 5);
        cases.push_back({s[0], s[1], s[2], ab, out, tf32, variant % 2 == 0, variant % 4 == 1, act});
      }
  return cases;
}

TEST(CudaGemm, SmallMMatchesFloat64Reference) {
  NEREID_REQUIRE_GPU();
  for (auto variant : kernels::cuda::kSmallMVariants) {
    const bool tc = kernels::cuda::SmallMTensorCore(variant);
    if (kernels::cuda::SmallMClusterSplits(variant) > 1) {
      // Cluster splits need thread-block clusters (and the sm_90a build): probe once.
      alignas(16) static char probe[16];
      GemmProblem q;
      q.m = 1, q.n = 64, q.k = 1024, q.ab_type = ElemType::kBF16, q.x = q.w = probe;
      if (!kernels::cuda::SmallMSupported(q, variant)) {
        std::printf("  %s skipped: no thread-block clusters on this GPU or build\n",
                    kernels::cuda::SmallMVariantName(variant));
        continue;
      }
    }
    int ran = 0;
    for (const auto& c : GemmCases(tc ? ShapeSet::kTensorCoreSmallM : ShapeSet::kSmallM)) {
      // Exact fp32 never runs on the tensor cores; every other case must be supported.
      if (tc && c.ab == ElemType::kF32 && !c.tf32) continue;
      ++ran;
      CheckGemm(c, [&](GemmProblem& p) {
        ASSERT_TRUE(kernels::cuda::SmallMSupported(p, variant)) << Describe(c);
        ASSERT_EQ(kernels::cuda::GemmSmallM(p, nullptr, variant), cudaSuccess)
            << Describe(c) << " " << kernels::cuda::SmallMVariantName(variant);
      });
    }
    EXPECT_GT(ran, 10) << kernels::cuda::SmallMVariantName(variant);
  }
}

TEST(CudaGemm, Sm90MatchesFloat64Reference) {
  NEREID_REQUIRE_GPU();
  int major = 0;
  CUDA_OK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0));
  if (major != 9) GTEST_SKIP() << "GemmSm90 needs a Hopper GPU (compute capability 9.0)";
  for (const auto& config : kernels::cuda::kSm90Configs)
    for (const auto& c : GemmCases(ShapeSet::kSm90)) {
      if ((c.ab == ElemType::kF32 && !c.tf32) || !Sm90Takes(config, c)) continue;
      CheckGemm(c, [&](GemmProblem& p) { RunSm90(p, config, c); });
    }
}

TEST(CudaGemm, CublasWithEpilogueMatchesFloat64Reference) {
  NEREID_REQUIRE_GPU();
  cudaStream_t stream;
  CUDA_OK(cudaStreamCreate(&stream));
  {
    CublasGemm gemm;
    ASSERT_EQ(gemm.Init(stream), "");
    for (const auto& c : GemmCases(ShapeSet::kGeneral))
      CheckGemm(c, [&](GemmProblem& p) {
        DeviceBuffer acc(std::max<int64_t>(CublasGemm::AccumulatorFloats(p), 1) * 4);
        ASSERT_EQ(gemm.Run(p, static_cast<float*>(acc.get())), "") << Describe(c);
        ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
      });
  }
  cudaStreamDestroy(stream);
}

// A 1x1 convolution's epilogue, relu(x w^T + bias + residual), on the shapes of ResNet-50's
// (pixels x c_out x c_in at batch 1 and beyond), through every GemmSm90 configuration and cuBLAS;
// the small-M kernels refuse it.
TEST(CudaGemm, ResidualBeforeReluMatchesFloat64Reference) {
  NEREID_REQUIRE_GPU();
  std::vector<GemmCase> cases;
  for (const auto& s : std::vector<std::array<int64_t, 3>>{
           {49, 2048, 512}, {3136, 256, 64}, {784, 512, 128}, {77, 129, 136}, {3136, 64, 64}})
    for (ElemType t : {ElemType::kBF16, ElemType::kF16})
      cases.push_back({s[0], s[1], s[2], t, t, false, true, true, Activation::kRelu, true});
  cases.push_back({200, 72, 40, ElemType::kF32, ElemType::kF32, false, false, true,
                   Activation::kSigmoid, true});  // cuBLAS: any activation, exact fp32
  cudaStream_t stream;
  CUDA_OK(cudaStreamCreate(&stream));
  {
    CublasGemm gemm;
    ASSERT_EQ(gemm.Init(stream), "");
    for (const auto& c : cases)
      CheckGemm(c, [&](GemmProblem& p) {
        for (auto v : kernels::cuda::kSmallMVariants)
          EXPECT_FALSE(kernels::cuda::SmallMSupported(p, v)) << Describe(c);
        DeviceBuffer acc(std::max<int64_t>(CublasGemm::AccumulatorFloats(p), 1) * 4);
        ASSERT_EQ(gemm.Run(p, static_cast<float*>(acc.get())), "") << Describe(c);
        ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
      });
  }
  cudaStreamDestroy(stream);
  int major = 0;
  CUDA_OK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0));
  if (major != 9) GTEST_SKIP() << "GemmSm90 needs a Hopper GPU (compute capability 9.0)";
  for (const auto& config : kernels::cuda::kSm90Configs)
    for (const auto& c : cases) {
      if (c.ab == ElemType::kF32 || !Sm90Takes(config, c)) continue;
      CheckGemm(c, [&](GemmProblem& p) { RunSm90(p, config, c); });
    }
}

TEST(CudaGemm, SmallMRefusesWhatItCannotRun) {
  using kernels::cuda::SmallMSupported;
  using kernels::cuda::SmallMVariant;
  GemmProblem p;
  p.m = 17, p.n = 8, p.k = 64, p.ab_type = ElemType::kBF16;
  alignas(16) static char buf[16];
  p.x = p.w = buf;
  EXPECT_FALSE(SmallMSupported(p, SmallMVariant::kWarpRows2));  // m over the CUDA-core limit
  EXPECT_TRUE(SmallMSupported(p, SmallMVariant::kTensorCore16));
  p.m = 65;
  EXPECT_FALSE(SmallMSupported(p, SmallMVariant::kTensorCore32));  // m over the limit
  p.m = 4, p.k = 60;
  EXPECT_FALSE(SmallMSupported(p, SmallMVariant::kWarpRows4));  // k not a multiple of 8 bf16
  p.k = 48;
  EXPECT_TRUE(SmallMSupported(p, SmallMVariant::kSharedX));
  EXPECT_FALSE(SmallMSupported(p, SmallMVariant::kTensorCore16));  // nor of 32 bf16
  p.k = 64, p.x = buf + 2;
  EXPECT_FALSE(SmallMSupported(p, SmallMVariant::kWarpRows2));  // misaligned
  p.x = buf;
  EXPECT_TRUE(SmallMSupported(p, SmallMVariant::kWarpRows2));
  p.ab_type = ElemType::kF32;
  EXPECT_FALSE(SmallMSupported(p, SmallMVariant::kTensorCore16));  // exact fp32
  p.tf32 = true;
  EXPECT_TRUE(SmallMSupported(p, SmallMVariant::kTensorCore16));
}

TEST(CudaGemm, Sm90RefusesWhatItCannotRun) {
  GemmProblem p;
  p.m = 256, p.n = 256, p.k = 64, p.ab_type = ElemType::kF32;
  alignas(16) static char buf[16];
  p.x = p.w = buf;
  EXPECT_FALSE(kernels::cuda::Sm90Supported(p));  // exact fp32
  p.ab_type = ElemType::kBF16, p.k = 12;
  EXPECT_FALSE(kernels::cuda::Sm90Supported(p));  // rows of 24 bytes: TMA needs multiples of 16
  p.k = 64, p.w = buf + 8;
  EXPECT_FALSE(kernels::cuda::Sm90Supported(p));  // misaligned
  p.w = buf;
  const kernels::cuda::Sm90Config split{kernels::cuda::Sm90Tile::k128x128, 2};
  EXPECT_FALSE(kernels::cuda::Sm90Supported(p, split));  // a split without a workspace
  p.workspace = reinterpret_cast<float*>(buf), p.workspace_floats = 256 * 256;
  EXPECT_FALSE(kernels::cuda::Sm90Supported(p, split));  // ... or with one too small
  alignas(16) static char residual[16];
  p.residual = residual, p.residual_first = true, p.act = Activation::kGelu;
  EXPECT_FALSE(kernels::cuda::Sm90Supported(p));  // only Relu after the residual
  p.residual = nullptr, p.act = Activation::kNone, p.n = 65;
  EXPECT_FALSE(kernels::cuda::Sm90Supported(p, {kernels::cuda::Sm90Tile::k128x64, 1}));
}

// ---- int8 -----------------------------------------------------------------------------------

// The host's symmetric per-row quantization, the arithmetic QuantizeRowsInt8 must reproduce.
void QuantizeHost(const std::vector<float>& v, int64_t rows, int64_t k, std::vector<int8_t>* q,
                  std::vector<float>* scale) {
  q->resize(rows * k);
  scale->resize(rows);
  for (int64_t r = 0; r < rows; ++r) {
    float absmax = 0.f;
    for (int64_t l = 0; l < k; ++l) absmax = std::max(absmax, std::fabs(v[r * k + l]));
    const float inv = absmax > 0.f ? 127.f / absmax : 0.f;
    (*scale)[r] = absmax / 127.f;
    for (int64_t l = 0; l < k; ++l) {
      const float x = std::nearbyint(v[r * k + l] * inv);
      (*q)[r * k + l] = static_cast<int8_t>(std::clamp(x, -127.f, 127.f));
    }
  }
}

std::vector<uint8_t> Bytes(const void* p, size_t n) {
  const auto* b = static_cast<const uint8_t*>(p);
  return {b, b + n};
}

// Rows of every length class: several to a block with 2 to 32 lanes each (k 16, 64, 1,000 and
// 4,096: multiples of 8 up to 4,096), one to a block (k 1,004 and 4,104).
TEST(CudaGemmInt8, QuantizeRowsMatchesTheHostBitForBit) {
  NEREID_REQUIRE_GPU();
  for (const int64_t k : {16, 64, 1000, 4096, 1004, 4104})
    for (ElemType t : {ElemType::kF32, ElemType::kBF16, ElemType::kF16}) {
      SCOPED_TRACE("k " + std::to_string(k));
      const int64_t rows = 37;
      auto v = Random(rows * k, ++seed_counter, -3.f, 3.f);
      for (int64_t l = 0; l < k; ++l) v[5 * k + l] = 0.f;  // a row of zeros: scale 0
      v[7 * k + 3] = 40.f;                                 // an outlier sets its row's scale
      v[36 * k + k - 1] = -50.f;                           // the last row's last value too
      std::vector<int8_t> want_q;
      std::vector<float> want_scale;
      const auto rounded = Rounded(v, t);
      std::vector<float> as_float(rounded.begin(), rounded.end());
      QuantizeHost(as_float, rows, k, &want_q, &want_scale);
      DeviceBuffer in(Encode(v, t)), q(rows * k), scale(rows * 4);
      CUDA_OK(kernels::cuda::QuantizeRowsInt8(t, in.get(), rows, k, static_cast<int8_t*>(q.get()),
                                              static_cast<float*>(scale.get()), nullptr));
      CUDA_OK(cudaDeviceSynchronize());
      EXPECT_EQ(q.Read(), Bytes(want_q.data(), want_q.size())) << kernels::cuda::ElemTypeName(t);
      EXPECT_EQ(scale.Read(), Bytes(want_scale.data(), 4 * want_scale.size()));
      EXPECT_EQ(want_scale[5], 0.f);
    }
}

TEST(CudaGemmInt8, QuantizeLongRowsMatchesQuantizeRowsBitForBit) {
  NEREID_REQUIRE_GPU();
  // Images per row: rows of 3 chunks and a bit (the chunk is 8,192), an outlier in the last chunk
  // of one row, a row of zeros.
  const int64_t rows = 5, k = 3 * 8192 + 100;
  auto v = Random(rows * k, ++seed_counter, -3.f, 3.f);
  v[2 * k + k - 7] = -90.f;
  for (int64_t l = 0; l < k; ++l) v[4 * k + l] = 0.f;
  for (ElemType t : {ElemType::kF32, ElemType::kBF16}) {
    DeviceBuffer in(Encode(v, t)), q0(rows * k), s0(rows * 4), q1(rows * k), s1(rows * 4),
        bits(rows * 4);
    CUDA_OK(kernels::cuda::QuantizeRowsInt8(t, in.get(), rows, k, static_cast<int8_t*>(q0.get()),
                                            static_cast<float*>(s0.get()), nullptr));
    CUDA_OK(kernels::cuda::QuantizeLongRowsInt8(
        t, in.get(), rows, k, static_cast<int8_t*>(q1.get()), static_cast<float*>(s1.get()),
        static_cast<unsigned*>(bits.get()), nullptr));
    CUDA_OK(cudaDeviceSynchronize());
    EXPECT_EQ(q1.Read(), q0.Read()) << kernels::cuda::ElemTypeName(t);
    EXPECT_EQ(s1.Read(), s0.Read()) << kernels::cuda::ElemTypeName(t);
  }
  EXPECT_EQ(kernels::cuda::QuantizeLongRowsInt8(ElemType::kI32, nullptr, 1, 1, nullptr, nullptr,
                                                nullptr, nullptr),
            cudaErrorInvalidValue);
}

// A row holding NaN quantizes to a NaN scale (its products NaN, as the CPU's rows), short rows
// and long; the other rows as before.
TEST(CudaGemmInt8, ARowHoldingNaNGetsANaNScale) {
  NEREID_REQUIRE_GPU();
  for (int64_t k : {int64_t{1000}, int64_t{1004}, int64_t{3 * 8192 + 100}}) {
    const int64_t rows = 3;
    auto v = Random(rows * k, ++seed_counter, -3.f, 3.f);
    v[1 * k + k - 5] = NAN;
    DeviceBuffer in(Encode(v, ElemType::kF32)), q(rows * k), scale(rows * 4), bits(rows * 4);
    if (k > 8192) {
      CUDA_OK(cudaMemset(bits.get(), 0, rows * 4));
      CUDA_OK(kernels::cuda::QuantizeLongRowsInt8(
          ElemType::kF32, in.get(), rows, k, static_cast<int8_t*>(q.get()),
          static_cast<float*>(scale.get()), static_cast<unsigned*>(bits.get()), nullptr));
    } else {
      CUDA_OK(kernels::cuda::QuantizeRowsInt8(ElemType::kF32, in.get(), rows, k,
                                              static_cast<int8_t*>(q.get()),
                                              static_cast<float*>(scale.get()), nullptr));
    }
    CUDA_OK(cudaDeviceSynchronize());
    const std::vector<uint8_t> raw = scale.Read();
    std::vector<float> scales(rows);
    std::memcpy(scales.data(), raw.data(), raw.size());
    EXPECT_TRUE(std::isnan(scales[1])) << k;
    EXPECT_TRUE(std::isfinite(scales[0]) && scales[0] > 0.f) << k;
    EXPECT_TRUE(std::isfinite(scales[2]) && scales[2] > 0.f) << k;
  }
}

// One int8 case through 'run': x and w quantized per row, y against the exact integer products
// scaled (tight) and against float64 of the unquantized operands (quantization's own error).
void CheckGemmInt8(const GemmCase& c, const std::function<void(GemmProblem&)>& run) {
  auto x = Random(c.m * c.k, ++seed_counter), w = Random(c.n * c.k, ++seed_counter, -0.1f, 0.1f);
  auto bias = Random(c.n, ++seed_counter), residual = Random(c.m * c.n, ++seed_counter);
  std::vector<int8_t> xq, wq;
  std::vector<float> xs, ws;
  QuantizeHost(x, c.m, c.k, &xq, &xs);
  QuantizeHost(w, c.n, c.k, &wq, &ws);
  DeviceBuffer dx(Bytes(xq.data(), xq.size())), dw(Bytes(wq.data(), wq.size())),
      dxs(Bytes(xs.data(), 4 * xs.size())), dws(Bytes(ws.data(), 4 * ws.size())),
      dbias(Encode(bias, ElemType::kF32)), dres(Encode(residual, c.out)),
      dy(c.m * c.n * kernels::cuda::ElemSize(c.out));
  GemmProblem p;
  p.m = c.m, p.n = c.n, p.k = c.k, p.ab_type = ElemType::kI8, p.out_type = c.out;
  p.x = dx.get(), p.w = dw.get(), p.y = dy.get(), p.act = c.act, p.alpha = 0.75f;
  p.x_scale = static_cast<const float*>(dxs.get()),
  p.w_scale = static_cast<const float*>(dws.get());
  p.bias = c.bias ? static_cast<const float*>(dbias.get()) : nullptr;
  p.residual = c.residual ? dres.get() : nullptr;
  run(p);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess) << Describe(c);
  const auto rres = Rounded(residual, c.out);
  std::vector<double> exact(c.m * c.n), unquantized(c.m * c.n);
  auto finish = [&](double s, int64_t i, int64_t j) {
    s = Act(c.act, 0.75 * s + (c.bias ? bias[j] : 0.0));
    return s + (c.residual ? rres[i * c.n + j] : 0.0);
  };
  for (int64_t i = 0; i < c.m; ++i)
    for (int64_t j = 0; j < c.n; ++j) {
      int64_t dot = 0;
      double real = 0;
      for (int64_t l = 0; l < c.k; ++l) {
        dot += int64_t{xq[i * c.k + l]} * wq[j * c.k + l];
        real += double{x[i * c.k + l]} * w[j * c.k + l];
      }
      exact[i * c.n + j] = finish(static_cast<double>(dot) * xs[i] * ws[j], i, j);
      unquantized[i * c.n + j] = finish(real, i, j);
    }
  const auto y = Decode(dy.Read(), c.out);
  EXPECT_LE(RelativeError(y, exact), c.out == ElemType::kF32 ? 1e-5 : 8e-3) << Describe(c);
  EXPECT_LE(RelativeError(y, unquantized), 3e-2) << Describe(c);
}

std::vector<GemmCase> Int8Cases(const std::vector<std::array<int64_t, 3>>& shapes) {
  std::vector<GemmCase> cases;
  int variant = 0;
  for (const auto& s : shapes)
    for (ElemType out : {ElemType::kF32, ElemType::kBF16}) {
      ++variant;
      cases.push_back({s[0], s[1], s[2], ElemType::kI8, out, false, variant % 2 == 0,
                       variant % 3 == 1, static_cast<Activation>(variant % 5)});
    }
  return cases;
}

TEST(CudaGemmInt8, SmallMMatchesTheReferences) {
  NEREID_REQUIRE_GPU();
  for (const auto& c : Int8Cases({{1, 1000, 1024},
                                  {3, 257, 512},
                                  {16, 130, 144},
                                  {5, 33, 8192},
                                  {9, 4097, 64},
                                  {2, 3, 16}}))
    CheckGemmInt8(c, [&](GemmProblem& p) {
      ASSERT_TRUE(kernels::cuda::SmallMInt8Supported(p)) << Describe(c);
      ASSERT_EQ(kernels::cuda::GemmSmallMInt8(p, nullptr), cudaSuccess) << Describe(c);
    });
}

TEST(CudaGemmInt8, TensorCoreSmallMMatchesTheReferences) {
  NEREID_REQUIRE_GPU();
  // Every x-tile count (m <= 8, 16, 32, 64), ragged n, k in fewer chunks than a cluster's blocks.
  const auto cases = Int8Cases({{1, 1000, 1024},
                                {7, 257, 512},
                                {16, 64, 4096},
                                {29, 130, 192},
                                {64, 2048, 256},
                                {41, 33, 8192}});
  for (auto variant : kernels::cuda::kSmallMVariants) {
    if (!kernels::cuda::SmallMTensorCore(variant)) continue;
    if (kernels::cuda::SmallMClusterSplits(variant) > 1) {
      alignas(16) static char probe[16];
      static float scale[1];
      GemmProblem q;
      q.m = 1, q.n = 64, q.k = 1024, q.ab_type = ElemType::kI8, q.x = q.w = probe;
      q.x_scale = q.w_scale = scale;
      if (!kernels::cuda::SmallMSupported(q, variant)) {
        std::printf("  %s skipped: no thread-block clusters on this GPU or build\n",
                    kernels::cuda::SmallMVariantName(variant));
        continue;
      }
    }
    for (const auto& c : cases)
      CheckGemmInt8(c, [&](GemmProblem& p) {
        ASSERT_TRUE(kernels::cuda::SmallMSupported(p, variant)) << Describe(c);
        ASSERT_EQ(kernels::cuda::GemmSmallM(p, nullptr, variant), cudaSuccess)
            << Describe(c) << " " << kernels::cuda::SmallMVariantName(variant);
      });
  }
}

TEST(CudaGemmInt8, Sm90MatchesTheReferences) {
  NEREID_REQUIRE_GPU();
  int major = 0;
  CUDA_OK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0));
  if (major != 9) GTEST_SKIP() << "GemmSm90 needs a Hopper GPU (compute capability 9.0)";
  // Ragged edges in every dimension, k shorter than one 128-byte block, more tiles than SMs,
  // outputs of at most 64 columns.
  const auto cases = Int8Cases({{1, 1000, 1024},
                                {77, 129, 144},
                                {128, 256, 64},
                                {257, 300, 528},
                                {300, 1000, 1024},
                                {2304, 2048, 64},
                                {384, 512, 2048},
                                {3136, 64, 256},
                                {100, 40, 80}});
  for (const auto& config : kernels::cuda::kSm90Configs)
    for (const auto& c : cases)
      if (Sm90Takes(config, c)) CheckGemmInt8(c, [&](GemmProblem& p) { RunSm90(p, config, c); });
}

TEST(CudaGemmInt8, RefusesWhatItCannotRun) {
  GemmProblem p;
  alignas(16) static char buf[16];
  static float scale[1];
  p.m = 4, p.n = 8, p.k = 64, p.ab_type = ElemType::kI8, p.x = p.w = buf;
  EXPECT_FALSE(kernels::cuda::SmallMInt8Supported(p));  // no scales
  p.x_scale = p.w_scale = scale;
  EXPECT_TRUE(kernels::cuda::SmallMInt8Supported(p));
  p.k = 72;
  EXPECT_FALSE(kernels::cuda::SmallMInt8Supported(p));  // k not a multiple of 16
  p.k = 64, p.m = 17;
  EXPECT_FALSE(kernels::cuda::SmallMInt8Supported(p));  // m over 16
  p.m = 4, p.out_type = ElemType::kI8;
  EXPECT_FALSE(kernels::cuda::SmallMInt8Supported(p));  // y must be floating point
  p.out_type = ElemType::kF16;
  EXPECT_FALSE(kernels::cuda::Sm90Supported(p));  // the wgmma path writes fp32 or bf16
  p.out_type = ElemType::kF32;
  using kernels::cuda::SmallMVariant;
  EXPECT_TRUE(kernels::cuda::SmallMSupported(p, SmallMVariant::kTensorCore16));
  EXPECT_FALSE(kernels::cuda::SmallMSupported(p, SmallMVariant::kWarpRows2));  // no CUDA-core int8
  p.k = 96;
  EXPECT_FALSE(kernels::cuda::SmallMSupported(p, SmallMVariant::kTensorCore16));  // k % 64
  EXPECT_EQ(kernels::cuda::QuantizeRowsInt8(ElemType::kI32, buf, 1, 4, nullptr, nullptr, nullptr),
            cudaErrorInvalidValue);
}

}  // namespace
}  // namespace nereid::gpu_test
