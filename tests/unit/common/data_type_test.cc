// Shape arithmetic on untrusted shapes: element and byte counts that overflow are refused, and a
// variable dimension is filled only when the fixed ones divide the total.
#include "common/data_type.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <limits>

namespace nereid {
namespace {

TEST(DataTypeTest, ElementCountRefusesNegativeAndOverflowingShapes) {
  EXPECT_EQ(ElementCount(std::vector<int64_t>{2, 3, 4}), 24);
  EXPECT_EQ(ElementCount(std::vector<int64_t>{}), 1);
  EXPECT_EQ(ElementCount(std::vector<int64_t>{2, -1}), -1);
  EXPECT_EQ(ElementCount(std::vector<int64_t>{int64_t{1} << 32, int64_t{1} << 32}), -1);
}

TEST(DataTypeTest, TensorByteSizeRefusesWrapAround) {
  EXPECT_EQ(TensorByteSize(DataType::kFp32, {3, 4}), 48);
  // 2^52 x 1024 elements x 4 bytes = 2^64: once wrapped to 0 and accepted an empty tensor.
  EXPECT_EQ(TensorByteSize(DataType::kFp32, {int64_t{1} << 52, 1024}), -1);
  EXPECT_EQ(TensorByteSize(DataType::kBytes, {4}), -1);
}

TEST(DataTypeTest, FillVariableDimension) {
  std::vector<int64_t> shape{-1, 4};
  EXPECT_TRUE(FillVariableDimension(shape, 12));
  EXPECT_EQ(shape, (std::vector<int64_t>{3, 4}));
  shape = {2, 3};
  EXPECT_TRUE(FillVariableDimension(shape, 7));  // nothing to fill: left to the caller's check
  EXPECT_EQ(shape, (std::vector<int64_t>{2, 3}));
  for (std::vector<int64_t> bad : std::vector<std::vector<int64_t>>{
           {-1, 5}, {-1, -1}, {0, -1}, {int64_t{1} << 40, int64_t{1} << 40, -1}}) {
    const auto before = bad;
    EXPECT_FALSE(FillVariableDimension(bad, 12)) << ShapeString(before);
    EXPECT_EQ(bad, before);
  }
}

}  // namespace
}  // namespace nereid
