#include "common/data_type.h"

#include <limits>

#include "nereid/backend_util.h"

// The arithmetic lives once, in the header-only helpers backends use too; the core keeps its own
// enum so that nothing below the ABI glue depends on the ABI.
namespace nereid {
namespace {
backend::DataType B(DataType t) { return static_cast<backend::DataType>(t); }
}  // namespace

std::string_view DataTypeName(DataType type) { return backend::DataTypeName(B(type)); }
DataType DataTypeFromName(std::string_view name) {
  return static_cast<DataType>(backend::DataTypeFromName(name));
}
size_t DataTypeSize(DataType type) { return backend::DataTypeSize(B(type)); }

double ElementAsDouble(DataType type, const uint8_t* p) {
  return backend::ElementAsDouble(B(type), p);
}

std::string ShapeString(const int64_t* dims, size_t rank) {
  return backend::ShapeString(dims, rank);
}
int64_t ElementCount(const int64_t* shape, size_t rank) {
  return backend::ElementCount(shape, rank);
}
bool FillVariableDimension(std::vector<int64_t>& shape, int64_t elements) {
  return backend::FillVariableDimension(shape, elements);
}
int64_t TensorByteSize(DataType type, const int64_t* shape, size_t rank) {
  return backend::TensorByteSize(B(type), shape, rank);
}

int64_t ZeroFilledByteSize(DataType type, const std::vector<int64_t>& shape) {
  if (type != DataType::kBytes) return TensorByteSize(type, shape);
  const int64_t elements = ElementCount(shape);
  if (elements < 0 || elements > std::numeric_limits<int64_t>::max() / 4) return -1;
  return elements * 4;
}

std::string SizeOverflow(const std::string& input, DataType type,
                         const std::vector<int64_t>& shape) {
  if (ElementCount(shape) < 0)
    return "input '" + input + "' has shape " + ShapeString(shape) +
           ", which causes total element count to exceed maximum size of " +
           std::to_string(std::numeric_limits<int64_t>::max());
  if (DataTypeSize(type) > 0 && TensorByteSize(type, shape) < 0)
    return "byte size overflow for input '" + input + "': shape " + ShapeString(shape) + " of " +
           std::string(DataTypeName(type)) + " holds more than " +
           std::to_string(std::numeric_limits<int64_t>::max()) + " bytes";
  return "";
}

}  // namespace nereid
