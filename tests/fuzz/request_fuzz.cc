// Fuzz target for everything Nereid parses from the network: infer bodies (JSON + binary tensors,
// raw requests), compressed bodies, and model configs (config.pbtxt text and the JSON a load
// request may carry). The first input byte picks the parser; the rest is the data.
//   libFuzzer: scripts/fuzz.sh [seconds]       replay (any compiler): build/request_fuzz FILE...
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "config/config_validator.h"
#include "config/model_config.h"
#include "frontend/http/compression.h"
#include "frontend/http/infer_codec.h"

namespace {

const inference::ModelConfig& Config() {
  static const inference::ModelConfig config = [] {
    inference::ModelConfig c;
    c.set_name("m");
    c.set_max_batch_size(8);
    for (const char* name : {"IN0", "IN1"}) {
      auto* in = c.add_input();
      in->set_name(name);
      in->set_data_type(inference::TYPE_FP32);
      in->add_dims(-1);
    }
    return c;
  }();
  return config;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const uint8_t mode = data[0] % 6;
  std::string body(reinterpret_cast<const char*>(data + 1), size - 1);
  switch (mode) {
    case 0:
    case 1:
    case 2: {
      // JSON only / JSON with a binary tail (header length from the first body byte) / raw.
      const int64_t header = mode == 0   ? -1
                             : mode == 2 ? 0
                                         : (body.empty() ? 0 : body[0] % (body.size() + 1));
      nereid::RequestDescription description;
      if (nereid::http::DecodeInferRequest(std::make_shared<const std::string>(std::move(body)),
                                           header, &description)
              .ok())
        (void)nereid::BuildInferenceRequest(std::move(description), nereid::InferEndpoint::kHttp,
                                            Config(), nullptr);
      break;
    }
    case 3: {
      auto inflated = nereid::http::Inflate(nereid::http::Encoding::kGzip, body, 1 << 20);
      (void)inflated;
      (void)nereid::http::Inflate(nereid::http::Encoding::kDeflate, body, 1 << 20);
      break;
    }
    case 4: {
      auto parsed = nereid::ParseModelConfigText(body, "fuzz/config.pbtxt");
      if (parsed.ok()) {
        nereid::FillConfigDefaults("fuzz", &parsed->config);
        (void)nereid::ValidateModelConfig(parsed->config, "fuzz", parsed->locator);
        (void)nereid::IgnoredConfigFields(parsed->config);
        (void)nereid::ModelConfigToJson(parsed->config);
      }
      break;
    }
    case 5: {
      auto config = nereid::ModelConfigFromJson(body);
      if (config.ok()) (void)nereid::ModelConfigToJson(*config);
      break;
    }
  }
  return 0;
}
