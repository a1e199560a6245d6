#include "gpu/cuda_driver.h"

#include <dlfcn.h>

#include <cstring>
#include <memory>

#include "common/logging.h"

namespace nereid::gpu {

// The driver API's types and entry points this file uses, declared from the CUDA driver API
// reference (so the server builds without the toolkit). The _v2 names are the ABI's current ones.
using CUresult = int;
using CUdevice = int;
using CUdeviceptr = unsigned long long;
using CUcontext = void*;
struct CUipcMemHandle {
  char reserved[kIpcHandleBytes];
};
constexpr unsigned kHostAllocPortable = 0x01;
constexpr unsigned kIpcLazyEnablePeerAccess = 0x01;
constexpr int kAttrComputeMajor = 75, kAttrComputeMinor = 76;

struct CudaDriver::Api {
  void* lib = nullptr;
  CUresult (*cuInit)(unsigned);
  CUresult (*cuGetErrorString)(CUresult, const char**);
  CUresult (*cuDeviceGetCount)(int*);
  CUresult (*cuDeviceGet)(CUdevice*, int);
  CUresult (*cuDeviceGetName)(char*, int, CUdevice);
  CUresult (*cuDeviceTotalMem)(size_t*, CUdevice);
  CUresult (*cuDeviceGetAttribute)(int*, int, CUdevice);
  CUresult (*cuDeviceGetUuid)(unsigned char*, CUdevice) = nullptr;  // 16 bytes; optional
  CUresult (*cuDevicePrimaryCtxRetain)(CUcontext*, CUdevice);
  CUresult (*cuCtxSetCurrent)(CUcontext);
  CUresult (*cuMemHostAlloc)(void**, size_t, unsigned);
  CUresult (*cuMemFreeHost)(void*);
  CUresult (*cuMemAlloc)(CUdeviceptr*, size_t);
  CUresult (*cuMemFree)(CUdeviceptr);
  CUresult (*cuIpcOpenMemHandle)(CUdeviceptr*, CUipcMemHandle, unsigned);
  CUresult (*cuIpcCloseMemHandle)(CUdeviceptr);
  CUresult (*cuMemcpyDtoH)(void*, CUdeviceptr, size_t);
  CUresult (*cuMemcpyHtoD)(CUdeviceptr, const void*, size_t);
  CUresult (*cuMemGetAddressRange)(CUdeviceptr*, size_t*, CUdeviceptr);

  template <typename F>
  bool Bind(F& fn, const char* name) {
    fn = reinterpret_cast<F>(dlsym(lib, name));
    return fn != nullptr;
  }
};

CudaDriver& CudaDriver::Get() {
  static CudaDriver* driver = new CudaDriver();  // never destroyed: contexts outlive every user
  return *driver;
}

CudaDriver::CudaDriver() {
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    reason_ = "no CUDA driver (libcuda.so.1 not found)";
    return;
  }
  auto api = std::make_unique<Api>();
  api->lib = lib;
  const bool bound =
      api->Bind(api->cuInit, "cuInit") && api->Bind(api->cuGetErrorString, "cuGetErrorString") &&
      api->Bind(api->cuDeviceGetCount, "cuDeviceGetCount") &&
      api->Bind(api->cuDeviceGet, "cuDeviceGet") &&
      api->Bind(api->cuDeviceGetName, "cuDeviceGetName") &&
      api->Bind(api->cuDeviceTotalMem, "cuDeviceTotalMem_v2") &&
      api->Bind(api->cuDeviceGetAttribute, "cuDeviceGetAttribute") &&
      api->Bind(api->cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain") &&
      api->Bind(api->cuCtxSetCurrent, "cuCtxSetCurrent") &&
      api->Bind(api->cuMemHostAlloc, "cuMemHostAlloc") &&
      api->Bind(api->cuMemFreeHost, "cuMemFreeHost") &&
      api->Bind(api->cuMemAlloc, "cuMemAlloc_v2") && api->Bind(api->cuMemFree, "cuMemFree_v2") &&
      api->Bind(api->cuIpcOpenMemHandle, "cuIpcOpenMemHandle_v2") &&
      api->Bind(api->cuIpcCloseMemHandle, "cuIpcCloseMemHandle") &&
      api->Bind(api->cuMemcpyDtoH, "cuMemcpyDtoH_v2") &&
      api->Bind(api->cuMemcpyHtoD, "cuMemcpyHtoD_v2") &&
      api->Bind(api->cuMemGetAddressRange, "cuMemGetAddressRange_v2");
  if (!bound) {
    reason_ = "the CUDA driver lacks an entry point the server needs";
    return;
  }
  if (!api->Bind(api->cuDeviceGetUuid, "cuDeviceGetUuid_v2")) {
    api->Bind(api->cuDeviceGetUuid, "cuDeviceGetUuid");
  }
  api_ = api.release();
  if (Status s = Check(api_->cuInit(0), "cuInit"); !s.ok()) {
    reason_ = s.message();
    return;
  }
  int count = 0;
  if (Status s = Check(api_->cuDeviceGetCount(&count), "cuDeviceGetCount"); !s.ok()) {
    reason_ = s.message();
    return;
  }
  std::vector<DeviceInfo> devices;
  for (int i = 0; i < count; ++i) {
    CUdevice dev = 0;
    CUcontext ctx = nullptr;
    DeviceInfo info;
    info.ordinal = i;
    char name[256] = {};
    size_t total = 0;
    if (!Check(api_->cuDeviceGet(&dev, i), "cuDeviceGet").ok() ||
        !Check(api_->cuDevicePrimaryCtxRetain(&ctx, dev), "cuDevicePrimaryCtxRetain").ok()) {
      reason_ = "GPU " + std::to_string(i) + " could not be opened";
      return;
    }
    api_->cuDeviceGetName(name, sizeof(name) - 1, dev);
    api_->cuDeviceTotalMem(&total, dev);
    api_->cuDeviceGetAttribute(&info.compute_major, kAttrComputeMajor, dev);
    api_->cuDeviceGetAttribute(&info.compute_minor, kAttrComputeMinor, dev);
    info.name = name;
    info.total_memory = total;
    unsigned char uuid[16] = {};
    if (api_->cuDeviceGetUuid != nullptr && api_->cuDeviceGetUuid(uuid, dev) == 0) {
      static const char* kHex = "0123456789abcdef";
      info.uuid = "GPU-";
      for (int b = 0; b < 16; ++b) {
        if (b == 4 || b == 6 || b == 8 || b == 10) info.uuid += '-';
        info.uuid += kHex[uuid[b] >> 4];
        info.uuid += kHex[uuid[b] & 15];
      }
    }
    contexts_.push_back(ctx);
    devices.push_back(info);
  }
  if (devices.empty()) reason_ = "no CUDA devices";
  devices_ = std::move(devices);
}

Status CudaDriver::Check(int result, const char* what) const {
  if (result == 0) return Status::Ok();
  const char* text = nullptr;
  if (api_ != nullptr) api_->cuGetErrorString(result, &text);
  return Unavailable(std::string(what) + " failed: " +
                     (text != nullptr ? text : "CUDA error " + std::to_string(result)));
}

Status CudaDriver::MakeCurrent(int device) {
  if (device < 0 || device >= device_count())
    return InvalidArgument("GPU " + std::to_string(device) + " does not exist (" +
                           std::to_string(device_count()) + " GPUs)");
  return Check(api_->cuCtxSetCurrent(contexts_[device]), "cuCtxSetCurrent");
}

StatusOr<void*> CudaDriver::HostAlloc(size_t bytes) {
  if (!available()) return Unavailable(reason_);
  RETURN_IF_ERROR(MakeCurrent(0));
  void* p = nullptr;
  RETURN_IF_ERROR(Check(api_->cuMemHostAlloc(&p, bytes, kHostAllocPortable), "cuMemHostAlloc"));
  return p;
}

void CudaDriver::HostFree(void* p) {
  if (p != nullptr && available() && MakeCurrent(0).ok()) api_->cuMemFreeHost(p);
}

StatusOr<uint64_t> CudaDriver::DeviceAlloc(int device, size_t bytes) {
  RETURN_IF_ERROR(MakeCurrent(device));
  CUdeviceptr p = 0;
  RETURN_IF_ERROR(Check(api_->cuMemAlloc(&p, bytes), "cuMemAlloc"));
  return static_cast<uint64_t>(p);
}

void CudaDriver::DeviceFree(int device, uint64_t ptr) {
  if (ptr != 0 && MakeCurrent(device).ok()) api_->cuMemFree(ptr);
}

StatusOr<uint64_t> CudaDriver::IpcOpen(int device, const uint8_t (&handle)[kIpcHandleBytes]) {
  RETURN_IF_ERROR(MakeCurrent(device));
  CUipcMemHandle h;
  std::memcpy(h.reserved, handle, kIpcHandleBytes);
  CUdeviceptr p = 0;
  RETURN_IF_ERROR(
      Check(api_->cuIpcOpenMemHandle(&p, h, kIpcLazyEnablePeerAccess), "cuIpcOpenMemHandle"));
  return static_cast<uint64_t>(p);
}

void CudaDriver::IpcClose(int device, uint64_t ptr) {
  if (ptr != 0 && MakeCurrent(device).ok()) api_->cuIpcCloseMemHandle(ptr);
}

StatusOr<uint64_t> CudaDriver::BytesToEndOfAllocation(int device, uint64_t ptr) {
  RETURN_IF_ERROR(MakeCurrent(device));
  CUdeviceptr base = 0;
  size_t size = 0;
  RETURN_IF_ERROR(Check(api_->cuMemGetAddressRange(&base, &size, ptr), "cuMemGetAddressRange"));
  return static_cast<uint64_t>(base + size - ptr);
}

Status CudaDriver::CopyToHost(int device, void* dst, uint64_t src, size_t bytes) {
  RETURN_IF_ERROR(MakeCurrent(device));
  return Check(api_->cuMemcpyDtoH(dst, src, bytes), "cuMemcpyDtoH");
}

Status CudaDriver::CopyToDevice(int device, uint64_t dst, const void* src, size_t bytes) {
  RETURN_IF_ERROR(MakeCurrent(device));
  return Check(api_->cuMemcpyHtoD(dst, src, bytes), "cuMemcpyHtoD");
}

}  // namespace nereid::gpu
