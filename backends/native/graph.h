// Graph: an ONNX model loaded for the native engine: initializers as tensors, nodes bound to op
// functions, rewritten by the graph passes (passes.cc: constant folding, BatchNormalization
// folded into Conv, fused epilogues, dead nodes, channels-last layout, packed weights), and a Run()
// that executes the nodes in order, freeing each value after its last use.
// A Graph is immutable after Load and may be run from several instance threads at once.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "common/graph_check.h"
#include "cpu/gemm.h"
#include "cpu/gemm_int8.h"
#include "ops/op.h"
#include "tensor.h"

namespace onnx {
class ModelProto;
class NodeProto;
}  // namespace onnx

namespace nereid::native {

using ValueInfo = backend::ValueInfo;

// What calibration inputs showed of one int8 layer's input (Graph::MeasureInt8Inputs): each input
// channel's largest magnitude, and up to kSampleRows rows of the layer's GEMM as they were (a
// token's or pixel's channels; a convolution's window, depth ordered (ky, kx, channel)), evenly
// spaced, 'depth' values each.
struct Int8InputStats {
  static constexpr int64_t kSampleRows = 64;
  std::vector<float> range, rows;
  int64_t depth = 0;
};
// By the name of the value the layer writes.
using Int8Calibration = std::map<std::string, Int8InputStats>;

struct GraphOptions {
  // Pack constant GEMM weights for the CPU kernels and release the originals (CPU execution). The
  // GPU compiler loads with false: it needs the weights as the file has them.
  bool pack_weights = true;
  // With pack_weights: quantize those weights to int8 per output channel instead (the "int8"
  // precision; GemmInt8 runs them, activations quantized per row as they come).
  bool int8_weights = false;
  // With int8_weights: the layers found here may have their activations smoothed per input
  // channel (kernels::PackedInt8W's 'smooth': SmoothQuant's factors s = range^alpha /
  // w_max^(1 - alpha)), where a channel that is large on every pixel otherwise sets each row's
  // scale alone and the small channels lose their bits. 'int8_smoothing' below 0: per layer,
  // alpha 0.5 where it gives the sampled rows' products less error against fp32 than none
  // (SmoothingFor in passes.cc); from 0 to 1: that alpha for every layer.
  std::shared_ptr<const Int8Calibration> int8_calibration = nullptr;
  float int8_smoothing = -1.f;
  // Fuse 1x1 convolutions around depthwise ones (FuseDepthwiseBlocks). Off for a graph that
  // measures Int8Calibration, where every layer's input must be a value of its own.
  bool fuse_depthwise_blocks = true;
  // Run the CPU's convolutions channels-last (NHWC) with the ops between them (with
  // pack_weights; the GPU compiler has its own layouts).
  bool channels_last = true;
  // Non-empty: the inputs a request can feed (the model config's). An initializer the file also
  // lists as an input (IR version 3 files list every weight so) is then a constant unless named
  // here, and the constant subgraphs behind it fold at load.
  std::vector<std::string> declared_inputs = {};
};

struct ConvPlan;

// One node of a loaded graph, bound to its op function.
struct GraphNode {
  OpNode op;
  OpFn fn;
  std::vector<int> inputs;  // value ids; -1 for an omitted optional input
  std::vector<int> outputs;
};

// What a loaded graph is made of: its values (by id), constants, nodes and what the passes made,
// as Graph::FromProto builds it and the graph passes (passes.cc) rewrite it. Graph owns one and
// shows it read-only.
struct GraphBody {
  std::unique_ptr<onnx::ModelProto> model;
  int64_t opset = 0;
  std::map<std::string, int> value_ids;
  std::vector<Tensor> constants;  // by value id; invalid where not an initializer
  std::vector<GraphNode> nodes;
  std::vector<int> last_use;  // by value id: index of the last node reading it
  std::vector<bool> keep;     // by value id: graph outputs and initializers are never freed
  std::vector<ValueInfo> inputs;
  std::vector<ValueInfo> outputs;
  std::vector<std::unique_ptr<kernels::PackedMatrixB>> packed;  // referenced by nodes' OpNode
  std::vector<std::unique_ptr<kernels::PackedInt8W>> packed_int8;
  std::vector<std::unique_ptr<ConvPlan>> conv_plans;
  std::set<int> overridable;  // initializers a request may replace
  std::set<std::string> initializer_names;
  std::vector<std::unique_ptr<onnx::NodeProto>> made_nodes;  // of the nodes the passes insert
  std::vector<std::string> pass_log;                         // what the passes did, one line each

  GraphBody();
  ~GraphBody();
  GraphBody(GraphBody&&) = default;
  GraphBody& operator=(GraphBody&&) = default;

  // The id of value 'name', made on first use.
  int ValueId(const std::string& name);
  // A new value (a constant when 't' is valid) for the passes.
  int AddValue(const std::string& hint, Tensor t = Tensor());
  // A node the passes insert (its NodeProto owned by the body).
  GraphNode MakeNode(const std::string& op_type, const std::string& name, OpFn fn,
                     std::vector<int> inputs, std::vector<int> outputs);
  bool IsConstant(int id) const {
    return id >= 0 && static_cast<size_t>(id) < constants.size() && constants[id].valid() &&
           !overridable.count(id);
  }
  // By value id: how many node inputs and graph outputs read it.
  std::vector<int> Readers();
};

// The graph passes (passes.cc), in the one order this runs them: constant folding,
// BatchNormalization and per-channel scales folded into Conv, ops written out fused (HardSwish,
// LayerNormalization), epilogues fused into Conv and Gemm, dead nodes removed, then for the CPU
// MatMul's bias, residual and GELU epilogues, attention as one node, the channels-last layout and
// packed weights, and the values' lifetimes.
Status RunPasses(GraphBody& g, const GraphOptions& options);

class Graph {
 public:
  using Node = GraphNode;
  // Fails with the list of unsupported ops when any node's op is not implemented.
  static StatusOr<std::unique_ptr<Graph>> Load(const std::string& path, GraphOptions options = {});
  static StatusOr<std::unique_ptr<Graph>> FromProto(std::unique_ptr<onnx::ModelProto> model,
                                                    GraphOptions options = {});
  ~Graph();

  const std::vector<ValueInfo>& inputs() const { return body_.inputs; }
  const std::vector<ValueInfo>& outputs() const { return body_.outputs; }
  size_t node_count() const { return body_.nodes.size(); }
  int64_t opset() const { return body_.opset; }

  // Runs the graph on 'feeds' (by graph input name) and returns 'fetch' (by graph output name).
  // 'node_ns' (optional, node_count() entries): each node's wall time is added to its entry (the
  // benchmarks' per-node profile).
  // 'observe' (optional) sees each node with its inputs just before it runs.
  using Observer = std::function<void(const GraphNode&, const std::vector<const Tensor*>&)>;
  Status Run(const std::vector<std::pair<std::string, Tensor>>& feeds,
             const std::vector<std::string>& fetch, std::vector<Tensor>* results,
             std::vector<double>* node_ns = nullptr, const Observer* observe = nullptr) const;

  // The input statistics of every layer the int8 precision quantizes (a Conv with packed weights
  // but not a depthwise or small-groups one, a MatMul or Gemm with a packed weight) over 'feeds':
  // GraphOptions::int8_calibration. Load the graph fp32 with fuse_depthwise_blocks off: each
  // layer's input is then a value of its own. 'outputs' (optional): the run's graph outputs, in
  // outputs()' order.
  StatusOr<Int8Calibration> MeasureInt8Inputs(
      const std::vector<std::pair<std::string, Tensor>>& feeds,
      std::vector<Tensor>* outputs = nullptr) const;

  // What Run gives for feeds whose rows (first dim, the same count in every numeric feed) are
  // independent, computed one row at a time and the outputs' rows joined: a network of memory-bound
  // layers keeps one image's activations in cache where a batch's spill to memory. With a thread
  // team current and at least as many rows as its threads, the rows run side by side, one per
  // thread (each row's ops on that thread alone); with fewer rows the batch runs whole on the team.
  // Feeds without such rows (BYTES, scalars, differing counts) run whole too.
  Status RunRows(const std::vector<std::pair<std::string, Tensor>>& feeds,
                 const std::vector<std::string>& fetch, std::vector<Tensor>* results) const;

  // The structure, for compilers of other targets (the GPU engine).
  const std::vector<Node>& nodes() const { return body_.nodes; }
  size_t value_count() const { return body_.value_ids.size(); }
  // The value id of a graph input or output name; -1 when unknown.
  int FindValue(const std::string& name) const {
    auto it = body_.value_ids.find(name);
    return it == body_.value_ids.end() ? -1 : it->second;
  }
  // The initializer with this value id; an invalid tensor when it is not one.
  const Tensor& constant(int id) const { return body_.constants[id]; }
  // What the passes did, one line each (logged at load): folded, fused, converted groups.
  const std::vector<std::string>& pass_log() const { return body_.pass_log; }

 private:
  Graph() = default;

  GraphBody body_;
};

// The model at 'path' loaded as 'options' asks but fp32 and with each layer its own node, and its
// int8 layers' inputs measured on 'feeds' (Graph::MeasureInt8Inputs): what an int8 load's
// GraphOptions::int8_calibration takes. 'outputs' (optional): that fp32 run's graph outputs.
StatusOr<std::shared_ptr<const Int8Calibration>> CalibrateInt8(
    const std::string& path, GraphOptions options,
    const std::vector<std::pair<std::string, Tensor>>& feeds,
    std::vector<Tensor>* outputs = nullptr);

// Relu, Clip with constant bounds, LeakyRelu, HardSigmoid, HardSwish: the activations a Conv's
// epilogue applies (and the GPU runs alone), with their parameters in 'a' and 'b'.
bool FusableActivation(const Graph::Node& node, const std::function<bool(int)>& is_constant,
                       const std::function<const Tensor&(int)>& constant, OpNode::Activation* act,
                       float* a, float* b);

}  // namespace nereid::native
