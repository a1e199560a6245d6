#include "python/outputs.h"

#include <cstring>
#include <vector>

namespace nereid::python {

Status OutputWriter::FillUnchecked(NereidRequest* request, const rapidjson::Value& response,
                                   const uint8_t* data, size_t size) {
  if (response.HasMember("error") && response["error"].IsObject()) {
    const auto& e = response["error"];
    return Status(
        FromError(NereidErrorNew(ErrorCode(e["code"].GetInt()), e["message"].GetString())));
  }
  const auto& outputs = response["outputs"];
  for (const std::string& name : backend::RequestedOutputs(request)) {
    const rapidjson::Value* found = nullptr;
    for (const auto& o : outputs.GetArray())
      if (StringField(o, "name") == name) found = &o;
    // A requested output that execute() left out is left out of the response (Triton's Python
    // backend does the same; its ensemble QA relies on it).
    if (found == nullptr) continue;
    const DataType type = backend::DataTypeFromName(StringField(*found, "datatype"));
    if (type == DataType::kInvalid)
      return backend::Internal("model '" + model_ + "': output '" + name +
                               "' has no Triton datatype");
    // Triton's Python backend answers with the tensor's own datatype whatever the config says
    // (its own bls_decoupled example sums int32 outputs into an int64 array for an INT32
    // output); so does this one, with a warning, once per output.
    auto declared = declared_.find(name);
    if (declared != declared_.end() && declared->second != type && !warned_.count(name) &&
        warned_.size() < 64) {
      warned_.insert(name);
      Log(NEREID_LOG_WARNING, "model '" + model_ + "': output '" + name + "' is " +
                                  std::string(backend::DataTypeName(declared->second)) +
                                  " in the config, but execute() returned " +
                                  StringField(*found, "datatype") + "; it is sent as " +
                                  StringField(*found, "datatype") +
                                  ", as Triton does (make the numpy array's dtype match)");
    }
    std::vector<int64_t> shape;
    for (const auto& d : (*found)["shape"].GetArray()) shape.push_back(d.GetInt64());
    const uint64_t at = (*found)["offset"].GetUint64(), n = (*found)["size"].GetUint64();
    if (at > size || n > size - at)
      return backend::Internal("model '" + model_ + "': output '" + name +
                               "' lies outside the shared region");
    auto buffer = backend::AllocateOutput(request, name, type, shape, n);
    if (!buffer.ok()) return buffer.status();
    if (n) std::memcpy(buffer->data, data + at, n);
  }
  return Status::Ok();
}

Status OutputWriter::Fill(NereidRequest* request, const rapidjson::Value& response,
                          const uint8_t* data, size_t size) {
  try {
    return FillUnchecked(request, response, data, size);
  } catch (const std::exception& e) {
    return backend::Internal("model '" + model_ + "': " + e.what());
  }
}

}  // namespace nereid::python
