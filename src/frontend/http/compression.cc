#include "frontend/http/compression.h"

#include <zlib.h>

#include <algorithm>
#include <cctype>

namespace nereid::http {
namespace {

int WindowBits(Encoding e) { return e == Encoding::kGzip ? 15 + 16 : 15; }

std::string Lower(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(),
                 [](unsigned char c) { return std::tolower(c); });
  return out;
}

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

}  // namespace

StatusOr<Encoding> ParseContentEncoding(std::string_view value) {
  const std::string v = Lower(Trim(value));
  if (v.empty() || v == "identity") return Encoding::kIdentity;
  if (v == "gzip") return Encoding::kGzip;
  if (v == "deflate") return Encoding::kDeflate;
  return Unsupported("unsupported Content-Encoding '" + std::string(value) +
                     "' (supported: gzip, deflate)");
}

Encoding PickAcceptEncoding(std::string_view value) {
  while (!value.empty()) {
    const size_t comma = value.find(',');
    std::string_view item = Trim(value.substr(0, comma));
    value = comma == std::string_view::npos ? std::string_view() : value.substr(comma + 1);
    const size_t semi = item.find(';');
    const std::string name = Lower(Trim(item.substr(0, semi)));
    if (semi != std::string_view::npos) {
      std::string params = Lower(item.substr(semi + 1));
      params.erase(std::remove(params.begin(), params.end(), ' '), params.end());
      if (params == "q=0" || params == "q=0.0" || params == "q=0.00" || params == "q=0.000")
        continue;
    }
    if (name == "gzip") return Encoding::kGzip;
    if (name == "deflate") return Encoding::kDeflate;
  }
  return Encoding::kIdentity;
}

std::string_view EncodingName(Encoding e) {
  return e == Encoding::kGzip ? "gzip" : e == Encoding::kDeflate ? "deflate" : "identity";
}

StatusOr<std::string> Inflate(Encoding e, std::string_view in, size_t limit) {
  if (e == Encoding::kIdentity) return std::string(in);
  z_stream zs{};
  if (inflateInit2(&zs, WindowBits(e)) != Z_OK) return Internal("inflateInit failed");
  zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data()));
  zs.avail_in = static_cast<uInt>(in.size());
  std::string out;
  int rc = Z_OK;
  char chunk[65536];
  while (rc != Z_STREAM_END) {
    zs.next_out = reinterpret_cast<Bytef*>(chunk);
    zs.avail_out = sizeof(chunk);
    rc = inflate(&zs, Z_NO_FLUSH);
    if (rc != Z_OK && rc != Z_STREAM_END) {
      inflateEnd(&zs);
      return InvalidArgument("failed to decompress the " + std::string(EncodingName(e)) +
                             " request body (corrupt or truncated)");
    }
    out.append(chunk, sizeof(chunk) - zs.avail_out);
    if (out.size() > limit) {
      inflateEnd(&zs);
      return InvalidArgument("decompressed request body exceeds the limit of " +
                             std::to_string(limit) + " bytes (--http-max-input-size)");
    }
    if (rc == Z_OK && zs.avail_in == 0 && zs.avail_out != 0) {
      inflateEnd(&zs);
      return InvalidArgument("failed to decompress the " + std::string(EncodingName(e)) +
                             " request body: it is truncated");
    }
  }
  inflateEnd(&zs);
  return out;
}

StatusOr<std::string> Deflate(Encoding e, std::string_view in) {
  if (e == Encoding::kIdentity) return std::string(in);
  z_stream zs{};
  if (deflateInit2(&zs, Z_DEFAULT_COMPRESSION, Z_DEFLATED, WindowBits(e), 8, Z_DEFAULT_STRATEGY) !=
      Z_OK)
    return Internal("deflateInit failed");
  std::string out;
  out.resize(deflateBound(&zs, static_cast<uLong>(in.size())));
  zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data()));
  zs.avail_in = static_cast<uInt>(in.size());
  zs.next_out = reinterpret_cast<Bytef*>(out.data());
  zs.avail_out = static_cast<uInt>(out.size());
  const int rc = deflate(&zs, Z_FINISH);
  deflateEnd(&zs);
  if (rc != Z_STREAM_END) return Internal("compression failed");
  out.resize(zs.total_out);
  return out;
}

}  // namespace nereid::http
