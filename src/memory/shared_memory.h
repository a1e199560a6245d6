// The system shared-memory extension's registry: regions a client created with shm_open and
// registered by name. Requests read inputs from and write outputs into them without a copy through
// the request body. A region stays mapped while any request still uses it, even after it is
// unregistered.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common/status.h"
#include "memory/buffer.h"

namespace nereid {

struct SharedMemoryRegionStatus {
  std::string name;
  std::string key;
  uint64_t offset = 0;
  uint64_t byte_size = 0;
};

class SharedMemoryRegistry {
 public:
  // Maps 'byte_size' bytes at 'offset' of the POSIX shared-memory object 'key'.
  Status Register(const std::string& name, const std::string& key, uint64_t offset,
                  uint64_t byte_size);
  // Unregisters one region, or every region when 'name' is empty.
  Status Unregister(const std::string& name);
  // One region's status, or every region's when 'name' is empty.
  StatusOr<std::vector<SharedMemoryRegionStatus>> GetStatus(const std::string& name) const;
  // 'byte_size' bytes at 'offset' inside region 'name', checked against its bounds; the buffer
  // keeps the mapping alive.
  StatusOr<Buffer> Get(const std::string& name, uint64_t offset, uint64_t byte_size) const;

  static constexpr size_t kMaxRegions = 4096;

 private:
  struct Region;
  mutable std::mutex mu_;
  std::map<std::string, std::shared_ptr<Region>> regions_;
};

}  // namespace nereid
