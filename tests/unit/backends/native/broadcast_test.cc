// Broadcasting walks (Sub, Expand) against index-by-index references, over shapes whose
// dimensions merge (CollapseDims) in every pattern: size-1 dimensions, runs broadcast in one
// operand only, broadcast in both, nothing left to merge, everything of size 1.
#include <gtest/gtest.h>
#include <onnx/onnx_pb.h>

#include <random>
#include <vector>

#include "graph.h"
#include "onnx_builder.h"
#include "ops/op.h"

namespace nereid::native {
namespace {

using Shape = std::vector<int64_t>;

TEST(CollapseDims, MergesWhatEveryOperandWalksAsOne) {
  // NHWC times a per-channel vector: rows of channels against one row.
  Shape shape = {1, 12, 96, 8};
  Shape a = BroadcastStrides({1, 12, 96, 8}, shape), b = BroadcastStrides({8}, shape);
  CollapseDims(shape, {&a, &b});
  EXPECT_EQ(shape, (Shape{1152, 8}));
  EXPECT_EQ(a, (Shape{8, 1}));
  EXPECT_EQ(b, (Shape{0, 1}));
  // NCHW times a per-channel vector [C, 1, 1]: H and W merge, C stays.
  shape = {2, 5, 3, 4};
  a = BroadcastStrides({2, 5, 3, 4}, shape), b = BroadcastStrides({5, 1, 1}, shape);
  CollapseDims(shape, {&a, &b});
  EXPECT_EQ(shape, (Shape{2, 5, 12}));
  EXPECT_EQ(a, (Shape{60, 12, 1}));
  EXPECT_EQ(b, (Shape{0, 1, 0}));
  // Alternating broadcasts: nothing merges.
  shape = {2, 3, 4};
  a = BroadcastStrides({2, 1, 4}, shape), b = BroadcastStrides({1, 3, 1}, shape);
  CollapseDims(shape, {&a, &b});
  EXPECT_EQ(shape, (Shape{2, 3, 4}));
  // Only ones: rank 0 (one element).
  shape = {1, 1};
  a = BroadcastStrides({1, 1}, shape), b = BroadcastStrides({1}, shape);
  CollapseDims(shape, {&a, &b});
  EXPECT_TRUE(shape.empty());
  EXPECT_TRUE(a.empty());
  EXPECT_TRUE(b.empty());
}

Tensor Random(Shape shape, unsigned seed) {
  Tensor t = Tensor::Allocate(DataType::kFp32, std::move(shape));
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-2.f, 2.f);
  float* p = t.mutable_data<float>();
  for (int64_t i = 0; i < t.elements(); ++i) p[i] = u(rng);
  return t;
}

// The element of 't' (broadcast to 'out') at out's flat index 'flat'.
float At(const Tensor& t, const Shape& out, int64_t flat) {
  const Shape& s = t.shape();
  int64_t offset = 0, stride = 1;
  for (size_t d = out.size(); d-- > 0;) {
    const int64_t i = flat % out[d];
    flat /= out[d];
    const size_t k = d + s.size() - out.size();
    if (d + s.size() < out.size()) continue;
    if (s[k] != 1) offset += i * stride;
    stride *= s[k];
  }
  return t.data<float>()[offset];
}

TEST(Broadcast, SubAndExpandMatchIndexByIndex) {
  const std::vector<std::pair<Shape, Shape>> cases = {{{1, 12, 96, 8}, {1, 1, 1, 8}},
                                                      {{2, 5, 3, 4}, {5, 1, 1}},
                                                      {{2, 3, 4}, {2, 1, 4}},
                                                      {{2, 1, 4}, {1, 3, 1}},
                                                      {{4, 1}, {1, 1}},
                                                      {{3}, {2, 1, 1}},
                                                      {{5, 1, 7}, {5, 6, 1}},
                                                      {{1, 1}, {1}},
                                                      {{2, 1, 3, 1, 5}, {2, 4, 3, 6, 1}},
                                                      {{7, 300}, {300}},
                                                      {{300, 1}, {300, 40}}};
  unsigned seed = 1;
  for (const auto& [sa, sb] : cases) {
    auto model = onnx_builder::NewModel(13);
    auto* g = model->mutable_graph();
    onnx_builder::AddValueInfo(g->mutable_input(), "a", sa);
    onnx_builder::AddValueInfo(g->mutable_input(), "b", sb);
    onnx_builder::AddNode(g, "Sub", {"a", "b"}, "y");  // (not commutative: operands not swapped)
    onnx_builder::AddValueInfo(g->mutable_output(), "y", {});
    auto graph = Graph::FromProto(std::move(model));
    ASSERT_TRUE(graph.ok()) << graph.status().message();
    const Tensor a = Random(sa, seed++), b = Random(sb, seed++);
    std::vector<Tensor> out;
    ASSERT_TRUE((*graph)->Run({{"a", a}, {"b", b}}, {"y"}, &out).ok());
    const Shape& shape = out[0].shape();
    for (int64_t i = 0; i < out[0].elements(); ++i)
      ASSERT_EQ(out[0].data<float>()[i], At(a, shape, i) - At(b, shape, i))
          << "case " << seed / 2 << " at " << i;
    // Expand a to the broadcast shape.
    auto expand = onnx_builder::NewModel(13);
    auto* e = expand->mutable_graph();
    onnx_builder::AddValueInfo(e->mutable_input(), "a", sa);
    onnx_builder::AddInt64Tensor(e, "shape", shape);
    onnx_builder::AddNode(e, "Expand", {"a", "shape"}, "y");
    onnx_builder::AddValueInfo(e->mutable_output(), "y", {});
    auto expander = Graph::FromProto(std::move(expand));
    ASSERT_TRUE(expander.ok()) << expander.status().message();
    ASSERT_TRUE((*expander)->Run({{"a", a}}, {"y"}, &out).ok());
    ASSERT_EQ(out[0].shape(), shape);
    for (int64_t i = 0; i < out[0].elements(); ++i)
      ASSERT_EQ(out[0].data<float>()[i], At(a, shape, i)) << "expand, case " << seed / 2;
  }
}

}  // namespace
}  // namespace nereid::native
