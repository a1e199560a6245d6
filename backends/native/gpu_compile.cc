// The GPU compiler: walks a Graph's nodes in order, each through its op family's compile function
// (gpu_ops/*.cc), into a GpuModel of values and steps; the shared helpers of the families.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <iterator>
#include <set>

#include "cuda/gemm.h"
#include "cuda/tensor_ops.h"
#include "gpu_model.h"
#include "nereid/half.h"

namespace nereid::native {

StatusOr<Precision> ParsePrecision(const std::string& name) {
  if (name.empty() || name == "fp32") return Precision::kFp32;
  if (name == "tf32") return Precision::kTf32;
  if (name == "bf16") return Precision::kBf16;
  if (name == "fp16") return Precision::kFp16;
  if (name == "int8") return Precision::kInt8;
  return InvalidArgument("parameter 'precision' must be fp32, tf32, bf16, fp16 or int8, got '" +
                         name + "'");
}

const char* PrecisionName(Precision p) {
  switch (p) {
    case Precision::kFp32:
      return "fp32";
    case Precision::kTf32:
      return "tf32";
    case Precision::kBf16:
      return "bf16";
    case Precision::kFp16:
      return "fp16";
    case Precision::kInt8:
      return "int8";
  }
  return "?";
}

StatusOr<kc::ElemType> StorageType(DataType t, kc::ElemType float_type, const std::string& what) {
  switch (t) {
    case DataType::kFp32:
      return float_type;
    case DataType::kInt32:
      return kc::ElemType::kI32;
    case DataType::kInt64:
      return kc::ElemType::kI64;
    default:
      return Unsupported(what + " is " + std::string(DataTypeName(t)) +
                         ": the GPU engine runs FP32, INT32 and INT64 tensors");
  }
}

std::vector<float> FloatsOf(const Tensor& t) {
  std::vector<float> v(t.elements());
  const size_t size = DataTypeSize(t.type());
  for (int64_t i = 0; i < t.elements(); ++i)
    v[i] = static_cast<float>(ElementAsDouble(t.type(), t.raw() + i * size));
  return v;
}

Status AddElementwise(GpuModel& m, Step s, const ValueSpec& like, int out) {
  ValueSpec result = like;
  result.alias = -1;
  m.values[out] = result;
  s.out = out;
  m.steps.push_back(s);
  ++m.elementwise;
  return Status::Ok();
}

bool IsImage(const ValueSpec& v) { return v.dims.size() == 3; }

int AddLayoutCopy(GpuModel& m, int source, int64_t channels, ValueSpec spec) {
  spec.alias = -1;
  const int out = m.AddValue(spec);
  Step s;
  s.kind = Step::kLayout;
  s.in = source, s.out = out, s.to_last = spec.nhwc, s.layout_c = channels;
  m.steps.push_back(s);
  return out;
}

int InLayout(GpuModel& m, int id, bool nhwc) {
  const ValueSpec v = m.values[id];  // an alias's own dims (Flatten's are not its buffer's)
  if (v.nhwc == nhwc || !IsImage(v) || v.dims[1] * v.dims[2] == 1) return id;
  id = m.Resolve(id);
  auto& copies = m.layout_copies[nhwc ? 1 : 0];
  if (auto it = copies.find(id); it != copies.end()) return it->second;
  ValueSpec converted = v;
  converted.nhwc = nhwc;
  return copies[id] = AddLayoutCopy(m, id, v.dims[0], converted);
}

ValueSpec ImageValue(kc::ElemType type, int64_t c, int64_t h, int64_t w) {
  return ValueSpec{true, type, DataType::kFp32, {c, h, w}, c * h * w, -1, h * w > 1};
}

StatusOr<kc::ConvActivation> ConvActivationOf(OpNode::Activation act, const std::string& who) {
  using A = OpNode::Activation;
  switch (act) {
    case A::kNone:
      return kc::ConvActivation::kNone;
    case A::kRelu:
      return kc::ConvActivation::kRelu;
    case A::kClip:
      return kc::ConvActivation::kClip;
    case A::kLeakyRelu:
      return kc::ConvActivation::kLeakyRelu;
    case A::kHardSigmoid:
      return kc::ConvActivation::kHardSigmoid;
    case A::kHardSwish:
      return kc::ConvActivation::kHardSwish;
    default:
      return Unsupported(who + ": its fused activation has no GPU epilogue");
  }
}

std::vector<int64_t> ShapeOpResult(const OpNode& op, const std::vector<int64_t>& shape) {
  const int64_t rank = static_cast<int64_t>(shape.size());
  auto clamp = [&](int64_t v) { return std::clamp<int64_t>(v < 0 ? v + rank : v, 0, rank); };
  const int64_t start = clamp(op.AttrInt("start", 0)), end = clamp(op.AttrInt("end", rank));
  return std::vector<int64_t>(shape.begin() + start, shape.begin() + std::max(start, end));
}

bool IsSqrt2(float d) { return std::fabs(d - kSqrt2) <= 1e-6f; }

bool ScalarOf(const Tensor& t, float* v) {
  if (!t.valid() || t.type() != DataType::kFp32 || t.elements() != 1) return false;
  *v = t.data<float>()[0];
  return true;
}

StatusOr<kc::Activation> GpuActivationOf(const Graph::Node& node, const std::string& who) {
  using A = OpNode::Activation;
  switch (node.op.activation) {
    case A::kNone:
      return kc::Activation::kNone;
    case A::kRelu:
      return kc::Activation::kRelu;
    case A::kSigmoid:
      return kc::Activation::kSigmoid;
    case A::kGelu:
      if (IsSqrt2(node.op.activation_a)) return kc::Activation::kGelu;
      return Unsupported(who + ": a GELU of erf(x / " + std::to_string(node.op.activation_a) +
                         "): the GPU's divides by sqrt(2)");
    default:
      return Unsupported(who + ": its fused activation has no GPU GEMM epilogue");
  }
}

bool ComposeViews(const GpuModel::View& outer, const GpuModel::View& copy, GpuModel::View* out) {
  const size_t rank = copy.dims.size();
  std::vector<int64_t> contiguous(rank, 1), reach(rank, 0);
  for (size_t d = rank - 1; d-- > 0;) contiguous[d] = contiguous[d + 1] * copy.dims[d + 1];
  GpuModel::View v = outer;
  v.source = copy.source;
  v.offset = copy.offset;
  // The axis of the copy a step of 'stride' elements walks along, and how far per step.
  auto axis_of = [&](int64_t stride, size_t* axis, int64_t* step) {
    for (size_t d = 0; d < rank; ++d)
      if (stride >= contiguous[d] && stride % contiguous[d] == 0 &&
          stride / contiguous[d] < copy.dims[d]) {
        *axis = d, *step = stride / contiguous[d];
        return true;
      }
    return false;
  };
  for (size_t e = 0; e < outer.dims.size(); ++e) {
    if (e == outer.batch_axis) {
      v.strides[e] = copy.strides[copy.batch_axis];  // a row of the copy: a row of its source
      continue;
    }
    if (outer.dims[e] == 1) continue;
    size_t d = 0;
    int64_t step = 0;
    if (!axis_of(outer.strides[e], &d, &step) || d == copy.batch_axis) return false;
    v.strides[e] = step * copy.strides[d];
    reach[d] += (outer.dims[e] - 1) * step;
  }
  int64_t rest = outer.offset;
  for (size_t d = 0; d < rank; ++d) {
    const int64_t index = rest / contiguous[d];
    rest %= contiguous[d];
    if (index > 0 && d == copy.batch_axis) return false;
    v.offset += index * copy.strides[d];
    reach[d] += index;
  }
  for (size_t d = 0; d < rank; ++d)
    if (reach[d] >= copy.dims[d] && copy.dims[d] > 0) return false;
  *out = std::move(v);
  return true;
}

std::optional<std::vector<int64_t>> IntsOf(const Graph& graph, const GpuModel& m,
                                           const OpNode& node, int id) {
  if (id < 0) return std::nullopt;
  if (auto it = m.shape_values.find(id); it != m.shape_values.end()) return it->second;
  const Tensor* t = nullptr;
  if (auto it = m.host_constants.find(id); it != m.host_constants.end()) t = &it->second;
  if (t == nullptr && static_cast<size_t>(id) < graph.value_count() && graph.constant(id).valid())
    t = &graph.constant(id);
  if (t == nullptr) return std::nullopt;
  auto v = IntValues(node, *t, "input");
  if (!v.ok()) return std::nullopt;
  return std::move(v).value();
}

const Tensor& GpuNode::Constant(size_t k) const {
  static const Tensor kNone;
  const int id = in(k);
  if (id < 0) return kNone;
  if (auto it = m.host_constants.find(id); it != m.host_constants.end()) return it->second;
  return static_cast<size_t>(id) < graph.value_count() ? graph.constant(id) : kNone;
}

StatusOr<ValueSpec> GpuNode::Input(size_t k) const {
  const int id = in(k);
  if (id < 0 || Constant(k).valid() || !m.values[id].defined)
    return Unsupported(who +
                       ": the GPU engine needs this input computed from the model's inputs, not a "
                       "constant or an optional input");
  return m.values[id];  // its own shape; steps resolve aliases to buffers
}

namespace {

// Every op the GPU compiler runs, by type.
const std::map<std::string, GpuOpDef>& GpuOps() {
  static const std::map<std::string, GpuOpDef> ops = [] {
    std::map<std::string, GpuOpDef> map;
    for (auto family : {GpuAttentionOps, GpuConvOps, GpuElementwiseOps, GpuGemmOps, GpuNormOps,
                        GpuReduceOps, GpuResizeOps, GpuShapeOps})
      for (const GpuOpDef& def : family()) map.emplace(def.op_type, def);
    return map;
  }();
  return ops;
}

// Ops whose output keeps a row-broadcast input's leading axis as its own (elementwise ops where
// that input has the output's rank; Gather by such indices).
bool KeepsLeadingAxis(const GpuNode& n, const std::vector<const Tensor*>& in, size_t k) {
  static const std::set<std::string> kElementwise = {"Add",   "Sub",  "Mul",     "Div",
                                                     "Equal", "Less", "Greater", "Where",
                                                     "Not",   "Cast", "Neg",     "Identity"};
  const std::string& op = n.node.op.op_type();
  if (op == "Gather") return k == 1 && n.node.op.AttrInt("axis", 0) == 0;
  if (!kElementwise.count(op)) return false;
  for (const Tensor* t : in)
    if (t != nullptr && t->shape().size() > in[k]->shape().size()) return false;
  return true;
}

// A node whose inputs are all known at load (constants, those computed so before, shapes without
// the batch) runs once here through the CPU's op, its outputs host constants: what a request
// cannot change is computed before any does. False for any other node.
StatusOr<bool> EvaluateOnHost(const GpuNode& n) {
  GpuModel& m = n.m;
  const auto& ids = n.node.inputs;
  std::vector<Tensor> shapes(ids.size());
  std::vector<const Tensor*> in(ids.size(), nullptr);
  std::vector<size_t> broadcast;  // inputs standing for the same tensor in every row
  for (size_t k = 0; k < ids.size(); ++k) {
    if (ids[k] < 0) continue;
    if (n.Constant(k).valid()) {
      in[k] = &n.Constant(k);
      if (m.row_broadcast.count(ids[k])) broadcast.push_back(k);
      continue;
    }
    auto it = m.shape_values.find(ids[k]);
    if (it == m.shape_values.end() ||
        std::count(it->second.begin(), it->second.end(), kRowsDim) > 0)
      return false;
    shapes[k] = Tensor::Allocate(
        DataType::kInt64, m.scalar_shapes.count(ids[k])
                              ? std::vector<int64_t>{}
                              : std::vector<int64_t>{static_cast<int64_t>(it->second.size())});
    std::copy(it->second.begin(), it->second.end(), shapes[k].mutable_data<int64_t>());
    in[k] = &shapes[k];
  }
  if (n.node.fn == nullptr || n.node.outputs.empty()) return false;
  if (!broadcast.empty() && n.node.op.op_type() == "Shape") {
    // The batch's place holds a 1 in the host's tensor: the shape names the batch there.
    std::vector<int64_t> shape = in[0]->shape();
    shape[0] = m.fixed_rows > 0 ? m.fixed_rows : kRowsDim;
    m.shape_values[n.out()] = ShapeOpResult(n.node.op, shape);
    return true;
  }
  for (size_t k : broadcast)
    if (!KeepsLeadingAxis(n, in, k))
      return Unsupported(n.who +
                         " reads a tensor that is the same in every row (an expanded "
                         "constant) in a way that moves its batch axis: not on the GPU");
  std::vector<Tensor> out(n.node.outputs.size());
  // A constant subgraph that fails would fail every request: the model is refused.
  RETURN_IF_ERROR(n.node.fn(n.node.op, in, out));
  for (size_t o = 0; o < out.size(); ++o) {
    const int id = n.node.outputs[o];
    if (id < 0) continue;
    m.host_constants[id] = std::move(out[o]);
    if (!broadcast.empty()) m.row_broadcast.insert(id);
  }
  return true;
}

Status CompileNode(const Graph& graph, const Graph::Node& node, GpuModel& m) {
  const GpuNode n{graph, node, m, "node '" + node.op.name() + "' (" + node.op.op_type() + ")"};
  ASSIGN_OR_RETURN(const bool on_host, EvaluateOnHost(n));
  if (on_host) return Status::Ok();
  ASSIGN_OR_RETURN(const bool shape_op, CompileShapeOp(n));
  if (shape_op) return Status::Ok();
  const auto it = GpuOps().find(node.op.op_type());
  if (it == GpuOps().end()) {
    std::string list;
    for (const auto& [type, def] : GpuOps()) list += (list.empty() ? "" : ", ") + type;
    return Unsupported(n.who + " has no GPU kernel (GPU ops: " + list +
                       "; Shape, Slice, Gather, Cast, Unsqueeze, Squeeze of known shapes)");
  }
  const std::string& op = node.op.op_type();
  if (op != "Transpose" && op != "Slice" && op != "Squeeze" && op != "Unsqueeze")
    for (int id : node.inputs)
      if (m.views.count(id))
        return Unsupported(n.who +
                           " reads a value whose batch axis a Transpose moved: the GPU engine "
                           "brings it first again through Transpose, Slice, Squeeze and "
                           "Unsqueeze only");
  int outputs = 0;
  for (int id : node.outputs) outputs += id >= 0;
  if (node.outputs.empty() || node.outputs[0] < 0 || outputs > it->second.max_outputs)
    return Unsupported(n.who + ": " + std::to_string(it->second.max_outputs) +
                       " output(s) expected");
  if (!m.ragged()) return it->second.compile(n);
  ASSIGN_OR_RETURN(const RaggedRole role, PrepareRaggedNode(n));
  const size_t first_step = m.steps.size();
  RETURN_IF_ERROR(it->second.compile(n));
  return FinishRaggedNode(n, role, first_step);
}

}  // namespace

std::vector<int> StepReads(const GpuModel& m, const Step& s) {
  std::vector<int> ids;
  for (int id : {s.in, s.a.value, s.b.value, s.residual, s.mask, s.token_sequence, s.sequence_ends})
    if (id >= 0) ids.push_back(m.Resolve(id));
  for (const auto& part : s.parts)
    if (part.first >= 0) ids.push_back(m.Resolve(part.first));
  return ids;
}

std::vector<int> StepWrites(const GpuModel& m, const Step& s) {
  std::vector<int> ids;
  for (int id : {s.out, s.mean_out, s.inv_std_out})
    if (id >= 0) ids.push_back(m.Resolve(id));
  return ids;
}

namespace {

// Whether output value 'id' (stored in bf16/fp16) can be written in fp32 by the GEMM that makes it
// instead of converted after it (and so does it): its own buffer, made by a float GEMM without a
// residual (whose type would have to match), read by no step.
bool GemmWritesFp32(GpuModel& m, int id) {
  if (m.ragged() || m.values[id].alias >= 0) return false;
  Step* maker = nullptr;
  for (Step& s : m.steps) {
    for (int read : StepReads(m, s))
      if (read == id) return false;
    for (int written : StepWrites(m, s))
      if (written == id) maker = &s;
  }
  if (maker == nullptr || maker->kind != Step::kGemm || maker->out != id || maker->residual >= 0 ||
      maker->w_scale != nullptr)
    return false;
  m.values[id].type = kc::ElemType::kF32;
  return true;
}

// Drops the steps whose outputs nothing reads (a strided copy whose reader took its source
// instead), last to first so that what only they read goes too.
void RemoveDeadSteps(GpuModel& m) {
  std::vector<bool> live(m.values.size(), false);
  for (const IoSpec& io : m.outputs) live[m.Resolve(io.value)] = true;
  std::vector<Step> kept;
  for (size_t i = m.steps.size(); i-- > 0;) {
    const Step& s = m.steps[i];
    bool needed = false;
    for (int id : StepWrites(m, s)) needed = needed || live[id];
    if (!needed) continue;
    for (int id : StepReads(m, s)) live[id] = true;
    kept.push_back(s);
  }
  if (kept.size() == m.steps.size()) return;
  m.steps.assign(kept.rbegin(), kept.rend());
}

// Step::norm_follows: each GEMM whose output (not a model output) only the next step reads, a
// LayerNorm over its rows (k its n) with no mean or inverse deviation written.
void MarkNormsOfSums(GpuModel& m) {
  std::vector<int> reads(m.values.size(), 0);
  for (const IoSpec& io : m.outputs) ++reads[m.Resolve(io.value)];
  for (const Step& s : m.steps)
    for (int id : StepReads(m, s)) ++reads[id];
  for (size_t i = 0; i + 1 < m.steps.size(); ++i) {
    Step& g = m.steps[i];
    const Step& ln = m.steps[i + 1];
    g.norm_follows = g.kind == Step::kGemm && ln.kind == Step::kLayerNorm && g.residual >= 0 &&
                     g.act == kc::Activation::kNone && g.w_scale == nullptr &&
                     g.sequences == ln.sequences && m.Resolve(ln.in) == m.Resolve(g.out) &&
                     reads[m.Resolve(g.out)] == 1 && ln.k == g.n && ln.outer == g.outer &&
                     ln.mean_out < 0 && ln.inv_std_out < 0 &&
                     m.values[ln.out].type == m.values[g.out].type &&
                     kc::LayerNormOfSumSupported(m.values[g.out].type, g.n);
  }
}

void PlanArena(GpuModel& m) {
  const size_t n = m.values.size();
  const int64_t last = static_cast<int64_t>(m.steps.size());
  std::vector<int64_t> start(n, INT64_MAX), end(n, -1), bytes(n, 0);
  for (const IoSpec& io : m.inputs) start[m.Resolve(io.value)] = -1;
  for (const IoSpec& io : m.outputs) end[m.Resolve(io.value)] = last;
  for (int64_t i = 0; i < last; ++i) {
    for (int id : StepWrites(m, m.steps[i])) start[id] = std::min(start[id], i);
    for (int id : StepReads(m, m.steps[i])) end[id] = std::max(end[id], i);
  }
  std::vector<int> owners;
  for (size_t id = 0; id < n; ++id) {
    const ValueSpec& v = m.values[id];
    if (!v.defined || v.alias >= 0 || start[id] == INT64_MAX) continue;
    end[id] = std::max(end[id], start[id]);
    bytes[id] = (v.row_elems * kc::ElemSize(v.type) + 255) / 256 * 256;
    m.unplanned_row_bytes += bytes[id];
    owners.push_back(static_cast<int>(id));
  }
  // Largest first, each at the lowest offset clear of the placed values it lives beside.
  std::stable_sort(owners.begin(), owners.end(), [&](int a, int b) { return bytes[a] > bytes[b]; });
  m.arena_offset.assign(n, -1);
  std::vector<int> placed;
  for (int id : owners) {
    std::vector<std::pair<int64_t, int64_t>> taken;  // [offset, offset + bytes) of live neighbours
    for (int other : placed)
      if (start[other] <= end[id] && start[id] <= end[other])
        taken.emplace_back(m.arena_offset[other], m.arena_offset[other] + bytes[other]);
    std::sort(taken.begin(), taken.end());
    int64_t offset = 0;
    for (const auto& [lo, hi] : taken) {
      if (offset + bytes[id] <= lo) break;
      offset = std::max(offset, hi);
    }
    m.arena_offset[id] = offset;
    m.arena_row_bytes = std::max(m.arena_row_bytes, offset + bytes[id]);
    placed.push_back(id);
  }
}

}  // namespace

StatusOr<std::shared_ptr<const GpuModel>> CompileForGpu(const Graph& graph, int device,
                                                        Precision precision,
                                                        const GpuShapes& given) {
  GpuShapes shapes = given;
  std::shared_ptr<const GpuModel> longest;
  if (const int64_t length = given.ragged_max_length; length > 0) {
    // A ragged plan: first the graph at its longest length, without a device, for the dims and
    // constants that tell each value's tokens axis; then at one token per sequence.
    GpuShapes at_longest = given;
    at_longest.ragged_max_length = at_longest.ragged_max_sequences = 0;
    at_longest.keep_host_constants = true;
    at_longest.weights = nullptr;
    for (auto& [name, dims] : at_longest.input_dims)
      std::replace(dims.begin(), dims.end(), int64_t{-1}, length);
    auto made = CompileForGpu(graph, kGpuPlanOnly, precision, at_longest);
    if (!made.ok())
      return Status(made.status().code(),
                    "ragged batching: at its longest sequence, " + std::to_string(length) +
                        " tokens (parameter nereid.max_sequence_length), the graph does not "
                        "compile for the GPU: " +
                        made.status().message());
    longest = std::move(made).value();
    for (auto& [name, dims] : shapes.input_dims)
      std::replace(dims.begin(), dims.end(), int64_t{-1}, int64_t{1});
  }
  if (device != kGpuPlanOnly)
    CUDA_RETURN(cudaSetDevice(device), "cudaSetDevice(" + std::to_string(device) + ")");
  auto m = std::make_shared<GpuModel>();
  m->longest = longest;
  if (longest) {
    m->ragged_max_length = given.ragged_max_length;
    m->ragged_sequences = given.ragged_max_sequences + 1;  // (and the padding's)
  }
  m->device = device;
  m->store = shapes.weights;
  m->precision = precision;
  // int8: GEMM operands in int8, everything between them in bf16.
  m->float_type = precision == Precision::kBf16 || precision == Precision::kInt8
                      ? kc::ElemType::kBF16
                  : precision == Precision::kFp16 ? kc::ElemType::kF16
                                                  : kc::ElemType::kF32;
  if (precision == Precision::kInt8 && device != kGpuPlanOnly) {
    // Batches over 16 rows run on Hopper's int8 tensor cores, the only int8 kernel for them.
    alignas(16) static const int8_t probe[16] = {};
    static const float scale[1] = {1.f};
    kc::GemmProblem p;
    p.m = 256, p.n = 256, p.k = 64, p.ab_type = kc::ElemType::kI8, p.x = p.w = probe;
    p.x_scale = p.w_scale = scale;
    if (!kc::Sm90Supported(p))
      return Unsupported(
          "precision int8 needs a Hopper GPU (compute capability 9.0) and a build "
          "for sm_90a: batches over 16 rows run on its int8 tensor cores");
  }
  m->values.resize(graph.value_count());
  m->fixed_rows = shapes.fixed_rows;
  m->readers.assign(graph.value_count(), 0);
  for (const auto& node : graph.nodes())
    for (int id : node.inputs)
      if (id >= 0) ++m->readers[id];
  for (const ValueInfo& v : graph.outputs())
    if (const int id = graph.FindValue(v.name); id >= 0) ++m->readers[id];
  for (const ValueInfo& v : graph.inputs()) {
    const std::string what = "input '" + v.name + "'";
    if (v.has_default) return Unsupported(what + " is optional: not supported on the GPU");
    std::vector<int64_t> dims(v.dims.begin() + (v.dims.empty() ? 0 : 1), v.dims.end());
    if (auto it = shapes.input_dims.find(v.name);
        it != shapes.input_dims.end() && it->second.size() == dims.size())
      for (size_t d = 0; d < dims.size(); ++d)
        if (dims[d] < 1) dims[d] = it->second[d];
    if (v.dims.empty() || std::any_of(dims.begin(), dims.end(), [](int64_t d) { return d < 1; }))
      return Unsupported(what + " has shape " + ShapeString(v.dims) +
                         ": the GPU engine needs [rows, fixed dims...] (fixed dims in the "
                         "model's config serve where the file leaves them open)");
    ASSIGN_OR_RETURN(kc::ElemType type, StorageType(v.type, m->float_type, what));
    const int id = graph.FindValue(v.name);
    const int64_t row_elems = ElementCount(dims.data(), dims.size());
    m->values[id] = ValueSpec{true, type, v.type, dims, row_elems, -1};
    IoSpec io{v.name, id, v.type, dims, static_cast<size_t>(row_elems) * DataTypeSize(v.type)};
    if (v.type == DataType::kFp32 && type != kc::ElemType::kF32) {
      io.value = m->AddValue(ValueSpec{true, kc::ElemType::kF32, v.type, dims, row_elems, -1});
      Step s;
      s.kind = Step::kConvert;
      s.in = io.value, s.out = id;
      m->steps.push_back(s);
    }
    m->inputs.push_back(io);
  }
  if (m->ragged()) RETURN_IF_ERROR(AddRaggedInputs(*m));
  for (const auto& node : graph.nodes()) RETURN_IF_ERROR(CompileNode(graph, node, *m));
  if (!shapes.keep_host_constants) m->host_constants.clear();  // uploaded where read
  for (const ValueInfo& v : graph.outputs()) {
    int id = graph.FindValue(v.name);
    if (id >= 0 && m->views.count(id))
      return Unsupported("output '" + v.name +
                         "' has its batch axis moved by a Transpose: the GPU engine answers "
                         "with the batch first");
    if (id < 0 || !m->values[id].defined)
      return Unsupported("output '" + v.name + "' is not computed from the inputs on the GPU");
    const int tokens_axis = m->ragged() ? RaggedTokensAxis(*m, id) : 0;
    if (tokens_axis == -2 || tokens_axis > 1)
      return Unsupported("output '" + v.name +
                         "': ragged batching on the GPU answers outputs per sequence or [batch, "
                         "tokens, ...], not this one's shape");
    id = InLayout(*m, id, false);
    const ValueSpec spec = m->values[id];
    IoSpec io{v.name, id, spec.logical, spec.dims,
              static_cast<size_t>(spec.row_elems) * DataTypeSize(spec.logical)};
    if (spec.logical == DataType::kFp32 && spec.type != kc::ElemType::kF32 &&
        GemmWritesFp32(*m, id)) {
      io.value = id;  // (a classifier's logits straight from its GEMM)
    } else if (spec.logical == DataType::kFp32 && spec.type != kc::ElemType::kF32) {
      io.value = m->AddValue(
          ValueSpec{true, kc::ElemType::kF32, spec.logical, spec.dims, spec.row_elems, -1});
      Step s;
      s.kind = Step::kConvert;
      s.in = id, s.out = io.value;
      s.sequences = tokens_axis == -1;
      m->steps.push_back(s);
    }
    io.sequences = tokens_axis == -1;
    m->outputs.push_back(io);
  }
  if (m->ragged()) RETURN_IF_ERROR(FinishRagged(*m));
  RemoveDeadSteps(*m);
  MarkNormsOfSums(*m);
  PlanArena(*m);
  return std::shared_ptr<const GpuModel>(std::move(m));
}

std::shared_ptr<GpuWeightStore> MakeGpuWeightStore(int device) {
  return std::make_shared<GpuWeightStore>(device);
}
size_t StoredBytes(const GpuWeightStore& store) { return store.stored_bytes(); }

const char* StepKindName(Step::Kind kind) {
  static const char* const kNames[] = {
      "gemm",   "binary",        "broadcast", "unary",       "convert",    "activation",
      "conv",   "convtranspose", "pool",      "global pool", "layout",     "softmax",
      "lrn",    "strided copy",  "resize",    "concat",      "layer norm", "batched matmul",
      "gather", "reduce",        "attention"};
  static_assert(std::size(kNames) == Step::kAttention + 1);
  return kNames[kind];
}

std::map<std::string, int> GpuStepCounts(const GpuModel& m) {
  std::map<std::string, int> counts;
  for (const Step& s : m.steps) ++counts[StepKindName(s.kind)];
  return counts;
}

std::vector<std::pair<std::string, std::vector<int64_t>>> GpuModelOutputs(const GpuModel& m) {
  std::vector<std::pair<std::string, std::vector<int64_t>>> out;
  for (const IoSpec& io : m.outputs) out.emplace_back(io.name, io.dims);
  return out;
}

std::string Describe(const GpuModel& m) {
  char mib[32];
  std::snprintf(mib, sizeof(mib), "%.1f", static_cast<double>(m.weight_bytes) / (1 << 20));
  std::string precision = PrecisionName(m.precision);
  if (m.precision == Precision::kInt8)
    precision += " (" + std::to_string(m.int8_gemms) + " of " + std::to_string(m.gemms) +
                 " GEMMs in int8, the rest in bf16)";
  if (m.precision == Precision::kInt8 && m.convs > 0)
    precision += "; " + std::to_string(m.int8_convs) + " of " + std::to_string(m.convs) +
                 " convolutions in int8, the rest in bf16";
  std::string convs;
  if (m.convs > 0) {
    convs = std::to_string(m.convs) + " convolution(s) (";
    const char* sep = "";
    for (const auto& [kernel, count] : m.conv_kernels)
      convs += sep + std::to_string(count) + " " + kernel, sep = ", ";
    convs += "), " + std::to_string(m.pools) + " pool(s), ";
  }
  char activations[96];
  std::snprintf(activations, sizeof(activations),
                "%.2f MiB of activations per row (%.2f without sharing)",
                static_cast<double>(m.arena_row_bytes) / (1 << 20),
                static_cast<double>(m.unplanned_row_bytes) / (1 << 20));
  const std::string attention =
      m.fused_attention > 0 ? std::to_string(m.fused_attention) + " fused attention(s), " : "";
  return convs + std::to_string(m.gemms) + " GEMM(s), " + attention +
         std::to_string(m.elementwise) + " elementwise op(s); " + precision + ", " + mib +
         " MiB of weights on GPU " + std::to_string(m.device) + ", " + activations;
}

}  // namespace nereid::native
