// ResponseCache: the server's one response cache (`--cache-config local,size=BYTES`), shared by
// every model whose config enables `response_cache`. A request's key hashes its model, version
// and inputs sorted by name (name, datatype, shape and bytes); a hit answers with the stored
// outputs (their bytes shared, not copied) without reaching the scheduler. Least recently used
// entries are evicted until a new one fits. Thread-safe.
#pragma once

#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/status.h"
#include "request/inference_request.h"

namespace nereid {

// What `--cache-config` (and Triton's deprecated `--response-cache-byte-size`) ask for.
struct CacheConfig {
  std::string implementation;  // "local"; empty: no cache
  uint64_t size = 0;           // bytes
};

class ResponseCache {
 public:
  struct Key {
    uint64_t hash = 0;
    uint64_t check = 0;  // a second, independent hash: a collision of 'hash' is not a hit
  };
  struct Counters {
    uint64_t entries = 0, bytes = 0, capacity = 0, lookups = 0, hits = 0, misses = 0, evictions = 0,
             too_large = 0;
  };

  explicit ResponseCache(uint64_t capacity_bytes);

  // The key of a validated request to model version ('model', 'version') as loaded the
  // 'generation'-th time (a reload that replaced the model's files never answers from what the
  // previous load stored); nullopt when it is not cached: an input outside host memory, or an
  // output going to shared memory.
  static std::optional<Key> KeyOf(const InferenceRequest& request, const std::string& model,
                                  int64_t version, uint64_t generation = 0);
  // The stored response holding every output 'request' names (its bytes shared), or null.
  std::unique_ptr<InferenceResponse> Lookup(const Key& key, const InferenceRequest& request);
  // Stores a copy of a successful response's outputs; false (logged the first time) when it is
  // larger than the whole cache.
  bool Insert(const Key& key, const InferenceResponse& response);

  Counters counters() const;

 private:
  struct Output {
    std::string name;
    DataType datatype = DataType::kInvalid;
    std::vector<int64_t> shape;
    std::shared_ptr<std::vector<uint8_t>> bytes;
  };
  struct Entry {
    Key key;
    std::vector<Output> outputs;
    uint64_t size = 0;
  };
  using List = std::list<Entry>;

  const uint64_t capacity_;
  mutable std::mutex mu_;
  List lru_;  // most recently used first
  std::unordered_map<uint64_t, List::iterator> index_;
  Counters counters_;
};

// Reads `--cache-config` values ("local,size=1048576", several for one implementation) and
// `--response-cache-byte-size` (0: not given) into one config, with Triton's refusals.
StatusOr<CacheConfig> ParseCacheConfig(const std::vector<std::string>& cache_configs,
                                       uint64_t response_cache_byte_size);

}  // namespace nereid
