// GPU benchmarks of kernels/cuda, each side by side with its reference in one run (ratios):
//   gemm:     Nereid's GEMMs vs cuBLAS (bf16, fp16, tf32), square and serving shapes, with the HBM
//             roofline for small M (bytes each input read once / measured copy bandwidth)
//   int8:     Nereid's int8 GEMMs (per-row scales, fp32 out) vs Nereid's bf16 and cuBLASLt's int8
//             (int32 out, no scales), the same shapes, with the HBM roofline of int8 weights
//   epilogue: GEMM + bias + GELU fused into the GEMM vs cuBLAS followed by the epilogue kernel
//   copy:     pinned vs pageable host memory, host->device and device->host, 4 KiB .. 256 MiB
//   copyfresh: DMA from pinned memory the CPU has just written (and flushed), vs untouched
//   launch:   host cost of graph launches, back to back and after the thread slept
//   runshapes: a serving run's copies and graph issued three ways (around, nodes, staging)
//   conv:     Conv2dNhwc on ResNet-50's layers at batch 1 and 256
//   pointwise: ResNet-50's 1x1 layers at batch 1 and 256 as GEMMs, each kernel the tuner may
//             pick, with and without the residual, against the copy bandwidth
// Timing: CUDA events around 'reps' launches after warm-up, median of 7 such samples; inputs
// rotated among enough copies to exceed the L2 cache; random data, never zeros. GEMMs (ours and
// cuBLAS alike) are timed as a CUDA graph of the 'reps' launches, as the engine runs them, so the
// host's launch cost (cuBLAS's heuristics included) is out of both sides.
// Usage: bench_gpu [gemm] [int8] [epilogue] [copy] [copyfresh] [launch] [runshapes] [conv]
//                  [pointwise] [pointwise1: batch 1 only]   (default: all)
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <thread>
#include <vector>
#if defined(__x86_64__)
#include <cpuid.h>
#include <immintrin.h>
#endif

#include "cuda/conv.h"
#include "cuda/elementwise.h"
#include "cuda/epilogue.h"
#include "cuda/gemm.h"
#include "cuda/gemm_int8.h"

namespace kc = nereid::kernels::cuda;

#define CHECK(expr)                                                                              \
  do {                                                                                           \
    cudaError_t e_ = (expr);                                                                     \
    if (e_ != cudaSuccess) {                                                                     \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #expr, cudaGetErrorString(e_)); \
      std::exit(1);                                                                              \
    }                                                                                            \
  } while (0)

namespace {

cudaStream_t stream;

// Median over 7 samples of 'sample()', each timed by CUDA events and divided by 'reps', in us.
double MedianUs(const std::function<void()>& sample, int reps) {
  cudaEvent_t a, b;
  CHECK(cudaEventCreate(&a));
  CHECK(cudaEventCreate(&b));
  std::vector<double> samples;
  for (int s = 0; s < 7; ++s) {
    CHECK(cudaEventRecord(a, stream));
    sample();
    CHECK(cudaEventRecord(b, stream));
    CHECK(cudaEventSynchronize(b));
    float ms = 0;
    CHECK(cudaEventElapsedTime(&ms, a, b));
    samples.push_back(1000.0 * ms / reps);
  }
  CHECK(cudaGetLastError());
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  std::sort(samples.begin(), samples.end());
  return samples[3];
}

// Median over 7 samples of the mean time of 'reps' calls of fn(i), in microseconds.
double TimeUs(const std::function<void(int)>& fn, int reps) {
  for (int i = 0; i < 3; ++i) fn(i);
  CHECK(cudaStreamSynchronize(stream));
  int call = 0;
  return MedianUs(
      [&] {
        for (int r = 0; r < reps; ++r) fn(call++);
      },
      reps);
}

// As TimeUs, but the 'reps' calls are captured once into a CUDA graph and the graph is replayed:
// the device time of back-to-back kernels, without the host's launch cost.
double TimeGraphUs(const std::function<void(int)>& fn, int reps) {
  for (int i = 0; i < 3; ++i) fn(i);
  CHECK(cudaStreamSynchronize(stream));
  CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  for (int r = 0; r < reps; ++r) fn(r);
  cudaGraph_t graph = nullptr;
  CHECK(cudaStreamEndCapture(stream, &graph));
  cudaGraphExec_t exec = nullptr;
  CHECK(cudaGraphInstantiate(&exec, graph, 0));
  CHECK(cudaGraphDestroy(graph));
  CHECK(cudaGraphLaunch(exec, stream));  // upload and warm
  CHECK(cudaStreamSynchronize(stream));
  const double us = MedianUs([&] { CHECK(cudaGraphLaunch(exec, stream)); }, reps);
  CHECK(cudaGraphExecDestroy(exec));
  return us;
}

void* RandomDevice(size_t elements, kc::ElemType type, uint64_t seed) {
  std::vector<float> v(elements);
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> d(-1.f, 1.f);
  for (auto& x : v) x = d(rng);
  void *f32 = nullptr, *out = nullptr;
  CHECK(cudaMalloc(&f32, elements * 4));
  CHECK(cudaMemcpy(f32, v.data(), elements * 4, cudaMemcpyHostToDevice));
  if (type == kc::ElemType::kF32) return f32;
  CHECK(cudaMalloc(&out, elements * kc::ElemSize(type)));
  CHECK(kc::Convert(kc::ElemType::kF32, f32, type, out, elements, nullptr));
  CHECK(cudaDeviceSynchronize());
  cudaFree(f32);
  return out;
}

// Device-to-device copy bandwidth (bytes read + written per second): the HBM ceiling.
double CopyBandwidthGBs() {
  const size_t bytes = size_t{2} << 30;
  void *a, *b;
  CHECK(cudaMalloc(&a, bytes));
  CHECK(cudaMalloc(&b, bytes));
  CHECK(cudaMemset(a, 1, bytes));
  const double us = TimeUs(
      [&](int) { CHECK(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice, stream)); }, 5);
  cudaFree(a);
  cudaFree(b);
  return 2.0 * bytes / (us * 1e3);
}

struct Operands {
  std::vector<void*> x, w;
  void* y = nullptr;
  float* acc = nullptr;
  float* bias = nullptr;
};

Operands MakeOperands(int64_t m, int64_t n, int64_t k, kc::ElemType ab, int copies) {
  Operands o;
  for (int c = 0; c < copies; ++c) {
    o.x.push_back(RandomDevice(m * k, ab, 100 + c));
    o.w.push_back(RandomDevice(n * k, ab, 200 + c));
  }
  CHECK(cudaMalloc(&o.y, m * n * 4));
  CHECK(cudaMalloc(&o.acc, m * n * 4));
  o.bias = static_cast<float*>(RandomDevice(n, kc::ElemType::kF32, 300));
  return o;
}

void Free(Operands& o) {
  for (void* p : o.x) cudaFree(p);
  for (void* p : o.w) cudaFree(p);
  cudaFree(o.y), cudaFree(o.acc), cudaFree(o.bias);
}

const char* Name(kc::ElemType t, bool tf32) { return tf32 ? "tf32" : kc::ElemTypeName(t); }

// The fastest of Nereid's kernels for the problem with(i) returns (i picks the operand copy):
// every small-M variant and GemmSm90 configuration that can run it (K splits with a workspace of
// their own), each timed over 'reps' calls; 'verbose' prints every candidate.
struct Fastest {
  double us = 0;  // 0: none can run it
  std::string name;
};
Fastest FastestOurs(const std::function<kc::GemmProblem(int)>& with, int reps, bool verbose) {
  Fastest best;
  const kc::GemmProblem p0 = with(0);
  auto consider = [&](const std::string& name, const std::function<cudaError_t(int)>& launch) {
    const double us = TimeGraphUs([&](int i) { CHECK(launch(i)); }, reps);
    if (verbose)
      std::printf("    %-16s %10.2f us %9.1f TFLOP/s\n", name.c_str(), us,
                  2e-6 * p0.m * p0.n * p0.k / us);
    if (best.us == 0 || us < best.us) best = {us, name};
  };
  for (auto v : kc::kSmallMVariants)
    if (kc::SmallMSupported(p0, v))
      consider(kc::SmallMVariantName(v), [&](int i) { return kc::GemmSmallM(with(i), stream, v); });
  if (kc::SmallMInt8Supported(p0))
    consider("int8-small-m", [&](int i) { return kc::GemmSmallMInt8(with(i), stream); });
  for (const auto& config : kc::kSm90Configs) {
    kc::GemmProblem p = p0;
    const int64_t floats = kc::Sm90WorkspaceFloats(p, config);
    float* workspace = nullptr;
    if (floats > 0) CHECK(cudaMalloc(&workspace, floats * 4));
    p.workspace = workspace, p.workspace_floats = floats;
    if (kc::Sm90Supported(p, config))
      consider(config.Name(), [&](int i) {
        kc::GemmProblem q = with(i);
        q.workspace = workspace, q.workspace_floats = floats;
        return kc::GemmSm90(q, stream, config);
      });
    if (workspace != nullptr) CHECK(cudaFree(workspace));
  }
  return best;
}

void BenchGemm(kc::CublasGemm& cublas, double hbm_gbs) {
  // BENCH_GPU_VERBOSE=1: every candidate's time, not only the best.
  const bool verbose = std::getenv("BENCH_GPU_VERBOSE") != nullptr;
  std::printf(
      "\n== GEMM: y = x w^T, Nereid vs cuBLAS (cublasGemmEx), fp32 accumulation, fp32 out\n");
  std::printf("%-6s %6s %6s %6s | %10s %9s | %10s %9s | %7s | %9s %s\n", "type", "M", "N", "K",
              "cuBLAS us", "TFLOP/s", "Nereid us", "TFLOP/s", "ratio", "HBM roof", "variant");
  struct Shape {
    int64_t m, n, k;
  };
  std::vector<Shape> shapes = {{4096, 4096, 4096}, {8192, 8192, 8192}};
  for (int64_t m : {1, 8, 16, 32, 64, 256}) shapes.push_back({m, 4096, 4096});
  for (int64_t m : {1, 32, 256})  // recommend_model's layers
    for (auto [n, k] : {std::pair<int64_t, int64_t>{2048, 1024}, {1024, 2048}, {1000, 1024}})
      shapes.push_back({m, n, k});
  // BENCH_GPU_SHAPES="MxNxK,...": those shapes alone, in bf16.
  std::vector<std::pair<kc::ElemType, bool>> types = {
      {kc::ElemType::kBF16, false}, {kc::ElemType::kF16, false}, {kc::ElemType::kF32, true}};
  if (const char* only = std::getenv("BENCH_GPU_SHAPES"); only != nullptr) {
    shapes.clear();
    types.resize(1);
    for (const char* at = only; *at != '\0';) {
      Shape s{};
      int used = 0;
      if (std::sscanf(at, "%ldx%ldx%ld%n", &s.m, &s.n, &s.k, &used) != 3) break;
      shapes.push_back(s);
      at += used;
      if (*at == ',') ++at;
    }
  }
  for (auto [type, tf32] : types) {
    for (const Shape& s : shapes) {
      const size_t wbytes = s.n * s.k * kc::ElemSize(type);
      const int copies = static_cast<int>(
          std::clamp<size_t>((size_t{256} << 20) / std::max<size_t>(wbytes, 1), 1, 8));
      Operands o = MakeOperands(s.m, s.n, s.k, type, copies);
      kc::GemmProblem p;
      p.m = s.m, p.n = s.n, p.k = s.k, p.ab_type = type, p.tf32 = tf32, p.y = o.y;
      auto with = [&](int i) {
        p.x = o.x[i % copies], p.w = o.w[i % copies];
        return p;
      };
      const int reps = s.m * s.n * s.k > (int64_t{1} << 33) ? 5 : 50;
      const double cublas_us = TimeGraphUs([&](int i) { cublas.Run(with(i), o.acc); }, reps);
      const double flops = 2.0 * s.m * s.n * s.k;
      const Fastest ours = FastestOurs(with, reps, verbose);
      const double ours_us = ours.us;
      const double bytes = wbytes + s.m * s.k * kc::ElemSize(type) + s.m * s.n * 4.0;
      const double best = ours_us > 0 ? ours_us : cublas_us;  // the roofline of our own kernel
      char roof[32] = "";
      if (s.m <= 16)
        std::snprintf(roof, sizeof(roof), "%.0f%%", 100.0 * bytes / (best * 1e3) / hbm_gbs);
      if (ours_us > 0)
        std::printf("%-6s %6ld %6ld %6ld | %10.2f %9.1f | %10.2f %9.1f | %6.2fx | %9s %s\n",
                    Name(type, tf32), s.m, s.n, s.k, cublas_us, flops / cublas_us / 1e6, ours_us,
                    flops / ours_us / 1e6, cublas_us / ours_us, roof, ours.name.c_str());
      else
        std::printf("%-6s %6ld %6ld %6ld | %10.2f %9.1f | %10s %9s | %7s | %9s\n", Name(type, tf32),
                    s.m, s.n, s.k, cublas_us, flops / cublas_us / 1e6, "cuBLAS", "", "1.00x", roof);
      Free(o);
    }
  }
}

// cuBLASLt's int8 GEMM as PyTorch's torch._int_mm calls it: int8 x int8 -> int32, no scales or
// epilogue, in the layout int8 requires (y^T = w x^T with w transposed: "TN").
class CublasLtInt8 {
 public:
  CublasLtInt8() {
    CHECK_LT(cublasLtCreate(&handle_));
    CHECK(cudaMalloc(&workspace_, kWorkspace));
  }
  ~CublasLtInt8() {
    cublasLtDestroy(handle_);
    cudaFree(workspace_);
  }
  // False when cuBLASLt has no algorithm for the shape.
  bool Prepare(int64_t m, int64_t n, int64_t k) {
    Release();
    CHECK_LT(cublasLtMatmulDescCreate(&op_, CUBLAS_COMPUTE_32I, CUDA_R_32I));
    const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
    CHECK_LT(cublasLtMatmulDescSetAttribute(op_, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)));
    CHECK_LT(cublasLtMatmulDescSetAttribute(op_, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)));
    CHECK_LT(cublasLtMatrixLayoutCreate(&a_, CUDA_R_8I, k, n, k));
    CHECK_LT(cublasLtMatrixLayoutCreate(&b_, CUDA_R_8I, k, m, k));
    CHECK_LT(cublasLtMatrixLayoutCreate(&c_, CUDA_R_32I, n, m, n));
    cublasLtMatmulPreference_t pref;
    CHECK_LT(cublasLtMatmulPreferenceCreate(&pref));
    const size_t ws = kWorkspace;
    CHECK_LT(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                  &ws, sizeof(ws)));
    int found = 0;
    const cublasStatus_t st =
        cublasLtMatmulAlgoGetHeuristic(handle_, op_, a_, b_, c_, c_, pref, 1, &heuristic_, &found);
    cublasLtMatmulPreferenceDestroy(pref);
    return st == CUBLAS_STATUS_SUCCESS && found > 0;
  }
  void Run(const void* x, const void* w, int32_t* y) {
    const int32_t alpha = 1, beta = 0;
    CHECK_LT(cublasLtMatmul(handle_, op_, &alpha, w, a_, x, b_, &beta, y, c_, y, c_,
                            &heuristic_.algo, workspace_, kWorkspace, stream));
  }

 private:
  static void CHECK_LT(cublasStatus_t s) {
    if (s != CUBLAS_STATUS_SUCCESS) {
      std::fprintf(stderr, "cuBLASLt: status %d\n", static_cast<int>(s));
      std::exit(1);
    }
  }
  void Release() {
    if (op_) cublasLtMatmulDescDestroy(op_);
    for (auto* l : {a_, b_, c_})
      if (l) cublasLtMatrixLayoutDestroy(l);
    op_ = nullptr, a_ = b_ = c_ = nullptr;
  }
  static constexpr size_t kWorkspace = size_t{32} << 20;
  cublasLtHandle_t handle_ = nullptr;
  void* workspace_ = nullptr;
  cublasLtMatmulDesc_t op_ = nullptr;
  cublasLtMatrixLayout_t a_ = nullptr, b_ = nullptr, c_ = nullptr;
  cublasLtMatmulHeuristicResult_t heuristic_{};
};

void BenchInt8(double hbm_gbs) {
  const bool verbose = std::getenv("BENCH_GPU_VERBOSE") != nullptr;
  // BENCH_INT8_OUT=bf16: y in bf16, as the engine's int8 precision chains its layers (default
  // fp32).
  const char* out_env = std::getenv("BENCH_INT8_OUT");
  const kc::ElemType out_type = out_env != nullptr && std::string(out_env) == "bf16"
                                    ? kc::ElemType::kBF16
                                    : kc::ElemType::kF32;
  std::printf(
      "\n== INT8 GEMM: y = x_scale * w_scale * (x w^T), Nereid (%s out, scales fused) vs Nereid "
      "bf16 (fp32 out) and cuBLASLt int8 (int32 out)\n",
      kc::ElemTypeName(out_type));
  std::printf("%6s %6s %6s | %9s %8s | %9s %8s | %9s %8s | %7s %7s | %9s %9s %s\n", "M", "N", "K",
              "bf16 us", "TFLOP/s", "Lt i8 us", "TOP/s", "i8 us", "TOP/s", "vs bf16", "vs Lt",
              "+quant us", "HBM roof", "variant");
  struct Shape {
    int64_t m, n, k;
  };
  std::vector<Shape> shapes = {{4096, 4096, 4096}, {8192, 8192, 8192}};
  for (int64_t m : {1, 8, 16, 32, 64, 256, 1024}) shapes.push_back({m, 4096, 4096});
  for (int64_t m : {1, 32, 256})  // recommend_model's layers
    for (auto [n, k] : {std::pair<int64_t, int64_t>{2048, 1024}, {1024, 2048}, {1000, 1024}})
      shapes.push_back({m, n, k});
  CublasLtInt8 lt;
  for (const Shape& s : shapes) {
    const int copies = static_cast<int>(
        std::clamp<int64_t>((int64_t{256} << 20) / std::max<int64_t>(s.n * s.k, 1), 1, 8));
    const int reps = s.m * s.n * s.k > (int64_t{1} << 33) ? 5 : 50;
    const double ops = 2.0 * s.m * s.n * s.k;
    // bf16: the fastest of Nereid's kernels, as the gemm section times it.
    Operands o = MakeOperands(s.m, s.n, s.k, kc::ElemType::kBF16, copies);
    kc::GemmProblem pb;
    pb.m = s.m, pb.n = s.n, pb.k = s.k, pb.ab_type = kc::ElemType::kBF16, pb.y = o.y;
    const Fastest bf16 = FastestOurs(
        [&](int i) {
          pb.x = o.x[i % copies], pb.w = o.w[i % copies];
          return pb;
        },
        reps, false);
    // int8 operands: the same random values quantized per row.
    std::vector<void*> xq, wq;
    std::vector<float*> xs, ws;
    for (int c = 0; c < copies; ++c) {
      void* xf = RandomDevice(s.m * s.k, kc::ElemType::kF32, 100 + c);
      void* wf = RandomDevice(s.n * s.k, kc::ElemType::kF32, 200 + c);
      void *a, *b;
      float *sa, *sb;
      CHECK(cudaMalloc(&a, s.m * s.k));
      CHECK(cudaMalloc(&b, s.n * s.k));
      CHECK(cudaMalloc(&sa, s.m * 4));
      CHECK(cudaMalloc(&sb, s.n * 4));
      CHECK(kc::QuantizeRowsInt8(kc::ElemType::kF32, xf, s.m, s.k, static_cast<int8_t*>(a), sa,
                                 stream));
      CHECK(kc::QuantizeRowsInt8(kc::ElemType::kF32, wf, s.n, s.k, static_cast<int8_t*>(b), sb,
                                 stream));
      CHECK(cudaStreamSynchronize(stream));
      cudaFree(xf), cudaFree(wf);
      xq.push_back(a), wq.push_back(b), xs.push_back(sa), ws.push_back(sb);
    }
    kc::GemmProblem p;
    p.m = s.m, p.n = s.n, p.k = s.k, p.ab_type = kc::ElemType::kI8, p.y = o.y;
    p.out_type = out_type;
    auto with = [&](int i) {
      p.x = xq[i % copies], p.w = wq[i % copies];
      p.x_scale = xs[i % copies], p.w_scale = ws[i % copies];
      return p;
    };
    const Fastest ours = FastestOurs(with, reps, verbose);
    double lt_us = 0;
    if (lt.Prepare(s.m, s.n, s.k))
      lt_us = TimeGraphUs(
          [&](int i) { lt.Run(xq[i % copies], wq[i % copies], reinterpret_cast<int32_t*>(o.acc)); },
          reps);
    // What a layer pays in serving: its activations quantized per row, then the GEMM. The bf16
    // source stands in for the previous layer's output.
    double with_quant_us = 0;
    if (ours.us > 0) {
      void* act_q = nullptr;
      float* act_s = nullptr;
      CHECK(cudaMalloc(&act_q, s.m * s.k));
      CHECK(cudaMalloc(&act_s, s.m * 4));
      kc::GemmProblem q = with(0);
      const std::string name = ours.name;
      float* workspace = nullptr;  // a split sm90 config's partial sums
      for (const auto& config : kc::kSm90Configs)
        if (config.Name() == name && config.splits > 1) {
          q.workspace_floats = kc::Sm90WorkspaceFloats(q, config);
          CHECK(cudaMalloc(&workspace, q.workspace_floats * 4));
          q.workspace = workspace;
        }
      with_quant_us = TimeGraphUs(
          [&](int i) {
            CHECK(kc::QuantizeRowsInt8(kc::ElemType::kBF16, o.x[i % copies], s.m, s.k,
                                       static_cast<int8_t*>(act_q), act_s, stream));
            q.x = act_q, q.x_scale = act_s, q.w = wq[i % copies], q.w_scale = ws[i % copies];
            if (name == "int8-small-m") CHECK(kc::GemmSmallMInt8(q, stream));
            for (auto v : kc::kSmallMVariants)
              if (name == kc::SmallMVariantName(v)) CHECK(kc::GemmSmallM(q, stream, v));
            for (const auto& config : kc::kSm90Configs)
              if (config.Name() == name) CHECK(kc::GemmSm90(q, stream, config));
          },
          reps);
      if (workspace != nullptr) cudaFree(workspace);
      cudaFree(act_q), cudaFree(act_s);
    }
    const double bytes =
        s.n * s.k + s.m * s.k + s.m * s.n * double(kc::ElemSize(out_type)) + (s.m + s.n) * 4.0;
    char roof[32] = "", quant[32] = "-", lt_cell[32] = "-", lt_rate[32] = "", vs_lt[32] = "-";
    if (s.m <= 16 && ours.us > 0)
      std::snprintf(roof, sizeof(roof), "%.0f%%", 100.0 * bytes / (ours.us * 1e3) / hbm_gbs);
    if (with_quant_us > 0) std::snprintf(quant, sizeof(quant), "%.2f", with_quant_us);
    if (lt_us > 0) {
      std::snprintf(lt_cell, sizeof(lt_cell), "%.2f", lt_us);
      std::snprintf(lt_rate, sizeof(lt_rate), "%.1f", ops / lt_us / 1e6);
      if (ours.us > 0) std::snprintf(vs_lt, sizeof(vs_lt), "%.2fx", lt_us / ours.us);
    }
    std::printf("%6ld %6ld %6ld | %9.2f %8.1f | %9s %8s | %9.2f %8.1f | %6.2fx %7s | %9s %9s %s\n",
                s.m, s.n, s.k, bf16.us, ops / bf16.us / 1e6, lt_cell, lt_rate, ours.us,
                ours.us > 0 ? ops / ours.us / 1e6 : 0.0, ours.us > 0 ? bf16.us / ours.us : 0.0,
                vs_lt, quant, roof, ours.name.c_str());
    for (int c = 0; c < copies; ++c)
      cudaFree(xq[c]), cudaFree(wq[c]), cudaFree(xs[c]), cudaFree(ws[c]);
    Free(o);
  }
}

void BenchEpilogue(kc::CublasGemm& cublas) {
  std::printf(
      "\n== GEMM + bias + GELU: fused (Nereid) vs cuBLAS then the epilogue kernel (bf16 in, "
      "bf16 out)\n");
  std::printf("%6s %6s %6s | %12s %10s | %7s %s\n", "M", "N", "K", "cuBLAS+epi us", "fused us",
              "ratio", "kernel");
  struct Shape {
    int64_t m, n, k;
  };
  std::vector<Shape> shapes;
  for (int64_t m : {1, 4, 8, 16, 64})
    for (auto [n, k] : {std::pair<int64_t, int64_t>{4096, 4096}, {2048, 1024}})
      shapes.push_back({m, n, k});
  for (int64_t m : {256, 1024, 4096}) shapes.push_back({m, 4096, 4096});
  for (const Shape& s : shapes) {
    const int copies = s.m >= 1024 ? 2 : 8;
    Operands o = MakeOperands(s.m, s.n, s.k, kc::ElemType::kBF16, copies);
    kc::GemmProblem p;
    p.m = s.m, p.n = s.n, p.k = s.k, p.ab_type = kc::ElemType::kBF16, p.y = o.y, p.bias = o.bias;
    p.out_type = kc::ElemType::kBF16;
    p.act = kc::Activation::kGelu;
    auto with = [&](int i) {
      p.x = o.x[i % copies], p.w = o.w[i % copies];
      return p;
    };
    const int reps = s.m >= 1024 ? 10 : 50;
    const double split = TimeGraphUs([&](int i) { cublas.Run(with(i), o.acc); }, reps);
    const Fastest fused = FastestOurs(with, reps, false);
    std::printf("%6ld %6ld %6ld | %12.2f %10.2f | %6.2fx %s\n", s.m, s.n, s.k, split, fused.us,
                split / fused.us, fused.name.c_str());
    Free(o);
  }
}

// Only Nereid's Hopper GEMM at the square shapes, each tile once (for profiling runs).
void BenchSm90() {
  for (int64_t size : {4096, 8192})
    for (auto tile : {kc::Sm90Tile::k128x256, kc::Sm90Tile::k128x128}) {
      Operands o = MakeOperands(size, size, size, kc::ElemType::kBF16, 1);
      kc::GemmProblem p;
      p.m = p.n = p.k = size, p.ab_type = kc::ElemType::kBF16, p.x = o.x[0], p.w = o.w[0];
      p.y = o.y;
      const kc::Sm90Config config{tile, 1};
      if (!kc::Sm90Supported(p, config)) return;
      const double us = TimeUs([&](int) { CHECK(kc::GemmSm90(p, stream, config)); }, 3);
      std::printf("sm90 bf16 %ld^3 %s: %.1f us, %.1f TFLOP/s\n", size, config.Name().c_str(), us,
                  2e-6 * size * size * size / us);
      Free(o);
    }
}

void BenchCopies() {
  std::printf("\n== Host<->device copies: pinned vs pageable (cudaMemcpyAsync + sync), GB/s\n");
  std::printf("%10s | %9s %9s %6s | %9s %9s %6s\n", "bytes", "H2D pin", "H2D page", "ratio",
              "D2H pin", "D2H page", "ratio");
  const size_t max_bytes = size_t{256} << 20;
  void *pinned = nullptr, *device = nullptr;
  CHECK(cudaHostAlloc(&pinned, max_bytes, cudaHostAllocPortable));
  std::vector<uint8_t> pageable(max_bytes);
  std::mt19937 rng(1);
  for (size_t i = 0; i < max_bytes; i += 4096) pageable[i] = static_cast<uint8_t>(rng());
  std::memcpy(pinned, pageable.data(), max_bytes);
  CHECK(cudaMalloc(&device, max_bytes));
  for (size_t bytes = 4096; bytes <= max_bytes; bytes *= 4) {
    const int reps = bytes < (size_t{1} << 20) ? 200 : bytes < (size_t{64} << 20) ? 20 : 3;
    auto time = [&](void* host, bool h2d) {
      return TimeUs(
          [&](int) {
            CHECK(h2d ? cudaMemcpyAsync(device, host, bytes, cudaMemcpyHostToDevice, stream)
                      : cudaMemcpyAsync(host, device, bytes, cudaMemcpyDeviceToHost, stream));
            CHECK(cudaStreamSynchronize(stream));
          },
          reps);
    };
    const double hp = time(pinned, true), hq = time(pageable.data(), true);
    const double dp = time(pinned, false), dq = time(pageable.data(), false);
    auto gbs = [&](double us) { return bytes / (us * 1e3); };
    std::printf("%10zu | %9.2f %9.2f %5.2fx | %9.2f %9.2f %5.2fx\n", bytes, gbs(hp), gbs(hq),
                hq / hp, gbs(dp), gbs(dq), dq / dp);
  }
  cudaFreeHost(pinned);
  cudaFree(device);
}

// 1 MiB copies as a server makes them, device time of the copy alone (events around it): from the
// same pinned buffer every time (a benchmark's habit), from a buffer the CPU has just written (a
// request body), from a different 1 MiB of a 256 MiB pinned region each time (a pool), and both.
// Writes the lines of [p, p + bytes) back to memory and drops them from the CPU's caches
// (clflushopt where the CPU has it, else clflush).
#if defined(__x86_64__)
__attribute__((target("clflushopt"))) void FlushLinesOpt(const uint8_t* p, size_t bytes) {
  for (size_t i = 0; i < bytes; i += 64) _mm_clflushopt(const_cast<uint8_t*>(p) + i);
  _mm_sfence();
}
bool HasClflushopt() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  return __get_cpuid_count(7, 0, &a, &b, &c, &d) && (b >> 23 & 1);
}
#endif
void FlushLines(const uint8_t* p, size_t bytes) {
#if defined(__x86_64__)
  static const bool opt = HasClflushopt();
  if (opt) return FlushLinesOpt(p, bytes);
  for (size_t i = 0; i < bytes; i += 64) _mm_clflush(p + i);
  _mm_mfence();
#else
  (void)p, (void)bytes;
#endif
}

void BenchCopyFresh() {
  std::printf(
      "\n== 1 MiB copies from/to pinned memory: same buffer vs just written by the CPU (then "
      "flushed from its caches or not) vs a new place in a 256 MiB region (device time of the "
      "copy, median us; host us of the flush)\n");
  const size_t bytes = size_t{1} << 20, region = size_t{256} << 20;
  uint8_t* pinned = nullptr;
  void* device = nullptr;
  CHECK(cudaHostAlloc(reinterpret_cast<void**>(&pinned), region, cudaHostAllocPortable));
  std::memset(pinned, 1, region);
  std::vector<uint8_t> source(bytes, 7);
  CHECK(cudaMalloc(&device, bytes));
  cudaEvent_t a, b;
  CHECK(cudaEventCreate(&a));
  CHECK(cudaEventCreate(&b));
  std::printf("%-40s | %9s | %9s | %9s\n", "case", "H2D us", "D2H us", "flush us");
  struct Case {
    const char* name;
    bool written, moving, flushed;
  };
  const Case cases[] = {{"same buffer", false, false, false},
                        {"same buffer, CPU-written", true, false, false},
                        {"same buffer, CPU-written, flushed", true, false, true},
                        {"new place each time", false, true, false},
                        {"new place, CPU-written", true, true, false}};
  for (const Case& c : cases) {
    double us[2];
    double flush_us = 0;
    for (int h2d = 1; h2d >= 0; --h2d) {
      std::vector<double> samples, flushes;
      for (int r = 0; r < 60; ++r) {
        uint8_t* host = pinned + (c.moving ? (static_cast<size_t>(r) * bytes) % region : 0);
        if (c.written) std::memcpy(host, source.data(), bytes);
        if (c.flushed) {
          const auto t0 = std::chrono::steady_clock::now();
          FlushLines(host, bytes);
          flushes.push_back(
              std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0)
                  .count());
        }
        CHECK(cudaEventRecord(a, stream));
        CHECK(h2d ? cudaMemcpyAsync(device, host, bytes, cudaMemcpyHostToDevice, stream)
                  : cudaMemcpyAsync(host, device, bytes, cudaMemcpyDeviceToHost, stream));
        CHECK(cudaEventRecord(b, stream));
        CHECK(cudaEventSynchronize(b));
        float ms = 0;
        CHECK(cudaEventElapsedTime(&ms, a, b));
        if (r >= 4) samples.push_back(1000.0 * ms);
      }
      std::sort(samples.begin(), samples.end());
      us[h2d] = samples[samples.size() / 2];
      if (!flushes.empty()) {
        std::sort(flushes.begin(), flushes.end());
        flush_us = flushes[flushes.size() / 2];
      }
    }
    std::printf("%-40s | %9.1f | %9.1f | %9.1f\n", c.name, us[1], us[0], flush_us);
  }
  cudaEventDestroy(a), cudaEventDestroy(b);
  cudaFreeHost(pinned);
  cudaFree(device);
}

// Host time of cudaGraphLaunch (and launch to synchronized) for graphs shaped like the engine's at
// one row: three small kernels, alone and between a 4 KiB copy in and out of pinned memory.
void BenchLaunch() {
  std::printf(
      "\n== CUDA graph launch: host us in cudaGraphLaunch, us from launch to synchronized "
      "(mean of 500)\n");
  const int64_t n = 1024;
  void *host = nullptr, *a = nullptr, *b = nullptr;
  CHECK(cudaHostAlloc(&host, n * 4, cudaHostAllocPortable));
  CHECK(cudaMalloc(&a, n * 4));
  CHECK(cudaMalloc(&b, n * 4));
  for (int copies = 0; copies < 2; ++copies) {
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
    if (copies) CHECK(cudaMemcpyAsync(a, host, n * 4, cudaMemcpyHostToDevice, stream));
    for (int k = 0; k < 3; ++k)
      CHECK(kc::Unary(kc::Activation::kRelu, kc::ElemType::kF32, k % 2 ? b : a, k % 2 ? a : b, n,
                      stream));
    if (copies) CHECK(cudaMemcpyAsync(host, b, n * 4, cudaMemcpyDeviceToHost, stream));
    CHECK(cudaStreamEndCapture(stream, &graph));
    CHECK(cudaGraphInstantiate(&exec, graph, 0));
    // Back to back, and with the thread asleep 200 us between runs (as an instance thread
    // waiting for its next request is).
    for (int idle = 0; idle < 2; ++idle) {
      double launch = 0, total = 0;
      const int reps = 500;
      for (int r = -20; r < reps; ++r) {
        if (idle) std::this_thread::sleep_for(std::chrono::microseconds(200));
        const auto t0 = std::chrono::steady_clock::now();
        CHECK(cudaGraphLaunch(exec, stream));
        const auto t1 = std::chrono::steady_clock::now();
        CHECK(cudaStreamSynchronize(stream));
        const auto t2 = std::chrono::steady_clock::now();
        if (r < 0) continue;
        launch += std::chrono::duration<double, std::micro>(t1 - t0).count();
        total += std::chrono::duration<double, std::micro>(t2 - t0).count();
      }
      std::printf("%-40s %-22s | launch %6.1f us | to synchronized %6.1f us\n",
                  copies ? "3 kernels + 4 KiB pinned copy in and out" : "3 kernels",
                  idle ? "after 200 us asleep" : "back to back", launch / reps, total / reps);
    }
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
  }
  cudaFreeHost(host), cudaFree(a), cudaFree(b);
}

// One run shaped like the GPU engine's at 32 and 256 rows: an input copied in from page-locked
// request memory (just written by the CPU), a graph of three small kernels, an output copied out
// to page-locked response memory, then synchronize; host wall time per run (mean of 300),
// back to back and with the thread asleep 200 us before each run. Three ways to issue it:
//   around:  cudaMemcpyAsync in, cudaGraphLaunch, cudaMemcpyAsync out (three submissions)
//   nodes:   the copies are memcpy nodes of the graph, pointed at this run's memory with
//            cudaGraphExecMemcpyNodeSetParams1D, then one launch
//   staging: the CPU copies the input into the instance's staging, the graph (with copy nodes
//            from and to the staging) runs, and the CPU copies the output to the response.
void BenchRunShapes() {
  std::printf(
      "\n== A run's copies and graph, host wall time per run (us, mean of 300): copies around "
      "the graph vs memcpy nodes updated per run vs CPU staging\n");
  std::printf("%10s %-20s | %8s %8s %8s\n", "bytes", "thread", "around", "nodes", "staging");
  const int64_t n = 1024;
  void *ka = nullptr, *kb = nullptr;
  CHECK(cudaMalloc(&ka, n * 4));
  CHECK(cudaMalloc(&kb, n * 4));
  cudaGraph_t kernels;
  CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  for (int k = 0; k < 3; ++k)
    CHECK(kc::Unary(kc::Activation::kRelu, kc::ElemType::kF32, k % 2 ? kb : ka, k % 2 ? ka : kb, n,
                    stream));
  CHECK(cudaStreamEndCapture(stream, &kernels));
  cudaGraphExec_t kernels_exec;
  CHECK(cudaGraphInstantiate(&kernels_exec, kernels, 0));
  for (size_t bytes : {size_t{128} << 10, size_t{1} << 20}) {
    uint8_t *src[2], *dst[2], *stage_in, *stage_out;
    for (int i = 0; i < 2; ++i) {
      CHECK(cudaHostAlloc(reinterpret_cast<void**>(&src[i]), bytes, cudaHostAllocPortable));
      CHECK(cudaHostAlloc(reinterpret_cast<void**>(&dst[i]), bytes, cudaHostAllocPortable));
    }
    CHECK(cudaHostAlloc(reinterpret_cast<void**>(&stage_in), bytes, cudaHostAllocPortable));
    CHECK(cudaHostAlloc(reinterpret_cast<void**>(&stage_out), bytes, cudaHostAllocPortable));
    std::vector<uint8_t> fresh(bytes, 3);
    void *din = nullptr, *dout = nullptr;
    CHECK(cudaMalloc(&din, bytes));
    CHECK(cudaMalloc(&dout, bytes));
    // The graph with copy nodes: in -> kernels -> out.
    auto with_copies = [&](const void* from, void* to, cudaGraphNode_t* in, cudaGraphNode_t* out) {
      cudaGraph_t g;
      CHECK(cudaGraphCreate(&g, 0));
      cudaGraphNode_t child;
      CHECK(cudaGraphAddMemcpyNode1D(in, g, nullptr, 0, din, from, bytes, cudaMemcpyDefault));
      CHECK(cudaGraphAddChildGraphNode(&child, g, in, 1, kernels));
      CHECK(cudaGraphAddMemcpyNode1D(out, g, &child, 1, to, dout, bytes, cudaMemcpyDefault));
      cudaGraphExec_t e;
      CHECK(cudaGraphInstantiate(&e, g, 0));
      return std::make_pair(g, e);
    };
    cudaGraphNode_t node_in, node_out, stage_node_in, stage_node_out;
    auto [nodes_graph, nodes_exec] = with_copies(src[0], dst[0], &node_in, &node_out);
    auto [stage_graph, stage_exec] =
        with_copies(stage_in, stage_out, &stage_node_in, &stage_node_out);
    for (int idle = 0; idle < 2; ++idle) {
      double us[3] = {0, 0, 0};
      for (int way = 0; way < 3; ++way) {
        const int reps = 300;
        for (int r = -20; r < reps; ++r) {
          const int i = r & 1;
          std::memcpy(src[i], fresh.data(), bytes);  // the request just arrived
          if (idle) std::this_thread::sleep_for(std::chrono::microseconds(200));
          const auto t0 = std::chrono::steady_clock::now();
          if (way == 0) {
            CHECK(cudaMemcpyAsync(din, src[i], bytes, cudaMemcpyDefault, stream));
            CHECK(cudaGraphLaunch(kernels_exec, stream));
            CHECK(cudaMemcpyAsync(dst[i], dout, bytes, cudaMemcpyDefault, stream));
            CHECK(cudaStreamSynchronize(stream));
          } else if (way == 1) {
            CHECK(cudaGraphExecMemcpyNodeSetParams1D(nodes_exec, node_in, din, src[i], bytes,
                                                     cudaMemcpyDefault));
            CHECK(cudaGraphExecMemcpyNodeSetParams1D(nodes_exec, node_out, dst[i], dout, bytes,
                                                     cudaMemcpyDefault));
            CHECK(cudaGraphLaunch(nodes_exec, stream));
            CHECK(cudaStreamSynchronize(stream));
          } else {
            std::memcpy(stage_in, src[i], bytes);
            CHECK(cudaGraphLaunch(stage_exec, stream));
            CHECK(cudaStreamSynchronize(stream));
            std::memcpy(dst[i], stage_out, bytes);
          }
          if (r >= 0)
            us[way] +=
                std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0)
                    .count();
        }
        us[way] /= reps;
      }
      std::printf("%10zu %-20s | %8.1f %8.1f %8.1f\n", bytes,
                  idle ? "after 200 us asleep" : "back to back", us[0], us[1], us[2]);
    }
    for (auto [g, e] :
         {std::make_pair(nodes_graph, nodes_exec), std::make_pair(stage_graph, stage_exec)}) {
      cudaGraphExecDestroy(e);
      cudaGraphDestroy(g);
    }
    for (int i = 0; i < 2; ++i) cudaFreeHost(src[i]), cudaFreeHost(dst[i]);
    cudaFreeHost(stage_in), cudaFreeHost(stage_out), cudaFree(din), cudaFree(dout);
  }
  cudaGraphExecDestroy(kernels_exec);
  cudaGraphDestroy(kernels);
  cudaFree(ka), cudaFree(kb);
}

}  // namespace

// ResNet-50's convolution shapes (224x224 input) at batch 1 and 256 in bf16 on Conv2dNhwc, each
// timed as a replayed CUDA graph of 10 launches: us per launch and the tensor-core rate.
void BenchConv() {
  struct Shape {
    const char* name;
    int64_t hw, c_in, c_out, k, stride;
  };
  const Shape shapes[] = {
      {"stem 7x7/2 8->64", 224, 8, 64, 7, 2},  {"l1 1x1 64->64", 56, 64, 64, 1, 1},
      {"l1 3x3 64->64", 56, 64, 64, 3, 1},     {"l1 1x1 64->256", 56, 64, 256, 1, 1},
      {"l1 1x1 256->64", 56, 256, 64, 1, 1},   {"l2 3x3/2 128", 56, 128, 128, 3, 2},
      {"l2 1x1 512->128", 28, 512, 128, 1, 1}, {"l2 3x3 128", 28, 128, 128, 3, 1},
      {"l3 3x3 256", 14, 256, 256, 3, 1},      {"l3 1x1 256->1024", 14, 256, 1024, 1, 1},
      {"l4 3x3 512", 7, 512, 512, 3, 1},       {"l4 1x1 512->2048", 7, 512, 2048, 1, 1},
      {"l4 1x1 2048->512", 7, 2048, 512, 1, 1}};
  void* workspace = nullptr;
  CHECK(cudaMalloc(&workspace, kc::kConvWorkspaceFloats * sizeof(float)));
  std::printf("\n== conv: Conv2dNhwc on ResNet-50's shapes, bf16, replayed CUDA graph\n");
  std::printf("%-20s %6s | %-26s %6s | %10s %8s\n", "layer", "batch", "kernel", "splits", "us",
              "TFLOP/s");
  for (const Shape& sh : shapes)
    for (int64_t batch : {1, 256}) {
      kc::ConvProblem p;
      p.type = kc::ElemType::kBF16;
      nereid::kernels::Conv2dGeometry& g = p.g;
      g.n = batch, g.h = g.w = sh.hw, g.c_in = sh.c_in, g.c_out = sh.c_out;
      g.kh = g.kw = sh.k, g.stride_h = g.stride_w = sh.stride;
      g.pad_top = g.pad_left = sh.k / 2;
      g.oh = g.ow = (sh.hw + 2 * (sh.k / 2) - sh.k) / sh.stride + 1;
      p.x = RandomDevice(batch * sh.hw * sh.hw * sh.c_in, p.type, 1);
      p.w = RandomDevice(sh.c_out * sh.k * sh.k * sh.c_in, p.type, 2);
      CHECK(cudaMalloc(&p.y, batch * g.oh * g.ow * sh.c_out * 2));
      p.act = kc::ConvActivation::kRelu;
      p.workspace = static_cast<float*>(workspace);
      const double us = TimeGraphUs([&](int) { CHECK(kc::Conv2dNhwc(p, stream)); }, 10);
      const double flop = 2.0 * batch * g.oh * g.ow * sh.c_out * sh.k * sh.k * sh.c_in;
      const bool sm90 = kc::ConvOnSm90(p);
      std::printf("%-20s %6lld | %-26s %6d | %10.1f %8.1f\n", sh.name,
                  static_cast<long long>(batch),
                  sm90 ? "wgmma implicit GEMM" : kc::ConvKernelName(kc::ChooseConvKernel(p)),
                  sm90 ? 1 : kc::ConvSplits(p), us, flop / us * 1e-6);
      CHECK(cudaFree(const_cast<void*>(p.x)));
      CHECK(cudaFree(const_cast<void*>(p.w)));
      CHECK(cudaFree(p.y));
    }
  CHECK(cudaFree(workspace));
}

// ResNet-50's 1x1 convolutions at batch 256 and batch 1 as the GEMMs the engine runs them as
// (pixels x c_out x c_in, bf16 in and out, bias and Relu): each implementation the tuner may pick
// (GemmSm90's configurations, the small-M kernels, the tensor-core convolution as a 1x1 over m
// one-pixel images) and cuBLAS with its epilogue kernel, without a residual and with one added
// before the Relu (a bottleneck's last layer), with the bytes moved per second against the
// device's copy bandwidth (x, w and y once; the residual once more).
void BenchPointwise(kc::CublasGemm& cublas, double hbm_gbs, bool batch_256) {
  struct Shape {
    const char* name;
    int64_t pixels, n, k;  // pixels of one image
  };
  const Shape shapes[] = {
      {"l1 1x1 64->64", 56 * 56, 64, 64},       {"l1 1x1 64->256", 56 * 56, 256, 64},
      {"l1 1x1 256->64", 56 * 56, 64, 256},     {"l2 1x1 256->128", 56 * 56, 128, 256},
      {"l2 1x1 128->512", 28 * 28, 512, 128},   {"l2 1x1 512->128", 28 * 28, 128, 512},
      {"l3 1x1 256->1024", 14 * 14, 1024, 256}, {"l3 1x1 1024->256", 14 * 14, 256, 1024},
      {"l4 1x1 512->2048", 7 * 7, 2048, 512},   {"l4 1x1 2048->512", 7 * 7, 512, 2048}};
  std::printf(
      "\n== pointwise: ResNet-50's 1x1 layers as GEMMs, bf16, bias + Relu, replayed CUDA graph "
      "(%% of %.0f GB/s)\n",
      hbm_gbs);
  std::printf("%-18s %5s %-9s | %-22s %10s %8s\n", "layer", "batch", "residual", "kernel", "us",
              "HBM");
  for (int64_t batch : {int64_t{1}, int64_t{256}})
    for (const Shape& sh : shapes) {
      if (batch == 256 && !batch_256) continue;
      const int64_t m = batch * sh.pixels;
      const auto t = kc::ElemType::kBF16;
      void* x = RandomDevice(m * sh.k, t, 1);
      void* w = RandomDevice(sh.n * sh.k, t, 2);
      void* res = RandomDevice(m * sh.n, t, 3);
      auto* bias = static_cast<float*>(RandomDevice(sh.n, kc::ElemType::kF32, 4));
      void *y = nullptr, *acc = nullptr;
      CHECK(cudaMalloc(&y, m * sh.n * 2));
      CHECK(cudaMalloc(&acc, m * sh.n * 4));
      for (bool with_residual : {false, true}) {
        kc::GemmProblem p;
        p.m = m, p.n = sh.n, p.k = sh.k, p.ab_type = p.out_type = t;
        p.x = x, p.w = w, p.y = y, p.bias = bias, p.act = kc::Activation::kRelu;
        p.residual = with_residual ? res : nullptr, p.residual_first = true;
        p.workspace = static_cast<float*>(acc), p.workspace_floats = m * sh.n;
        const double bytes = 2.0 * (m * sh.k + sh.n * sh.k + m * sh.n * (with_residual ? 2 : 1));
        auto row = [&](const std::string& kernel, double us) {
          std::printf("%-18s %5lld %-9s | %-22s %10.1f %7.0f%%\n", sh.name,
                      static_cast<long long>(batch), with_residual ? "first" : "none",
                      kernel.c_str(), us, 100.0 * bytes / (us * 1e3) / hbm_gbs);
        };
        for (const auto& config : kc::kSm90Configs)
          if (config.splits == 1 && kc::Sm90Supported(p, config))
            row(config.Name(),
                TimeGraphUs([&](int) { CHECK(kc::GemmSm90(p, stream, config)); }, 10));
        for (auto variant : kc::kSmallMVariants)
          if (kc::SmallMSupported(p, variant))
            row(kc::SmallMVariantName(variant),
                TimeGraphUs([&](int) { CHECK(kc::GemmSmallM(p, stream, variant)); }, 10));
        if (kc::GemmAsConvSupported(p))
          row("conv-tensor-core", TimeGraphUs([&](int) { CHECK(kc::GemmAsConv(p, stream)); }, 10));
        row("cuBLAS+epilogue", TimeGraphUs(
                                   [&](int) {
                                     const std::string e = cublas.Run(p, static_cast<float*>(acc));
                                     if (!e.empty()) std::fprintf(stderr, "%s\n", e.c_str());
                                   },
                                   10));
      }
      for (void* ptr : {x, w, res, static_cast<void*>(bias), y, acc}) CHECK(cudaFree(ptr));
    }
}

int main(int argc, char** argv) {
  std::vector<std::string> sections(argv + 1, argv + argc);
  auto want = [&](const char* s) {
    return sections.empty() || std::find(sections.begin(), sections.end(), s) != sections.end();
  };
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    std::printf("bench_gpu: no CUDA device, nothing to measure\n");
    return 0;
  }
  cudaDeviceProp prop;
  CHECK(cudaGetDeviceProperties(&prop, 0));
  CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  const double hbm = CopyBandwidthGBs();
  std::printf("device: %s, %d SMs, L2 %d MiB; device-to-device copy %.0f GB/s (the HBM ceiling)\n",
              prop.name, prop.multiProcessorCount, prop.l2CacheSize >> 20, hbm);
  kc::CublasGemm cublas;
  if (std::string e = cublas.Init(stream); !e.empty()) {
    std::fprintf(stderr, "%s\n", e.c_str());
    return 1;
  }
  if (want("gemm")) BenchGemm(cublas, hbm);
  if (want("int8")) BenchInt8(hbm);
  if (!sections.empty() && want("sm90")) BenchSm90();
  if (want("epilogue")) BenchEpilogue(cublas);
  if (want("copy")) BenchCopies();
  if (want("copyfresh")) BenchCopyFresh();
  if (want("launch")) BenchLaunch();
  if (want("runshapes")) BenchRunShapes();
  if (want("conv")) BenchConv();
  if (want("pointwise") || want("pointwise1")) BenchPointwise(cublas, hbm, want("pointwise"));
  return 0;
}
