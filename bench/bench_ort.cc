// ONNX Runtime called directly in one process: the baseline for the ONNX Runtime backend's
// overhead (bench/ort_overhead.py runs it beside the server). Loads libonnxruntime.so through the
// same C API table as the backend (backends/onnxruntime/ort_api.h), opens the model with the given
// thread counts, fills every input with deterministic data (variable dimensions: the first gets
// --batch, the others --dim), and times Session::Run with preallocated inputs.
//
//   bench_ort --library=PATH --model=PATH [--batch=N] [--dim=N] [--threads=N] [--iterations=N]
// Prints one line: "run_us <mean> p50_us <median> iterations <n>".
#include <dlfcn.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "onnxruntime/ort_api.h"

namespace {

using namespace nereid::ort;
const Api* api = nullptr;

void Check(OrtStatus* s, const char* what) {
  if (s == nullptr) return;
  std::fprintf(stderr, "%s: %s\n", what, api->GetErrorMessage(s));
  std::exit(1);
}

size_t ElementSize(ElementType t) {
  switch (t) {
    case kFloat:
    case kInt32:
    case kUint32:
      return 4;
    case kDouble:
    case kInt64:
    case kUint64:
      return 8;
    case kFloat16:
    case kBfloat16:
    case kInt16:
    case kUint16:
      return 2;
    default:
      return 1;
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::string library, model;
  int64_t batch = 1, dim = 16;
  int threads = 1, iterations = 2000;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&](const char* flag) -> const char* {
      const size_t n = std::strlen(flag);
      return a.compare(0, n, flag) == 0 ? argv[i] + n : nullptr;
    };
    if (auto v = value("--library="))
      library = v;
    else if (auto v = value("--model="))
      model = v;
    else if (auto v = value("--batch="))
      batch = std::atoll(v);
    else if (auto v = value("--dim="))
      dim = std::atoll(v);
    else if (auto v = value("--threads="))
      threads = std::atoi(v);
    else if (auto v = value("--iterations="))
      iterations = std::atoi(v);
    else {
      std::fprintf(stderr, "unknown flag %s\n", argv[i]);
      return 2;
    }
  }
  void* handle = dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    std::fprintf(stderr, "%s\n", dlerror());
    return 1;
  }
  auto base = reinterpret_cast<const ApiBase* (*)()>(dlsym(handle, "OrtGetApiBase"))();
  api = base->GetApi(kApiVersion);
  OrtEnv* env = nullptr;
  Check(api->CreateEnv(kWarning, "bench", &env), "env");
  OrtSessionOptions* options = nullptr;
  Check(api->CreateSessionOptions(&options), "options");
  Check(api->SetIntraOpNumThreads(options, threads), "threads");
  Check(api->SetInterOpNumThreads(options, threads), "threads");
  OrtSession* session = nullptr;
  Check(api->CreateSession(env, model.c_str(), options, &session), "session");
  OrtAllocator* allocator = nullptr;
  Check(api->GetAllocatorWithDefaultOptions(&allocator), "allocator");

  size_t inputs = 0, outputs = 0;
  Check(api->SessionGetInputCount(session, &inputs), "inputs");
  Check(api->SessionGetOutputCount(session, &outputs), "outputs");
  std::vector<std::string> in_names, out_names;
  std::vector<OrtValue*> in_values;
  for (size_t i = 0; i < inputs; ++i) {
    char* name = nullptr;
    Check(api->SessionGetInputName(session, i, allocator, &name), "name");
    in_names.emplace_back(name);
    api->AllocatorFree(allocator, name);
    OrtTypeInfo* info = nullptr;
    Check(api->SessionGetInputTypeInfo(session, i, &info), "type");
    const OrtTensorTypeAndShapeInfo* tensor = nullptr;
    Check(api->CastTypeInfoToTensorInfo(info, &tensor), "tensor");
    ElementType type = kUndefined;
    size_t rank = 0;
    Check(api->GetTensorElementType(tensor, &type), "type");
    Check(api->GetDimensionsCount(tensor, &rank), "rank");
    std::vector<int64_t> shape(rank);
    Check(api->GetDimensions(tensor, shape.data(), rank), "dims");
    api->ReleaseTypeInfo(info);
    bool first = true;
    for (int64_t& d : shape)
      if (d < 0) d = std::exchange(first, false) ? batch : dim;
    OrtValue* value = nullptr;
    Check(api->CreateTensorAsOrtValue(allocator, shape.data(), shape.size(), type, &value),
          "tensor");
    void* data = nullptr;
    Check(api->GetTensorMutableData(value, &data), "data");
    size_t count = 0;
    OrtTensorTypeAndShapeInfo* value_info = nullptr;
    Check(api->GetTensorTypeAndShape(value, &value_info), "shape");
    Check(api->GetTensorShapeElementCount(value_info, &count), "count");
    api->ReleaseTensorTypeAndShapeInfo(value_info);
    const size_t size = ElementSize(type);
    for (size_t e = 0; e < count; ++e) {  // small non-negative values: valid ids, masks, floats
      if (type == kFloat) {
        static_cast<float*>(data)[e] = static_cast<float>((e * 7919) % 1000) / 1000.0f;
      } else if (type == kInt64) {
        static_cast<int64_t*>(data)[e] = static_cast<int64_t>(1 + e % 100);
      } else if (type == kInt32) {
        static_cast<int32_t*>(data)[e] = static_cast<int32_t>(e % 256);
      } else {
        std::memset(static_cast<char*>(data) + e * size, 0, size);
      }
    }
    in_values.push_back(value);
  }
  for (size_t i = 0; i < outputs; ++i) {
    char* name = nullptr;
    Check(api->SessionGetOutputName(session, i, allocator, &name), "name");
    out_names.emplace_back(name);
    api->AllocatorFree(allocator, name);
  }
  std::vector<const char*> in_c, out_c;
  for (auto& n : in_names) in_c.push_back(n.c_str());
  for (auto& n : out_names) out_c.push_back(n.c_str());
  std::vector<const OrtValue*> in_const(in_values.begin(), in_values.end());

  std::vector<double> times;
  for (int it = -iterations / 10; it < iterations; ++it) {
    std::vector<OrtValue*> outs(outputs, nullptr);
    const auto start = std::chrono::steady_clock::now();
    Check(api->Run(session, nullptr, in_c.data(), in_const.data(), in_c.size(), out_c.data(),
                   out_c.size(), outs.data()),
          "run");
    const auto end = std::chrono::steady_clock::now();
    for (OrtValue* v : outs) api->ReleaseValue(v);
    if (it >= 0) times.push_back(std::chrono::duration<double, std::micro>(end - start).count());
  }
  double sum = 0;
  for (double t : times) sum += t;
  std::sort(times.begin(), times.end());
  std::printf("run_us %.2f p50_us %.2f iterations %zu\n", sum / times.size(),
              times[times.size() / 2], times.size());
  for (OrtValue* v : in_values) api->ReleaseValue(v);
  api->ReleaseSession(session);
  api->ReleaseSessionOptions(options);
  api->ReleaseEnv(env);
  return 0;
}
