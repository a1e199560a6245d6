// One input or output of an ONNX graph, as a backend's loader reads it from the model file
// (backends/common/onnx_config.h checks a config against a list of these).
#pragma once

#include <string>
#include <vector>

#include "nereid/backend_util.h"

namespace nereid::backend::onnx {

// One input or output of an ONNX graph as the backend's loader sees it.
struct ValueInfo {
  std::string name;
  DataType type = DataType::kInvalid;
  std::vector<int64_t> dims;  // -1 where the graph leaves a dimension symbolic or unknown
  // A graph input that is also an initializer: a request may send it (overriding the model's
  // value) or leave it out (the initializer is used). Triton serves these as optional inputs.
  bool has_default = false;
  bool has_shape = false;  // false when the graph states no shape (dims is then empty)
};

}  // namespace nereid::backend::onnx
