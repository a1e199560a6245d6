// The native engine on a GPU: a Graph compiled for one device (GpuModel: weights resident in device
// memory in the model's precision, a list of kernel launches whose shapes follow the row count),
// and per instance a stream, a cuBLAS handle, device buffers for every value, staging buffers from
// the server's pinned pool, and one CUDA graph captured per row count and replayed after that.
//
// Graphs it compiles: every input [rows, fixed dims...] (rows is the batch, or the variable first
// dimension of a model without batching; open dims fixed by the config), nodes Gemm and MatMul
// with constant weights, 2-D Conv and ConvTranspose with constant weights (any groups;
// BatchNormalization, residual Add and activation fused into Conv by the graph's passes),
// MaxPool, AveragePool, GlobalAveragePool, GlobalMaxPool, BatchNormalization, LRN, Softmax,
// Resize (constant scales or sizes), Concat, Transpose, Flatten and Reshape keeping the rows
// (shapes from Shape/Slice/Gather/Concat of known shapes worked out at load), Add, Sub, Mul, Div,
// Max, Min, Sum (numpy broadcasting), Relu, Sigmoid, Tanh, Gelu, Identity, Dropout; float tensors
// as FP32, integer tensors as INT32 or INT64. Images run channels-last from the first
// convolution on (converted where an op needs NCHW and at the outputs). Anything else fails at
// load, naming the op.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "graph.h"
#include "nereid/backend.h"

namespace nereid::native {

// How float math runs on the GPU (config parameter "precision"): fp32 exact, tf32 (fp32 storage,
// TF32 tensor cores), bf16 and fp16 (weights and activations stored at 16 bits, fp32 accumulation,
// fp32 at the model's inputs and outputs).
enum class Precision { kFp32, kTf32, kBf16, kFp16, kInt8 };
StatusOr<Precision> ParsePrecision(const std::string& name);
const char* PrecisionName(Precision p);

class GpuModel;
class GpuInstance;
class GpuWeightStore;

// What the model's config says of the shapes (the GPU engine compiles for fixed ones).
struct GpuShapes {
  // By input name, the dims after the rows: they fill the dimensions the file leaves open.
  std::map<std::string, std::vector<int64_t>> input_dims;
  // A model without batching whose config fixes its first dimension: that count (a Reshape to it
  // keeps the rows), else 0.
  int64_t fixed_rows = 0;
  // Where the weights go on the device: models compiled into one store (one graph's plans for
  // each value of its open dimensions) share each identical weight's copy; null: a store of the
  // model's own.
  std::shared_ptr<GpuWeightStore> weights;
  // Ragged batching (allow_ragged_batch on a [batch, tokens] encoder): the graph compiled
  // token-major (RunOnGpu's 'sequences'), sequences of 1 to ragged_max_length tokens, at most
  // ragged_max_sequences of them a run; the open dims in input_dims (-1) are the tokens. 0: not.
  int64_t ragged_max_length = 0, ragged_max_sequences = 0;
  // (Internal: the plan compiled only to read its dims and constants, kept after compiling.)
  bool keep_host_constants = false;
};
std::shared_ptr<GpuWeightStore> MakeGpuWeightStore(int device);
// The bytes a store holds on its device.
size_t StoredBytes(const GpuWeightStore& store);

// The device for CompileForGpu that compiles without one: every check, shape and step, no weights
// uploaded and no instance to run (the tests of the compiler on machines without a GPU).
constexpr int kGpuPlanOnly = -1;

// Compiles 'graph' for 'device' (uploading its weights). Shared by the instances on that device.
StatusOr<std::shared_ptr<const GpuModel>> CompileForGpu(const Graph& graph, int device,
                                                        Precision precision,
                                                        const GpuShapes& shapes = {});
// How many steps of each kind the compiled model runs ("conv", "concat", "broadcast", ...), and its
// outputs with their dims after the rows.
std::map<std::string, int> GpuStepCounts(const GpuModel& model);
std::vector<std::pair<std::string, std::vector<int64_t>>> GpuModelOutputs(const GpuModel& model);
// A short description for the load log ("3 GEMMs, 0 elementwise; bf16 weights, 12.5 MiB").
std::string Describe(const GpuModel& model);

// One request's part of an input: host bytes (page-locked or not) or device memory (a client's
// CUDA shared-memory region).
struct GpuPart {
  const void* data = nullptr;
  size_t bytes = 0;
  bool pinned = false;
  bool device = false;
};

// Where the caller wants an output: page-locked host memory, or device memory (a CUDA region);
// or, for a batch of several requests (or a ragged plan's sequences), each request's rows at an
// address of its own: 'parts' in row order, their bytes summing to the output's real rows ('data'
// then null).
struct GpuDestinationPart {
  void* data = nullptr;
  size_t bytes = 0;
  bool device = false, pinned = false;
};
struct GpuDestination {
  void* data = nullptr;
  bool device = false;
  std::vector<GpuDestinationPart> parts;
};

// One input of a run: each request's part, in batch order.
struct GpuFeed {
  std::string name;
  std::vector<GpuPart> parts;
};

// An output of the model as the GPU engine produces it: [rows, dims...].
struct GpuOutputInfo {
  std::string name;
  DataType type;
  std::vector<int64_t> dims;
  size_t row_bytes = 0;
  // Ragged plans: a row per sequence (pooled), or per token (dims[0] the tokens' 1), else neither.
  bool sequences = false, per_token = false;
};
std::vector<GpuOutputInfo> GpuOutputs(const GpuInstance& instance);

// One output of a run, in host memory until the next Run of the same instance.
struct GpuResult {
  std::string name;
  DataType type;
  std::vector<int64_t> shape;     // rows first
  const uint8_t* data = nullptr;  // (null where the destination had parts)
  size_t bytes = 0;
  bool in_destination = false;  // copied into the caller's destination, not staging
};

void DestroyGpuInstance(GpuInstance* instance);
struct GpuInstanceDeleter {
  void operator()(GpuInstance* i) const { DestroyGpuInstance(i); }
};
using GpuInstancePtr = std::unique_ptr<GpuInstance, GpuInstanceDeleter>;

// Creates the instance's stream, cuBLAS handle and buffers, and times Nereid's GEMM kernels
// against cuBLAS for each layer and row count up to 64 on this device (about a second for
// recommend_model's three layers on an H200).
StatusOr<GpuInstancePtr> CreateGpuInstance(std::shared_ptr<const GpuModel> model);
// Which GEMM implementation the instance runs per layer and row count (for the load log).
std::string GemmTuning(const GpuInstance& instance);
// Runs 'rows' rows through the graph. Inputs given as one page-locked part of 64 KiB or more, or
// in device memory, are copied to the device straight from there (part by part), others through
// the instance's staging memory (which also gathers a batch). 'destinations' (per model output,
// may be empty or hold nulls): device memory always, and page-locked buffers of 64 KiB or more
// (parts: 16 KiB each on average), are written directly; other results point into staging memory
// until the next run.
// 'compute_start_ns' and 'compute_end_ns' (NereidNowNs) bracket the copies and the kernels.
//
// A ragged plan takes 'sequences' (each one's tokens, in the order they lie in the inputs; rows is
// their sum) and answers its per-token outputs with those rows and its pooled ones with a row per
// sequence; 'destinations' are not written directly.
Status RunOnGpu(GpuInstance& instance, int64_t rows, const std::vector<GpuFeed>& feeds,
                const std::vector<GpuDestination>& destinations, std::vector<GpuResult>* results,
                uint64_t* compute_start_ns, uint64_t* compute_end_ns,
                const std::vector<int64_t>* sequences = nullptr);
// The device time of the instance's last run (CUDA events around its copies and kernels).
uint64_t LastDeviceNs(const GpuInstance& instance);

// One step of a plan, timed alone (ProfileGpuSteps).
struct GpuStepTime {
  std::string kind;    // "gemm", "attention", "layer norm", ...
  std::string detail;  // a GEMM's m x n x k and implementation; empty otherwise
  double us = 0;
};
// Where a plan's device time goes: after a run of 'rows' rows (whose values the buffers still
// hold), each step enqueued alone, without a graph, a CUDA event after each, 'reps' times over;
// per step its fastest time. Launch gaps that a graph replay hides count here when the GPU waits
// on the host, so the sum can exceed a replay's time. A ragged plan: 'rows' is the last run's
// tokens, and its sequences are the ones timed.
StatusOr<std::vector<GpuStepTime>> ProfileGpuSteps(GpuInstance& instance, int64_t rows, int reps);

}  // namespace nereid::native
