// The native engine's GPU compiler without a GPU (kGpuPlanOnly): the model zoo's graphs and the
// real CNNs of the model packages (from the test environment's .venv) compile for the GPU in fp32
// and bf16 with the steps their ops need, and what the GPU engine cannot run is refused at load,
// naming it. The kernels themselves run on the device machine (tests/gpu, tests/e2e/test_gpu_*.py).
#ifdef NEREID_NATIVE_GPU
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <string>

#include "gpu_engine.h"
#include "graph.h"

namespace nereid::native {
namespace {

namespace fs = std::filesystem;

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
     {{"conv", 53}, {"softmax", 1}, {"gemm", 1}},
     {1000}},
    {"densenet121",
     "onnx/backend/test/data/light/light_densenet121.onnx",
     "data_0",
     {3, 224, 224},
     1,
     {{"conv", 121}, {"concat", 58}},
     {1000, 1, 1}},
    {"inception_v1",
     "onnx/backend/test/data/light/light_inception_v1.onnx",
     "data_0",
     {3, 224, 224},
     1,
     {{"conv", 57}, {"concat", 9}, {"lrn", 2}, {"softmax", 1}},
     {1000}},
    {"inception_v2",
     "onnx/backend/test/data/light/light_inception_v2.onnx",
     "data_0",
     {3, 224, 224},
     1,
     {{"conv", 69}, {"concat", 10}, {"softmax", 1}},
     {1000}},
    {"shufflenet",
     "onnx/backend/test/data/light/light_shufflenet.onnx",
     "gpu_0/data_0",
     {3, 224, 224},
     1,
     {{"conv", 49}, {"transpose", 16}, {"concat", 3}},
     {1000}},
    {"squeezenet",
     "onnx/backend/test/data/light/light_squeezenet.onnx",
     "data_0",
     {3, 224, 224},
     1,
     {{"conv", 26}, {"concat", 8}, {"softmax", 1}},
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
     {{"conv", 5}, {"lrn", 2}},
     {1000}},
    // RapidOCR's text detector (DBNet: FPN upsampling, ConvTranspose head) at a fixed 128x160.
    {"ocr_detector",
     "rapidocr_onnxruntime/models/ch_PP-OCRv4_det_infer.onnx",
     "x",
     {3, 128, 160},
     0,
     {{"conv", 62}, {"resize", 6}, {"convtranspose", 2}, {"concat", 1}},
     {1, 128, 160}},
    // Its direction classifier: the flatten's shape from Shape/Slice/Concat of the batch.
    {"ocr_direction",
     "rapidocr_onnxruntime/models/ch_ppocr_mobile_v2.0_cls_infer.onnx",
     "x",
     {3, 48, 192},
     0,
     {{"conv", 53}, {"softmax", 1}, {"gemm", 1}},
     {2}},
    {"wakeword_embedding",
     "openwakeword/resources/models/embedding_model.onnx",
     "input_1",
     {76, 32, 1},
     0,
     {{"conv", 20}, {"pool", 5}},
     {1, 1, 96}},
};

StatusOr<std::unique_ptr<Graph>> LoadFor(const fs::path& file, const std::string& input) {
  GraphOptions options{.pack_weights = false};
  options.declared_inputs = {input};
  return Graph::Load(file.string(), options);
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
    auto graph = LoadFor(file, c.input);
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
      const auto outputs = GpuModelOutputs(**model);
      ASSERT_EQ(outputs.size(), 1u);
      EXPECT_EQ(outputs[0].second, c.output);
      EXPECT_FALSE(CreateGpuInstance(*model).ok());  // nothing uploaded: it cannot run
    }
  }
}

TEST(GpuCompile, RefusesOpenDimsAndOpsWithoutAGpuKernelNamingThem) {
  const fs::path site = SitePackages();
  if (site.empty()) GTEST_SKIP() << "no .venv with the onnx wheel (scripts/install-deps.sh)";
  const fs::path det = site / "rapidocr_onnxruntime/models/ch_PP-OCRv4_det_infer.onnx";
  const fs::path rec = site / "rapidocr_onnxruntime/models/ch_PP-OCRv4_rec_infer.onnx";
  if (!fs::exists(det) || !fs::exists(rec)) GTEST_SKIP() << "rapidocr_onnxruntime is missing";
  auto graph = LoadFor(det, "x");
  ASSERT_TRUE(graph.ok()) << graph.status().message();
  auto open = CompileForGpu(**graph, kGpuPlanOnly, Precision::kFp32);  // no dims from a config
  ASSERT_FALSE(open.ok());
  EXPECT_NE(open.status().message().find("input 'x' has shape"), std::string::npos)
      << open.status().message();
  EXPECT_NE(open.status().message().find("fixed dims"), std::string::npos);
  // The recogniser's attention (ReduceMean layer norms, MatMul of two activations) has no GPU
  // kernels yet: refused at load with the node's name and op.
  graph = LoadFor(rec, "x");
  ASSERT_TRUE(graph.ok()) << graph.status().message();
  GpuShapes shapes;
  shapes.input_dims["x"] = {3, 48, 320};
  auto refused = CompileForGpu(**graph, kGpuPlanOnly, Precision::kFp32, shapes);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("node '"), std::string::npos)
      << refused.status().message();
}

}  // namespace
}  // namespace nereid::native
#endif  // NEREID_NATIVE_GPU
