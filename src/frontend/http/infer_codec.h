// The KServe v2 HTTP infer body: JSON tensors and Triton's binary tensor extension, in both
// directions. Pure functions over bytes (no sockets), shared by the HTTP server, unit tests and
// fuzz targets.
#pragma once

#include <simdjson.h>

#include <boost/container/small_vector.hpp>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "request/inference_request.h"
#include "server/request_builder.h"

namespace nereid::http {

// Decodes an infer request body: the wire only (JSON, binary sections, a raw body); the server's
// request builder does the rest. 'header_length' is Inference-Header-Content-Length (-1 when the
// header is absent: the whole body is JSON; 0: a raw binary body for a single-input model).
// Binary input data points into 'body', which the description keeps alive.
Status DecodeInferRequest(const Buffer& body, int64_t header_length, RequestDescription* request);
Status DecodeInferRequest(std::shared_ptr<const std::string> body, int64_t header_length,
                          RequestDescription* request);

// A response body in pieces: the JSON header, then each binary output where the backend wrote it
// (sent with one gathered write: output bytes are not copied into the body).
struct EncodedResponse {
  std::string json;
  boost::container::small_vector<Buffer, 4> binary;
  bool has_binary = false;  // true: send Inference-Header-Content-Length (the JSON's size)
  size_t size() const;
  // The whole body as one string (a copy, counted): for compression and tests.
  std::string Flatten() const;
};
EncodedResponse EncodeInferResponse(const InferenceResponse& response);
// Ok when every output the response carries as JSON can be JSON: a BYTES element that is not
// valid UTF-8 cannot (the client can ask for that output as binary data instead).
Status CheckJsonOutputs(const InferenceResponse& response);

// Parses untrusted JSON (simdjson: exact numbers, robust against hostile input). The element lives
// until the parser parses again.
StatusOr<simdjson::dom::element> ParseJson(simdjson::dom::parser& parser, std::string_view text);

// The non-negative integer member 'key' of a JSON object, 0 when absent; otherwise the error
// "<what> '<key>' must be a non-negative integer".
StatusOr<uint64_t> UintMember(const simdjson::dom::element& object, std::string_view key,
                              std::string_view what = "parameter");

// {"error":"<message>"} with the message JSON-escaped.
std::string ErrorJson(const std::string& message);

}  // namespace nereid::http
