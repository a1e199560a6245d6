// The GPU's resize family: Resize of an image's spatial axes, nearest and linear, with the taps
// the CPU op computes (ops/resize.h) uploaded once.
#include "ops/resize.h"

#include "gpu_model.h"

namespace nereid::native {
namespace {

// Resize of an image's spatial axes with constant scales or sizes, channels-last.
Status CompileResize(const Graph& graph, const Graph::Node& node, GpuModel& m,
                     const std::string& who) {
  const ValueSpec x = m.values[node.inputs[0]];
  if (x.logical != DataType::kFp32 || !IsImage(x))
    return Unsupported(who + ": the GPU engine resizes FP32 images [rows, c, h, w]");
  std::vector<const Tensor*> in(node.inputs.size(), nullptr);
  for (size_t k = 1; k < node.inputs.size(); ++k) {
    const int id = node.inputs[k];
    if (id < 0) continue;
    if (!graph.constant(id).valid())
      return Unsupported(who + ": roi, scales and sizes must be constants on the GPU");
    in[k] = &graph.constant(id);
  }
  const int64_t c = x.dims[0], h = x.dims[1], w = x.dims[2];
  ASSIGN_OR_RETURN(const ResizePlan plan, PlanResize(node.op, in, {1, c, h, w}));
  Step s;
  s.kind = Step::kResize;
  s.in = InLayout(m, node.inputs[0], true);
  s.window.h = h, s.window.w = w, s.window.c_in = c;
  s.window.oh = plan.out_shape[2], s.window.ow = plan.out_shape[3];
  for (int axis = 0; axis < 2; ++axis) {
    const auto& taps = axis == 0 ? plan.taps_y : plan.taps_x;
    std::vector<kc::ResizeTap> device(taps.size());
    for (size_t i = 0; i < taps.size(); ++i)
      device[i] = {static_cast<int32_t>(taps[i].i0), static_cast<int32_t>(taps[i].i1), taps[i].f};
    ASSIGN_OR_RETURN(const void* p, m.Upload(device.data(), device.size() * sizeof(device[0])));
    (axis == 0 ? s.taps_y : s.taps_x) = static_cast<const kc::ResizeTap*>(p);
  }
  m.values[node.outputs[0]] = ImageValue(m.float_type, c, s.window.oh, s.window.ow);
  s.out = node.outputs[0];
  m.steps.push_back(s);
  return Status::Ok();
}

Status Resize(const GpuNode& n) {
  RETURN_IF_ERROR(n.Input(0).status());
  return CompileResize(n.graph, n.node, n.m, n.who);
}

}  // namespace

std::vector<GpuOpDef> GpuResizeOps() { return {{"Resize", Resize}}; }

}  // namespace nereid::native
