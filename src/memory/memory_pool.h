// The server's memory pools (tritonserver's --pinned-memory-pool-byte-size and
// --cuda-memory-pool-byte-size): one page-locked host region shared by every device, and one
// region of device memory per GPU, each allocated once at start and carved up per request. Output
// buffers a backend asks to have pinned, and what backends allocate for staging and device I/O
// (NereidMemoryAllocate), come from here; when a pool is full or absent the allocation falls back
// (pinned to pageable host memory, device pool to a direct device allocation) and the buffer says
// where it really is.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "memory/buffer.h"

namespace nereid {

// Best fit over a fixed region: free blocks indexed by size and by offset, neighbours coalesced
// on free. Thread-safe.
class RegionPool {
 public:
  RegionPool(size_t size, size_t alignment);
  // Offset of a block of at least 'bytes' (rounded up to the alignment), or nullopt when full.
  std::optional<size_t> Allocate(size_t bytes);
  void Free(size_t offset);
  size_t size() const { return size_; }
  size_t used() const;

 private:
  void InsertFree(size_t offset, size_t length);
  void EraseFree(std::map<size_t, size_t>::iterator it);
  const size_t size_, alignment_;
  mutable std::mutex mu_;
  std::map<size_t, size_t> free_by_offset_;     // offset -> length
  std::multimap<size_t, size_t> free_by_size_;  // length -> offset
  std::map<size_t, size_t> used_;               // offset -> length
  size_t used_bytes_ = 0;
};

struct MemoryPoolOptions {
  size_t pinned_bytes = 256u << 20;       // tritonserver's default
  size_t default_cuda_bytes = 64u << 20;  // per device, unless listed in 'cuda_bytes'
  std::map<int, size_t> cuda_bytes;       // device -> bytes
};

// Creates the pools (once, at start; a later call replaces nothing and fails). Without GPUs there
// is nothing to pin for, and pinned buffers keep coming from mlock'ed pages.
Status ConfigureMemoryPools(const MemoryPoolOptions& options);

struct PoolUsage {
  std::string name;  // "pinned" or "cuda:<device>"
  size_t size = 0, used = 0;
};
std::vector<PoolUsage> MemoryPoolUsage();

// Whether the pinned pool exists (GPUs present and --pinned-memory-pool-byte-size > 0).
bool PinnedPoolAvailable();

// Allocations from the pools (with their fallbacks), used by DefaultAllocator().
StatusOr<Buffer> AllocatePinned(size_t bytes);
StatusOr<Buffer> AllocateDevice(size_t bytes, int64_t device);

}  // namespace nereid
