// NereidRequestsOutputAllocate (ABI 2.10): one output of a batch's requests in one block of the
// server's host memory, each request's slice right after the one before, or none at all.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <vector>

#include "nereid/backend.h"
#include "runtime/backend_abi.h"

namespace nereid {
namespace {

// Requests that each name output "y" (the model's only output).
std::vector<std::unique_ptr<BackendRequest>> Requests(size_t n) {
  std::vector<std::unique_ptr<BackendRequest>> out;
  for (size_t i = 0; i < n; ++i) {
    auto r = std::make_unique<BackendRequest>();
    r->request = std::make_unique<InferenceRequest>();
    RequestedOutput y;
    y.name = "y";
    r->request->outputs.push_back(std::move(y));
    r->response = std::make_unique<InferenceResponse>();
    out.push_back(std::move(r));
  }
  return out;
}

std::vector<NereidRequest*> Handles(const std::vector<std::unique_ptr<BackendRequest>>& rs) {
  std::vector<NereidRequest*> out;
  for (const auto& r : rs) out.push_back(r->handle());
  return out;
}

// Frees an error and says whether there was one.
bool Failed(NereidError* e) {
  if (e == nullptr) return false;
  NereidErrorDelete(e);
  return true;
}

TEST(OutputBlock, SlicesFollowOneAnotherAndOutliveTheirNeighbours) {
  auto rs = Requests(3);
  auto handles = Handles(rs);
  const std::vector<int64_t> shapes = {2, 4, 3, 4, 1, 4};  // [2, 4], [3, 4], [1, 4] floats
  const std::vector<uint64_t> sizes = {32, 48, 16};
  std::vector<NereidBuffer> b(3);
  ASSERT_EQ(NereidRequestsOutputAllocate(handles.data(), 3, "y", NEREID_TYPE_FP32, shapes.data(), 2,
                                         sizes.data(), NEREID_MEMORY_GPU, b.data()),
            nullptr);
  EXPECT_EQ(static_cast<uint8_t*>(b[1].data), static_cast<uint8_t*>(b[0].data) + 32);
  EXPECT_EQ(static_cast<uint8_t*>(b[2].data), static_cast<uint8_t*>(b[1].data) + 48);
  for (int i = 0; i < 3; ++i) {
    EXPECT_NE(b[i].memory_type, NEREID_MEMORY_GPU);  // host memory, never a device's
    const auto& outputs = rs[i]->response->outputs;
    ASSERT_EQ(outputs.size(), 1u);
    EXPECT_EQ(outputs[0].name, "y");
    EXPECT_EQ(outputs[0].datatype, DataType::kFp32);
    EXPECT_EQ(outputs[0].shape,
              std::vector<int64_t>(shapes.begin() + 2 * i, shapes.begin() + 2 * i + 2));
    EXPECT_EQ(outputs[0].buffer.data(), b[i].data);
    EXPECT_EQ(outputs[0].buffer.size(), sizes[i]);
  }
  std::memset(b[2].data, 0x5A, 16);
  // The first two responses go (their requests answered): the third's slice still holds its bytes.
  rs[0].reset(), rs[1].reset();
  const auto* last = static_cast<const uint8_t*>(rs[2]->response->outputs[0].buffer.data());
  for (int i = 0; i < 16; ++i) EXPECT_EQ(last[i], 0x5A);
  // The same output again for these requests: refused.
  std::vector<NereidRequest*> again = {rs[2]->handle()};
  EXPECT_TRUE(
      Failed(NereidRequestsOutputAllocate(again.data(), 1, "y", NEREID_TYPE_FP32, shapes.data() + 4,
                                          2, sizes.data() + 2, NEREID_MEMORY_CPU, b.data())));
}

TEST(OutputBlock, AllOrNothing) {
  const std::vector<int64_t> shapes = {2, 4, 2, 4};
  const std::vector<uint64_t> sizes = {32, 32};
  std::vector<NereidBuffer> b(2);
  // Output "y" of rank 2 for the first 'count' requests of 'h': whether it was refused.
  auto refused = [&b](std::vector<NereidRequest*>& h, uint32_t count, NereidDataType type,
                      const int64_t* dims, const uint64_t* bytes, NereidMemoryType preferred) {
    return Failed(NereidRequestsOutputAllocate(h.data(), count, "y", type, dims, 2, bytes,
                                               preferred, b.data()));
  };
  auto none_allocated = [](const std::vector<std::unique_ptr<BackendRequest>>& rs) {
    for (const auto& r : rs)
      if (!r->response->outputs.empty()) return false;
    return true;
  };
  {  // The second request's output goes to its shared-memory region.
    auto rs = Requests(2);
    rs[1]->request->outputs[0].has_destination = true;
    auto h = Handles(rs);
    EXPECT_TRUE(refused(h, 2, NEREID_TYPE_FP32, shapes.data(), sizes.data(), NEREID_MEMORY_GPU));
    EXPECT_TRUE(none_allocated(rs));
  }
  {  // The next step of an ensemble reads it on the device (a GPU preference keeps it there).
    auto rs = Requests(2);
    rs[0]->request->outputs[0].device_ok = true;
    auto h = Handles(rs);
    EXPECT_TRUE(refused(h, 2, NEREID_TYPE_FP32, shapes.data(), sizes.data(), NEREID_MEMORY_GPU));
    EXPECT_TRUE(none_allocated(rs));
    // Asked for in host memory, it may share the block.
    EXPECT_FALSE(refused(h, 2, NEREID_TYPE_FP32, shapes.data(), sizes.data(), NEREID_MEMORY_CPU));
  }
  {  // Sizes that do not match the shapes, an overflowing shape, BYTES, no requests.
    auto rs = Requests(2);
    auto h = Handles(rs);
    const std::vector<uint64_t> wrong = {32, 31};
    EXPECT_TRUE(refused(h, 2, NEREID_TYPE_FP32, shapes.data(), wrong.data(), NEREID_MEMORY_GPU));
    const std::vector<int64_t> huge = {int64_t{1} << 62, 8, 2, 4};
    const std::vector<uint64_t> huge_sizes = {0, 32};
    EXPECT_TRUE(refused(h, 2, NEREID_TYPE_FP32, huge.data(), huge_sizes.data(), NEREID_MEMORY_GPU));
    EXPECT_TRUE(refused(h, 2, NEREID_TYPE_BYTES, shapes.data(), sizes.data(), NEREID_MEMORY_GPU));
    EXPECT_TRUE(refused(h, 0, NEREID_TYPE_FP32, shapes.data(), sizes.data(), NEREID_MEMORY_GPU));
    EXPECT_TRUE(none_allocated(rs));
  }
}

}  // namespace
}  // namespace nereid
