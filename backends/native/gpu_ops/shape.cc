// The GPU's shape family: Flatten and Reshape (the same buffer read with other dims), Transpose
// keeping the batch first, Concat (strided copies), and the shape arithmetic worked out at compile
// time (Shape and what slices, gathers and joins its result) for a Reshape to read.
#include <algorithm>

#include "gpu_model.h"

namespace nereid::native {
namespace {

// Flatten (axis 1) and Reshape to a shape known at load that keeps the rows: the same buffer read
// in NCHW order with other per-row dims.
Status CompileReshape(const Graph& graph, const Graph::Node& node, const ValueSpec& x, GpuModel& m,
                      const std::string& who) {
  const OpNode& op = node.op;
  std::vector<int64_t> dims;
  if (op.op_type() == "Flatten") {
    if (op.AttrInt("axis", 1) != 1)
      return Unsupported(who + ": the GPU engine flattens from axis 1 only");
    dims = {x.row_elems};
  } else {
    std::optional<std::vector<int64_t>> shape =
        node.inputs.size() > 1 ? IntsOf(graph, m, node.op, node.inputs[1]) : std::nullopt;
    if (!shape || shape->empty())
      return Unsupported(who + ": the GPU engine reshapes to a shape known at load");
    std::vector<int64_t>& v = *shape;
    // The rows: from a Shape of a value, or the one row count a model without batching takes.
    if (v[0] == kRowsDim || (m.fixed_rows > 0 && v[0] == m.fixed_rows)) v[0] = 0;
    const bool allow_zero = op.AttrInt("allowzero", 0) != 0;
    if (allow_zero || (v[0] != 0 && v[0] != -1) || std::count(v.begin(), v.end(), kRowsDim) > 0)
      return Unsupported(who + ": the new shape must keep the rows (0 or -1 first) on the GPU");
    int64_t known = 1, infer_at = -1;
    for (size_t i = 1; i < v.size(); ++i) {
      int64_t d = v[i];
      if (d == 0 && i <= x.dims.size()) d = x.dims[i - 1];
      if (d == -1 && v[0] == 0 && infer_at < 0) {
        infer_at = static_cast<int64_t>(dims.size());
        dims.push_back(1);
        continue;
      }
      if (d < 1) return op.Error("shape value " + std::to_string(v[i]) + " is not supported");
      if (known > x.row_elems) break;
      known *= d;
      dims.push_back(d);
    }
    if (infer_at >= 0 && known > 0 && x.row_elems % known == 0)
      dims[infer_at] = x.row_elems / known;
    if (ElementCount(dims.data(), dims.size()) != x.row_elems)
      return op.Error("cannot reshape " + ShapeString(x.dims) + " per row to shape " +
                      ShapeString(v));
  }
  const int source = InLayout(m, node.inputs[0], false);
  ValueSpec alias = m.values[source];
  alias.alias = source;
  alias.dims = dims;
  alias.nhwc = false;
  m.values[node.outputs[0]] = alias;
  return Status::Ok();
}

// Transpose keeping the batch axis first, NCHW.
Status CompileTranspose(const Graph::Node& node, GpuModel& m, const std::string& who) {
  ValueSpec x = m.values[node.inputs[0]];
  const int rank = static_cast<int>(x.dims.size()) + 1;
  if (rank > kc::kMaxTransposeRank)
    return Unsupported(who + ": more than " + std::to_string(kc::kMaxTransposeRank) +
                       " dimensions on the GPU");
  std::vector<int64_t> perm = node.op.AttrInts("perm");
  if (perm.empty())
    for (int d = rank - 1; d >= 0; --d) perm.push_back(d);
  if (static_cast<int>(perm.size()) != rank) return node.op.Error("perm does not fit the input");
  std::vector<bool> seen(rank, false);
  Step s;
  for (int64_t p : perm) {
    if (p < 0 || p >= rank || seen[p]) return node.op.Error("perm is not a permutation");
    seen[p] = true;
    s.perm.push_back(static_cast<int>(p));
  }
  if (perm[0] != 0) return Unsupported(who + ": a transpose that moves the batch axis");
  s.kind = Step::kTranspose;
  s.in = InLayout(m, node.inputs[0], false);
  s.dims = {1};
  s.dims.insert(s.dims.end(), x.dims.begin(), x.dims.end());
  for (int d = 1; d < rank; ++d) x.dims[d - 1] = s.dims[perm[d]];
  x.nhwc = false;
  return AddElementwise(m, s, x, node.outputs[0]);
}

// Concat of values along an axis after the rows: blocks copied side by side (channels of images
// channels-last when one of them is).
Status CompileConcat(const Graph& graph, const Graph::Node& node, GpuModel& m,
                     const std::string& who) {
  std::vector<ValueSpec> in;
  for (int id : node.inputs) {
    if (id < 0 || graph.constant(id).valid() || !m.values[id].defined)
      return Unsupported(who + ": the GPU engine concatenates computed values only");
    in.push_back(m.values[id]);
  }
  if (in.empty()) return node.op.Error("no inputs");
  const int64_t rank = static_cast<int64_t>(in[0].dims.size()) + 1;
  int64_t axis = node.op.AttrInt("axis", 0);
  if (axis < 0) axis += rank;
  if (axis < 1 || axis >= rank) return Unsupported(who + ": a concat along the batch axis");
  ValueSpec y = in[0];
  y.alias = -1;
  y.dims[axis - 1] = 0;
  bool nhwc = false;
  for (const ValueSpec& v : in) {
    if (v.dims.size() != in[0].dims.size() || v.logical != in[0].logical)
      return node.op.Error("inputs of different ranks or types");
    for (int64_t d = 0; d + 1 < rank; ++d)
      if (d != axis - 1 && v.dims[d] != in[0].dims[d])
        return node.op.Error("inputs of shapes " + ShapeString(v.dims) + " and " +
                             ShapeString(in[0].dims) + " per row");
    y.dims[axis - 1] += v.dims[axis - 1];
    nhwc = nhwc || (v.nhwc && axis == 1 && IsImage(v));
  }
  y.row_elems = ElementCount(y.dims.data(), y.dims.size());
  y.nhwc = nhwc;
  Step s;
  s.kind = Step::kConcat;
  // Per row: 'outer' blocks; each input adds its inner elements to every block (channels-last:
  // the channels).
  for (size_t i = 0; i < in.size(); ++i) {
    const int id = InLayout(m, node.inputs[i], nhwc);
    const int64_t inner =
        nhwc ? in[i].dims[0]
             : ElementCount(in[i].dims.data() + axis - 1, in[i].dims.size() - (axis - 1));
    s.parts.emplace_back(m.Resolve(id), inner);
  }
  int64_t block = 0;
  for (const auto& part : s.parts) block += part.second;
  s.outer = y.row_elems / block;
  m.values[node.outputs[0]] = y;
  s.out = node.outputs[0];
  m.steps.push_back(s);
  return Status::Ok();
}

Status Reshape(const GpuNode& n) {
  ASSIGN_OR_RETURN(const ValueSpec x, n.Input(0));
  return CompileReshape(n.graph, n.node, x, n.m, n.who);
}

Status Transpose(const GpuNode& n) {
  RETURN_IF_ERROR(n.Input(0).status());
  return CompileTranspose(n.node, n.m, n.who);
}

Status Concat(const GpuNode& n) { return CompileConcat(n.graph, n.node, n.m, n.who); }

}  // namespace

StatusOr<bool> CompileShapeOp(const GpuNode& g) {
  const Graph& graph = g.graph;
  const Graph::Node& node = g.node;
  GpuModel& m = g.m;
  const std::string& who = g.who;
  const std::string& op = node.op.op_type();
  if (node.outputs.size() != 1 || node.outputs[0] < 0 || node.inputs.empty()) return false;
  const int out = node.outputs[0];
  if (op == "Shape") {
    const int id = node.inputs[0];
    if (id < 0 || !m.values[id].defined) return false;
    std::vector<int64_t> shape = {m.fixed_rows > 0 ? m.fixed_rows : kRowsDim};
    shape.insert(shape.end(), m.values[id].dims.begin(), m.values[id].dims.end());
    const int64_t rank = static_cast<int64_t>(shape.size());
    auto clamp = [&](int64_t v) { return std::clamp<int64_t>(v < 0 ? v + rank : v, 0, rank); };
    const int64_t start = clamp(node.op.AttrInt("start", 0));
    const int64_t end = clamp(node.op.AttrInt("end", rank));
    m.shape_values[out] =
        std::vector<int64_t>(shape.begin() + start, shape.begin() + std::max(start, end));
    return true;
  }
  if (!m.shape_values.count(node.inputs[0]) && op != "Concat") return false;
  std::vector<std::vector<int64_t>> in;
  for (int id : node.inputs) {
    auto v = IntsOf(graph, m, node.op, id);
    in.push_back(v ? *v : std::vector<int64_t>{});
    if (!v && id >= 0 && op != "Slice") return false;
  }
  if (op == "Concat") {
    bool any = false;
    std::vector<int64_t> joined;
    for (size_t k = 0; k < in.size(); ++k) {
      any = any || m.shape_values.count(node.inputs[k]) > 0;
      joined.insert(joined.end(), in[k].begin(), in[k].end());
    }
    if (!any) return false;
    m.shape_values[out] = joined;
    return true;
  }
  const std::vector<int64_t>& data = in[0];
  if (op == "Cast") {
    const int64_t to = node.op.AttrInt("to", 0);
    if (to != 7 && to != 6)  // ONNX's INT64 and INT32
      return Unsupported(who + ": a shape cast to another type than an integer");
    m.shape_values[out] = data;
    return true;
  }
  if (op == "Unsqueeze" || op == "Squeeze" || op == "Identity") {
    m.shape_values[out] = data;  // a shape is 1-D; squeezing a 1-element one keeps its value
    return true;
  }
  const int64_t n = static_cast<int64_t>(data.size());
  if (op == "Gather") {
    if (node.op.AttrInt("axis", 0) != 0 || in.size() < 2)
      return Unsupported(who + ": gathers from a shape along axis 0 only");
    std::vector<int64_t> picked;
    for (int64_t i : in[1]) {
      if (i < -n || i >= n) return node.op.Error("index " + std::to_string(i) + " out of range");
      picked.push_back(data[i < 0 ? i + n : i]);
    }
    m.shape_values[out] = picked;
    return true;
  }
  if (op == "Slice") {
    if (node.op.opset() < 10 || in.size() < 3 || in[1].size() != 1 || in[2].size() != 1 ||
        (in.size() > 3 && node.inputs[3] >= 0 && in[3] != std::vector<int64_t>{0} &&
         in[3] != std::vector<int64_t>{-1}) ||
        (in.size() > 4 && node.inputs[4] >= 0 && in[4] != std::vector<int64_t>{1}))
      return Unsupported(who + ": slices a shape with one constant start and end, step 1");
    auto clamp = [&](int64_t v) { return std::clamp<int64_t>(v < 0 ? v + n : v, 0, n); };
    const int64_t start = clamp(in[1][0]), end = clamp(in[2][0]);
    m.shape_values[out] =
        std::vector<int64_t>(data.begin() + start, data.begin() + std::max(start, end));
    return true;
  }
  return false;
}

std::vector<GpuOpDef> GpuShapeOps() {
  return {{"Flatten", Reshape}, {"Reshape", Reshape}, {"Transpose", Transpose}, {"Concat", Concat}};
}

}  // namespace nereid::native
