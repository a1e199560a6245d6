// What execute() returned, as the stub describes it (names, datatypes, shapes, where the bytes lie
// in the output region), written into the requests' responses.
#pragma once

#include <map>
#include <set>
#include <string>

#include "python/protocol.h"

namespace nereid::python {

class OutputWriter {
 public:
  // 'declared': each output's datatype in the config.
  OutputWriter(std::string model, std::map<std::string, DataType> declared)
      : model_(std::move(model)), declared_(std::move(declared)) {}
  // Writes one response's outputs ('response', bytes in 'data') into the request; its error when
  // execute() answered the request with one. A malformed description (a model writing to the
  // stub's socket) is the request's error: each request completes exactly once, whatever the stub
  // sent. Triton's Python backend sends an output with the tensor's own datatype whatever the
  // config says; so does this one, with a warning once per output.
  Status Fill(NereidRequest* request, const rapidjson::Value& response, const uint8_t* data,
              size_t size);

 private:
  Status FillUnchecked(NereidRequest* request, const rapidjson::Value& response,
                       const uint8_t* data, size_t size);

  std::string model_;
  std::map<std::string, DataType> declared_;
  std::set<std::string> warned_;  // outputs whose datatype differed from the config (logged)
};

}  // namespace nereid::python
