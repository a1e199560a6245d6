// DataType: the tensor element types of the KServe v2 protocol ("FP32", "BYTES", ...), numbered as
// in Triton's model_config.proto (the backend ABI uses the same numbers; the ABI glue checks).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace nereid {

enum class DataType : int {
  kInvalid = 0,
  kBool = 1,
  kUint8 = 2,
  kUint16 = 3,
  kUint32 = 4,
  kUint64 = 5,
  kInt8 = 6,
  kInt16 = 7,
  kInt32 = 8,
  kInt64 = 9,
  kFp16 = 10,
  kFp32 = 11,
  kFp64 = 12,
  kBytes = 13,
  kBf16 = 14,
};

// Protocol name ("FP32", "BYTES"); "INVALID" for kInvalid.
std::string_view DataTypeName(DataType type);
// Parses a protocol name; kInvalid when unknown.
DataType DataTypeFromName(std::string_view name);
// Bytes per element; 0 for BYTES (variable) and kInvalid.
size_t DataTypeSize(DataType type);

// One element at 'p' (little-endian, any alignment) as a double; FP16/BF16 widened, BOOL 0/1, BYTES
// 0.
double ElementAsDouble(DataType type, const uint8_t* p);

// "[2,-1,3]": how error messages print a shape.
std::string ShapeString(const int64_t* dims, size_t rank);
inline std::string ShapeString(const std::vector<int64_t>& shape) {
  return ShapeString(shape.data(), shape.size());
}

// Number of elements of a shape; -1 if any dimension is negative or the product does not fit in
// int64 (a shape from a client can be anything: callers treat -1 as "no such tensor").
int64_t ElementCount(const int64_t* shape, size_t rank);
inline int64_t ElementCount(const std::vector<int64_t>& shape) {
  return ElementCount(shape.data(), shape.size());
}

// Gives the one variable dimension (-1) of 'shape' the size that makes the shape hold 'elements'.
// False, and 'shape' unchanged, when no size does: more than one -1, fixed dimensions whose product
// is 0, overflows or does not divide 'elements'. A shape without -1 is left as it is (true).
bool FillVariableDimension(std::vector<int64_t>& shape, int64_t elements);

// Bytes a tensor of fixed-size 'type' and 'shape' holds; -1 if the shape is invalid (see
// ElementCount), the type has no fixed size (BYTES, INVALID) or the byte count overflows int64.
int64_t TensorByteSize(DataType type, const int64_t* shape, size_t rank);
inline int64_t TensorByteSize(DataType type, const std::vector<int64_t>& shape) {
  return TensorByteSize(type, shape.data(), shape.size());
}

// Bytes a zero-valued tensor of 'type' and 'shape' holds: TensorByteSize for fixed-size types, and
// for BYTES an empty element each (its 4-byte length); -1 when the shape is invalid or it
// overflows.
int64_t ZeroFilledByteSize(DataType type, const std::vector<int64_t>& shape);

// Why an input's size cannot be computed, in Triton's words: its element count, or (for a
// fixed-size type) its byte size, overflows int64. Empty when neither does.
std::string SizeOverflow(const std::string& input, DataType type,
                         const std::vector<int64_t>& shape);

}  // namespace nereid
