#include "memory/shared_memory.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string_view>

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
  uint8_t* mapping = nullptr;  // the object from its start through offset + byte_size
  size_t mapped_length = 0;
  int fd = -1;  // kept to notice an object shrunk under the mapping
  uint8_t* base() const { return mapping + status.offset; }
  ~Region() {
    if (mapping != nullptr) munmap(mapping, mapped_length);
    if (fd >= 0) close(fd);
  }
};

Status SharedMemoryRegistry::Register(const std::string& name, const std::string& key,
                                      uint64_t offset, uint64_t byte_size) {
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
  std::lock_guard<std::mutex> lock(mu_);
  if (name.empty()) {
    regions_.clear();
    return Status::Ok();
  }
  regions_.erase(name);  // Triton: unregistering an unknown region succeeds
  return Status::Ok();
}

StatusOr<std::vector<SharedMemoryRegionStatus>> SharedMemoryRegistry::GetStatus(
    const std::string& name) const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<SharedMemoryRegionStatus> out;
  if (name.empty()) {
    for (const auto& [n, region] : regions_) out.push_back(region->status);
    return out;
  }
  auto it = regions_.find(name);
  if (it == regions_.end())
    return NotFound("Unable to find system shared memory region: '" + name + "'");
  out.push_back(it->second->status);
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
  struct stat st {};
  if (fstat(region->fd, &st) != 0 || st.st_size < 0 ||
      static_cast<uint64_t>(st.st_size) < region->mapped_length)
    return InvalidArgument("shared memory region '" + name +
                           "' shrank after it was registered; register it again");
  uint8_t* data = region->base() + offset;
  return Buffer(data, byte_size, MemoryLocation{MemoryType::kShm, 0}, std::move(region));
}

}  // namespace nereid
