// The HTTP API's requests other than inference and health, each answered from the server's
// protocol-neutral API: a request body in, a Reply (status and JSON body) out, in Triton's JSON
// shapes. No sockets here: the session routes a request, calls one of these and writes the Reply.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "common/status.h"
#include "frontend/http/http_routes.h"
#include "server/server_api.h"

namespace nereid::http {

inline constexpr const char* kJson = "application/json";

struct Reply {
  int status = 200;
  std::string body;
  const char* content_type = kJson;  // null: no Content-Type (an empty body)
};

// Triton's HTTP status for each Status code: the one table of this protocol.
int HttpStatusFor(Status::Code code);
// {"error": message} with 'status'; an error Status with its code's status.
Reply ErrorReply(int status, const std::string& message);
Reply StatusReply(const Status& s);
// 200 with an empty body.
Reply OkReply();

Reply ServerMetadataReply(const ServerApi& api);
Reply ModelMetadataReply(const ServerApi& api, const Route& route);
// The statistics extension (one model version, a model, or all: kAllStats).
Reply StatisticsReply(const ServerApi& api, const Route& route);
Reply RepositoryIndexReply(const ServerApi& api, const std::string& body);
// Load or unload (route kRepoLoad / kRepoUnload) in the model's control lane: 'done' gets the
// Reply when it has run (on a control thread), or at once when the request is refused.
void RepositoryControl(ServerApi& api, const Route& route, const std::string& body,
                       std::function<void(Reply)> done);
// The system and CUDA shared-memory extensions: status, register, unregister.
Reply SharedMemoryReply(ServerApi& api, const Route& route, const std::string& body);
// An inference request's description from its HTTP parts: the body, inflated when
// 'content_encoding' says so (within 'max_input_size'), with 'header_length' as its
// Inference-Header-Content-Length (absent: the body is JSON).
StatusOr<RequestDescription> DecodeInferBody(Buffer body,
                                             std::optional<std::string_view> content_encoding,
                                             std::optional<std::string_view> header_length,
                                             size_t max_input_size);

// The logging extension: 'update' (POST) applies the body's settings first; both answer with the
// settings in force.
Reply LoggingReply(ServerApi& api, bool update, const std::string& body);

// One request as the routing sees it: its route (Match), method ("GET", "POST", ...), a header
// lookup (names case-insensitive; empty when absent) and its body.
struct RoutedRequest {
  const Route& route;
  std::string_view method;
  std::function<std::optional<std::string_view>(std::string_view name)> header;
  const std::string& body;
};
// What the session does with a request: write 'reply', or run the asynchronous route itself
// (inference, repository load and unload), its method and access already checked.
struct Handling {
  enum Kind { kReply, kInfer, kRepositoryControl } kind = kReply;
  Reply reply;
};
// Every route's method and restricted-API check (--http-restricted-api), then the answer of each
// synchronous one, in Triton's statuses and messages.
Handling HandleRoute(ServerApi& api, const RestrictedApis& restricted,
                     const RoutedRequest& request);

}  // namespace nereid::http
