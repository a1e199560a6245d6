#include "tensor.h"

#include <onnx/onnx_pb.h>

#include <cstdlib>
#include <cstring>
#include <new>
#include <vector>

#include "cpu/gemm.h"

namespace nereid::native {

namespace {

// Buffers of 16 KiB and more freed inside Graph::Run (a RecycleScope) are kept by that thread (up
// to 128 MiB a thread) and handed out again: an instance thread running the same graph again
// reuses its activations' memory instead of faulting in fresh pages each request. Buffers freed
// elsewhere (outputs, released by the thread that sends the response) and smaller ones go back
// to malloc, so no thread that does not run graphs holds any. (From 256 KiB, as this was first,
// the ones between went back to malloc, which returned some to the system at every free: RapidOCR's
// classifier faulted in 17.6 pages an inference, its squeeze-excitation Mul 21 us instead of 5.)
//
// A request takes the buffer freed last among those large enough (and at most kSlack times its
// size): its lines are the likeliest to be in the cache still, and one buffer serves tensors of
// different sizes in turn, so a network's activations stay within a few buffers. Kept by exact
// size and oldest first, MobileNetV2's 19 activation sizes held ~25 MB of buffers, more than a
// Zen 4 L3 keeps beside the weights, and every layer wrote and read its tensors from DRAM (a
// depthwise layer 3x its time on data in cache).
constexpr size_t kCachedFrom = size_t{16} << 10;
constexpr size_t kCacheLimit = size_t{128} << 20;
constexpr size_t kSlack = 4;

struct BufferCache {
  struct Entry {
    uint8_t* p;
    size_t capacity;
  };
  std::vector<Entry> free;  // freed last at the back
  size_t bytes = 0;
};
// Trivially destructible, so still readable while the thread exits: the guard below frees the
// cache and clears the pointer, after which buffers go straight back to free().
thread_local BufferCache* t_cache = nullptr;
thread_local bool t_exiting = false;
thread_local int t_recycling = 0;  // RecycleScope depth
struct CacheGuard {
  ~CacheGuard() {
    t_exiting = true;
    if (t_cache == nullptr) return;
    for (const auto& e : t_cache->free) std::free(e.p);
    delete t_cache;
    t_cache = nullptr;
  }
};
thread_local CacheGuard t_guard;

BufferCache* Cache() {
  if (t_exiting || t_recycling == 0) return nullptr;
  if (t_cache == nullptr) {
    (void)&t_guard;  // (constructs the guard: its destructor runs at thread exit)
    t_cache = new BufferCache();
  }
  return t_cache;
}

// At least 'bytes' (a multiple of 64); *capacity says how many the buffer holds.
uint8_t* TakeBuffer(size_t bytes, size_t* capacity) {
  *capacity = bytes;
  if (bytes >= kCachedFrom)
    if (BufferCache* cache = Cache()) {
      for (size_t i = cache->free.size(); i-- > 0;) {
        const auto [p, held] = cache->free[i];
        if (held < bytes || held / kSlack > bytes) continue;
        cache->free.erase(cache->free.begin() + static_cast<std::ptrdiff_t>(i));
        cache->bytes -= held;
        *capacity = held;
        return p;
      }
    }
  // (Large activations on huge pages: MobileNetV2 at batch 8 3-5% faster on one core.)
  return static_cast<uint8_t*>(kernels::AllocLarge(bytes));
}

void GiveBuffer(uint8_t* p, size_t capacity) {
  if (capacity >= kCachedFrom)
    if (BufferCache* cache = Cache(); cache != nullptr && cache->bytes + capacity <= kCacheLimit) {
      cache->free.push_back({p, capacity});
      cache->bytes += capacity;
      return;
    }
  std::free(p);
}

}  // namespace

RecycleScope::RecycleScope() { ++t_recycling; }
RecycleScope::~RecycleScope() { --t_recycling; }

Tensor Tensor::Uninitialized(DataType type, std::vector<int64_t> shape) {
  Tensor t;
  t.type_ = type;
  t.shape_ = std::move(shape);
  t.elements_ = ElementCount(t.shape_.data(), t.shape_.size());
  const size_t bytes = (std::max<size_t>(t.bytes(), 1) + 63) / 64 * 64;
  size_t capacity = 0;
  uint8_t* p = TakeBuffer(bytes, &capacity);
  if (p == nullptr) throw std::bad_alloc();
  t.storage_ = std::shared_ptr<uint8_t>(p, [capacity](uint8_t* q) { GiveBuffer(q, capacity); });
  t.data_ = p;
  return t;
}

Tensor Tensor::Allocate(DataType type, std::vector<int64_t> shape) {
  Tensor t = Uninitialized(type, std::move(shape));
  std::memset(t.mutable_raw(), 0, (std::max<size_t>(t.bytes(), 1) + 63) / 64 * 64);
  return t;
}

Tensor Tensor::Borrow(DataType type, std::vector<int64_t> shape, const void* data,
                      size_t byte_size) {
  Tensor t;
  t.bytes_size_ = byte_size;
  t.type_ = type;
  t.shape_ = std::move(shape);
  t.elements_ = ElementCount(t.shape_.data(), t.shape_.size());
  t.data_ = static_cast<const uint8_t*>(data);
  return t;
}

Tensor Tensor::View(std::vector<int64_t> shape) const {
  Tensor t = *this;
  t.shape_ = std::move(shape);
  t.elements_ = ElementCount(t.shape_.data(), t.shape_.size());
  return t;
}

Tensor Tensor::Reinterpret(DataType type) const {
  Tensor t = *this;
  if (DataTypeSize(type) == DataTypeSize(type_)) t.type_ = type;
  return t;
}

DataType FromOnnxType(int32_t t) {
  switch (t) {
    case onnx::TensorProto::FLOAT:
      return DataType::kFp32;
    case onnx::TensorProto::UINT8:
      return DataType::kUint8;
    case onnx::TensorProto::INT8:
      return DataType::kInt8;
    case onnx::TensorProto::UINT16:
      return DataType::kUint16;
    case onnx::TensorProto::INT16:
      return DataType::kInt16;
    case onnx::TensorProto::INT32:
      return DataType::kInt32;
    case onnx::TensorProto::INT64:
      return DataType::kInt64;
    case onnx::TensorProto::BOOL:
      return DataType::kBool;
    case onnx::TensorProto::FLOAT16:
      return DataType::kFp16;
    case onnx::TensorProto::DOUBLE:
      return DataType::kFp64;
    case onnx::TensorProto::UINT32:
      return DataType::kUint32;
    case onnx::TensorProto::UINT64:
      return DataType::kUint64;
    case onnx::TensorProto::BFLOAT16:
      return DataType::kBf16;
    case onnx::TensorProto::STRING:
      return DataType::kBytes;
    default:
      return DataType::kInvalid;
  }
}

int32_t ToOnnxType(DataType t) {
  for (int32_t candidate = 1; candidate <= 16; ++candidate)
    if (FromOnnxType(candidate) == t) return candidate;
  return 0;
}

namespace {
// memcpy that accepts an empty (possibly null) source.
void CopyIn(uint8_t* dst, const void* src, size_t bytes) {
  if (bytes != 0) std::memcpy(dst, src, bytes);
}
}  // namespace

StatusOr<Tensor> TensorFromProto(const onnx::TensorProto& proto) {
  const DataType type = FromOnnxType(proto.data_type());
  if (type == DataType::kInvalid || type == DataType::kBytes)
    return Unsupported("tensor '" + proto.name() + "' has unsupported element type " +
                       std::to_string(proto.data_type()));
  if (proto.data_location() == onnx::TensorProto::EXTERNAL)
    return Unsupported("tensor '" + proto.name() +
                       "' uses external data, which is not supported yet");
  std::vector<int64_t> shape(proto.dims().begin(), proto.dims().end());
  Tensor t = Tensor::Allocate(type, shape);
  const size_t bytes = t.bytes();
  if (proto.has_raw_data()) {
    if (proto.raw_data().size() != bytes)
      return InvalidArgument("tensor '" + proto.name() + "': raw_data has " +
                             std::to_string(proto.raw_data().size()) + " bytes, shape needs " +
                             std::to_string(bytes));
    CopyIn(t.mutable_raw(), proto.raw_data().data(), bytes);
    return t;
  }
  const int64_t n = t.elements();
  auto check = [&](int64_t have) -> Status {
    if (have != n)
      return InvalidArgument("tensor '" + proto.name() + "' has " + std::to_string(have) +
                             " values, shape needs " + std::to_string(n));
    return Status::Ok();
  };
  switch (type) {
    case DataType::kFp32:
      RETURN_IF_ERROR(check(proto.float_data_size()));
      CopyIn(t.mutable_raw(), proto.float_data().data(), bytes);
      break;
    case DataType::kFp64:
      RETURN_IF_ERROR(check(proto.double_data_size()));
      CopyIn(t.mutable_raw(), proto.double_data().data(), bytes);
      break;
    case DataType::kInt64:
      RETURN_IF_ERROR(check(proto.int64_data_size()));
      CopyIn(t.mutable_raw(), proto.int64_data().data(), bytes);
      break;
    case DataType::kUint32:
    case DataType::kUint64:
      RETURN_IF_ERROR(check(proto.uint64_data_size()));
      for (int64_t i = 0; i < n; ++i) {
        if (type == DataType::kUint32)
          t.mutable_data<uint32_t>()[i] = static_cast<uint32_t>(proto.uint64_data(i));
        else
          t.mutable_data<uint64_t>()[i] = proto.uint64_data(i);
      }
      break;
    default: {
      // int32_data carries every type of 32 bits or fewer (incl. FP16/BF16 bit patterns).
      RETURN_IF_ERROR(check(proto.int32_data_size()));
      const size_t esize = DataTypeSize(type);
      for (int64_t i = 0; i < n; ++i) {
        const int32_t v = proto.int32_data(i);
        std::memcpy(t.mutable_raw() + i * esize, &v, esize);  // little-endian low bytes
      }
    }
  }
  return t;
}

}  // namespace nereid::native
