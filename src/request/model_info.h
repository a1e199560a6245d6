// What the server tells a client about its models, as plain values that the frontends render and
// the layers below produce: a tensor's metadata, an entry of the repository index, and the files a
// load request carries. Here, below every area that makes them, so that a frontend reads none of
// the core's classes to show them.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "common/data_type.h"

namespace nereid {

// One input or output as the metadata endpoints describe it (the batch dimension included as -1).
struct TensorMetadata {
  std::string name;
  DataType datatype = DataType::kInvalid;
  std::vector<int64_t> shape;
};

// One model version of the repository index (Triton's RepositoryIndex).
struct IndexEntry {
  std::string name;
  int64_t version = -1;  // -1: never loaded (Triton then prints only the name)
  std::string state;
  std::string reason;
};

// The files of a load request ("file:<path>" parameters): relative paths inside the model's
// directory and their bytes.
using ModelFiles = std::vector<std::pair<std::string, std::string>>;

}  // namespace nereid
