// Standard base64 (RFC 4648, with padding) decoding, for the one place the protocol carries binary
// in JSON: a CUDA IPC handle in /v2/cudasharedmemory/.../register.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace nereid {

// The decoded bytes, or nullopt when 'text' is not valid padded base64. Line breaks and other
// ASCII whitespace between characters are skipped: Triton's C++ client (perf_analyzer's CUDA
// shared memory included) encodes with libb64, which breaks lines every 72 characters and ends
// with a newline. Anything else outside the alphabet, or padding anywhere but the end, is refused.
inline std::optional<std::string> DecodeBase64(std::string_view text) {
  auto value = [](char c) -> int {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
  };
  auto space = [](char c) { return c == '\n' || c == '\r' || c == ' ' || c == '\t'; };
  std::string out;
  out.reserve(text.size() / 4 * 3);
  int quad[4];
  int have = 0, padding = 0;
  for (const char c : text) {
    if (space(c)) continue;
    if (padding > 0 && c != '=') return std::nullopt;  // data after the padding
    if (c == '=') {
      if (have < 2) return std::nullopt;  // "=" can only end a group of 2 or 3 characters
      ++padding;
      quad[have++] = 0;
    } else {
      const int v = value(c);
      if (v < 0) return std::nullopt;
      quad[have++] = v;
    }
    if (have == 4) {
      const unsigned bits = (quad[0] << 18) | (quad[1] << 12) | (quad[2] << 6) | quad[3];
      out.push_back(static_cast<char>(bits >> 16));
      if (padding < 2) out.push_back(static_cast<char>((bits >> 8) & 0xff));
      if (padding < 1) out.push_back(static_cast<char>(bits & 0xff));
      have = 0;
      if (padding > 0) padding = 3;  // the group with padding must be the last one
    }
  }
  if (have != 0) return std::nullopt;  // not a multiple of 4 characters
  return out;
}

}  // namespace nereid
