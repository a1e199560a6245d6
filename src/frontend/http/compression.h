// gzip / deflate (zlib-wrapped, as Python's zlib and Triton use) for HTTP request and response
// bodies. Inflation is bounded so a small compressed body cannot expand past the body limit.
#pragma once

#include <string>
#include <string_view>

#include "common/status.h"

namespace nereid::http {

enum class Encoding { kIdentity, kGzip, kDeflate };

// Parses a Content-Encoding value; kIdentity for empty/"identity", error for anything unknown.
StatusOr<Encoding> ParseContentEncoding(std::string_view value);
// Picks the first of gzip/deflate named in an Accept-Encoding header (q=0 excluded).
Encoding PickAcceptEncoding(std::string_view value);
std::string_view EncodingName(Encoding e);

StatusOr<std::string> Inflate(Encoding e, std::string_view in, size_t limit);
StatusOr<std::string> Deflate(Encoding e, std::string_view in);

}  // namespace nereid::http
