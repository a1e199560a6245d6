// Tensor of the native engine: element type, shape, and a shared byte buffer. Views (Reshape,
// Flatten, Identity, request inputs) share or borrow storage instead of copying.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "nereid/backend_util.h"

namespace onnx {
class TensorProto;
}

namespace nereid::native {

// The engine is a pure client of include/: its types and status come from the backend helpers.
using backend::DataType;
using backend::DataTypeFromName;
using backend::DataTypeName;
using backend::DataTypeSize;
using backend::ElementAsDouble;
using backend::ElementCount;
using backend::FillVariableDimension;
using backend::Internal;
using backend::InvalidArgument;
using backend::NotFound;
using backend::ShapeString;
using backend::Status;
using backend::StatusOr;
using backend::TensorByteSize;
using backend::Unavailable;
using backend::Unsupported;

class Tensor {
 public:
  Tensor() = default;
  // Allocates zeroed, 64-byte aligned storage for 'shape'.
  static Tensor Allocate(DataType type, std::vector<int64_t> shape);
  // The same without zeroing, for outputs every element of which the op writes. Large buffers
  // are recycled per thread (tensor.cc).
  static Tensor Uninitialized(DataType type, std::vector<int64_t> shape);
  // Borrows 'data' (not owned; must outlive the tensor and its views). For BYTES, 'byte_size' is
  // the serialized size (4-byte little-endian length before each element); ignored for other types.
  static Tensor Borrow(DataType type, std::vector<int64_t> shape, const void* data,
                       size_t byte_size = 0);
  // Same storage, new shape (element count must match; checked by the caller).
  Tensor View(std::vector<int64_t> shape) const;
  // Same bytes read as another type of the same element size (e.g. UINT16 bits as BF16).
  Tensor Reinterpret(DataType type) const;

  DataType type() const { return type_; }
  const std::vector<int64_t>& shape() const { return shape_; }
  int64_t elements() const { return elements_; }
  size_t bytes() const {
    return type_ == DataType::kBytes ? bytes_size_
                                     : static_cast<size_t>(elements()) * DataTypeSize(type_);
  }
  const uint8_t* raw() const { return data_; }
  uint8_t* mutable_raw() { return const_cast<uint8_t*>(data_); }
  template <typename T>
  const T* data() const {
    return reinterpret_cast<const T*>(data_);
  }
  template <typename T>
  T* mutable_data() {
    return reinterpret_cast<T*>(const_cast<uint8_t*>(data_));
  }
  bool valid() const { return type_ != DataType::kInvalid; }
  // Whether this handle is the only one on its storage (no views, copies or borrowing): its bytes
  // may be overwritten without anyone else seeing it.
  bool sole_owner() const { return storage_ != nullptr && storage_.use_count() == 1; }

 private:
  DataType type_ = DataType::kInvalid;
  std::vector<int64_t> shape_;
  std::shared_ptr<uint8_t> storage_;
  const uint8_t* data_ = nullptr;
  size_t bytes_size_ = 0;  // BYTES only: elements have no fixed size
  int64_t elements_ = 0;   // the product of shape_ (kept: ops read it per loop)
};

// While one lives, large tensor buffers this thread frees are kept for its next allocations of the
// same size (tensor.cc); Graph::Run holds one.
class RecycleScope {
 public:
  RecycleScope();
  ~RecycleScope();
  RecycleScope(const RecycleScope&) = delete;
  RecycleScope& operator=(const RecycleScope&) = delete;
};

// ONNX TensorProto element type <-> DataType (STRING is BYTES; kInvalid when unsupported).
DataType FromOnnxType(int32_t onnx_type);
int32_t ToOnnxType(DataType type);
// Reads an initializer or test tensor (raw_data or typed fields; external data is rejected).
StatusOr<Tensor> TensorFromProto(const onnx::TensorProto& proto);

}  // namespace nereid::native
