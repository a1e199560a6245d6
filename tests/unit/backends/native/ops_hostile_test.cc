// Hostile graphs and inputs for the native engine's op families: attributes and shape values out of
// range, overflowing, NaN or contradictory. Each must be refused at load or answered with an
// error at run time, never crash, hang or allocate without bound (run under ASan/UBSan by
// scripts/sanitize.sh).
#include <gtest/gtest.h>
#include <onnx/onnx_pb.h>

#include <cmath>
#include <limits>
#include <memory>
#include <tuple>

#include "graph.h"

namespace nereid::native {
namespace {

// One node reading graph input "x" (FP32, the given shape) and constant inputs, writing "y".
struct Case {
  onnx::ModelProto model;
  onnx::NodeProto* node;
  explicit Case(const std::string& op, int64_t opset = 13) {
    model.set_ir_version(8);
    auto* o = model.add_opset_import();
    o->set_domain("");
    o->set_version(opset);
    node = model.mutable_graph()->add_node();
    node->set_op_type(op);
    node->set_name("n");
    node->add_input("x");
    node->add_output("y");
    auto* in = model.mutable_graph()->add_input();
    in->set_name("x");
    in->mutable_type()->mutable_tensor_type()->set_elem_type(onnx::TensorProto::FLOAT);
    auto* out = model.mutable_graph()->add_output();
    out->set_name("y");
    out->mutable_type()->mutable_tensor_type()->set_elem_type(onnx::TensorProto::FLOAT);
  }
  Case& Ints(const std::string& name, std::vector<int64_t> values) {
    auto* a = node->add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto::INTS);
    for (int64_t v : values) a->add_ints(v);
    return *this;
  }
  Case& Int(const std::string& name, int64_t v) {
    auto* a = node->add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto::INT);
    a->set_i(v);
    return *this;
  }
  Case& Str(const std::string& name, const std::string& v) {
    auto* a = node->add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto::STRING);
    a->set_s(v);
    return *this;
  }
  // A constant input (an initializer) of INT64 or FP32 values.
  Case& Const(const std::string& name, std::vector<int64_t> dims, std::vector<int64_t> ints,
              std::vector<float> floats = {}) {
    node->add_input(name);
    auto* t = model.mutable_graph()->add_initializer();
    t->set_name(name);
    for (int64_t d : dims) t->add_dims(d);
    if (floats.empty()) {
      t->set_data_type(onnx::TensorProto::INT64);
      for (int64_t v : ints) t->add_int64_data(v);
    } else {
      t->set_data_type(onnx::TensorProto::FLOAT);
      for (float v : floats) t->add_float_data(v);
    }
    return *this;
  }
  Case& Skip() {  // an omitted optional input
    node->add_input("");
    return *this;
  }
  // Loads and runs on x of 'shape': Ok or the error, never a crash.
  Status Try(std::vector<int64_t> shape) {
    auto graph = Graph::FromProto(std::make_unique<onnx::ModelProto>(model));
    if (!graph.ok()) return graph.status();
    Tensor x = Tensor::Allocate(DataType::kFp32, shape);
    std::vector<Tensor> out;
    return (*graph)->Run({{"x", x}}, {"y"}, &out);
  }
};

constexpr int64_t kMin = std::numeric_limits<int64_t>::min();
constexpr int64_t kMax = std::numeric_limits<int64_t>::max();

// A feed of another rank than the graph declares is refused before any op reads it, naming the
// input (a Conv had answered "a layout conversion of a tensor not of rank 4"); a graph that
// declares no shape takes any rank.
TEST(HostileOps, AFeedOfAnotherRankThanDeclaredIsRefused) {
  Case c("Relu");
  auto* shape = c.model.mutable_graph()
                    ->mutable_input(0)
                    ->mutable_type()
                    ->mutable_tensor_type()
                    ->mutable_shape();
  shape->add_dim()->set_dim_param("batch");
  shape->add_dim()->set_dim_value(3);
  EXPECT_TRUE(c.Try({2, 3}).ok());
  const Status wrong = c.Try({3});
  EXPECT_EQ(wrong.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(wrong.message().find("input 'x' has 1 dimensions; the ONNX graph declares 2"),
            std::string::npos)
      << wrong.message();
  EXPECT_FALSE(c.Try({1, 2, 3}).ok());
  EXPECT_TRUE(Case("Relu").Try({4}).ok());
  EXPECT_TRUE(Case("Relu").Try({1, 2, 3, 4}).ok());
}

TEST(HostileOps, ConvAttributesOutOfRange) {
  const std::vector<float> w(2 * 3 * 3 * 3, 0.5f);
  for (auto attrs :
       std::vector<std::pair<std::string, std::vector<int64_t>>>{{"strides", {0, 1}},
                                                                 {"strides", {kMax, 1}},
                                                                 {"dilations", {-1, 1}},
                                                                 {"pads", {-1, 0, 0, 0}},
                                                                 {"pads", {kMax, 0, 0, 0}},
                                                                 {"kernel_shape", {5, 5}}}) {
    Case c("Conv");
    c.Const("w", {2, 3, 3, 3}, {}, w).Ints(attrs.first, attrs.second);
    EXPECT_FALSE(c.Try({1, 3, 8, 8}).ok()) << attrs.first;
  }
  Case group0("Conv");
  group0.Const("w", {2, 3, 3, 3}, {}, w).Int("group", 0);
  EXPECT_FALSE(group0.Try({1, 3, 8, 8}).ok());
  Case bigger("Conv");  // the window larger than the input
  bigger.Const("w", {2, 3, 3, 3}, {}, w);
  EXPECT_FALSE(bigger.Try({1, 3, 2, 2}).ok());
  Case wrong_channels("Conv");
  wrong_channels.Const("w", {2, 3, 3, 3}, {}, w);
  EXPECT_FALSE(wrong_channels.Try({1, 4, 8, 8}).ok());
  Case three_d("Conv");  // refused at load, naming the node
  three_d.Const("w", {1, 1, 1, 1, 1}, {}, {1.f});
  const Status s = three_d.Try({1, 1, 2, 2, 2});
  EXPECT_EQ(s.code(), Status::Code::kUnsupported);
  EXPECT_NE(s.message().find("Conv node 'n'"), std::string::npos) << s.message();
  Case auto_pad("Conv");
  auto_pad.Const("w", {2, 3, 3, 3}, {}, w).Str("auto_pad", "BOGUS");
  EXPECT_FALSE(auto_pad.Try({1, 3, 8, 8}).ok());
}

TEST(HostileOps, ConvTransposeOutputShapeBounded) {
  Case c("ConvTranspose");
  c.Const("w", {1, 1, 2, 2}, {}, {1, 1, 1, 1}).Ints("output_shape", {kMax, kMax});
  EXPECT_FALSE(c.Try({1, 1, 2, 2}).ok());
  Case huge("ConvTranspose");  // 2^20 strides on a 2x2 input: a 4 GiB-plus output, refused
  huge.Const("w", {1, 1, 2, 2}, {}, {1, 1, 1, 1}).Ints("strides", {1 << 20, 1 << 20});
  EXPECT_FALSE(huge.Try({1, 1, 64, 64}).ok());
}

TEST(HostileOps, PoolsRefuseWhatTheyCannotRun) {
  Case no_kernel("MaxPool");
  EXPECT_EQ(no_kernel.Try({1, 1, 4, 4}).code(), Status::Code::kUnsupported);
  Case indices("MaxPool");
  indices.Ints("kernel_shape", {2, 2});
  indices.node->add_output("indices");
  EXPECT_EQ(indices.Try({1, 1, 4, 4}).code(), Status::Code::kUnsupported);
  Case huge("AveragePool");
  huge.Ints("kernel_shape", {kMax, 1});
  EXPECT_FALSE(huge.Try({1, 1, 4, 4}).ok());
  Case rank("GlobalAveragePool");
  EXPECT_FALSE(rank.Try({4}).ok());
}

TEST(HostileOps, ShapeValuesFromTensorsAreBounded) {
  Case expand("Expand");
  expand.Const("shape", {3}, {1 << 20, 1 << 20, 1 << 20});
  EXPECT_FALSE(expand.Try({1}).ok());
  Case negative("Expand");
  negative.Const("shape", {2}, {-5, 2});
  EXPECT_FALSE(negative.Try({1, 1}).ok());
  Case pad("Pad", 13);
  pad.Const("pads", {2}, {kMin, kMax});
  EXPECT_FALSE(pad.Try({4}).ok());
  Case crop("Pad", 13);
  crop.Const("pads", {2}, {-3, -3});
  EXPECT_FALSE(crop.Try({4}).ok());
  Case reflect("Pad", 13);  // reflect pads wider than the axis
  reflect.Const("pads", {2}, {9, 0}).Str("mode", "reflect");
  EXPECT_FALSE(reflect.Try({4}).ok());
  Case reshape("Reshape");
  reshape.Const("shape", {2}, {-1, -1});
  EXPECT_FALSE(reshape.Try({4}).ok());
}

TEST(HostileOps, RangeCountsAreFiniteAndBounded) {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  // start is the request's scalar x (0 here); limit and delta constants.
  for (auto [limit, delta, ok] :
       std::vector<std::tuple<float, float, bool>>{{5.f, 1.f, true},
                                                   {-5.f, 1.f, true},  // (an empty range)
                                                   {1e30f, 1.f, false},
                                                   {5.f, 0.f, false},
                                                   {inf, 1.f, false},
                                                   {nan, 1.f, false},
                                                   {5.f, nan, false},
                                                   {5.f, 1e-30f, false}}) {
    Case range("Range", 11);
    range.Const("limit", {}, {}, {limit}).Const("delta", {}, {}, {delta});
    EXPECT_EQ(range.Try({}).ok(), ok) << limit << " by " << delta;
  }
}

TEST(HostileOps, SliceAndGatherExtremes) {
  // Extreme starts, ends and steps clamp as the spec says: never out of bounds.
  for (auto [start, end, step] : std::vector<std::array<int64_t, 3>>{
           {kMin, kMax, 1}, {kMax, kMin, -1}, {0, 4, kMax}, {3, -5, kMin}, {-2, kMax, 3}}) {
    Case c("Slice");
    c.Const("starts", {1}, {start}).Const("ends", {1}, {end}).Const("axes", {1}, {0});
    c.Const("steps", {1}, {step});
    EXPECT_TRUE(c.Try({4}).ok()) << start << " " << end << " " << step;
  }
  Case zero("Slice");
  zero.Const("starts", {1}, {0}).Const("ends", {1}, {4}).Const("axes", {1}, {0});
  zero.Const("steps", {1}, {0});
  EXPECT_FALSE(zero.Try({4}).ok());
  Case gather("Gather");
  gather.Const("idx", {2}, {0, kMin});
  EXPECT_FALSE(gather.Try({4}).ok());
}

TEST(HostileOps, ResizeScalesAndModes) {
  for (float scale : {std::nanf(""), INFINITY, -1.f, 0.f, 1e9f}) {
    Case c("Resize");
    c.Skip().Const("scales", {4}, {}, {1, 1, scale, scale});
    EXPECT_FALSE(c.Try({1, 1, 4, 4}).ok()) << scale;
  }
  Case channels("Resize");  // resizing the channel axis: refused
  channels.Skip().Const("scales", {4}, {}, {1, 2, 1, 1});
  EXPECT_EQ(channels.Try({1, 1, 4, 4}).code(), Status::Code::kUnsupported);
  Case cubic("Resize");
  cubic.Skip().Const("scales", {4}, {}, {1, 1, 2, 2}).Str("mode", "cubic");
  EXPECT_EQ(cubic.Try({1, 1, 4, 4}).code(), Status::Code::kUnsupported);
}

TEST(HostileOps, ReductionsAndSoftmaxAxes) {
  Case axis("ReduceMean");
  axis.Ints("axes", {kMin});
  EXPECT_FALSE(axis.Try({2, 3}).ok());
  Case transpose("Transpose");
  transpose.Ints("perm", {0, 0});
  EXPECT_FALSE(transpose.Try({2, 3}).ok());
  Case split("Split", 13);
  split.Const("split", {2}, {kMax, kMin + 5});
  EXPECT_FALSE(split.Try({4}).ok());
  Case overflow("Split", 13);  // sizes whose sum overflows
  overflow.Const("split", {2}, {kMax, kMax});
  EXPECT_FALSE(overflow.Try({4}).ok());
}

TEST(HostileOps, EmptyTensorsBroadcast) {
  // A zero-sized dimension broadcast against a constant: an empty result, no division by zero.
  Case add("Add");
  add.Const("c", {1, 3}, {}, {1, 2, 3});
  EXPECT_TRUE(add.Try({0, 3}).ok());
  Case wide("Mul");
  wide.Const("c", {2, 1, 1}, {}, {1, 2});
  EXPECT_TRUE(wide.Try({2, 0, 5}).ok());
}

}  // namespace
}  // namespace nereid::native
