// The CUDA driver API, loaded at run time from libcuda.so.1: the server links no CUDA library, so
// one binary starts on machines with and without a GPU driver. Without a driver (or with
// CUDA_VISIBLE_DEVICES hiding every GPU) the server simply has no GPUs. The server uses the driver
// for what it owns itself: the pinned and device memory pools, CUDA IPC handles of the CUDA
// shared-memory extension, and copies between a client's device memory and the host. Backends use
// the CUDA runtime on the same primary contexts, so pointers pass between them unchanged.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"

namespace nereid::gpu {

struct DeviceInfo {
  int ordinal = 0;
  std::string name;
  uint64_t total_memory = 0;
  int compute_major = 0, compute_minor = 0;
  // "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx", as NVML writes it; empty if unknown.
  std::string uuid;
};

// 64 bytes, as cudaIpcMemHandle_t / CUipcMemHandle.
constexpr size_t kIpcHandleBytes = 64;

class CudaDriver {
 public:
  // Loads and initializes the driver once (thread-safe).
  static CudaDriver& Get();

  bool available() const { return !devices_.empty(); }
  // Why there are no GPUs (driver not found, no devices, ...); empty when available().
  const std::string& unavailable_reason() const { return reason_; }
  const std::vector<DeviceInfo>& devices() const { return devices_; }
  int device_count() const { return static_cast<int>(devices_.size()); }

  // Page-locked host memory, usable by every device (portable).
  StatusOr<void*> HostAlloc(size_t bytes);
  void HostFree(void* p);
  // Device memory on 'device'.
  StatusOr<uint64_t> DeviceAlloc(int device, size_t bytes);
  void DeviceFree(int device, uint64_t ptr);
  // Maps another process's allocation (a cudaIpcMemHandle_t) into this one on 'device'.
  StatusOr<uint64_t> IpcOpen(int device, const uint8_t (&handle)[kIpcHandleBytes]);
  void IpcClose(int device, uint64_t ptr);
  // The bytes from 'ptr' to the end of the device allocation holding it.
  StatusOr<uint64_t> BytesToEndOfAllocation(int device, uint64_t ptr);
  // Synchronous copies between host and device memory.
  Status CopyToHost(int device, void* dst, uint64_t src, size_t bytes);
  Status CopyToDevice(int device, uint64_t dst, const void* src, size_t bytes);

 private:
  CudaDriver();
  struct Api;
  Status Check(int result, const char* what) const;
  Status MakeCurrent(int device);
  Api* api_ = nullptr;
  std::vector<void*> contexts_;  // primary context per device
  std::vector<DeviceInfo> devices_;
  std::string reason_;
};

}  // namespace nereid::gpu
