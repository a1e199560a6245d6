#include "common/data_type.h"

#include <array>
#include <cstring>
#include <limits>

#include "common/half.h"

namespace nereid {
namespace {

struct TypeInfo {
  DataType type;
  std::string_view name;
  size_t size;
};

constexpr std::array<TypeInfo, 14> kTypes = {{
    {DataType::kBool, "BOOL", 1},
    {DataType::kUint8, "UINT8", 1},
    {DataType::kUint16, "UINT16", 2},
    {DataType::kUint32, "UINT32", 4},
    {DataType::kUint64, "UINT64", 8},
    {DataType::kInt8, "INT8", 1},
    {DataType::kInt16, "INT16", 2},
    {DataType::kInt32, "INT32", 4},
    {DataType::kInt64, "INT64", 8},
    {DataType::kFp16, "FP16", 2},
    {DataType::kFp32, "FP32", 4},
    {DataType::kFp64, "FP64", 8},
    {DataType::kBytes, "BYTES", 0},
    {DataType::kBf16, "BF16", 2},
}};

}  // namespace

std::string_view DataTypeName(DataType type) {
  for (const auto& t : kTypes)
    if (t.type == type) return t.name;
  return "INVALID";
}

DataType DataTypeFromName(std::string_view name) {
  for (const auto& t : kTypes)
    if (t.name == name) return t.type;
  return DataType::kInvalid;
}

size_t DataTypeSize(DataType type) {
  for (const auto& t : kTypes)
    if (t.type == type) return t.size;
  return 0;
}

namespace {
template <typename T>
double Load(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return static_cast<double>(v);
}
}  // namespace

double ElementAsDouble(DataType type, const uint8_t* p) {
  switch (type) {
    case DataType::kBool:
      return *p ? 1.0 : 0.0;
    case DataType::kUint8:
      return *p;
    case DataType::kInt8:
      return static_cast<int8_t>(*p);
    case DataType::kUint16:
      return Load<uint16_t>(p);
    case DataType::kInt16:
      return Load<int16_t>(p);
    case DataType::kUint32:
      return Load<uint32_t>(p);
    case DataType::kInt32:
      return Load<int32_t>(p);
    case DataType::kUint64:
      return Load<uint64_t>(p);
    case DataType::kInt64:
      return Load<int64_t>(p);
    case DataType::kFp32:
      return Load<float>(p);
    case DataType::kFp64:
      return Load<double>(p);
    case DataType::kFp16: {
      uint16_t v;
      std::memcpy(&v, p, 2);
      return HalfToFloat(v);
    }
    case DataType::kBf16: {
      uint16_t v;
      std::memcpy(&v, p, 2);
      return Bf16ToFloat(v);
    }
    default:
      return 0;
  }
}

std::string ShapeString(const int64_t* dims, size_t rank) {
  std::string s = "[";
  for (size_t i = 0; i < rank; ++i) s += (i ? "," : "") + std::to_string(dims[i]);
  return s + "]";
}

int64_t ElementCount(const int64_t* shape, size_t rank) {
  int64_t count = 1;
  for (size_t i = 0; i < rank; ++i) {
    if (shape[i] < 0) return -1;
    if (__builtin_mul_overflow(count, shape[i], &count)) return -1;
  }
  return count;
}

bool FillVariableDimension(std::vector<int64_t>& shape, int64_t elements) {
  int64_t known = 1;
  size_t variable = shape.size();
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] >= 0) {
      if (__builtin_mul_overflow(known, shape[d], &known)) return false;
    } else if (variable == shape.size()) {
      variable = d;
    } else {
      return false;
    }
  }
  if (variable == shape.size()) return true;
  if (known == 0 || elements < 0 || elements % known != 0) return false;
  shape[variable] = elements / known;
  return true;
}

int64_t TensorByteSize(DataType type, const int64_t* shape, size_t rank) {
  const int64_t elements = ElementCount(shape, rank);
  const auto size = static_cast<int64_t>(DataTypeSize(type));
  int64_t bytes = 0;
  if (elements < 0 || size == 0 || __builtin_mul_overflow(elements, size, &bytes)) return -1;
  return bytes;
}

}  // namespace nereid
