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

struct CudaSharedMemoryRegionStatus {
  std::string name;
  int64_t device_id = 0;
  uint64_t byte_size = 0;
};

// System regions (shm_open) and CUDA regions (cudaIpcMemHandle_t of another process's device
// allocation) share one namespace, as in Triton: a request names either by its region name.
class SharedMemoryRegistry {
 public:
  // --allow-client-shm (Triton's flag; off by default since Triton 2.69): off, clients may not
  // register or unregister regions (UNSUPPORTED, Triton's message), so no request can name one;
  // the status calls still answer. Set once at start-up.
  void AllowClients(bool allow) { allow_clients_ = allow; }
  Status CheckClientAccess() const;
  static constexpr const char* kClientShmDisabled =
      "Client shared memory is disabled. Start the server with '--allow-client-shm=true' to "
      "enable.";
  // Maps 'byte_size' bytes at 'offset' of the POSIX shared-memory object 'key'.
  Status Register(const std::string& name, const std::string& key, uint64_t offset,
                  uint64_t byte_size);
  // Unregisters one system region, or every system region when 'name' is empty.
  Status Unregister(const std::string& name);
  // One system region's status, or every system region's when 'name' is empty.
  StatusOr<std::vector<SharedMemoryRegionStatus>> GetStatus(const std::string& name) const;
  // Opens 'raw_handle' (the 64 bytes of a cudaIpcMemHandle_t) on GPU 'device_id'; the allocation
  // must hold at least 'byte_size' bytes.
  Status RegisterCuda(const std::string& name, const std::string& raw_handle, int64_t device_id,
                      uint64_t byte_size);
  Status UnregisterCuda(const std::string& name);  // every CUDA region when 'name' is empty
  StatusOr<std::vector<CudaSharedMemoryRegionStatus>> GetCudaStatus(const std::string& name) const;
  // 'byte_size' bytes at 'offset' inside region 'name', checked against its bounds; the buffer
  // keeps the mapping alive. A CUDA region's buffer is device memory (MemoryType::kGpu).
  StatusOr<Buffer> Get(const std::string& name, uint64_t offset, uint64_t byte_size) const;

  static constexpr size_t kMaxRegions = 4096;

 private:
  struct Region;
  Status Erase(const std::string& name, bool cuda);
  bool allow_clients_ = false;
  mutable std::mutex mu_;
  std::map<std::string, std::shared_ptr<Region>> regions_;
};

}  // namespace nereid
