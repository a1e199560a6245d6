// The GPU's reduction family: ReduceSum, ReduceMean and ReduceMax of a value over axes after the
// rows that lie side by side (a sentence embedding's pooling over the tokens, a layer norm written
// out), as one pass over [rows x outer, reduced, inner].
#include <algorithm>

#include "gpu_model.h"

namespace nereid::native {
namespace {

Status Reduce(const GpuNode& n) {
  const OpNode& op = n.node.op;
  const std::string& type = op.op_type();
  ASSIGN_OR_RETURN(const ValueSpec x, n.Input(0));
  if (x.logical != DataType::kFp32) return Unsupported(n.who + ": FP32 only on the GPU");
  // Axes: an input from opset 13 (ReduceSum) and 18 (the others), an attribute before.
  const bool axes_input = op.opset() >= (type == "ReduceSum" ? 13 : 18);
  std::vector<int64_t> axes = op.AttrInts("axes");
  if (axes_input && n.in(1) >= 0) {
    auto v = IntsOf(n.graph, n.m, op, n.in(1));
    if (!v) return Unsupported(n.who + ": the GPU engine reduces over constant axes");
    axes = *v;
  }
  const int64_t rank = static_cast<int64_t>(x.dims.size()) + 1;
  if (axes.empty())
    return Unsupported(n.who + ": a reduction over every axis, the batch's too, is not on the GPU");
  std::vector<bool> marked(rank, false);
  for (int64_t a : axes) {
    if (a < 0) a += rank;
    if (a < 0 || a >= rank || marked[a]) return op.Error("axes out of range or repeated");
    if (a == 0) return Unsupported(n.who + ": a reduction over the batch axis");
    marked[a] = true;
  }
  const auto first = std::find(marked.begin(), marked.end(), true) - marked.begin();
  const auto last = marked.rend() - std::find(marked.rbegin(), marked.rend(), true) - 1;
  for (int64_t d = first; d <= last; ++d)
    if (!marked[d])
      return Unsupported(n.who + ": the GPU engine reduces over axes that lie side by side");
  // Per row: outer x reduced x inner elements (dims d - 1: the per-row dims).
  Step s;
  s.kind = Step::kReduce;
  s.pool = type == "ReduceSum"   ? kc::PoolKind::kSum
           : type == "ReduceMax" ? kc::PoolKind::kMax
                                 : kc::PoolKind::kAverage;
  s.outer = ElementCount(x.dims.data(), first - 1);
  s.m = ElementCount(x.dims.data() + first - 1, last - first + 1);
  s.k = ElementCount(x.dims.data() + last, x.dims.size() - last);
  if (s.m == 0) return Unsupported(n.who + ": a reduction over an empty axis");
  s.in = n.m.Resolve(InLayout(n.m, n.in(0), false));
  const bool keep = op.AttrInt("keepdims", 1) != 0;
  ValueSpec y = x;
  y.nhwc = false;
  y.dims.clear();
  for (int64_t d = 1; d < rank; ++d)
    if (!marked[d])
      y.dims.push_back(x.dims[d - 1]);
    else if (keep)
      y.dims.push_back(1);
  y.row_elems = s.outer * s.k;
  return AddElementwise(n.m, s, y, n.out());
}

}  // namespace

std::vector<GpuOpDef> GpuReduceOps() {
  return {{"ReduceSum", Reduce}, {"ReduceMean", Reduce}, {"ReduceMax", Reduce}};
}

}  // namespace nereid::native
