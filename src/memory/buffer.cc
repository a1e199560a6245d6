#include "memory/buffer.h"

#include <sys/mman.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <new>

#include "gpu/cuda_driver.h"
#include "memory/memory_pool.h"

namespace nereid {
namespace {

constexpr size_t kAlignment = 64;
// A single allocation above this is refused instead of attempted (no tensor the server accepts can
// be that large: request bodies and gRPC messages are bounded far below).
constexpr size_t kMaxAllocation = size_t{1} << 40;

// Copy counters, sharded by thread so that the request path never shares a cache line: each
// thread adds to its own slot; readers sum the slots.
struct alignas(64) CopySlot {
  std::atomic<uint64_t> counts[4];
};
constexpr size_t kCopySlots = 64;
CopySlot g_slots[kCopySlots];
std::atomic<size_t> g_next_slot{0};
CopySlot& MySlot() {
  thread_local CopySlot& slot =
      g_slots[g_next_slot.fetch_add(1, std::memory_order_relaxed) % kCopySlots];
  return slot;
}

}  // namespace

std::shared_ptr<uint8_t[]> AllocateAligned(size_t bytes) {
  // One allocation for the control block and the bytes (this is on every request's path), the
  // returned pointer aliasing the first 64-byte boundary inside it.
  auto block = std::make_shared_for_overwrite<uint8_t[]>(bytes + kAlignment);
  const auto address = reinterpret_cast<uintptr_t>(block.get());
  const size_t skip = (kAlignment - address % kAlignment) % kAlignment;
  uint8_t* aligned = block.get() + skip;
  return std::shared_ptr<uint8_t[]>(std::move(block), aligned);
}

StatusOr<Buffer> HeapAllocator::Allocate(size_t bytes, MemoryLocation) {
  if (bytes > kMaxAllocation)
    return InvalidArgument("cannot allocate " + std::to_string(bytes) + " bytes");
  std::shared_ptr<uint8_t[]> storage;
  try {
    storage = AllocateAligned(bytes);
  } catch (const std::bad_alloc&) {
    return Unavailable("out of memory allocating " + std::to_string(bytes) + " bytes");
  }
  uint8_t* data = storage.get();
  return Buffer(data, bytes, MemoryLocation{MemoryType::kCpu, 0}, std::move(storage));
}

StatusOr<Buffer> PinnedAllocator::Allocate(size_t bytes, MemoryLocation preferred) {
  if (bytes > kMaxAllocation)
    return InvalidArgument("cannot allocate " + std::to_string(bytes) + " bytes");
  const size_t length = std::max<size_t>(bytes, 1);
  void* p = mmap(nullptr, length, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return HeapAllocator().Allocate(bytes, preferred);
  if (mlock(p, length) != 0) {  // over RLIMIT_MEMLOCK: ordinary memory serves
    munmap(p, length);
    return HeapAllocator().Allocate(bytes, preferred);
  }
  std::shared_ptr<const void> owner(p, [length](const void* q) {
    munlock(q, length);
    munmap(const_cast<void*>(q), length);
  });
  return Buffer(static_cast<uint8_t*>(p), bytes, MemoryLocation{MemoryType::kCpuPinned, 0},
                std::move(owner));
}

namespace {
class ServerAllocator final : public Allocator {
 public:
  StatusOr<Buffer> Allocate(size_t bytes, MemoryLocation preferred) override {
    if (bytes > kMaxAllocation)
      return InvalidArgument("cannot allocate " + std::to_string(bytes) + " bytes");
    if (preferred.type == MemoryType::kCpuPinned) return AllocatePinned(bytes);
    if (preferred.type == MemoryType::kGpu) return AllocateDevice(bytes, preferred.device);
    return heap_.Allocate(bytes, preferred);
  }

 private:
  HeapAllocator heap_;
};
}  // namespace

Allocator& DefaultAllocator() {
  static ServerAllocator allocator;
  return allocator;
}

void CountCopy(CopyKind kind, size_t bytes) {
  const int base = kind == CopyKind::kInput ? 0 : 2;
  CopySlot& slot = MySlot();
  slot.counts[base].fetch_add(bytes, std::memory_order_relaxed);
  slot.counts[base + 1].fetch_add(1, std::memory_order_relaxed);
}

namespace {
std::atomic<uint64_t> g_handoff[2][2];  // [kind][device]
}  // namespace

void CountHandoff(HandoffKind kind, bool device, size_t bytes) {
  g_handoff[static_cast<int>(kind)][device ? 1 : 0].fetch_add(bytes, std::memory_order_relaxed);
}

HandoffCounts HandoffCountsNow() {
  HandoffCounts c;
  for (int k = 0; k < 2; ++k)
    for (int d = 0; d < 2; ++d) c.bytes[k][d] = g_handoff[k][d].load(std::memory_order_relaxed);
  return c;
}

CopyCounts CopyCountsNow() {
  uint64_t sum[4] = {0, 0, 0, 0};
  for (const CopySlot& slot : g_slots)
    for (int i = 0; i < 4; ++i) sum[i] += slot.counts[i].load(std::memory_order_relaxed);
  return {sum[0], sum[1], sum[2], sum[3]};
}

Status CopyIntoRegion(const Buffer& region, const uint8_t* data, size_t size) {
  if (size > region.size()) return Internal("a copy larger than its destination region");
  if (region.location().type == MemoryType::kGpu) {
    RETURN_IF_ERROR(gpu::CudaDriver::Get().CopyToDevice(static_cast<int>(region.location().device),
                                                        reinterpret_cast<uint64_t>(region.data()),
                                                        data, size));
  } else if (size > 0) {
    std::memcpy(region.data(), data, size);
  }
  CountCopy(CopyKind::kOutput, size);
  return Status::Ok();
}

}  // namespace nereid
