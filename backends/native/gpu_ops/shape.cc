// The GPU's shape family: Flatten and Reshape (the same buffer read with other dims), Transpose,
// Slice, Squeeze and Unsqueeze as views of a buffer (one strided copy, or none where the view
// reads it whole), Concat (strided copies), and the shape arithmetic worked out at compile time
// (Shape and what slices, gathers and joins its result) for a Reshape to read.
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

// ---- views: Transpose, Slice, Squeeze, Unsqueeze ----

using View = GpuModel::View;

}  // namespace

// Value 'id' as a view: its own (a Transpose moved its batch), or its NCHW buffer whole; where
// that buffer is a strided copy's output, the copy's source read through composed strides (so
// the copy need not run when nothing else reads it).
View ViewOf(GpuModel& m, int id) {
  if (auto it = m.views.find(id); it != m.views.end()) return it->second;
  View v;
  v.source = m.Resolve(InLayout(m, id, false));
  const ValueSpec& x = m.values[id];  // its own dims (an alias's, not its buffer's)
  v.dims = {1};
  v.dims.insert(v.dims.end(), x.dims.begin(), x.dims.end());
  v.strides.assign(v.dims.size(), 1);
  for (size_t d = v.dims.size() - 1; d-- > 0;) v.strides[d] = v.strides[d + 1] * v.dims[d + 1];
  for (auto copy = m.strided_copies.find(v.source); copy != m.strided_copies.end();
       copy = m.strided_copies.find(v.source))
    if (!ComposeViews(v, copy->second, &v)) break;
  return v;
}

namespace {

// The view as value 'out': with the batch first, the source itself under other dims when the view
// reads it whole and in order, else one strided copy; with the batch elsewhere, left a view.
Status Emit(GpuModel& m, View v, int out, const std::string& who) {
  if (v.batch_axis != 0) {
    m.views[out] = std::move(v);
    return Status::Ok();
  }
  if (v.dims.size() > static_cast<size_t>(kc::kMaxTransposeRank))
    return Unsupported(who + ": more than " + std::to_string(kc::kMaxTransposeRank) +
                       " dimensions on the GPU");
  const ValueSpec& source = m.values[v.source];
  ValueSpec y = source;
  y.alias = -1;
  y.nhwc = false;
  y.dims.assign(v.dims.begin() + 1, v.dims.end());
  y.row_elems = ElementCount(y.dims.data(), y.dims.size());
  bool whole = v.offset == 0 && y.row_elems == source.row_elems;
  int64_t step = 1;
  for (size_t d = v.dims.size(); d-- > 1;) {
    whole = whole && (v.dims[d] == 1 || v.strides[d] == step);
    step *= v.dims[d];
  }
  if (whole) {
    y.alias = v.source;
    m.values[out] = y;
    return Status::Ok();
  }
  Step s;
  s.kind = Step::kStridedCopy;
  s.in = v.source;
  s.dims = v.dims;
  s.strides = v.strides;
  s.offset = v.offset;
  m.strided_copies[out] = std::move(v);
  return AddElementwise(m, s, y, out);
}

// Transpose (any permutation: one moving the batch leaves a view for Slice and Squeeze to bring it
// back first).
Status Transpose(const GpuNode& n) {
  // A fused attention's context [heads, tokens, d] per row, transposed back to [tokens, heads, d]
  // and read by nothing else: the attention writes it so itself.
  if (auto it = n.m.attention_steps.find(n.in(0));
      it != n.m.attention_steps.end() && n.m.readers[n.in(0)] == 1 &&
      n.node.op.AttrInts("perm") == std::vector<int64_t>{0, 2, 1, 3}) {
    Step& s = n.m.steps[it->second];
    ValueSpec y = n.m.values[n.in(0)];
    const int64_t heads = y.dims[0], tokens = y.dims[1], d = y.dims[2];
    y.dims = {tokens, heads, d};
    s.attention.out_row = tokens * heads * d, s.attention.out_head = d;
    s.attention.out_token = heads * d;
    s.out = n.out();
    n.m.values[n.out()] = y;
    n.m.values[n.in(0)] = ValueSpec{};  // no longer written
    n.m.attention_steps.erase(it);
    return Status::Ok();
  }
  if (!n.m.views.count(n.in(0))) RETURN_IF_ERROR(n.Input(0).status());
  View x = ViewOf(n.m, n.in(0));
  const size_t rank = x.dims.size();
  std::vector<int64_t> perm = n.node.op.AttrInts("perm");
  if (perm.empty())
    for (size_t d = rank; d-- > 0;) perm.push_back(static_cast<int64_t>(d));
  if (perm.size() != rank) return n.node.op.Error("perm does not fit the input");
  std::vector<bool> seen(rank, false);
  View y = x;
  for (size_t d = 0; d < rank; ++d) {
    const int64_t p = perm[d];
    if (p < 0 || p >= static_cast<int64_t>(rank) || seen[p])
      return n.node.op.Error("perm is not a permutation");
    seen[p] = true;
    y.dims[d] = x.dims[p], y.strides[d] = x.strides[p];
    if (static_cast<size_t>(p) == x.batch_axis) y.batch_axis = d;
  }
  return Emit(n.m, std::move(y), n.out(), n.who);
}

// Slice with constant starts, ends, axes and positive steps, never along the batch.
Status Slice(const GpuNode& n) {
  const OpNode& op = n.node.op;
  if (!n.m.views.count(n.in(0))) RETURN_IF_ERROR(n.Input(0).status());
  if (op.opset() < 10) return Unsupported(n.who + ": Slice before opset 10 on the GPU");
  std::vector<int64_t> arg[4];  // starts, ends, axes, steps
  for (size_t k = 1; k < 5; ++k) {
    if (n.in(k) < 0) continue;
    auto v = IntsOf(n.graph, n.m, op, n.in(k));
    if (!v) return Unsupported(n.who + ": the GPU engine slices by constant starts and ends");
    arg[k - 1] = *v;
  }
  View y = ViewOf(n.m, n.in(0));
  const int64_t rank = static_cast<int64_t>(y.dims.size());
  if (arg[2].empty())
    for (int64_t d = 0; d < static_cast<int64_t>(arg[0].size()); ++d) arg[2].push_back(d);
  if (arg[3].empty()) arg[3].assign(arg[0].size(), 1);
  if (arg[1].size() != arg[0].size() || arg[2].size() != arg[0].size() ||
      arg[3].size() != arg[0].size())
    return op.Error("starts, ends, axes and steps differ in length");
  std::vector<bool> seen(rank, false);
  for (size_t i = 0; i < arg[0].size(); ++i) {
    int64_t axis = arg[2][i];
    if (axis < 0) axis += rank;
    if (axis < 0 || axis >= rank || seen[axis]) return op.Error("axes out of range or repeated");
    seen[axis] = true;
    if (static_cast<size_t>(axis) == y.batch_axis)
      return Unsupported(n.who + ": a slice along the batch axis");
    const int64_t step = arg[3][i];
    if (step < 1) return Unsupported(n.who + ": a slice of step " + std::to_string(step));
    const int64_t dim = y.dims[axis];
    auto clamp = [&](int64_t v) { return std::clamp<int64_t>(v < 0 ? v + dim : v, 0, dim); };
    const int64_t start = clamp(arg[0][i]), end = clamp(arg[1][i]);
    y.offset += start * y.strides[axis];
    y.dims[axis] = end > start ? (end - start + step - 1) / step : 0;
    y.strides[axis] *= step;
    if (y.dims[axis] == 0) return Unsupported(n.who + ": an empty slice on the GPU");
  }
  return Emit(n.m, std::move(y), n.out(), n.who);
}

// Squeeze and Unsqueeze: axes (an attribute before opset 13, a constant input from it) removed
// (each of size 1; all such but the batch when none is given) or inserted.
Status SqueezeOrUnsqueeze(const GpuNode& n) {
  const OpNode& op = n.node.op;
  const bool squeeze = op.op_type() == "Squeeze";
  if (!n.m.views.count(n.in(0))) RETURN_IF_ERROR(n.Input(0).status());
  std::vector<int64_t> axes = op.AttrInts("axes");
  if (op.opset() >= 13 && n.in(1) >= 0) {
    auto v = IntsOf(n.graph, n.m, op, n.in(1));
    if (!v) return Unsupported(n.who + ": the GPU engine takes constant axes");
    axes = *v;
  }
  View x = ViewOf(n.m, n.in(0));
  const int64_t rank = static_cast<int64_t>(x.dims.size()) + (squeeze ? 0 : axes.size());
  std::vector<bool> marked(rank, false);
  for (int64_t a : axes) {
    if (a < 0) a += rank;
    if (a < 0 || a >= rank || marked[a]) return op.Error("axes out of range or repeated");
    marked[a] = true;
  }
  if (squeeze && axes.empty())
    for (size_t d = 0; d < x.dims.size(); ++d) marked[d] = x.dims[d] == 1 && d != x.batch_axis;
  View y = x;
  y.dims.clear(), y.strides.clear();
  for (size_t d = 0, from = 0; d < static_cast<size_t>(rank); ++d) {
    if (!squeeze && marked[d]) {  // a new axis of size 1
      y.dims.push_back(1), y.strides.push_back(0);
      continue;
    }
    if (from == x.batch_axis) y.batch_axis = y.dims.size();
    if (squeeze && marked[d]) {
      if (d == x.batch_axis) return Unsupported(n.who + ": squeezes the batch axis");
      if (x.dims[d] != 1)
        return op.Error("axis " + std::to_string(d) + " has size " + std::to_string(x.dims[d]));
      ++from;
      continue;
    }
    y.dims.push_back(x.dims[from]), y.strides.push_back(x.strides[from]);
    ++from;
  }
  return Emit(n.m, std::move(y), n.out(), n.who);
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

Status Concat(const GpuNode& n) { return CompileConcat(n.graph, n.node, n.m, n.who); }

// Gather of a constant table's rows by indices straight from a model input (an embedding lookup:
// each request's indices checked against the table on the host before it runs), or of a value
// along an axis after the rows by one constant index (a sequence's first token), as a view.
Status Gather(const GpuNode& n) {
  const OpNode& op = n.node.op;
  const Tensor& table = n.Constant(0);
  if (!table.valid()) {
    if (!n.m.views.count(n.in(0))) RETURN_IF_ERROR(n.Input(0).status());
    View y = ViewOf(n.m, n.in(0));
    const int64_t rank = static_cast<int64_t>(y.dims.size());
    int64_t axis = op.AttrInt("axis", 0);
    if (axis < 0) axis += rank;
    const auto index = IntsOf(n.graph, n.m, op, n.in(1));
    if (axis < 0 || axis >= rank) return op.Error("axis out of range");
    if (static_cast<size_t>(axis) == y.batch_axis)
      return Unsupported(n.who + ": a gather along the batch axis");
    if (!index || index->size() != 1)
      return Unsupported(n.who + ": the GPU engine gathers a value by one constant index");
    const int64_t dim = y.dims[axis];
    int64_t i = (*index)[0];
    if (i < -dim || i >= dim)
      return op.Error("index " + std::to_string(i) + " is out of range for a dimension of " +
                      std::to_string(dim));
    if (i < 0) i += dim;
    y.offset += i * y.strides[axis];
    if (n.Constant(1).shape().empty()) {  // a scalar index drops the axis
      y.dims.erase(y.dims.begin() + axis), y.strides.erase(y.strides.begin() + axis);
      if (y.batch_axis > static_cast<size_t>(axis)) --y.batch_axis;
    } else {
      y.dims[axis] = 1;
    }
    return Emit(n.m, std::move(y), n.out(), n.who);
  }
  if (op.AttrInt("axis", 0) != 0)
    return Unsupported(n.who + ": the GPU engine gathers a table's rows (axis 0) only");
  if (table.type() != DataType::kFp32 || table.shape().empty())
    return Unsupported(n.who + ": the GPU engine gathers rows of an FP32 table");
  ASSIGN_OR_RETURN(const ValueSpec idx, n.Input(1));
  IoSpec* io = nullptr;
  for (IoSpec& input : n.m.inputs)
    if (input.value == n.in(1)) io = &input;
  if (io == nullptr || (idx.logical != DataType::kInt64 && idx.logical != DataType::kInt32))
    return Unsupported(n.who +
                       ": the GPU engine gathers a table's rows by INT64 or INT32 indices that "
                       "come straight from a model input (checked against the table before "
                       "each run)");
  const int64_t table_rows = table.shape()[0];
  const int64_t width = table.elements() / std::max<int64_t>(table_rows, 1);
  if (table_rows < 1 || width < 1) return Unsupported(n.who + ": an empty table");
  io->index_limit = io->index_limit > 0 ? std::min(io->index_limit, table_rows) : table_rows;
  Step s;
  s.kind = Step::kGather;
  s.in = n.m.Resolve(n.in(1));
  ASSIGN_OR_RETURN(s.w, n.m.UploadFloats(FloatsOf(table), n.m.float_type));
  s.n = table_rows, s.k = width;
  ValueSpec y{true, n.m.float_type, DataType::kFp32, idx.dims, 0, -1};
  y.dims.insert(y.dims.end(), table.shape().begin() + 1, table.shape().end());
  y.row_elems = idx.row_elems * width;
  return AddElementwise(n.m, s, y, n.out());
}

// Expand of a value to a shape that keeps its rows: its axes of size 1 read with stride 0.
Status Expand(const GpuNode& n) {
  const OpNode& op = n.node.op;
  if (!n.m.views.count(n.in(0))) RETURN_IF_ERROR(n.Input(0).status());
  auto shape = IntsOf(n.graph, n.m, op, n.in(1));
  if (!shape) return Unsupported(n.who + ": the GPU engine expands to a shape known at load");
  View x = ViewOf(n.m, n.in(0));
  if (x.batch_axis != 0 || shape->size() != x.dims.size())
    return Unsupported(n.who + ": the GPU engine expands a value of the shape's rank, rows first");
  View y = x;
  for (size_t d = 0; d < x.dims.size(); ++d) {
    const int64_t want = (*shape)[d];
    if (d == 0) {
      if (want != kRowsDim && want != 1 && !(n.m.fixed_rows > 0 && want == n.m.fixed_rows))
        return Unsupported(n.who + ": an expand of the rows to " + std::to_string(want));
      continue;
    }
    if (want == x.dims[d] || want == 1) continue;
    if (x.dims[d] != 1 || want < 1)
      return op.Error("cannot expand " + ShapeString(x.dims) + " to " + ShapeString(*shape));
    y.dims[d] = want, y.strides[d] = 0;
  }
  return Emit(n.m, std::move(y), n.out(), n.who);
}

// Cast of a value: integers to FLOAT (an attention mask) by a conversion, a type to itself by
// sharing the buffer.
Status Cast(const GpuNode& n) {
  ASSIGN_OR_RETURN(const ValueSpec x, n.Input(0));
  const int64_t to = n.node.op.AttrInt("to", 0);
  const DataType target = to == 1   ? DataType::kFp32
                          : to == 7 ? DataType::kInt64
                          : to == 6 ? DataType::kInt32
                                    : DataType::kInvalid;
  if (target == x.logical) {
    ValueSpec alias = x;
    alias.alias = n.m.Resolve(n.in(0));
    n.m.values[n.out()] = alias;
    return Status::Ok();
  }
  if (target != DataType::kFp32 || (x.logical != DataType::kInt64 && x.logical != DataType::kInt32))
    return Unsupported(n.who + ": the GPU engine casts INT64 and INT32 to FLOAT only");
  Step s;
  s.kind = Step::kConvert;
  s.in = n.m.Resolve(InLayout(n.m, n.in(0), false));
  ValueSpec y = x;
  y.type = n.m.float_type, y.logical = DataType::kFp32, y.nhwc = false;
  return AddElementwise(n.m, s, y, n.out());
}

// Nodes over shape vectors that hold the batch (kRowsDim) or shaped by one, worked out at
// compile time where the batch cannot change the answer: Reshape of a shape to 1-D, Equal (the
// batch is never below 1), Where between shapes, ConstantOfShape and Expand of a constant to a
// shape with the batch first (a tensor the same in every row: row_broadcast).
StatusOr<bool> CompileSymbolicShapeOp(const GpuNode& n) {
  GpuModel& m = n.m;
  const OpNode& op = n.node.op;
  const std::string& type = op.op_type();
  auto rows_in = [&](int id) {
    auto it = m.shape_values.find(id);
    return it != m.shape_values.end() &&
           std::count(it->second.begin(), it->second.end(), kRowsDim) > 0;
  };
  bool any = false;
  for (int id : n.node.inputs) any = any || rows_in(id);
  if (!any || n.node.outputs.size() != 1 || n.out() < 0) return false;
  auto ints = [&](size_t k) { return IntsOf(n.graph, m, op, n.in(k)); };
  // Elementwise over 1-D vectors of equal length or one of length 1.
  auto pair = [&](const std::vector<int64_t>& a, const std::vector<int64_t>& b,
                  std::vector<std::pair<int64_t, int64_t>>* out) -> Status {
    if (a.size() != b.size() && a.size() != 1 && b.size() != 1)
      return op.Error("shapes of " + std::to_string(a.size()) + " and " + std::to_string(b.size()) +
                      " elements do not broadcast");
    for (size_t i = 0; i < std::max(a.size(), b.size()); ++i)
      out->emplace_back(a[a.size() == 1 ? 0 : i], b[b.size() == 1 ? 0 : i]);
    return Status::Ok();
  };
  if (type == "Shape") {  // of a shape vector: its length (a scalar's: nothing)
    std::vector<int64_t> shape;
    if (!m.scalar_shapes.count(n.in(0)))
      shape.push_back(static_cast<int64_t>(m.shape_values[n.in(0)].size()));
    m.shape_values[n.out()] = ShapeOpResult(op, shape);
    return true;
  }
  if (type == "Reshape" && m.shape_values.count(n.in(0))) {
    const auto data = ints(0), shape = ints(1);
    if (!data || !shape || shape->size() != 1 ||
        ((*shape)[0] != -1 && (*shape)[0] != static_cast<int64_t>(data->size())))
      return Unsupported(n.who + ": reshapes a shape holding the batch to other than 1-D");
    m.shape_values[n.out()] = *data;
    return true;
  }
  if (type == "Equal") {
    const auto a = ints(0), b = ints(1);
    if (!a || !b) return false;
    std::vector<std::pair<int64_t, int64_t>> p;
    RETURN_IF_ERROR(pair(*a, *b, &p));
    Tensor y = Tensor::Allocate(DataType::kBool, {static_cast<int64_t>(p.size())});
    for (size_t i = 0; i < p.size(); ++i) {
      const auto [x, z] = p[i];
      const bool x_rows = x == kRowsDim, z_rows = z == kRowsDim;
      if (x_rows != z_rows && (x_rows ? z : x) >= 1)
        return Unsupported(n.who + ": compares the batch size with " +
                           std::to_string(x_rows ? z : x) + ", unknown until a request comes");
      y.mutable_data<bool>()[i] = x == z;
    }
    m.host_constants[n.out()] = std::move(y);
    return true;
  }
  if (type == "Where") {
    const Tensor& cond = n.Constant(0);
    const auto a = ints(1), b = ints(2);
    if (!cond.valid() || cond.type() != DataType::kBool || cond.shape().size() > 1 || !a || !b)
      return Unsupported(n.who + ": picks between shapes by a condition unknown at load");
    std::vector<std::pair<int64_t, int64_t>> p;
    RETURN_IF_ERROR(pair(*a, *b, &p));
    const int64_t nc = cond.elements();
    if (nc != 1 && nc != static_cast<int64_t>(p.size()))
      return op.Error("a condition of " + std::to_string(nc) + " elements");
    std::vector<int64_t> y;
    for (size_t i = 0; i < p.size(); ++i)
      y.push_back(cond.data<bool>()[nc == 1 ? 0 : i] ? p[i].first : p[i].second);
    m.shape_values[n.out()] = y;
    return true;
  }
  // ConstantOfShape and Expand of a constant: the CPU's op with the batch as 1.
  const bool fill = type == "ConstantOfShape";
  if (!fill && !(type == "Expand" && n.Constant(0).valid())) return false;
  const auto shape = ints(fill ? 0 : 1);
  if (!shape || shape->empty() || (*shape)[0] != kRowsDim ||
      std::count(shape->begin(), shape->end(), kRowsDim) != 1)
    return Unsupported(n.who + ": the batch must come first in the shape");
  if (!fill && n.Constant(0).shape().size() == shape->size() && n.Constant(0).shape()[0] != 1)
    return op.Error("cannot expand a constant of " + std::to_string(n.Constant(0).shape()[0]) +
                    " along the batch");
  if (!fill && n.Constant(0).shape().size() > shape->size())
    return Unsupported(n.who + ": expands a constant of higher rank than its shape");
  Tensor one_row = Tensor::Allocate(DataType::kInt64, {static_cast<int64_t>(shape->size())});
  std::copy(shape->begin(), shape->end(), one_row.mutable_data<int64_t>());
  one_row.mutable_data<int64_t>()[0] = 1;
  std::vector<const Tensor*> in = {fill ? &one_row : &n.Constant(0)};
  if (!fill) in.push_back(&one_row);
  std::vector<Tensor> out(1);
  RETURN_IF_ERROR(n.node.fn(op, in, out));
  m.host_constants[n.out()] = std::move(out[0]);
  m.row_broadcast.insert(n.out());
  return true;
}

}  // namespace

StatusOr<bool> CompileShapeOp(const GpuNode& g) {
  const Graph& graph = g.graph;
  const Graph::Node& node = g.node;
  GpuModel& m = g.m;
  const std::string& who = g.who;
  const std::string& op = node.op.op_type();
  if (node.outputs.size() != 1 || node.outputs[0] < 0 || node.inputs.empty()) return false;
  ASSIGN_OR_RETURN(const bool symbolic, CompileSymbolicShapeOp(g));
  if (symbolic) return true;
  const int out = node.outputs[0];
  if (op == "Shape") {
    const int id = node.inputs[0];
    if (id < 0 || !m.values[id].defined) return false;
    std::vector<int64_t> shape = {m.fixed_rows > 0 ? m.fixed_rows : kRowsDim};
    shape.insert(shape.end(), m.values[id].dims.begin(), m.values[id].dims.end());
    m.shape_values[out] = ShapeOpResult(node.op, shape);
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
    if (g.Constant(1).valid() && g.Constant(1).shape().empty()) m.scalar_shapes.insert(out);
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
  return {{"Flatten", Reshape},
          {"Reshape", Reshape},
          {"Transpose", Transpose},
          {"Slice", Slice},
          {"Squeeze", SqueezeOrUnsqueeze},
          {"Unsqueeze", SqueezeOrUnsqueeze},
          {"Concat", Concat},
          {"Gather", Gather},
          {"Expand", Expand},
          {"Cast", Cast}};
}

}  // namespace nereid::native
