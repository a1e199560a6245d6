// GEMM tuning for the native engine's GPU path: for every GEMM of a graph and each row count it
// serves (in buckets), which implementation runs it: cuBLAS, one of Nereid's small-M kernels or
// the Hopper wgmma/TMA kernel with one of its tiles. The tuner decides and remembers; the instance
// it tunes for runs and times the candidates (GemmBench), on its own stream and buffers.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "cuda/gemm.h"
#include "nereid/backend_util.h"

namespace nereid::native {

// Which implementation runs a GEMM at a row count.
struct GemmChoice {
  // kSmallMInt8: GemmSmallMInt8 (int8 GEMMs have no cuBLAS; their choices are Nereid's kernels).
  // kConv: GemmAsConv, the convolutions' tensor-core kernel (a batch-1 layer as one kernel).
  enum class Impl { kCublas, kSmallM, kSm90, kSmallMInt8, kConv } impl = Impl::kCublas;
  kernels::cuda::SmallMVariant variant = kernels::cuda::SmallMVariant::kWarpRows2;
  kernels::cuda::Sm90Config sm90{};

  std::string Name() const;
  bool operator==(const GemmChoice& o) const { return Name() == o.Name(); }
};

// The row counts GEMMs are tuned at: every count up to 16, then buckets about 1.5x apart (24, 32,
// 48, 64, 96, ...); a batch runs with the choice made for the smallest bucket that holds it.
int64_t TuneBucket(int64_t rows);

// What the tuner needs of the instance whose GEMMs it tunes. GEMMs are named by their step index.
class GemmBench {
 public:
  virtual ~GemmBench() = default;
  // Buffers for 'rows' rows, filled with a small non-zero pattern (never time on zeros).
  virtual backend::Status PrepareTuning(int64_t rows) = 0;
  virtual kernels::cuda::GemmProblem Problem(size_t step, int64_t rows) const = 0;
  // Milliseconds of 20 runs of GEMM 'step' at 'rows' on 'choice', timed as serving runs them.
  virtual backend::StatusOr<float> Time(size_t step, int64_t rows, const GemmChoice& choice) = 0;
};

class GemmTuner {
 public:
  // 'gemm_steps': the step indices of the graph's GEMMs (of 'step_count' steps in all).
  GemmTuner(size_t step_count, std::vector<size_t> gemm_steps)
      : choices_(step_count), ranked_(step_count), gemm_steps_(std::move(gemm_steps)) {}

  // Nereid's kernels timed again when a count is tuned from another's ranking.
  static constexpr size_t kShortlist = 3;

  bool Tuned(int64_t bucket) const { return tuned_.count(bucket) > 0; }
  // Times every candidate of every GEMM at 'rows' (a TuneBucket) against cuBLAS and keeps the
  // fastest; cuBLAS stays wherever Nereid's kernels do not win by 5%. With 'narrow_from' (a tuned
  // TuneBucket above 'rows'): only cuBLAS and the kShortlist fastest of Nereid's kernels there are
  // timed, at exactly 'rows' (a plan that runs few, known counts: which tile fills the SMs best
  // turns on the count).
  backend::Status Tune(GemmBench& bench, int64_t rows, int64_t narrow_from = 0);
  // The choice for GEMM 'step' at 'rows': the one made at the smallest count tuned that holds it,
  // at most its TuneBucket (null: cuBLAS, nothing tuned there).
  const GemmChoice* Choice(size_t step, int64_t rows) const;
  // For the load log: per GEMM, the implementation per range of tuned row counts.
  std::string Describe() const;

 private:
  std::vector<std::map<int64_t, GemmChoice>> choices_;  // per step, by tuned row count
  // Per step, by TuneBucket: Nereid's kernels from fastest to slowest.
  std::vector<std::map<int64_t, std::vector<GemmChoice>>> ranked_;
  std::vector<size_t> gemm_steps_;
  std::set<int64_t> tuned_;  // the row counts Tune() has run for
};

}  // namespace nereid::native
