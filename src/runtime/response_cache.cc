#include "runtime/response_cache.h"

#include <algorithm>
#include <charconv>
#include <set>

#include "common/hash.h"
#include "common/logging.h"

namespace nereid {
namespace {

constexpr uint64_t kEntryOverhead = 128;  // the entry's bookkeeping, counted against the size

}  // namespace

ResponseCache::ResponseCache(uint64_t capacity_bytes) : capacity_(capacity_bytes) {
  counters_.capacity = capacity_bytes;
}

std::optional<ResponseCache::Key> ResponseCache::KeyOf(const InferenceRequest& request,
                                                       const std::string& model, int64_t version,
                                                       uint64_t generation) {
  for (const auto& out : request.outputs)
    if (out.has_destination) return std::nullopt;
  std::vector<const InferInput*> inputs;
  inputs.reserve(request.inputs.size());
  for (const auto& in : request.inputs) {
    if (!in.location.host_addressable()) return std::nullopt;
    inputs.push_back(&in);
  }
  std::sort(inputs.begin(), inputs.end(),
            [](const InferInput* a, const InferInput* b) { return a->name < b->name; });
  Hasher64 first(0x6e65726569642d31ULL), second(0x63616368652d7632ULL);
  for (Hasher64* h : {&first, &second}) {
    h->Add(model);
    h->Add(static_cast<uint64_t>(version));
    h->Add(generation);
    for (const InferInput* in : inputs) {
      h->Add(in->name);
      h->Add(static_cast<uint64_t>(in->datatype));
      h->Add(static_cast<uint64_t>(in->shape.size()));
      for (int64_t d : in->shape) h->Add(static_cast<uint64_t>(d));
      h->Add(in->data, in->byte_size);
    }
  }
  return Key{first.Finish(), second.Finish()};
}

std::unique_ptr<InferenceResponse> ResponseCache::Lookup(const Key& key,
                                                         const InferenceRequest& request) {
  std::lock_guard lock(mu_);
  ++counters_.lookups;
  auto it = index_.find(key.hash);
  const Entry* entry =
      it == index_.end() || it->second->key.check != key.check ? nullptr : &*it->second;
  auto response = std::make_unique<InferenceResponse>();
  if (entry != nullptr) {
    for (const RequestedOutput& wanted : request.outputs) {
      auto o = std::find_if(entry->outputs.begin(), entry->outputs.end(),
                            [&](const Output& x) { return x.name == wanted.name; });
      if (o == entry->outputs.end()) {  // stored from a request that asked for fewer outputs
        entry = nullptr;
        break;
      }
      InferOutput& out = response->outputs.emplace_back();
      out.name = o->name;
      out.datatype = o->datatype;
      out.shape = o->shape;
      out.binary = wanted.binary;
      out.buffer = Buffer(o->bytes->data(), o->bytes->size(), MemoryLocation{}, o->bytes);
    }
  }
  if (entry == nullptr) {
    ++counters_.misses;
    return nullptr;
  }
  lru_.splice(lru_.begin(), lru_, it->second);
  ++counters_.hits;
  return response;
}

bool ResponseCache::Insert(const Key& key, const InferenceResponse& response) {
  Entry entry;
  entry.key = key;
  entry.size = kEntryOverhead;
  for (const InferOutput& out : response.outputs) {
    if (out.in_shared_memory || !out.buffer.location().host_addressable()) return false;
    entry.size += out.name.size() + out.shape.size() * sizeof(int64_t) + out.byte_size();
  }
  if (entry.size > capacity_) {
    std::lock_guard lock(mu_);
    if (counters_.too_large++ == 0)
      LOG_WARNING << "response cache: failed to insert key " << key.hash << ": cache entry of "
                  << entry.size << " bytes is larger than total cache size (" << capacity_
                  << " bytes)";
    return false;
  }
  // The bytes are copied before the lock is taken (a backend's output buffer may be reused once
  // the response is sent, which happens only after this returns).
  for (const InferOutput& out : response.outputs) {
    Output& o = entry.outputs.emplace_back();
    o.name = out.name;
    o.datatype = out.datatype;
    o.shape = out.shape;
    o.bytes = std::make_shared<std::vector<uint8_t>>(out.bytes(), out.bytes() + out.byte_size());
  }
  std::lock_guard lock(mu_);
  if (auto it = index_.find(key.hash); it != index_.end()) {
    // The newest response replaces what was stored (it may hold outputs the older one lacked).
    counters_.bytes -= it->second->size;
    lru_.erase(it->second);
    index_.erase(it);
  }
  while (counters_.bytes + entry.size > capacity_ && !lru_.empty()) {
    counters_.bytes -= lru_.back().size;
    index_.erase(lru_.back().key.hash);
    lru_.pop_back();
    ++counters_.evictions;
  }
  counters_.bytes += entry.size;
  lru_.push_front(std::move(entry));
  index_[key.hash] = lru_.begin();
  return true;
}

ResponseCache::Counters ResponseCache::counters() const {
  std::lock_guard lock(mu_);
  Counters c = counters_;
  c.entries = index_.size();
  return c;
}

StatusOr<CacheConfig> ParseCacheConfig(const std::vector<std::string>& cache_configs,
                                       uint64_t response_cache_byte_size) {
  CacheConfig config;
  if (response_cache_byte_size > 0 && !cache_configs.empty())
    return InvalidArgument(
        "Error: Incompatible flags --response-cache-byte-size and --cache-config both provided. "
        "Please provide one or the other.");
  if (response_cache_byte_size > 0) {
    LOG_WARNING << "'--response-cache-byte-size' has been deprecated: the equivalent is "
                   "'--cache-config=local,size="
                << response_cache_byte_size << "'";
    config.implementation = "local";
    config.size = response_cache_byte_size;
    return config;
  }
  std::set<std::string> seen_settings;
  for (const std::string& arg : cache_configs) {
    const size_t comma = arg.find(',');
    if (comma == std::string::npos || comma == 0)
      return InvalidArgument(
          "No cache specified. --cache-config option format is <cache name>,<setting>=<value>. "
          "Got " +
          arg);
    const size_t equals = arg.find('=', comma + 1);
    const std::string name = arg.substr(0, comma);
    const std::string setting =
        equals == std::string::npos ? "" : arg.substr(comma + 1, equals - comma - 1);
    const std::string value = equals == std::string::npos ? "" : arg.substr(equals + 1);
    if (setting.empty() || value.empty())
      return InvalidArgument(
          "--cache-config option format is '<cache name>,<setting>=<value>'. Got " + arg);
    if (!config.implementation.empty() && config.implementation != name)
      return InvalidArgument("multiple cache configurations are not supported: got '" +
                             config.implementation + "' and '" + name + "'");
    config.implementation = name;
    if (name != "local")
      return Unsupported("--cache-config: cache implementation '" + name +
                         "' is not available (Nereid has the 'local' cache)");
    if (setting != "size")
      return InvalidArgument("--cache-config: the local cache has no setting '" + setting +
                             "' (it takes size=<bytes>)");
    uint64_t size = 0;
    const auto [end, error] = std::from_chars(value.data(), value.data() + value.size(), size);
    if (error != std::errc() || end != value.data() + value.size())
      return InvalidArgument("--cache-config: size must be a number of bytes, got '" + value + "'");
    config.size = size;
  }
  if (!config.implementation.empty() && config.size == 0)
    return InvalidArgument("--cache-config: the local cache needs size=<bytes> above 0");
  return config;
}

}  // namespace nereid
