// The memory model shared by frontends, core and the backend ABI glue: where bytes live (memory
// type and device), who keeps them alive (a shared owner), and how the server allocates them.
// Tensor bytes are counted wherever the server copies them (CountCopy), so that tests and metrics
// can tell a zero-copy path from one that is not.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>

#include "common/status.h"

namespace nereid {

enum class MemoryType { kCpu = 0, kCpuPinned = 1, kGpu = 2, kShm = 3 };

struct MemoryLocation {
  MemoryType type = MemoryType::kCpu;
  int64_t device = 0;
  bool host_addressable() const { return type != MemoryType::kGpu; }
};

// A span of bytes somewhere, kept alive by 'owner' (which may be null for memory owned elsewhere
// for longer than the view, e.g. a registered shared-memory region that cannot be unregistered
// while in use).
class Buffer {
 public:
  Buffer() = default;
  Buffer(uint8_t* data, size_t size, MemoryLocation location, std::shared_ptr<const void> owner)
      : data_(data), size_(size), location_(location), owner_(std::move(owner)) {}

  uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const MemoryLocation& location() const { return location_; }
  const std::shared_ptr<const void>& owner() const { return owner_; }
  bool empty() const { return size_ == 0; }

 private:
  uint8_t* data_ = nullptr;
  size_t size_ = 0;
  MemoryLocation location_;
  std::shared_ptr<const void> owner_;
};

// Where buffers come from. Implementations are thread-safe. 'preferred' is a wish: the returned
// buffer says where it really is.
class Allocator {
 public:
  virtual ~Allocator() = default;
  virtual StatusOr<Buffer> Allocate(size_t bytes, MemoryLocation preferred) = 0;
};

// Host heap, 64-byte aligned. Never fails for sizes the process can hold; refuses absurd sizes.
class HeapAllocator final : public Allocator {
 public:
  StatusOr<Buffer> Allocate(size_t bytes, MemoryLocation preferred) override;
};

// Page-locked host memory (mmap + mlock). Falls back to the heap when the lock limit is reached,
// and says so in the buffer's location. The CUDA build replaces the lock with cudaHostRegister.
class PinnedAllocator final : public Allocator {
 public:
  StatusOr<Buffer> Allocate(size_t bytes, MemoryLocation preferred) override;
};

// The server's allocator: pinned memory from the pinned pool, device memory from the device's CUDA
// pool (memory_pool.h, each with its fallback), the heap otherwise.
Allocator& DefaultAllocator();

// Where tensor bytes are copied by the server (not by a backend, not by the kernel's socket read).
enum class CopyKind {
  kInput = 0,   // request bytes copied after they arrived (conversion, alignment, batch gather)
  kOutput = 1,  // response bytes copied after the backend wrote them
};
void CountCopy(CopyKind kind, size_t bytes);
struct CopyCounts {
  uint64_t input_bytes = 0, input_copies = 0, output_bytes = 0, output_copies = 0;
};
CopyCounts CopyCountsNow();
// Tensors the server hands from one execution to the next without a client: an ensemble step's
// output to the next step, a sequence's state to its next request; bytes by where they were.
enum class HandoffKind { kEnsemble, kSequenceState };
void CountHandoff(HandoffKind kind, bool device, size_t bytes);
struct HandoffCounts {
  uint64_t bytes[2][2] = {};  // [kind][device]
};
HandoffCounts HandoffCountsNow();

// Copies 'size' host bytes into 'region' (host memory, or a CUDA device's through the driver),
// counted as an output copy. 'region' holds at least 'size' bytes.
Status CopyIntoRegion(const Buffer& region, const uint8_t* data, size_t size);

// Aligned heap storage for 'bytes' bytes (64-byte alignment), owned by the returned pointer.
std::shared_ptr<uint8_t[]> AllocateAligned(size_t bytes);

}  // namespace nereid
