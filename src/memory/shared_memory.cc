#include "memory/shared_memory.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string_view>

#include "gpu/cuda_driver.h"

namespace nereid {
namespace {

// Reserved by Triton for its Python backend's own regions; refused the same way.
constexpr std::string_view kReservedPrefix = "triton_python_backend_shm_region_";

Status CheckKey(const std::string& name, const std::string& key) {
  const size_t first = key.find_first_not_of('/');
  if (first == std::string::npos)
    return InvalidArgument("cannot register shared memory region '" + name +
                           "' - invalid shm key '" + key + "'");
  const std::string_view rest = std::string_view(key).substr(first);
  // shm_open names one object in the shared-memory filesystem: no directories, no dot names.
  if (rest.find('/') != std::string_view::npos || rest == "." || rest == ".." || key.size() > 255 ||
      key.find('\0') != std::string::npos)
    return InvalidArgument("cannot register shared memory region '" + name +
                           "' - invalid shm key '" + key + "'");
  if (rest.rfind(kReservedPrefix, 0) == 0)
    return InvalidArgument("cannot register shared memory region '" + name + "' with key '" + key +
                           "' as the key contains the reserved prefix '" +
                           std::string(kReservedPrefix) + "'");
  return Status::Ok();
}

}  // namespace

struct SharedMemoryRegistry::Region {
  SharedMemoryRegionStatus status;
  bool cuda = false;
  int64_t device = 0;
  uint64_t device_ptr = 0;     // CUDA regions: the opened IPC mapping
  uint8_t* mapping = nullptr;  // the object from its start through offset + byte_size
  size_t mapped_length = 0;
  int fd = -1;  // kept to notice an object shrunk under the mapping
  uint8_t* base() const {
    return cuda ? reinterpret_cast<uint8_t*>(device_ptr) : mapping + status.offset;
  }
  ~Region() {
    if (device_ptr != 0) gpu::CudaDriver::Get().IpcClose(static_cast<int>(device), device_ptr);
    if (mapping != nullptr) munmap(mapping, mapped_length);
    if (fd >= 0) close(fd);
  }
};

Status SharedMemoryRegistry::CheckClientAccess() const {
  return allow_clients_ ? Status::Ok() : Unsupported(kClientShmDisabled);
}

Status SharedMemoryRegistry::Register(const std::string& name, const std::string& key,
                                      uint64_t offset, uint64_t byte_size) {
  RETURN_IF_ERROR(CheckClientAccess());
  if (name.empty()) return InvalidArgument("a shared memory region needs a name");
  RETURN_IF_ERROR(CheckKey(name, key));
  if (byte_size == 0)
    return InvalidArgument("failed to register shared memory region '" + name +
                           "': byte_size must be positive");
  uint64_t end = 0;
  if (__builtin_add_overflow(offset, byte_size, &end) ||
      end > static_cast<uint64_t>(std::numeric_limits<off_t>::max()))
    return InvalidArgument("failed to register shared memory region '" + name + "': invalid args");
  std::lock_guard<std::mutex> lock(mu_);
  if (regions_.count(name))
    return Status(Status::Code::kAlreadyExists,
                  "shared memory region '" + name + "' already in manager");
  if (regions_.size() >= kMaxRegions)
    return Unavailable("failed to register shared memory region '" + name +
                       "': " + std::to_string(kMaxRegions) + " regions are registered already");
  const int fd = shm_open(key.c_str(), O_RDWR, 0);
  if (fd < 0) return Internal("Unable to open shared memory region: '" + key + "'");
  struct stat st {};
  const bool regular = fstat(fd, &st) == 0 && S_ISREG(st.st_mode);
  if (!regular || st.st_size < 0 || end > static_cast<uint64_t>(st.st_size)) {
    close(fd);
    return InvalidArgument("failed to register shared memory region '" + name + "': invalid args");
  }
  void* p = mmap(nullptr, end, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    const int error = errno;
    close(fd);
    return InvalidArgument("failed to register shared memory region '" + name +
                           "': mmap failed: " + std::strerror(error));
  }
  auto region = std::make_shared<Region>();
  region->status = {name, key, offset, byte_size};
  region->mapping = static_cast<uint8_t*>(p);
  region->mapped_length = end;
  region->fd = fd;
  regions_[name] = std::move(region);
  return Status::Ok();
}

Status SharedMemoryRegistry::Unregister(const std::string& name) {
  RETURN_IF_ERROR(CheckClientAccess());
  return Erase(name, /*cuda=*/false);
}

Status SharedMemoryRegistry::Erase(const std::string& name, bool cuda) {
  std::vector<std::shared_ptr<Region>> gone;  // released outside the lock
  std::lock_guard<std::mutex> lock(mu_);
  for (auto it = regions_.begin(); it != regions_.end();) {
    if ((name.empty() || it->first == name) && it->second->cuda == cuda) {
      gone.push_back(std::move(it->second));
      it = regions_.erase(it);
    } else {
      ++it;
    }
  }
  return Status::Ok();  // Triton: unregistering an unknown region succeeds
}

StatusOr<std::vector<SharedMemoryRegionStatus>> SharedMemoryRegistry::GetStatus(
    const std::string& name) const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<SharedMemoryRegionStatus> out;
  if (name.empty()) {
    for (const auto& [n, region] : regions_)
      if (!region->cuda) out.push_back(region->status);
    return out;
  }
  auto it = regions_.find(name);
  if (it == regions_.end() || it->second->cuda)
    return NotFound("Unable to find system shared memory region: '" + name + "'");
  out.push_back(it->second->status);
  return out;
}

Status SharedMemoryRegistry::RegisterCuda(const std::string& name, const std::string& raw_handle,
                                          int64_t device_id, uint64_t byte_size) {
  RETURN_IF_ERROR(CheckClientAccess());
  const std::string what = "failed to register CUDA shared memory region '" + name + "'";
  if (name.empty()) return InvalidArgument("a shared memory region needs a name");
  if (raw_handle.size() != gpu::kIpcHandleBytes)
    return InvalidArgument(
        what + ": raw_handle must be the " + std::to_string(gpu::kIpcHandleBytes) +
        " bytes of a cudaIpcMemHandle_t, got " + std::to_string(raw_handle.size()));
  if (byte_size == 0) return InvalidArgument(what + ": byte_size must be positive");
  auto& driver = gpu::CudaDriver::Get();
  if (device_id < 0 || device_id >= driver.device_count())
    return InvalidArgument(what + ": GPU " + std::to_string(device_id) + " does not exist" +
                           (driver.available() ? "" : " (" + driver.unavailable_reason() + ")"));
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (regions_.count(name))
      return Status(Status::Code::kAlreadyExists,
                    "shared memory region '" + name + "' already in manager");
    if (regions_.size() >= kMaxRegions)
      return Unavailable(what + ": " + std::to_string(kMaxRegions) +
                         " regions are registered already");
  }
  uint8_t handle[gpu::kIpcHandleBytes];
  std::memcpy(handle, raw_handle.data(), gpu::kIpcHandleBytes);
  auto region = std::make_shared<Region>();
  region->cuda = true;
  region->device = device_id;
  auto ptr = driver.IpcOpen(static_cast<int>(device_id), handle);
  if (!ptr.ok()) return InvalidArgument(what + ": " + ptr.status().message());
  region->device_ptr = *ptr;
  // The client says how large the region is; the driver knows: never let a request reach past
  // the allocation.
  auto available = driver.BytesToEndOfAllocation(static_cast<int>(device_id), *ptr);
  if (!available.ok()) return InvalidArgument(what + ": " + available.status().message());
  if (*available < byte_size)
    return InvalidArgument(what + ": byte_size " + std::to_string(byte_size) +
                           " is larger than the allocation (" + std::to_string(*available) +
                           " bytes)");
  region->status = {name, "", 0, byte_size};
  std::lock_guard<std::mutex> lock(mu_);
  if (regions_.count(name))
    return Status(Status::Code::kAlreadyExists,
                  "shared memory region '" + name + "' already in manager");
  regions_[name] = std::move(region);
  return Status::Ok();
}

Status SharedMemoryRegistry::UnregisterCuda(const std::string& name) {
  RETURN_IF_ERROR(CheckClientAccess());
  return Erase(name, /*cuda=*/true);
}

StatusOr<std::vector<CudaSharedMemoryRegionStatus>> SharedMemoryRegistry::GetCudaStatus(
    const std::string& name) const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<CudaSharedMemoryRegionStatus> out;
  for (const auto& [n, region] : regions_)
    if (region->cuda && (name.empty() || n == name))
      out.push_back({n, region->device, region->status.byte_size});
  if (!name.empty() && out.empty())
    return NotFound("Unable to find cuda shared memory region: '" + name + "'");
  return out;
}

StatusOr<Buffer> SharedMemoryRegistry::Get(const std::string& name, uint64_t offset,
                                           uint64_t byte_size) const {
  std::shared_ptr<Region> region;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = regions_.find(name);
    if (it == regions_.end())
      return NotFound("Unable to find shared memory region: '" + name + "'");
    region = it->second;
  }
  const uint64_t size = region->status.byte_size;
  if (offset >= size)
    return InvalidArgument("Invalid offset for shared memory region: '" + name + "'");
  if (byte_size > size - offset)
    return InvalidArgument("Invalid offset + byte size for shared memory region: '" + name + "'");
  // A client that shrank the object after registering would make reading the mapping fault:
  // check before every use (a shrink racing with the request itself is not caught).
  if (region->cuda) {
    uint8_t* data = region->base() + offset;
    const MemoryLocation location{MemoryType::kGpu, region->device};
    return Buffer(data, byte_size, location, std::move(region));
  }
  struct stat st {};
  if (fstat(region->fd, &st) != 0 || st.st_size < 0 ||
      static_cast<uint64_t>(st.st_size) < region->mapped_length)
    return InvalidArgument("shared memory region '" + name +
                           "' shrank after it was registered; register it again");
  uint8_t* data = region->base() + offset;
  return Buffer(data, byte_size, MemoryLocation{MemoryType::kShm, 0}, std::move(region));
}

}  // namespace nereid
