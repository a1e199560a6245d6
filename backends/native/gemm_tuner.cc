#include "gemm_tuner.h"

#include <algorithm>
#include <iterator>
#include <map>
#include <tuple>

#include "cuda/conv.h"
#include "cuda/gemm_int8.h"

namespace nereid::native {

namespace kc = kernels::cuda;

std::string GemmChoice::Name() const {
  switch (impl) {
    case Impl::kSmallM:
      return kc::SmallMVariantName(variant);
    case Impl::kSm90:
      return sm90.Name();
    case Impl::kSmallMInt8:
      return "int8-small-m";
    case Impl::kConv:
      return "conv-tensor-core";
    default:
      return "cuBLAS";
  }
}

int64_t TuneBucket(int64_t rows) {
  int64_t b = 16;
  if (rows <= b) return rows < 1 ? 1 : rows;
  while (b < rows) b = (b & (b - 1)) == 0 ? b + b / 2 : b / 3 * 4;
  return b;
}

backend::Status GemmTuner::Tune(GemmBench& bench, int64_t rows, int64_t narrow_from) {
  RETURN_IF_ERROR(bench.PrepareTuning(rows));
  // GEMMs of one shape, types and epilogue (a layer repeated, a weight shared) are timed once.
  // The epilogue is part of the key: a residual read can change the winner (ResNet-50's 64 -> 256
  // expansions at batch 256 on an H100: 128 x 256 tiles 450 us without one, 833 with; 128 x 128
  // 555 and 686), and the first of a stage's expansions, the projection, has none.
  std::map<std::tuple<int64_t, int64_t, int64_t, int, int, bool, int, bool, bool, bool>, size_t>
      by_shape;  // -> step
  for (size_t step : gemm_steps_) {
    const kc::GemmProblem p = bench.Problem(step, rows);
    const auto shape = std::make_tuple(
        p.m, p.n, p.k, static_cast<int>(p.ab_type), static_cast<int>(p.out_type), p.tf32,
        static_cast<int>(p.act), p.bias != nullptr, p.residual != nullptr, p.residual_first);
    if (auto seen = by_shape.find(shape); seen != by_shape.end()) {
      choices_[step][rows] = choices_[seen->second][rows];
      if (narrow_from == 0) ranked_[step][rows] = ranked_[seen->second][rows];
      continue;
    }
    std::vector<GemmChoice> candidates;
    if (narrow_from > 0) {  // the few fastest of Nereid's kernels at 'narrow_from'
      const auto ranked = ranked_[step].find(narrow_from);
      if (ranked != ranked_[step].end())
        candidates.assign(ranked->second.begin(),
                          ranked->second.begin() + static_cast<std::ptrdiff_t>(std::min(
                                                       ranked->second.size(), kShortlist)));
    } else {
      for (auto variant : kc::kSmallMVariants)
        if (kc::SmallMSupported(p, variant))
          candidates.push_back({GemmChoice::Impl::kSmallM, variant, {}});
      if (kc::SmallMInt8Supported(p)) candidates.push_back({GemmChoice::Impl::kSmallMInt8, {}, {}});
      if (kc::GemmAsConvSupported(p)) candidates.push_back({GemmChoice::Impl::kConv, {}, {}});
      for (const auto& config : kc::kSm90Configs)
        if (kc::Sm90Supported(p, config))
          candidates.push_back({GemmChoice::Impl::kSm90, {}, config});
    }
    // Int8 has no cuBLAS: the first of Nereid's kernels is the one to beat.
    const bool int8 = p.ab_type == kc::ElemType::kI8;
    if (int8 && candidates.empty())
      return backend::Unsupported("no int8 kernel runs a GEMM of " + std::to_string(rows) + " x " +
                                  std::to_string(p.n) + " x " + std::to_string(p.k) +
                                  " on this GPU");
    GemmChoice chosen = int8 ? candidates.front() : GemmChoice{};  // else cuBLAS
    std::vector<std::pair<float, size_t>> times;                   // Nereid's kernels, timed
    if (!candidates.empty()) {  // else cuBLAS alone: nothing to time it against
      ASSIGN_OR_RETURN(float best, bench.Time(step, rows, chosen));
      if (int8) times.emplace_back(best, 0);
      for (size_t i = int8 ? 1 : 0; i < candidates.size(); ++i) {
        ASSIGN_OR_RETURN(float t, bench.Time(step, rows, candidates[i]));
        times.emplace_back(t, i);
        // Against cuBLAS our kernel must win clearly (5%): a tie stays with cuBLAS.
        if (t < best * (int8 ? 1.f : 0.95f)) best = t, chosen = candidates[i];
      }
    }
    choices_[step][rows] = chosen;
    if (narrow_from == 0) {
      std::stable_sort(times.begin(), times.end(),
                       [](const auto& a, const auto& b) { return a.first < b.first; });
      std::vector<GemmChoice>& ranked = ranked_[step][rows];
      ranked.clear();
      for (const auto& [t, i] : times) ranked.push_back(candidates[i]);
    }
    by_shape.emplace(shape, step);
  }
  tuned_.insert(rows);
  return backend::Status::Ok();
}

const GemmChoice* GemmTuner::Choice(size_t step, int64_t rows) const {
  if (step >= choices_.size()) return nullptr;
  // The smallest count tuned that holds 'rows': the exact count where a plan tuned it, else its
  // TuneBucket.
  auto it = choices_[step].lower_bound(rows);
  return it == choices_[step].end() || it->first > TuneBucket(rows) ? nullptr : &it->second;
}

std::string GemmTuner::Describe() const {
  std::string out;
  int gemm = 0;
  for (size_t step : gemm_steps_) {
    std::string ranges;
    const auto& by_rows = choices_[step];
    for (auto it = by_rows.begin(); it != by_rows.end();) {
      auto last = it;
      const int64_t first_rows = it == by_rows.begin() ? 1 : std::prev(it)->first + 1;
      while (std::next(last) != by_rows.end() && std::next(last)->second == it->second) ++last;
      ranges += (ranges.empty() ? "" : ", ") + std::string("rows ") + std::to_string(first_rows) +
                "-" + std::to_string(last->first) + " " + it->second.Name();
      it = std::next(last);
    }
    out +=
        (out.empty() ? "" : "; ") + std::string("GEMM ") + std::to_string(gemm++) + ": " + ranges;
  }
  return out;
}

}  // namespace nereid::native
