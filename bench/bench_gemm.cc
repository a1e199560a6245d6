// GEMM benchmark: Nereid's Sgemm against OpenBLAS's cblas_sgemm, single-threaded, same inputs, same
// process, interleaved repetitions so machine noise hits both alike. Prints a table and the ratio.
// A second table times the pre-packed path (what the server runs for constant weights) with each
// micro-kernel this CPU supports, side by side. A third times GemmInt8 (per-row int8 activations
// quantized per call, int8 weights packed at load) with each of its kernels against the fp32
// pre-packed path, the same cases interleaved.
//   build/bench_gemm [--reps N]
#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "cpu/gemm.h"
#include "cpu/gemm_int8.h"

extern "C" void openblas_set_num_threads(int);

namespace {

double Seconds(const std::function<void()>& f) {
  const auto t0 = std::chrono::steady_clock::now();
  f();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

struct Case {
  int m, n, k;
  bool tb;
  const char* what;
};

// One case's random inputs and timing parameters, shared by both tables.
struct Operands {
  std::vector<float> a, b;
  int ldb;
  double flops;
  int inner;  // iterations per timing: enough for ~20 ms
  Operands(const Case& c, std::mt19937& rng)
      : a(static_cast<size_t>(c.m) * c.k),
        b(static_cast<size_t>(c.k) * c.n),
        ldb(c.tb ? c.k : c.n),
        flops(2.0 * c.m * c.n * c.k),
        inner(std::max(1, static_cast<int>(2e7 / flops * 50))) {
    std::uniform_real_distribution<float> dist(-1, 1);
    for (float& x : a) x = dist(rng);
    for (float& x : b) x = dist(rng);
  }
};

}  // namespace

int main(int argc, char** argv) {
  int reps = 7;
  for (int i = 1; i + 1 < argc; ++i)
    if (std::string(argv[i]) == "--reps") reps = std::stoi(argv[i + 1]);
  openblas_set_num_threads(1);
  // recommend_model's layers take [batch, in] x W^T with W stored [out, in] (PyTorch style).
  const Case cases[] = {
      {1, 2048, 1024, true, "recommend fc0, batch 1"},
      {2, 2048, 1024, true, "recommend fc0, batch 2"},
      {4, 2048, 1024, true, "recommend fc0, batch 4"},
      {8, 2048, 1024, true, "recommend fc0, batch 8"},
      {16, 2048, 1024, true, "recommend fc0, batch 16"},
      {32, 2048, 1024, true, "recommend fc0, batch 32"},
      {32, 1000, 1024, true, "recommend fc2, batch 32"},
      {64, 1024, 1024, false, "matmul_model, 64 rows"},
      {256, 256, 256, false, "square 256"},
      {512, 512, 512, false, "square 512"},
      {1024, 1024, 1024, false, "square 1024"},
      // A text encoder's layers at 128 tokens (MiniLM, hidden 384, FFN 1536; BERT-base 768/3072).
      {128, 384, 384, false, "MiniLM q/k/v/out, 128 tok"},
      {128, 1536, 384, false, "MiniLM FFN up, 128 tok"},
      {128, 384, 1536, false, "MiniLM FFN down, 128 tok"},
      {128, 3072, 768, false, "BERT FFN up, 128 tok"},
      {128, 128, 32, false, "attention Q.Kt, one head"},
      {128, 32, 128, false, "attention P.V, one head"},
  };
  std::printf("kernel: %s, threads: 1\n", nereid::kernels::SgemmKernelName());
  std::printf("| %-26s | %5s | %5s | %5s | %12s | %12s | %9s | %14s |\n", "case", "M", "N", "K",
              "nereid GF/s", "openblas GF/s", "ratio", "prepacked GF/s");
  std::printf("|%s|\n", std::string(117, '-').c_str());
  double log_ratio_sum = 0;
  int cases_run = 0;
  std::mt19937 rng(7);
  for (const Case& c : cases) {
    const Operands ops(c, rng);
    const auto& [a, b, ldb, flops, inner] = ops;
    std::vector<float> c1(static_cast<size_t>(c.m) * c.n), c2(c1.size());
    auto ours = [&] {
      for (int i = 0; i < inner; ++i)
        nereid::kernels::Sgemm(false, c.tb, c.m, c.n, c.k, 1.f, a.data(), c.k, b.data(), ldb, 0.f,
                               c1.data(), c.n);
    };
    auto blas = [&] {
      for (int i = 0; i < inner; ++i)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, c.tb ? CblasTrans : CblasNoTrans, c.m, c.n, c.k,
                    1.f, a.data(), c.k, b.data(), ldb, 0.f, c2.data(), c.n);
    };
    // What the server runs for constant weights: packed once at load, not per call.
    const nereid::kernels::PackedMatrixB packed(c.tb, c.k, c.n, b.data(), ldb);
    std::vector<float> c3(c1.size());
    auto prepacked = [&] {
      for (int i = 0; i < inner; ++i)
        nereid::kernels::SgemmPacked(false, c.m, 1.f, a.data(), c.k, packed, 0.f, c3.data(), c.n);
    };
    ours();
    blas();
    prepacked();
    double best_ours = 1e30, best_blas = 1e30, best_packed = 1e30;
    for (int r = 0; r < reps; ++r) {
      best_ours = std::min(best_ours, Seconds(ours));
      best_blas = std::min(best_blas, Seconds(blas));
      best_packed = std::min(best_packed, Seconds(prepacked));
    }
    double max_diff = 0;
    for (size_t i = 0; i < c1.size(); ++i)
      max_diff = std::max({max_diff, static_cast<double>(std::abs(c1[i] - c2[i])),
                           static_cast<double>(std::abs(c3[i] - c2[i]))});
    const double g_ours = flops * inner / best_ours / 1e9, g_blas = flops * inner / best_blas / 1e9;
    log_ratio_sum += std::log(g_ours / g_blas);
    ++cases_run;
    const double g_packed = flops * inner / best_packed / 1e9;
    std::printf("| %-26s | %5d | %5d | %5d | %12.1f | %12.1f | %8.2fx | %14.1f |%s\n", c.what, c.m,
                c.n, c.k, g_ours, g_blas, g_ours / g_blas, g_packed,
                max_diff > 1e-3 ? "  RESULTS DIFFER" : "");
  }
  std::printf("geometric mean ratio (nereid / openblas): %.2fx\n",
              std::exp(log_ratio_sum / cases_run));

  // Pre-packed GF/s per micro-kernel, interleaved so noise hits all alike.
  const std::string chosen = nereid::kernels::SgemmKernelName();
  std::vector<std::string> kernels;
  for (const std::string& k : nereid::kernels::SgemmKernels())
    if (k.rfind("portable", 0) != 0) kernels.push_back(k);
  std::printf("\npre-packed GF/s per micro-kernel (chosen here: %s)\n| %-26s |", chosen.c_str(),
              "case");
  for (const auto& k : kernels) std::printf(" %14s |", k.c_str());
  std::printf("\n|%s|\n", std::string(28 + 17 * kernels.size(), '-').c_str());
  for (const Case& c : cases) {
    const Operands ops(c, rng);
    const auto& [a, b, ldb, flops, inner] = ops;
    std::vector<float> out(static_cast<size_t>(c.m) * c.n);
    std::vector<std::unique_ptr<nereid::kernels::PackedMatrixB>> packed;
    for (const auto& k : kernels) {
      nereid::kernels::UseSgemmKernel(k);
      packed.push_back(
          std::make_unique<nereid::kernels::PackedMatrixB>(c.tb, c.k, c.n, b.data(), ldb));
    }
    std::vector<double> best(kernels.size(), 1e30);
    for (int r = 0; r < reps; ++r)
      for (size_t i = 0; i < kernels.size(); ++i)
        best[i] = std::min(best[i], Seconds([&] {
                             for (int it = 0; it < inner; ++it)
                               nereid::kernels::SgemmPacked(false, c.m, 1.f, a.data(), c.k,
                                                            *packed[i], 0.f, out.data(), c.n);
                           }));
    std::printf("| %-26s |", c.what);
    for (double t : best) std::printf(" %14.1f |", flops * inner / t / 1e9);
    std::printf("\n");
  }
  nereid::kernels::UseSgemmKernel(chosen);

  // INT8: GOP/s per int8 kernel beside fp32 pre-packed (the chosen SGEMM kernel), interleaved.
  const std::string int8_chosen = nereid::kernels::GemmInt8KernelName();
  const auto int8_kernels = nereid::kernels::GemmInt8Kernels();
  std::printf(
      "\nint8 GOP/s per kernel vs fp32 pre-packed GF/s (%s; int8 chosen here: %s)\n| %-26s | %14s "
      "|",
      chosen.c_str(), int8_chosen.c_str(), "case", "fp32");
  for (const auto& k : int8_kernels) std::printf(" %14s | %6s |", k.c_str(), "x fp32");
  std::printf(" %9s |\n|%s|\n", "max rel", std::string(47 + 26 * int8_kernels.size(), '-').c_str());
  for (const Case& c : cases) {
    const Operands ops(c, rng);
    const auto& [a, b, ldb, flops, inner] = ops;
    std::vector<float> w(static_cast<size_t>(c.n) * c.k);  // n x k, as a Linear layer stores it
    for (int j = 0; j < c.n; ++j)
      for (int l = 0; l < c.k; ++l) w[j * c.k + l] = c.tb ? b[j * c.k + l] : b[l * c.n + j];
    const nereid::kernels::PackedMatrixB packed(true, c.k, c.n, w.data(), c.k);
    const nereid::kernels::PackedInt8W packed8(w.data(), c.n, c.k, c.k);
    std::vector<float> ref(static_cast<size_t>(c.m) * c.n), out(ref.size());
    auto fp32 = [&] {
      for (int it = 0; it < inner; ++it)
        nereid::kernels::SgemmPacked(false, c.m, 1.f, a.data(), c.k, packed, 0.f, ref.data(), c.n);
    };
    fp32();
    double best32 = 1e30, max_rel = 0;
    std::vector<double> best(int8_kernels.size(), 1e30);
    for (int r = 0; r < reps; ++r) {
      best32 = std::min(best32, Seconds(fp32));
      for (size_t i = 0; i < int8_kernels.size(); ++i) {
        nereid::kernels::UseGemmInt8Kernel(int8_kernels[i]);
        best[i] = std::min(best[i], Seconds([&] {
                             for (int it = 0; it < inner; ++it)
                               nereid::kernels::GemmInt8(c.m, a.data(), c.k, packed8, nullptr,
                                                         out.data(), c.n);
                           }));
      }
    }
    double num = 0, den = 0;
    for (size_t i = 0; i < ref.size(); ++i)
      num += (out[i] - ref[i]) * (out[i] - ref[i]), den += ref[i] * ref[i];
    max_rel = std::sqrt(num / den);
    const double g32 = flops * inner / best32 / 1e9;
    std::printf("| %-26s | %14.1f |", c.what, g32);
    for (double t : best) std::printf(" %14.1f | %5.2fx |", flops * inner / t / 1e9, best32 / t);
    std::printf(" %9.1e |\n", max_rel);
  }
  nereid::kernels::UseGemmInt8Kernel(int8_chosen);
  return 0;
}
