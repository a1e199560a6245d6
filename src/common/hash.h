// Hasher64: a 64-bit hash of a stream of bytes, numbers and strings, eight bytes a step (inputs may
// be megabytes; a byte-wise hash would cost milliseconds), finished by a strong mix. Two seeds make
// two independent hashes. Not cryptographic: for keys and fingerprints, not for secrets.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

namespace nereid {

class Hasher64 {
 public:
  explicit Hasher64(uint64_t seed) : h_(seed) {}
  void Add(const void* data, size_t size) {
    const auto* p = static_cast<const uint8_t*>(data);
    size_t i = 0;
    for (; i + 8 <= size; i += 8) {
      uint64_t w;
      std::memcpy(&w, p + i, 8);
      Word(w);
    }
    if (i < size) {
      uint64_t w = 0;
      std::memcpy(&w, p + i, size - i);
      Word(w);
    }
    Word(size);  // "ab" + "c" differs from "a" + "bc"
  }
  void Add(uint64_t value) { Word(value); }
  void Add(const std::string& text) { Add(text.data(), text.size()); }
  uint64_t Finish() const {
    uint64_t h = h_;
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdULL;
    h ^= h >> 33;
    h *= 0xc4ceb9fe1a85ec53ULL;
    h ^= h >> 33;
    return h;
  }

 private:
  void Word(uint64_t w) {
    h_ ^= w * 0x9e3779b97f4a7c15ULL;
    h_ = (h_ << 27 | h_ >> 37) * 0x100000001b3ULL + 0x52dce729ULL;
  }
  uint64_t h_;
};

}  // namespace nereid
