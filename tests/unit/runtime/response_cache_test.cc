// The response cache: its key (inputs sorted by name; shapes and bytes count, requested outputs
// do not), hits sharing the stored bytes, LRU eviction within the size, entries larger than the
// cache, and the --cache-config flags' refusals.
#include "runtime/response_cache.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <thread>

namespace nereid {
namespace {

std::unique_ptr<InferenceRequest> Request(
    std::vector<std::pair<std::string, std::vector<float>>> inputs,
    std::vector<std::string> outputs = {"y"}) {
  auto r = std::make_unique<InferenceRequest>();
  for (auto& [name, values] : inputs) {
    InferInput& in = r->inputs.emplace_back();
    in.name = name;
    in.datatype = DataType::kFp32;
    in.shape = {1, static_cast<int64_t>(values.size())};
    std::vector<uint8_t> bytes(values.size() * sizeof(float));
    std::memcpy(bytes.data(), values.data(), bytes.size());
    in.Own(std::move(bytes));
  }
  for (auto& name : outputs) r->outputs.emplace_back().name = name;
  return r;
}

InferenceResponse Response(std::vector<std::pair<std::string, size_t>> outputs) {
  InferenceResponse r;
  for (auto& [name, size] : outputs) {
    InferOutput& out = r.outputs.emplace_back();
    out.name = name;
    out.datatype = DataType::kUint8;
    out.shape = {1, static_cast<int64_t>(size)};
    out.SetBytes(std::vector<uint8_t>(size, static_cast<uint8_t>(name[0])));
  }
  return r;
}

TEST(ResponseCacheTest, KeysFollowTheInputsNotTheirOrderOrTheOutputsAsked) {
  auto a = Request({{"x0", {1, 2}}, {"x1", {3}}});
  auto b = Request({{"x1", {3}}, {"x0", {1, 2}}}, {"y", "z"});
  auto c = Request({{"x0", {1, 2}}, {"x1", {4}}});
  const auto ka = ResponseCache::KeyOf(*a, "m", 1), kb = ResponseCache::KeyOf(*b, "m", 1);
  ASSERT_TRUE(ka && kb);
  EXPECT_EQ(ka->hash, kb->hash);
  EXPECT_EQ(ka->check, kb->check);
  EXPECT_NE(ResponseCache::KeyOf(*c, "m", 1)->hash, ka->hash);   // other bytes
  EXPECT_NE(ResponseCache::KeyOf(*a, "m", 2)->hash, ka->hash);   // other version
  EXPECT_NE(ResponseCache::KeyOf(*a, "m2", 1)->hash, ka->hash);  // other model
  auto reshaped = Request({{"x0", {1, 2}}, {"x1", {3}}});
  reshaped->inputs[0].shape = {2, 1};  // the same bytes in another shape is another request
  EXPECT_NE(ResponseCache::KeyOf(*reshaped, "m", 1)->hash, ka->hash);
  auto shm = Request({{"x0", {1}}});
  shm->outputs[0].has_destination = true;  // written into the client's region: not cached
  EXPECT_FALSE(ResponseCache::KeyOf(*shm, "m", 1));
}

TEST(ResponseCacheTest, AHitSharesTheStoredBytesAndCoversTheAskedOutputs) {
  ResponseCache cache(1 << 20);
  auto first = Request({{"x", {1}}}, {"y", "z"});
  const auto key = *ResponseCache::KeyOf(*first, "m", 1);
  EXPECT_EQ(cache.Lookup(key, *first), nullptr);
  ASSERT_TRUE(cache.Insert(key, Response({{"y", 4}, {"z", 8}})));
  auto second = Request({{"x", {1}}}, {"z"});
  second->outputs[0].binary = true;
  auto hit = cache.Lookup(key, *second);
  ASSERT_NE(hit, nullptr);
  ASSERT_EQ(hit->outputs.size(), 1u);
  EXPECT_EQ(hit->outputs[0].name, "z");
  EXPECT_TRUE(hit->outputs[0].binary);  // as this request asked
  EXPECT_EQ(hit->outputs[0].byte_size(), 8u);
  EXPECT_EQ(hit->outputs[0].bytes()[0], 'z');
  EXPECT_EQ(hit->outputs[0].shape, (std::vector<int64_t>{1, 8}));
  // Stored from a request that asked for 'y' only: a request for 'z' is a miss.
  ResponseCache narrow(1 << 20);
  ASSERT_TRUE(narrow.Insert(key, Response({{"y", 4}})));
  EXPECT_EQ(narrow.Lookup(key, *second), nullptr);
  const auto c = cache.counters();
  EXPECT_EQ(c.lookups, 2u);
  EXPECT_EQ(c.hits, 1u);
  EXPECT_EQ(c.misses, 1u);
  EXPECT_EQ(c.entries, 1u);
}

TEST(ResponseCacheTest, EvictsTheLeastRecentlyUsedAndRefusesWhatCannotFit) {
  // Room for two entries of 1,000 bytes (each also counts its bookkeeping) but not three.
  ResponseCache cache(2 * 1200);
  std::vector<ResponseCache::Key> keys;
  std::vector<std::unique_ptr<InferenceRequest>> requests;
  for (float v : {1.0f, 2.0f, 3.0f}) {
    requests.push_back(Request({{"x", {v}}}));
    keys.push_back(*ResponseCache::KeyOf(*requests.back(), "m", 1));
  }
  ASSERT_TRUE(cache.Insert(keys[0], Response({{"y", 1000}})));
  ASSERT_TRUE(cache.Insert(keys[1], Response({{"y", 1000}})));
  ASSERT_NE(cache.Lookup(keys[0], *requests[0]), nullptr);  // 0 is now the most recent
  ASSERT_TRUE(cache.Insert(keys[2], Response({{"y", 1000}})));
  EXPECT_NE(cache.Lookup(keys[0], *requests[0]), nullptr);
  EXPECT_EQ(cache.Lookup(keys[1], *requests[1]), nullptr);  // the least recently used went
  EXPECT_NE(cache.Lookup(keys[2], *requests[2]), nullptr);
  EXPECT_EQ(cache.counters().evictions, 1u);
  EXPECT_LE(cache.counters().bytes, 2u * 1200);
  // Larger than the whole cache: refused, nothing evicted for it.
  EXPECT_FALSE(cache.Insert(keys[1], Response({{"y", 5000}})));
  EXPECT_EQ(cache.counters().too_large, 1u);
  EXPECT_EQ(cache.counters().entries, 2u);
}

// Threads looking up, inserting and evicting at once (TSan runs this in scripts/sanitize.sh): every
// hit is whole and holds what was stored under its key.
TEST(ResponseCacheTest, ConcurrentLookupsAndInsertsStayConsistent) {
  ResponseCache cache(8 * 1200);  // room for 8 of the 32 keys: constant eviction
  std::vector<std::unique_ptr<InferenceRequest>> requests;
  std::vector<ResponseCache::Key> keys;
  for (int k = 0; k < 32; ++k) {
    requests.push_back(Request({{"x", {static_cast<float>(k)}}}));
    keys.push_back(*ResponseCache::KeyOf(*requests.back(), "m", 1));
  }
  std::atomic<int> bad{0}, hits{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 2000; ++i) {
        // Each key four times in a row (hits even if the threads never overlap), then the next.
        const int k = ((i / 4) * 7 + t) % 32;
        if (auto hit = cache.Lookup(keys[k], *requests[k])) {
          ++hits;
          // Response({"y", n}) fills its bytes with 'y'; the size says which key stored it.
          if (hit->outputs.size() != 1 || hit->outputs[0].byte_size() != 900u + k ||
              hit->outputs[0].bytes()[0] != 'y')
            ++bad;
        } else {
          cache.Insert(keys[k], Response({{"y", 900u + k}}));
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(bad.load(), 0);
  EXPECT_GT(hits.load(), 0);
  EXPECT_LE(cache.counters().bytes, 8u * 1200);
}

TEST(ResponseCacheTest, CacheFlagsAreReadAsTritonReadsThem) {
  EXPECT_TRUE(ParseCacheConfig({}, 0)->implementation.empty());
  auto local = ParseCacheConfig({"local,size=1048576"}, 0);
  ASSERT_TRUE(local.ok());
  EXPECT_EQ(local->implementation, "local");
  EXPECT_EQ(local->size, 1048576u);
  EXPECT_EQ(ParseCacheConfig({}, 8192)->size, 8192u);  // --response-cache-byte-size
  EXPECT_NE(ParseCacheConfig({"local,size=1"}, 8192).status().message().find("Incompatible flags"),
            std::string::npos);
  EXPECT_NE(ParseCacheConfig({"local,size=8192", "redis,key=value"}, 0)
                .status()
                .message()
                .find("multiple cache configurations"),
            std::string::npos);
  EXPECT_NE(ParseCacheConfig({"size=5"}, 0).status().message().find("No cache specified"),
            std::string::npos);
  EXPECT_NE(ParseCacheConfig({"local,size"}, 0).status().message().find("option format is"),
            std::string::npos);
  EXPECT_EQ(ParseCacheConfig({"redis,host=localhost"}, 0).status().code(),
            Status::Code::kUnsupported);
  EXPECT_FALSE(ParseCacheConfig({"local,size=lots"}, 0).ok());
  EXPECT_FALSE(ParseCacheConfig({"local,size=0"}, 0).ok());
}

}  // namespace
}  // namespace nereid
