#include "memory/memory_pool.h"

#include <memory>
#include <vector>

#include "common/logging.h"
#include "gpu/cuda_driver.h"

namespace nereid {

RegionPool::RegionPool(size_t size, size_t alignment)
    : size_(size / alignment * alignment), alignment_(alignment) {
  if (size_ > 0) InsertFree(0, size_);
}

void RegionPool::InsertFree(size_t offset, size_t length) {
  free_by_offset_[offset] = length;
  free_by_size_.emplace(length, offset);
}

void RegionPool::EraseFree(std::map<size_t, size_t>::iterator it) {
  auto range = free_by_size_.equal_range(it->second);
  for (auto s = range.first; s != range.second; ++s)
    if (s->second == it->first) {
      free_by_size_.erase(s);
      break;
    }
  free_by_offset_.erase(it);
}

std::optional<size_t> RegionPool::Allocate(size_t bytes) {
  if (bytes == 0) bytes = 1;
  if (bytes > size_) return std::nullopt;
  const size_t length = (bytes + alignment_ - 1) / alignment_ * alignment_;
  std::lock_guard lock(mu_);
  auto best = free_by_size_.lower_bound(length);
  if (best == free_by_size_.end()) return std::nullopt;
  const size_t offset = best->second, block = best->first;
  EraseFree(free_by_offset_.find(offset));
  if (block > length) InsertFree(offset + length, block - length);
  used_[offset] = length;
  used_bytes_ += length;
  return offset;
}

void RegionPool::Free(size_t offset) {
  std::lock_guard lock(mu_);
  auto it = used_.find(offset);
  if (it == used_.end()) return;
  size_t start = offset, length = it->second;
  used_bytes_ -= length;
  used_.erase(it);
  auto next = free_by_offset_.find(start + length);
  if (next != free_by_offset_.end()) {
    length += next->second;
    EraseFree(next);
  }
  auto prev = free_by_offset_.lower_bound(start);
  if (prev != free_by_offset_.begin()) {
    --prev;
    if (prev->first + prev->second == start) {
      start = prev->first;
      length += prev->second;
      EraseFree(prev);
    }
  }
  InsertFree(start, length);
}

size_t RegionPool::used() const {
  std::lock_guard lock(mu_);
  return used_bytes_;
}

namespace {

// One region of memory and its pool; lives for the rest of the process (buffers may be released
// by threads still running at exit).
struct Region {
  std::string name;
  uint8_t* base = nullptr;
  MemoryLocation location;
  std::unique_ptr<RegionPool> pool;
};

struct Pools {
  std::mutex mu;
  bool configured = false;
  Region* pinned = nullptr;
  std::map<int, Region*> cuda;
};

Pools& ThePools() {
  static Pools* pools = new Pools();
  return *pools;
}

StatusOr<Buffer> FromRegion(Region* region, size_t bytes) {
  if (region == nullptr) return NotFound("no pool");
  std::optional<size_t> offset = region->pool->Allocate(bytes);
  if (!offset) return Unavailable(region->name + " pool is full");
  std::shared_ptr<const void> owner(region->base + *offset,
                                    [region, o = *offset](const void*) { region->pool->Free(o); });
  return Buffer(region->base + *offset, bytes, region->location, std::move(owner));
}

}  // namespace

Status ConfigureMemoryPools(const MemoryPoolOptions& options) {
  Pools& pools = ThePools();
  std::lock_guard lock(pools.mu);
  if (pools.configured) return Internal("memory pools are configured once");
  pools.configured = true;
  auto& driver = gpu::CudaDriver::Get();
  for (const auto& [device, bytes] : options.cuda_bytes)
    if (device < 0 || device >= driver.device_count())
      return InvalidArgument(
          "--cuda-memory-pool-byte-size names GPU " + std::to_string(device) + ", but " +
          (driver.available()
               ? "this machine has " + std::to_string(driver.device_count()) + " GPUs"
               : driver.unavailable_reason()));
  if (!driver.available()) return Status::Ok();
  constexpr size_t kAlignment = 256;  // what cudaMalloc guarantees; enough for any vector access
  if (options.pinned_bytes > 0) {
    auto p = driver.HostAlloc(options.pinned_bytes);
    if (!p.ok())
      return Unavailable("--pinned-memory-pool-byte-size=" + std::to_string(options.pinned_bytes) +
                         ": " + p.status().message());
    pools.pinned =
        new Region{"pinned", static_cast<uint8_t*>(*p), MemoryLocation{MemoryType::kCpuPinned, 0},
                   std::make_unique<RegionPool>(options.pinned_bytes, kAlignment)};
  }
  for (int d = 0; d < driver.device_count(); ++d) {
    auto listed = options.cuda_bytes.find(d);
    const size_t bytes =
        listed != options.cuda_bytes.end() ? listed->second : options.default_cuda_bytes;
    if (bytes == 0) continue;
    auto p = driver.DeviceAlloc(d, bytes);
    if (!p.ok())
      return Unavailable("--cuda-memory-pool-byte-size=" + std::to_string(d) + ":" +
                         std::to_string(bytes) + ": " + p.status().message());
    pools.cuda[d] = new Region{"cuda:" + std::to_string(d), reinterpret_cast<uint8_t*>(*p),
                               MemoryLocation{MemoryType::kGpu, d},
                               std::make_unique<RegionPool>(bytes, kAlignment)};
  }
  LOG_INFO << "memory pools: pinned " << options.pinned_bytes << " bytes; CUDA "
           << pools.cuda.size() << " device pool(s)";
  return Status::Ok();
}

std::vector<PoolUsage> MemoryPoolUsage() {
  Pools& pools = ThePools();
  std::lock_guard lock(pools.mu);
  std::vector<PoolUsage> out;
  if (pools.pinned != nullptr)
    out.push_back({"pinned", pools.pinned->pool->size(), pools.pinned->pool->used()});
  for (const auto& [d, region] : pools.cuda)
    out.push_back({region->name, region->pool->size(), region->pool->used()});
  return out;
}

bool PinnedPoolAvailable() {
  Pools& pools = ThePools();
  std::lock_guard lock(pools.mu);
  return pools.pinned != nullptr;
}

StatusOr<Buffer> AllocatePinned(size_t bytes) {
  Pools& pools = ThePools();
  Region* region;
  {
    std::lock_guard lock(pools.mu);
    region = pools.pinned;
  }
  if (region != nullptr) {
    auto buffer = FromRegion(region, bytes);
    if (buffer.ok()) return buffer;
    return HeapAllocator().Allocate(bytes, MemoryLocation{});  // pool full: pageable
  }
  if (gpu::CudaDriver::Get().available())  // pinned pool disabled (size 0): pageable
    return HeapAllocator().Allocate(bytes, MemoryLocation{});
  return PinnedAllocator().Allocate(bytes, MemoryLocation{MemoryType::kCpuPinned, 0});
}

StatusOr<Buffer> AllocateDevice(size_t bytes, int64_t device) {
  auto& driver = gpu::CudaDriver::Get();
  if (device < 0 || device >= driver.device_count())
    return InvalidArgument("GPU " + std::to_string(device) + " does not exist" +
                           (driver.available() ? "" : ": " + driver.unavailable_reason()));
  Pools& pools = ThePools();
  Region* region = nullptr;
  {
    std::lock_guard lock(pools.mu);
    auto it = pools.cuda.find(static_cast<int>(device));
    if (it != pools.cuda.end()) region = it->second;
  }
  if (region != nullptr) {
    auto buffer = FromRegion(region, bytes);
    if (buffer.ok()) return buffer;
  }
  ASSIGN_OR_RETURN(uint64_t ptr, driver.DeviceAlloc(static_cast<int>(device), bytes));
  const int d = static_cast<int>(device);
  std::shared_ptr<const void> owner(reinterpret_cast<void*>(ptr), [d](const void* p) {
    gpu::CudaDriver::Get().DeviceFree(d, reinterpret_cast<uint64_t>(p));
  });
  return Buffer(reinterpret_cast<uint8_t*>(ptr), bytes, MemoryLocation{MemoryType::kGpu, device},
                std::move(owner));
}

}  // namespace nereid
