// The native engine's fusions (Gemm -> activation, LayerNormalization written out) and its
// vectorized activation kernels, against float64 references.
#include <gtest/gtest.h>
#include <onnx/onnx_pb.h>

#include <cmath>
#include <functional>
#include <initializer_list>
#include <limits>
#include <random>
#include <set>

#include "cpu/elementwise.h"
#include "cpu/parallel.h"
#include "graph.h"
#include "onnx_builder.h"

namespace nereid::native {
namespace {

using onnx_builder::AddFloatTensor;
using onnx_builder::AddInt64Tensor;
using onnx_builder::AddNode;
using onnx_builder::AddValueInfo;
using onnx_builder::NewModel;
using onnx_builder::SetInt;
using onnx_builder::SetInts;
using onnx_builder::SetString;

// Uniform values in [lo, hi) from 'rng' into each vector in turn.
void FillUniform(std::mt19937& rng, float lo, float hi,
                 std::initializer_list<std::vector<float>*> vectors) {
  std::uniform_real_distribution<float> d(lo, hi);
  for (std::vector<float>* v : vectors)
    for (float& f : *v) f = d(rng);
}

// An FP32 tensor of 'shape', uniform in [lo, hi) from a generator seeded with 'seed'.
Tensor UniformTensor(std::vector<int64_t> shape, unsigned seed, float lo, float hi) {
  Tensor t = Tensor::Allocate(DataType::kFp32, std::move(shape));
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  for (int64_t i = 0; i < t.elements(); ++i) t.mutable_data<float>()[i] = d(rng);
  return t;
}

// 'model' loaded with the channels-last layout off (got[0], logs[0]) and on (got[1], logs[1]),
// each run on 'x' as input "x", fetching 'fetch'; logs[i] is that load's pass log.
void RunBothLayouts(const std::function<std::unique_ptr<onnx::ModelProto>()>& model,
                    const Tensor& x, const std::vector<std::string>& fetch,
                    std::vector<Tensor> (&got)[2], std::vector<std::string> (&logs)[2]) {
  for (bool channels_last : {false, true}) {
    GraphOptions options;
    options.channels_last = channels_last;
    auto graph = Graph::FromProto(model(), options);
    ASSERT_TRUE(graph.ok()) << graph.status().message();
    logs[channels_last] = (*graph)->pass_log();
    ASSERT_TRUE((*graph)->Run({{"x", x}}, fetch, &got[channels_last]).ok());
  }
}

struct Mlp {
  int64_t m, k = 40, n = 24;
  std::vector<float> x, w0, b0, w1, b1;
  explicit Mlp(int64_t rows = 13) : m(rows) {
    std::mt19937 rng(3);
    std::uniform_real_distribution<float> d(-1, 1);
    for (auto [v, size] : {std::pair{&x, m * k}, {&w0, n * k}, {&b0, n}, {&w1, n * n}, {&b1, n}})
      for (int64_t i = 0; i < size; ++i) v->push_back(d(rng));
  }
  // Gemm(transB) + Relu, Gemm(transB) + Sigmoid; 'hidden_is_output' also returns the first Gemm's
  // raw output, which must then stay unfused.
  std::unique_ptr<onnx::ModelProto> Model(bool hidden_is_output) const {
    auto model = NewModel(17);
    auto* g = model->mutable_graph();
    AddFloatTensor(g, "w0", {n, k}, w0);
    AddFloatTensor(g, "b0", {n}, b0);
    AddFloatTensor(g, "w1", {n, n}, w1);
    AddFloatTensor(g, "b1", {n}, b1);
    AddValueInfo(g->mutable_input(), "x", {m, k});
    AddValueInfo(g->mutable_output(), "y", {m, n});
    if (hidden_is_output) AddValueInfo(g->mutable_output(), "h", {m, n});
    for (auto [in, w, b, out] : {std::tuple{"x", "w0", "b0", "h"}, {"r", "w1", "b1", "l"}}) {
      SetInt(AddNode(g, "Gemm", {in, w, b}, out), "transB", 1);
    }
    AddNode(g, "Relu", {"h"}, "r");
    AddNode(g, "Sigmoid", {"l"}, "y");
    // Topological order: Gemm h, Relu r, Gemm l, Sigmoid y.
    std::swap(*g->mutable_node(1), *g->mutable_node(2));
    return model;
  }
  std::vector<double> Reference(std::vector<double>* hidden) const {
    std::vector<double> h(m * n), y(m * n);
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double s = b0[j];
        for (int64_t p = 0; p < k; ++p) s += double(x[i * k + p]) * w0[j * k + p];
        h[i * n + j] = s;
      }
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double s = b1[j];
        for (int64_t p = 0; p < n; ++p) s += std::max(h[i * n + p], 0.0) * w1[j * n + p];
        y[i * n + j] = 1.0 / (1.0 + std::exp(-s));
      }
    if (hidden) *hidden = h;
    return y;
  }
};

TEST(GemmFusionTest, ReluAndSigmoidFoldIntoTheirGemmsAndResultsHold) {
  // 1-4 rows: the small-row paths on packed weights; 13: the blocked GEMM (the graph keeps only
  // the packed copy of weights that nothing else reads).
  for (int64_t rows : {1, 2, 3, 4, 13}) {
    Mlp mlp(rows);
    auto graph = Graph::FromProto(mlp.Model(false));
    ASSERT_TRUE(graph.ok()) << graph.status().message();
    EXPECT_EQ((*graph)->node_count(), 2u);  // Gemm+Relu, Gemm+Sigmoid
    Tensor x = Tensor::Allocate(DataType::kFp32, {mlp.m, mlp.k});
    std::copy(mlp.x.begin(), mlp.x.end(), x.mutable_data<float>());
    std::vector<Tensor> out;
    ASSERT_TRUE((*graph)->Run({{"x", x}}, {"y"}, &out).ok());
    const auto want = mlp.Reference(nullptr);
    for (int64_t i = 0; i < mlp.m * mlp.n; ++i)
      ASSERT_NEAR(out[0].data<float>()[i], want[i], 1e-5) << "rows " << rows << ", " << i;
  }
}

TEST(GemmFusionTest, AGemmOutputThatIsAlsoAGraphOutputIsNotFused) {
  Mlp mlp;
  auto graph = Graph::FromProto(mlp.Model(true));
  ASSERT_TRUE(graph.ok()) << graph.status().message();
  EXPECT_EQ((*graph)->node_count(), 3u);  // Gemm, Relu, Gemm+Sigmoid
  Tensor x = Tensor::Allocate(DataType::kFp32, {mlp.m, mlp.k});
  std::copy(mlp.x.begin(), mlp.x.end(), x.mutable_data<float>());
  std::vector<Tensor> out;
  ASSERT_TRUE((*graph)->Run({{"x", x}}, {"y", "h"}, &out).ok());
  std::vector<double> hidden;
  const auto want = mlp.Reference(&hidden);
  for (int64_t i = 0; i < mlp.m * mlp.n; ++i) {
    ASSERT_NEAR(out[0].data<float>()[i], want[i], 1e-5) << i;
    ASSERT_NEAR(out[1].data<float>()[i], hidden[i], 1e-4) << i;  // raw, negatives kept
  }
}

TEST(GraphRunRowsTest, RowsAloneInTurnOrSideBySideAnswerAsTheBatch) {
  Mlp mlp;  // 13 rows, two outputs
  auto graph = Graph::FromProto(mlp.Model(true));
  ASSERT_TRUE(graph.ok()) << graph.status().message();
  Tensor x = Tensor::Allocate(DataType::kFp32, {mlp.m, mlp.k});
  std::copy(mlp.x.begin(), mlp.x.end(), x.mutable_data<float>());
  std::vector<double> hidden;
  const auto want = mlp.Reference(&hidden);
  // No team: in turn; a team of 3: side by side; a team of 16 (more threads than rows): whole.
  kernels::ThreadTeam three(3), sixteen(16);
  for (kernels::ThreadTeam* team : {static_cast<kernels::ThreadTeam*>(nullptr), &three, &sixteen}) {
    kernels::ParallelScope scope(team);
    std::vector<Tensor> out;
    ASSERT_TRUE((*graph)->RunRows({{"x", x}}, {"y", "h"}, &out).ok());
    ASSERT_EQ(out.size(), 2u);
    ASSERT_EQ(out[0].shape(), (std::vector<int64_t>{mlp.m, mlp.n}));
    ASSERT_EQ(out[1].shape(), (std::vector<int64_t>{mlp.m, mlp.n}));
    for (int64_t i = 0; i < mlp.m * mlp.n; ++i) {
      ASSERT_NEAR(out[0].data<float>()[i], want[i], 1e-5) << i;
      ASSERT_NEAR(out[1].data<float>()[i], hidden[i], 1e-4) << i;
    }
  }
}

// LayerNormalization as exporters without the op write it: ReduceMean, Sub, Pow(., 2) or Mul(d, d),
// ReduceMean, Add(eps), Sqrt, Div, then optionally Mul(scale) and Add(bias) over the last axis.
struct WrittenOutLayerNorm {
  static constexpr int64_t kRows = 6, kWidth = 24;
  bool square_by_mul = false, affine = true, diff_is_output = false;
  std::vector<float> x, scale, bias;
  WrittenOutLayerNorm() {
    std::mt19937 rng(5);
    std::uniform_real_distribution<float> d(-3, 3);
    for (int64_t i = 0; i < kRows * kWidth; ++i) x.push_back(d(rng));
    for (int64_t i = 0; i < kWidth; ++i) scale.push_back(d(rng)), bias.push_back(d(rng));
  }
  std::unique_ptr<onnx::ModelProto> Model() const {
    auto model = NewModel(13);
    auto* g = model->mutable_graph();
    AddFloatTensor(g, "two", {}, {2.f});
    AddFloatTensor(g, "eps", {}, {1e-5f});
    AddFloatTensor(g, "scale", {kWidth}, scale);
    AddFloatTensor(g, "bias", {kWidth}, bias);
    AddValueInfo(g->mutable_input(), "x", {2, 3, kWidth});
    AddValueInfo(g->mutable_output(), "y", {2, 3, kWidth});
    if (diff_is_output) AddValueInfo(g->mutable_output(), "d", {2, 3, kWidth});
    for (auto [in, out] : {std::pair{"x", "m"}, {"p", "v"}}) {
      SetInts(AddNode(g, "ReduceMean", {in}, out), "axes", {-1});
      if (std::string(in) == "x") {
        AddNode(g, "Sub", {"x", "m"}, "d");
        if (square_by_mul)
          AddNode(g, "Mul", {"d", "d"}, "p");
        else
          AddNode(g, "Pow", {"d", "two"}, "p");
      }
    }
    AddNode(g, "Add", {"v", "eps"}, "e");
    AddNode(g, "Sqrt", {"e"}, "s");
    AddNode(g, "Div", {"d", "s"}, affine ? "n" : "y");
    if (affine) {
      AddNode(g, "Mul", {"n", "scale"}, "t");
      AddNode(g, "Add", {"t", "bias"}, "y");
    }
    return model;
  }
  double Reference(int64_t r, int64_t i) const {
    const float* row = x.data() + r * kWidth;
    double mean = 0, var = 0;
    for (int64_t k = 0; k < kWidth; ++k) mean += row[k];
    mean /= kWidth;
    for (int64_t k = 0; k < kWidth; ++k) var += (row[k] - mean) * (row[k] - mean);
    const double y = (row[i] - mean) / std::sqrt(var / kWidth + 1e-5);
    return affine ? y * scale[i] + bias[i] : y;
  }
};

TEST(LayerNormFusionTest, TheWrittenOutFormsBecomeOneNodeAndResultsHold) {
  for (bool by_mul : {false, true})
    for (bool affine : {true, false})
      for (bool diff_is_output : {false, true}) {
        SCOPED_TRACE(testing::Message() << "square by Mul " << by_mul << ", affine " << affine
                                        << ", Sub's output also a graph output " << diff_is_output);
        WrittenOutLayerNorm ln;
        ln.square_by_mul = by_mul, ln.affine = affine, ln.diff_is_output = diff_is_output;
        auto graph = Graph::FromProto(ln.Model());
        ASSERT_TRUE(graph.ok()) << graph.status().message();
        // Fused: one node. A value of the chain read outside it keeps the chain as written.
        EXPECT_EQ((*graph)->node_count(), diff_is_output ? (affine ? 9u : 7u) : 1u);
        Tensor x = Tensor::Allocate(DataType::kFp32, {2, 3, ln.kWidth});
        std::copy(ln.x.begin(), ln.x.end(), x.mutable_data<float>());
        std::vector<Tensor> out;
        ASSERT_TRUE((*graph)->Run({{"x", x}}, {"y"}, &out).ok());
        for (int64_t r = 0; r < ln.kRows; ++r)
          for (int64_t i = 0; i < ln.kWidth; ++i)
            ASSERT_NEAR(out[0].data<float>()[r * ln.kWidth + i], ln.Reference(r, i), 2e-5)
                << r << ", " << i;
      }
}

// A transformer layer's feed-forward block as PyTorch exports it: MatMul by W1 -> Add(b1) -> GELU
// written out (Div by sqrt(2), Erf, Add 1, Mul by x, Mul by 0.5; or the 0.5 first) -> MatMul by
// W2 -> Add(b2) -> Add(x) (the residual). Fused: two MatMuls, the first with its bias and the GELU
// in its epilogue, the second with its bias and the residual; the answers hold against float64,
// for 3-D inputs (batch x tokens x width), on enough rows and columns for the tile kernels.
struct FeedForward {
  static constexpr int64_t kBatch = 2, kTokens = 20, kWidth = 64, kHidden = 160;
  bool half_first = false;
  std::vector<float> x, w1, b1, w2, b2;
  FeedForward() {
    std::mt19937 rng(11);
    std::uniform_real_distribution<float> d(-1, 1);
    for (auto [v, size] : {std::pair{&x, kBatch * kTokens * kWidth},
                           {&w1, kWidth * kHidden},
                           {&b1, kHidden},
                           {&w2, kHidden * kWidth},
                           {&b2, kWidth}})
      for (int64_t i = 0; i < size; ++i) v->push_back(d(rng));
  }
  std::unique_ptr<onnx::ModelProto> Model() const {
    auto model = NewModel(17);
    auto* g = model->mutable_graph();
    AddFloatTensor(g, "w1", {kWidth, kHidden}, w1);
    AddFloatTensor(g, "b1", {kHidden}, b1);
    AddFloatTensor(g, "w2", {kHidden, kWidth}, w2);
    AddFloatTensor(g, "b2", {kWidth}, b2);
    AddFloatTensor(g, "sqrt2", {}, {1.4142135381698608f});
    AddFloatTensor(g, "one", {}, {1.f});
    AddFloatTensor(g, "half", {}, {0.5f});
    AddValueInfo(g->mutable_input(), "x", {kBatch, kTokens, kWidth});
    AddValueInfo(g->mutable_output(), "y", {kBatch, kTokens, kWidth});
    AddNode(g, "MatMul", {"x", "w1"}, "p1");
    AddNode(g, "Add", {"p1", "b1"}, "h");
    AddNode(g, "Div", {"h", "sqrt2"}, "s");
    AddNode(g, "Erf", {"s"}, "e");
    AddNode(g, "Add", {"e", "one"}, "t");
    if (half_first) {
      AddNode(g, "Mul", {"h", "half"}, "hh");
      AddNode(g, "Mul", {"hh", "t"}, "gelu");
    } else {
      AddNode(g, "Mul", {"h", "t"}, "ht");
      AddNode(g, "Mul", {"ht", "half"}, "gelu");
    }
    AddNode(g, "MatMul", {"gelu", "w2"}, "p2");
    AddNode(g, "Add", {"b2", "p2"}, "o");  // (the bias on either side)
    AddNode(g, "Add", {"o", "x"}, "y");
    return model;
  }
  double Reference(int64_t row, int64_t j) const {
    std::vector<double> gelu(kHidden);
    for (int64_t c = 0; c < kHidden; ++c) {
      double h = b1[c];
      for (int64_t i = 0; i < kWidth; ++i) h += double(x[row * kWidth + i]) * w1[i * kHidden + c];
      gelu[c] = h * 0.5 * (1 + std::erf(h / std::sqrt(2.0)));
    }
    double y = b2[j] + x[row * kWidth + j];
    for (int64_t c = 0; c < kHidden; ++c) y += gelu[c] * w2[c * kWidth + j];
    return y;
  }
};

TEST(TransformerFusionTest, FeedForwardBecomesTwoMatMulsAndResultsHold) {
  for (bool half_first : {false, true}) {
    SCOPED_TRACE(testing::Message() << "0.5 first " << half_first);
    FeedForward ff;
    ff.half_first = half_first;
    auto graph = Graph::FromProto(ff.Model());
    ASSERT_TRUE(graph.ok()) << graph.status().message();
    EXPECT_EQ((*graph)->node_count(), 2u);  // MatMul+bias+GELU, MatMul+bias+residual
    Tensor x = Tensor::Allocate(DataType::kFp32, {ff.kBatch, ff.kTokens, ff.kWidth});
    std::copy(ff.x.begin(), ff.x.end(), x.mutable_data<float>());
    std::vector<Tensor> out;
    ASSERT_TRUE((*graph)->Run({{"x", x}}, {"y"}, &out).ok());
    ASSERT_EQ(out[0].shape(), (std::vector<int64_t>{ff.kBatch, ff.kTokens, ff.kWidth}));
    for (int64_t r = 0; r < ff.kBatch * ff.kTokens; ++r)
      for (int64_t j = 0; j < ff.kWidth; ++j)
        ASSERT_NEAR(out[0].data<float>()[r * ff.kWidth + j], ff.Reference(r, j),
                    5e-5 + 2e-6 * std::abs(ff.Reference(r, j)))
            << r << ", " << j;
  }
}

// ONNX's own Gelu (opset 20; Debian's node tests predate it): approximate "none" against
// float64, "tanh" refused at load naming the attribute.
TEST(TransformerFusionTest, OnnxGeluMatchesFloat64AndItsTanhFormIsRefused) {
  for (const char* approximate : {"none", "tanh"}) {
    auto model = NewModel(20, 9);
    auto* g = model->mutable_graph();
    AddValueInfo(g->mutable_input(), "x", {37});
    AddValueInfo(g->mutable_output(), "y", {37});
    SetString(AddNode(g, "Gelu", {"x"}, "y"), "approximate", approximate);
    auto graph = Graph::FromProto(std::move(model));
    if (std::string(approximate) == "tanh") {
      ASSERT_FALSE(graph.ok());
      EXPECT_NE(graph.status().message().find("approximate 'tanh'"), std::string::npos)
          << graph.status().message();
      continue;
    }
    ASSERT_TRUE(graph.ok()) << graph.status().message();
    Tensor x = Tensor::Allocate(DataType::kFp32, {37});
    for (int i = 0; i < 37; ++i) x.mutable_data<float>()[i] = -6.f + i / 3.f;
    std::vector<Tensor> out;
    ASSERT_TRUE((*graph)->Run({{"x", x}}, {"y"}, &out).ok());
    for (int i = 0; i < 37; ++i) {
      const double v = -6.0 + i / 3.0;
      EXPECT_NEAR(out[0].data<float>()[i], v * 0.5 * (1 + std::erf(v / std::sqrt(2.0))), 1e-6);
    }
  }
}

// Attention as exported: MatMul(Q, Kt) -> Div (or Mul) by a scalar -> Add(mask) -> Softmax ->
// MatMul(., V) becomes one node; its answers hold against float64 with a [B, 1, 1, T] padding mask,
// without a mask, with a Mul scale, and a mask of the scores' whole shape; a mask that would widen
// the scores is run by the nodes' own ops (the same answers as ONNX's broadcasting).
TEST(TransformerFusionTest, AttentionBecomesOneNodeAndResultsHold) {
  constexpr int64_t B = 2, H = 3, S = 5, D = 4;
  std::mt19937 rng(5);
  std::vector<float> q(B * H * S * D), k(B * H * D * S), v(B * H * S * D);
  FillUniform(rng, -1, 1, {&q, &k, &v});
  struct Form {
    const char* scale_op;
    std::vector<int64_t> mask_shape;  // empty: no mask
  };
  for (const Form& form : {Form{"Div", {B, 1, 1, S}}, Form{"Div", {}}, Form{"Mul", {B, 1, 1, S}},
                           Form{"Div", {B, H, S, S}}, Form{"Div", {1, B, H, S, S}}}) {
    SCOPED_TRACE(testing::Message() << form.scale_op << " mask rank " << form.mask_shape.size());
    auto model = NewModel(17);
    auto* g = model->mutable_graph();
    AddValueInfo(g->mutable_input(), "q", {B, H, S, D});
    AddValueInfo(g->mutable_input(), "kt", {B, H, D, S});
    AddValueInfo(g->mutable_input(), "v", {B, H, S, D});
    const float c = std::string(form.scale_op) == "Div" ? 2.f : 0.5f;
    AddFloatTensor(g, "c", {}, {c});
    std::vector<float> mask;
    int64_t mask_size = 1;
    for (int64_t d : form.mask_shape) mask_size *= d;
    for (int64_t i = 0; !form.mask_shape.empty() && i < mask_size; ++i)
      mask.push_back(i % 4 == 3 ? -1e30f : 0.25f * (i % 3));
    AddNode(g, "MatMul", {"q", "kt"}, "scores");
    AddNode(g, form.scale_op, {"scores", "c"}, "scaled");
    if (!form.mask_shape.empty()) {
      AddFloatTensor(g, "mask", form.mask_shape, mask);
      AddNode(g, "Add", {"scaled", "mask"}, "masked");
    }
    AddNode(g, "Softmax", {form.mask_shape.empty() ? "scaled" : "masked"}, "p");
    AddNode(g, "MatMul", {"p", "v"}, "y");
    const bool widens = form.mask_shape.size() > 4;
    AddValueInfo(g->mutable_output(), "y",
                 widens ? std::vector<int64_t>{1, B, H, S, D} : std::vector<int64_t>{B, H, S, D});
    auto graph = Graph::FromProto(std::move(model));
    ASSERT_TRUE(graph.ok()) << graph.status().message();
    EXPECT_EQ((*graph)->node_count(), 1u);  // (fused; the widening mask falls back at run time)
    Tensor tq = Tensor::Allocate(DataType::kFp32, {B, H, S, D});
    Tensor tk = Tensor::Allocate(DataType::kFp32, {B, H, D, S});
    Tensor tv = Tensor::Allocate(DataType::kFp32, {B, H, S, D});
    std::copy(q.begin(), q.end(), tq.mutable_data<float>());
    std::copy(k.begin(), k.end(), tk.mutable_data<float>());
    std::copy(v.begin(), v.end(), tv.mutable_data<float>());
    std::vector<Tensor> out;
    ASSERT_TRUE((*graph)->Run({{"q", tq}, {"kt", tk}, {"v", tv}}, {"y"}, &out).ok());
    // float64: per head, the masked scaled scores' softmax times V. (A [1,B,H,S,S] mask widens
    // the scores to rank 5: ONNX's answer then has another axis, which the unfused ops give;
    // checked by its shape.)
    if (widens) {
      EXPECT_EQ(out[0].shape().size(), 5u);
      continue;
    }
    for (int64_t b = 0; b < B; ++b)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t i = 0; i < S; ++i) {
          std::vector<double> p(S);
          double max = -1e300;
          for (int64_t j = 0; j < S; ++j) {
            double dot = 0;
            for (int64_t e = 0; e < D; ++e)
              dot += double(q[((b * H + h) * S + i) * D + e]) * k[((b * H + h) * D + e) * S + j];
            p[j] = std::string(form.scale_op) == "Div" ? dot / c : dot * c;
            if (form.mask_shape.size() == 4)
              p[j] +=
                  form.mask_shape[1] == 1 ? mask[b * S + j] : mask[((b * H + h) * S + i) * S + j];
            max = std::max(max, p[j]);
          }
          double sum = 0;
          for (double& x : p) sum += x = std::exp(x - max);
          for (int64_t e = 0; e < D; ++e) {
            double y = 0;
            for (int64_t j = 0; j < S; ++j) y += p[j] / sum * v[((b * H + h) * S + j) * D + e];
            ASSERT_NEAR(out[0].data<float>()[((b * H + h) * S + i) * D + e], y, 1e-5);
          }
        }
  }
}

// Empty heads (a head size or a token count of 0, from a request's shapes) run: scores of zero
// depth are zeros, so each query averages V's rows; zero queries answer an empty tensor.
TEST(TransformerFusionTest, AttentionOfEmptyShapesAnswers) {
  auto model = NewModel(17);
  auto* g = model->mutable_graph();
  for (const char* name : {"q", "kt", "v"}) AddValueInfo(g->mutable_input(), name, {1, 2, -1, -1});
  AddValueInfo(g->mutable_output(), "y", {1, 2, -1, -1});
  AddFloatTensor(g, "c", {}, {2.f});
  AddNode(g, "MatMul", {"q", "kt"}, "scores");
  AddNode(g, "Div", {"scores", "c"}, "scaled");
  AddNode(g, "Softmax", {"scaled"}, "p");
  AddNode(g, "MatMul", {"p", "v"}, "y");
  auto graph = Graph::FromProto(std::move(model));
  ASSERT_TRUE(graph.ok()) << graph.status().message();
  ASSERT_EQ((*graph)->node_count(), 1u);
  for (auto [s, d] : {std::pair<int64_t, int64_t>{3, 0}, {0, 4}}) {
    Tensor q = Tensor::Allocate(DataType::kFp32, {1, 2, s, d});
    Tensor kt = Tensor::Allocate(DataType::kFp32, {1, 2, d, 3});
    Tensor v = Tensor::Allocate(DataType::kFp32, {1, 2, 3, 4});
    for (int64_t i = 0; i < v.elements(); ++i) v.mutable_data<float>()[i] = static_cast<float>(i);
    std::vector<Tensor> out;
    ASSERT_TRUE((*graph)->Run({{"q", q}, {"kt", kt}, {"v", v}}, {"y"}, &out).ok());
    ASSERT_EQ(out[0].shape(), (std::vector<int64_t>{1, 2, s, 4}));
    for (int64_t h = 0; h < 2; ++h)
      for (int64_t i = 0; i < s; ++i)
        for (int64_t e = 0; e < 4; ++e)  // the mean of V's three rows of head h
          EXPECT_NEAR(out[0].data<float>()[(h * s + i) * 4 + e], h * 12 + 4 + e, 1e-5);
  }
}

// MatMul -> Add(bias) -> Add(residual) fused: a residual of the product's shape goes into the
// epilogue; one that broadcasts ([n]) or widens the product ([2, m, n]) is added as ONNX's Add
// adds it.
TEST(TransformerFusionTest, AFusedResidualOfAnyShapeAddsAsOnnxDoes) {
  constexpr int64_t M = 13, K = 24, N = 40;
  std::mt19937 rng(9);
  std::vector<float> x(M * K), w(K * N), b(N);
  FillUniform(rng, -1, 1, {&x, &w, &b});
  for (const std::vector<int64_t>& rshape :
       {std::vector<int64_t>{M, N}, std::vector<int64_t>{N}, std::vector<int64_t>{2, M, N}}) {
    SCOPED_TRACE(testing::Message() << "residual rank " << rshape.size());
    auto model = NewModel(17);
    auto* g = model->mutable_graph();
    AddFloatTensor(g, "w", {K, N}, w);
    AddFloatTensor(g, "b", {N}, b);
    AddValueInfo(g->mutable_input(), "x", {M, K});
    AddValueInfo(g->mutable_input(), "r", rshape);
    AddValueInfo(g->mutable_output(), "y",
                 rshape.size() == 3 ? rshape : std::vector<int64_t>{M, N});
    AddNode(g, "MatMul", {"x", "w"}, "p");
    AddNode(g, "Add", {"p", "b"}, "o");
    AddNode(g, "Add", {"o", "r"}, "y");
    auto graph = Graph::FromProto(std::move(model));
    ASSERT_TRUE(graph.ok()) << graph.status().message();
    EXPECT_EQ((*graph)->node_count(), 1u);
    Tensor tx = Tensor::Allocate(DataType::kFp32, {M, K});
    std::copy(x.begin(), x.end(), tx.mutable_data<float>());
    Tensor tr = Tensor::Allocate(DataType::kFp32, rshape);
    for (int64_t i = 0; i < tr.elements(); ++i) tr.mutable_data<float>()[i] = 0.01f * (i % 97);
    std::vector<Tensor> out;
    ASSERT_TRUE((*graph)->Run({{"x", tx}, {"r", tr}}, {"y"}, &out).ok());
    const int64_t copies = rshape.size() == 3 ? 2 : 1;
    ASSERT_EQ(out[0].elements(), copies * M * N);
    for (int64_t c = 0; c < copies; ++c)
      for (int64_t i = 0; i < M; ++i)
        for (int64_t j = 0; j < N; ++j) {
          double want = b[j];
          for (int64_t e = 0; e < K; ++e) want += double(x[i * K + e]) * w[e * N + j];
          const int64_t r = rshape.size() == 1 ? j : (c * M + i) * N + j;
          want += tr.data<float>()[r];
          ASSERT_NEAR(out[0].data<float>()[(c * M + i) * N + j], want, 1e-5) << i << ", " << j;
        }
  }
}

// x + x * s with x a Conv's output and s a squeeze-excite gate (GlobalAveragePool -> Conv ->
// HardSigmoid): one Mul by s + 1, on both layouts, with the answers of the graph that keeps the
// two (its x * s is also a graph output there).
TEST(LayoutTest, ASelfGatedResidualBecomesOneProduct) {
  auto model = [](bool product_is_output) {
    auto m = NewModel(13);
    auto* g = m->mutable_graph();
    std::mt19937 rng(6);
    std::vector<float> w0(6 * 3 * 9), w1(6 * 6);
    FillUniform(rng, -1, 1, {&w0, &w1});
    AddFloatTensor(g, "w0", {6, 3, 3, 3}, w0);
    AddFloatTensor(g, "w1", {6, 6, 1, 1}, w1);
    AddValueInfo(g->mutable_input(), "x", {2, 3, 9, 8});
    AddValueInfo(g->mutable_output(), "y", {});
    if (product_is_output) AddValueInfo(g->mutable_output(), "m", {});
    SetInts(AddNode(g, "Conv", {"x", "w0"}, "c"), "pads", {1, 1, 1, 1});
    AddNode(g, "GlobalAveragePool", {"c"}, "p");
    AddNode(g, "Conv", {"p", "w1"}, "q");
    AddNode(g, "HardSigmoid", {"q"}, "s");
    AddNode(g, "Mul", {"c", "s"}, "m");
    AddNode(g, "Add", {"m", "c"}, "y");
    return m;
  };
  const Tensor x = UniformTensor({2, 3, 9, 8}, 3, -1, 1);
  for (bool channels_last : {false, true}) {
    std::vector<Tensor> got[2];
    for (bool product_is_output : {false, true}) {
      GraphOptions options;
      options.channels_last = channels_last;
      auto graph = Graph::FromProto(model(product_is_output), options);
      ASSERT_TRUE(graph.ok()) << graph.status().message();
      const std::vector<std::string>& log = (*graph)->pass_log();
      EXPECT_EQ(std::find(log.begin(), log.end(), "x + x * s as x * (s + 1): 1") != log.end(),
                !product_is_output);
      ASSERT_TRUE((*graph)->Run({{"x", x}}, {"y"}, &got[product_is_output]).ok());
    }
    ASSERT_EQ(got[0][0].shape(), (std::vector<int64_t>{2, 6, 9, 8}));
    ASSERT_EQ(got[1][0].shape(), got[0][0].shape());
    for (int64_t i = 0; i < got[0][0].elements(); ++i)
      ASSERT_NEAR(got[0][0].data<float>()[i], got[1][0].data<float>()[i],
                  1e-6f * (1.f + std::abs(got[1][0].data<float>()[i])))
          << channels_last << " " << i;
  }
}

// Concat on the channel axis of two convolutions' outputs (4 and 7 channels) and the input (3):
// channels-last, its pixels over teams of 1 and 3, the same values as the NCHW graph's.
TEST(LayoutTest, ConcatOfChannelsAnswersAsOnNchwOverATeam) {
  auto model = [] {
    auto m = NewModel(13);
    auto* g = m->mutable_graph();
    std::mt19937 rng(4);
    std::vector<float> w0(4 * 3 * 9), w1(7 * 3);
    FillUniform(rng, -1, 1, {&w0, &w1});
    AddFloatTensor(g, "w0", {4, 3, 3, 3}, w0);
    AddFloatTensor(g, "w1", {7, 3, 1, 1}, w1);
    AddValueInfo(g->mutable_input(), "x", {3, 3, 40, 30});
    AddValueInfo(g->mutable_output(), "y", {});
    SetInts(AddNode(g, "Conv", {"x", "w0"}, "a"), "pads", {1, 1, 1, 1});
    AddNode(g, "Conv", {"x", "w1"}, "b");
    SetInt(AddNode(g, "Concat", {"a", "b", "x"}, "y"), "axis", 1);
    return m;
  };
  const Tensor x = UniformTensor({3, 3, 40, 30}, 5, -1, 1);
  std::vector<Tensor> want;
  GraphOptions nchw;
  nchw.channels_last = false;
  auto plain = Graph::FromProto(model(), nchw);
  ASSERT_TRUE(plain.ok()) << plain.status().message();
  ASSERT_TRUE((*plain)->Run({{"x", x}}, {"y"}, &want).ok());
  ASSERT_EQ(want[0].shape(), (std::vector<int64_t>{3, 14, 40, 30}));
  auto graph = Graph::FromProto(model(), GraphOptions{});
  ASSERT_TRUE(graph.ok()) << graph.status().message();
  for (int threads : {1, 3}) {
    kernels::ThreadTeam team(threads);
    kernels::ParallelScope scope(threads > 1 ? &team : nullptr);
    std::vector<Tensor> got;
    ASSERT_TRUE((*graph)->Run({{"x", x}}, {"y"}, &got).ok());
    ASSERT_EQ(got[0].shape(), want[0].shape());
    for (int64_t i = 0; i < want[0].elements(); ++i)
      ASSERT_NEAR(got[0].data<float>()[i], want[0].data<float>()[i], 1e-5) << threads << " " << i;
  }
}

// Nearest Resize copies each value, infinities and NaN included (a blend with weight 0 would turn
// an infinity into NaN), on NCHW and channels-last (after a 1x1 Conv by 1) alike.
TEST(LayoutTest, NearestResizeCopiesInfinitiesAndNaN) {
  auto model = [] {
    auto m = NewModel(13);
    auto* g = m->mutable_graph();
    AddFloatTensor(g, "one", {1, 1, 1, 1}, {1.f});
    AddFloatTensor(g, "roi", {0}, {});
    AddFloatTensor(g, "scales", {4}, {1, 1, 2, 2});
    AddValueInfo(g->mutable_input(), "x", {1, 1, 2, 2});
    AddValueInfo(g->mutable_output(), "y", {});
    AddNode(g, "Conv", {"x", "one"}, "a");
    SetString(AddNode(g, "Resize", {"a", "roi", "scales"}, "y"), "mode", "nearest");
    return m;
  };
  const float inf = std::numeric_limits<float>::infinity();
  Tensor x = Tensor::Allocate(DataType::kFp32, {1, 1, 2, 2});
  const float values[4] = {inf, -inf, std::nanf(""), 1.5f};
  std::copy(values, values + 4, x.mutable_data<float>());
  std::vector<Tensor> got[2];
  std::vector<std::string> logs[2];
  ASSERT_NO_FATAL_FAILURE(RunBothLayouts(model, x, {"y"}, got, logs));
  for (int layout = 0; layout < 2; ++layout) {
    ASSERT_EQ(got[layout][0].shape(), (std::vector<int64_t>{1, 1, 4, 4}));
    for (int64_t i = 0; i < 16; ++i) {
      const float want = values[(i / 4 / 2) * 2 + i % 4 / 2], v = got[layout][0].data<float>()[i];
      if (std::isnan(want))
        EXPECT_TRUE(std::isnan(v)) << layout << " " << i;
      else
        EXPECT_EQ(v, want) << layout << " " << i;
    }
  }
}

// Conv -> Resize (nearest or linear, by scales or sizes) -> Conv: the layout pass keeps the Resize
// channels-last between the convolutions; its answers equal the NCHW graph's (the same arithmetic
// per element).
TEST(LayoutTest, ResizeRunsChannelsLastBetweenConvolutionsWithTheSameAnswers) {
  for (const char* mode : {"nearest", "linear"})
    for (bool by_sizes : {false, true}) {
      SCOPED_TRACE(testing::Message() << mode << (by_sizes ? " by sizes" : " by scales"));
      auto model = [&] {
        auto m = NewModel(13);
        auto* g = m->mutable_graph();
        std::mt19937 rng(7);
        std::vector<float> w0(6 * 3 * 9), w1(4 * 6 * 9);
        FillUniform(rng, -1, 1, {&w0, &w1});
        AddFloatTensor(g, "w0", {6, 3, 3, 3}, w0);
        AddFloatTensor(g, "w1", {4, 6, 3, 3}, w1);
        AddFloatTensor(g, "roi", {0}, {});
        AddFloatTensor(g, "scales", by_sizes ? std::vector<int64_t>{0} : std::vector<int64_t>{4},
                       by_sizes ? std::vector<float>{} : std::vector<float>{1, 1, 2, 1.5f});
        AddInt64Tensor(g, "sizes",
                       by_sizes ? std::vector<int64_t>{2, 6, 11, 13} : std::vector<int64_t>{});
        AddValueInfo(g->mutable_input(), "x", {2, 3, 7, 9});
        AddValueInfo(g->mutable_output(), "y", {});
        for (auto [in, w, out] : {std::tuple{"x", "w0", "a"}, {"r", "w1", "y"}}) {
          SetInts(AddNode(g, "Conv", {in, w}, out), "pads", {1, 1, 1, 1});
        }
        SetString(AddNode(g, "Resize", {"a", "roi", "scales", "sizes"}, "r"), "mode", mode);
        std::swap(*g->mutable_node(1), *g->mutable_node(2));  // Conv a, Resize r, Conv y
        return m;
      };
      const Tensor x = UniformTensor({2, 3, 7, 9}, 8, -2, 2);
      std::vector<Tensor> got[2];
      std::vector<std::string> logs[2];
      ASSERT_NO_FATAL_FAILURE(RunBothLayouts(model, x, {"y"}, got, logs));
      for (const auto& log : logs) {
        bool converted_around_resize = false;
        for (const std::string& line : log)
          if (line.rfind("channels-last:", 0) == 0)
            converted_around_resize = line.find("2 layout conversions") == std::string::npos;
        EXPECT_FALSE(converted_around_resize);  // only in and out
      }
      ASSERT_EQ(got[0][0].shape(), got[1][0].shape());
      ASSERT_EQ(got[0][0].shape(),
                (std::vector<int64_t>{2, 4, by_sizes ? 11 : 14, by_sizes ? 13 : 13}));
      for (int64_t i = 0; i < got[0][0].elements(); ++i)
        ASSERT_NEAR(got[1][0].data<float>()[i], got[0][0].data<float>()[i], 1e-5) << i;
    }
}

// 1x1 Conv -> Relu -> depthwise Conv -> Relu -> 1x1 Conv + x (MobileNet's inverted residual block):
// with the channels-last layout the three become one node (the wide images between them never
// written), with the same answers as without; a 1x1 whose output is also a graph output stays
// apart from the depthwise after it.
TEST(LayoutTest, AnInvertedResidualBlockBecomesOneNode) {
  auto model = [] {
    auto m = NewModel(13);
    auto* g = m->mutable_graph();
    std::mt19937 rng(11);
    std::vector<float> w0(24 * 8), b0(24), w1(24 * 9), b1(24), w2(8 * 24), w3(24 * 8), w4(24 * 9);
    FillUniform(rng, -1, 1, {&w0, &b0, &w1, &b1, &w2, &w3, &w4});
    AddFloatTensor(g, "w0", {24, 8, 1, 1}, w0);
    AddFloatTensor(g, "b0", {24}, b0);
    AddFloatTensor(g, "w1", {24, 1, 3, 3}, w1);
    AddFloatTensor(g, "b1", {24}, b1);
    AddFloatTensor(g, "w2", {8, 24, 1, 1}, w2);
    AddFloatTensor(g, "w3", {24, 8, 1, 1}, w3);
    AddFloatTensor(g, "w4", {24, 1, 3, 3}, w4);
    AddValueInfo(g->mutable_input(), "x", {2, 8, 13, 11});
    AddValueInfo(g->mutable_output(), "y", {});
    AddValueInfo(g->mutable_output(), "e", {});  // the second 1x1's output: read twice
    AddValueInfo(g->mutable_output(), "z", {});
    AddNode(g, "Conv", {"x", "w0", "b0"}, "a");
    AddNode(g, "Relu", {"a"}, "ar");
    auto* dw = AddNode(g, "Conv", {"ar", "w1", "b1"}, "d");
    SetInt(dw, "group", 24), SetInts(dw, "pads", {1, 1, 1, 1});
    AddNode(g, "Relu", {"d"}, "dr");
    AddNode(g, "Conv", {"dr", "w2"}, "p");
    AddNode(g, "Add", {"p", "x"}, "y");
    AddNode(g, "Conv", {"y", "w3"}, "e");
    auto* dw2 = AddNode(g, "Conv", {"e", "w4"}, "z");
    SetInt(dw2, "group", 24), SetInts(dw2, "pads", {1, 1, 1, 1});
    return m;
  };
  const Tensor x = UniformTensor({2, 8, 13, 11}, 12, -2, 2);
  std::vector<Tensor> got[2];
  std::vector<std::string> logs[2];
  ASSERT_NO_FATAL_FAILURE(RunBothLayouts(model, x, {"y", "e", "z"}, got, logs));
  auto fused = [](const std::vector<std::string>& log) {
    for (const std::string& line : log)
      if (line.rfind("depthwise Conv blocks fused:", 0) == 0) return line;
    return std::string();
  };
  EXPECT_EQ(fused(logs[0]), "");
  EXPECT_EQ(fused(logs[1]), "depthwise Conv blocks fused: 1 1x1 before, 1 1x1 after");
  for (size_t o = 0; o < 3; ++o) {
    ASSERT_EQ(got[0][o].shape(), got[1][o].shape()) << o;
    for (int64_t i = 0; i < got[0][o].elements(); ++i)
      ASSERT_NEAR(got[1][o].data<float>()[i], got[0][o].data<float>()[i], 1e-4) << o << " " << i;
  }
  EXPECT_EQ(got[0][0].shape(), (std::vector<int64_t>{2, 8, 13, 11}));
}

// precision int8: the inverted residual block's 1x1s of 16 -> 96 and 96 -> 16 channels (1,536
// multiply-adds per pixel) run in int8 and are fused around the depthwise all the same (the wide
// images never written), with the answers of the three convolutions in turn.
TEST(LayoutTest, AnInt8InvertedResidualBlockBecomesOneNode) {
  auto model = [] {
    auto m = NewModel(13);
    auto* g = m->mutable_graph();
    std::mt19937 rng(5);
    std::vector<float> w0(96 * 16), b0(96), w1(96 * 9), b1(96), w2(16 * 96);
    FillUniform(rng, -0.5f, 0.5f, {&w0, &b0, &w1, &b1, &w2});
    AddFloatTensor(g, "w0", {96, 16, 1, 1}, w0);
    AddFloatTensor(g, "b0", {96}, b0);
    AddFloatTensor(g, "w1", {96, 1, 3, 3}, w1);
    AddFloatTensor(g, "b1", {96}, b1);
    AddFloatTensor(g, "w2", {16, 96, 1, 1}, w2);
    AddValueInfo(g->mutable_input(), "x", {2, 16, 15, 9});
    AddValueInfo(g->mutable_output(), "y", {});
    AddNode(g, "Conv", {"x", "w0", "b0"}, "a");
    AddNode(g, "Relu", {"a"}, "ar");
    auto* dw = AddNode(g, "Conv", {"ar", "w1", "b1"}, "d");
    SetInt(dw, "group", 96), SetInts(dw, "strides", {2, 2}), SetInts(dw, "pads", {1, 1, 1, 1});
    AddNode(g, "Relu", {"d"}, "dr");
    AddNode(g, "Conv", {"dr", "w2"}, "y");
    return m;
  };
  const Tensor x = UniformTensor({2, 16, 15, 9}, 6, -2, 2);
  std::vector<Tensor> got[2];
  for (bool fuse : {false, true}) {
    GraphOptions options;
    options.int8_weights = true;
    options.fuse_depthwise_blocks = fuse;
    auto graph = Graph::FromProto(model(), options);
    ASSERT_TRUE(graph.ok()) << graph.status().message();
    std::string packed, blocks;
    for (const std::string& line : (*graph)->pass_log()) {
      if (line.rfind("Conv weights packed", 0) == 0) packed = line;
      if (line.rfind("depthwise Conv blocks fused:", 0) == 0) blocks = line;
    }
    EXPECT_EQ(packed, "Conv weights packed: 3 (2 in int8)");
    EXPECT_EQ(blocks, fuse ? "depthwise Conv blocks fused: 1 1x1 before, 1 1x1 after" : "");
    ASSERT_TRUE((*graph)->Run({{"x", x}}, {"y"}, &got[fuse]).ok());
  }
  ASSERT_EQ(got[1][0].shape(), (std::vector<int64_t>{2, 16, 8, 5}));
  ASSERT_EQ(got[0][0].shape(), got[1][0].shape());
  for (int64_t i = 0; i < got[0][0].elements(); ++i)
    ASSERT_NEAR(got[1][0].data<float>()[i], got[0][0].data<float>()[i],
                1e-4f * (1.f + std::abs(got[0][0].data<float>()[i])))
        << i;
}

// Relu -> Mul by a constant -> Add of a constant -> Conv: where that Conv has no padding (a 1x1,
// groups of 2) the two fold into its weights and bias; where it has (a 3x3 padded by 1: its taps
// in the padding read zeros, not the shift) or where another reader (a graph output) needs the
// shifted values, they stay. The answers are those of the graph with every node in place.
TEST(LayoutTest, ConstantScalesBeforeAnUnpaddedConvFoldIntoIt) {
  auto model = [](bool padded, bool shifted_is_output) {
    auto m = NewModel(13);
    auto* g = m->mutable_graph();
    std::mt19937 rng(9);
    std::vector<float> w0(8 * 4 * 9), w1(12 * 4 * (padded ? 9 : 1)), b1(12);
    FillUniform(rng, -1, 1, {&w0, &w1, &b1});
    AddFloatTensor(g, "w0", {8, 4, 3, 3}, w0);
    AddFloatTensor(g, "w1", {12, 4, padded ? 3 : 1, padded ? 3 : 1}, w1);
    AddFloatTensor(g, "b1", {12}, b1);
    AddFloatTensor(g, "scale", {1}, {1.7f});
    AddFloatTensor(g, "shift", {}, {-0.4f});
    AddValueInfo(g->mutable_input(), "x", {2, 4, 9, 7});
    AddValueInfo(g->mutable_output(), "y", {});
    if (shifted_is_output) AddValueInfo(g->mutable_output(), "s", {});
    SetInts(AddNode(g, "Conv", {"x", "w0"}, "c"), "pads", {1, 1, 1, 1});
    AddNode(g, "Relu", {"c"}, "r");
    AddNode(g, "Mul", {"scale", "r"}, "m");
    AddNode(g, "Add", {"m", "shift"}, "s");
    auto* conv = AddNode(g, "Conv", {"s", "w1", "b1"}, "y");
    SetInt(conv, "group", 2);
    if (padded) SetInts(conv, "pads", {1, 1, 1, 1});
    return m;
  };
  const Tensor x = UniformTensor({2, 4, 9, 7}, 8, -1, 1);
  for (bool padded : {false, true}) {
    std::vector<Tensor> got[2];
    for (bool shifted_is_output : {false, true}) {
      auto graph = Graph::FromProto(model(padded, shifted_is_output), GraphOptions{});
      ASSERT_TRUE(graph.ok()) << graph.status().message();
      const std::vector<std::string>& log = (*graph)->pass_log();
      const bool folded =
          std::find(log.begin(), log.end(),
                    "constant Mul/Add folded into the Conv reading them: 2") != log.end();
      EXPECT_EQ(folded, !padded && !shifted_is_output) << padded << shifted_is_output;
      ASSERT_TRUE((*graph)->Run({{"x", x}}, {"y"}, &got[shifted_is_output]).ok());
    }
    ASSERT_EQ(got[0][0].shape(), got[1][0].shape());
    for (int64_t i = 0; i < got[0][0].elements(); ++i)
      ASSERT_NEAR(got[0][0].data<float>()[i], got[1][0].data<float>()[i],
                  1e-5f * (1.f + std::abs(got[1][0].data<float>()[i])))
          << "padded " << padded << " " << i;
  }
}

// The block's residual of another shape ([2, 8, 1, 1], a ReduceMean of x): added with broadcasting
// after the block, then the projection's Relu, as without the fusion.
TEST(LayoutTest, AnInvertedResidualBlocksBroadcastResidualAddsAsOnnxDoes) {
  auto model = [] {
    auto m = NewModel(13);
    auto* g = m->mutable_graph();
    std::mt19937 rng(13);
    std::vector<float> w0(24 * 8), w1(24 * 9), w2(8 * 24);
    FillUniform(rng, -1, 1, {&w0, &w1, &w2});
    AddFloatTensor(g, "w0", {24, 8, 1, 1}, w0);
    AddFloatTensor(g, "w1", {24, 1, 3, 3}, w1);
    AddFloatTensor(g, "w2", {8, 24, 1, 1}, w2);
    AddValueInfo(g->mutable_input(), "x", {2, 8, 9, 7});
    AddValueInfo(g->mutable_output(), "y", {});
    AddNode(g, "Conv", {"x", "w0"}, "a");
    auto* dw = AddNode(g, "Conv", {"a", "w1"}, "d");
    SetInt(dw, "group", 24), SetInts(dw, "pads", {1, 1, 1, 1});
    AddNode(g, "Conv", {"d", "w2"}, "p");
    SetInts(AddNode(g, "ReduceMean", {"x"}, "r"), "axes", {2, 3});
    AddNode(g, "Add", {"p", "r"}, "s");
    AddNode(g, "Relu", {"s"}, "y");
    return m;
  };
  const Tensor x = UniformTensor({2, 8, 9, 7}, 14, -2, 2);
  std::vector<Tensor> got[2];
  std::vector<std::string> logs[2];
  ASSERT_NO_FATAL_FAILURE(RunBothLayouts(model, x, {"y"}, got, logs));
  bool fused = false;
  for (const std::string& line : logs[1])
    fused |= line == "depthwise Conv blocks fused: 1 1x1 before, 1 1x1 after";
  EXPECT_TRUE(fused);
  ASSERT_EQ(got[0][0].shape(), got[1][0].shape());
  int64_t zeros = 0;
  for (int64_t i = 0; i < got[0][0].elements(); ++i) {
    ASSERT_NEAR(got[1][0].data<float>()[i], got[0][0].data<float>()[i], 1e-4) << i;
    zeros += got[0][0].data<float>()[i] == 0.f;
  }
  EXPECT_GT(zeros, 0);  // (the Relu ran after the residual)
  EXPECT_LT(zeros, got[0][0].elements());
}

// Inside a RecycleScope (Graph::Run holds one) a buffer of 16 KiB or more freed goes to the next
// request it holds, the one freed last first (its lines the likeliest to be in cache), also for a
// smaller tensor, but not for one more than 4x smaller than it.
TEST(TensorBuffers, TheBufferFreedLastServesTheNextRequestItHolds) {
  RecycleScope scope;
  const uint8_t* four_mib = nullptr;
  const uint8_t* two_mib = nullptr;
  {
    const Tensor a = Tensor::Uninitialized(DataType::kFp32, {1 << 20});
    const Tensor b = Tensor::Uninitialized(DataType::kFp32, {1 << 19});
    four_mib = a.raw(), two_mib = b.raw();
  }                                                              // b freed, then a
  Tensor c = Tensor::Uninitialized(DataType::kFp32, {3 << 17});  // 1.5 MiB: a, freed last
  EXPECT_EQ(c.raw(), four_mib);
  const Tensor d = Tensor::Uninitialized(DataType::kFp32, {1 << 19});  // b
  EXPECT_EQ(d.raw(), two_mib);
  c = Tensor();                                                        // a back
  const Tensor e = Tensor::Uninitialized(DataType::kFp32, {1 << 17});  // 512 KiB: not a
  EXPECT_NE(e.raw(), four_mib);
  const Tensor f = Tensor::Uninitialized(DataType::kFp32, {1 << 20});  // a again
  EXPECT_EQ(f.raw(), four_mib);
  // From 16 KiB up: kept too (below, malloc's).
  const uint8_t* small = nullptr;
  {
    const Tensor g = Tensor::Uninitialized(DataType::kFp32, {1 << 13});  // 32 KiB
    small = g.raw();
  }
  const Tensor h = Tensor::Uninitialized(DataType::kFp32, {3 << 11});  // 24 KiB: g's
  EXPECT_EQ(h.raw(), small);
}

// Conv(x) + r with r = Conv(x) fused into the first Conv's epilogue: the fused Conv writes over
// r's storage only where nothing reads r afterwards. Run channels-last (where it may) against
// channels-first (where it never does): r read again by a later Add, r a graph output, and r
// dying at the fused Conv all give the same answers, and r itself stays intact.
TEST(LayoutTest, AFusedResidualIsOverwrittenOnlyWhereNothingReadsItAgain) {
  enum Case { kDies, kReadLater, kGraphOutput };
  for (Case c : {kDies, kReadLater, kGraphOutput}) {
    SCOPED_TRACE(testing::Message() << "case " << c);
    auto model = [&] {
      auto m = NewModel(13);
      auto* g = m->mutable_graph();
      std::mt19937 rng(11);
      std::vector<float> wr(8 * 4), wa(8 * 4 * 9);
      FillUniform(rng, -1, 1, {&wr, &wa});
      AddFloatTensor(g, "wr", {8, 4, 1, 1}, wr);
      AddFloatTensor(g, "wa", {8, 4, 3, 3}, wa);
      AddValueInfo(g->mutable_input(), "x", {2, 4, 6, 5});
      AddValueInfo(g->mutable_output(), "y", {});
      if (c == kGraphOutput) AddValueInfo(g->mutable_output(), "r", {});
      AddNode(g, "Conv", {"x", "wr"}, "r");
      SetInts(AddNode(g, "Conv", {"x", "wa"}, "a"), "pads", {1, 1, 1, 1});
      AddNode(g, "Add", {"a", "r"}, "s");
      AddNode(g, "Relu", {"s"}, c == kReadLater ? "t" : "y");
      if (c == kReadLater) AddNode(g, "Add", {"t", "r"}, "y");
      return m;
    };
    const Tensor x = UniformTensor({2, 4, 6, 5}, 12, -2, 2);
    const std::vector<std::string> fetch =
        c == kGraphOutput ? std::vector<std::string>{"y", "r"} : std::vector<std::string>{"y"};
    std::vector<Tensor> got[2];
    std::vector<std::string> logs[2];
    ASSERT_NO_FATAL_FAILURE(RunBothLayouts(model, x, fetch, got, logs));
    for (const auto& log : logs) {
      bool fused = false;
      for (const std::string& line : log) fused |= line.find("1 residual Add") != std::string::npos;
      EXPECT_TRUE(fused);
    }
    ASSERT_EQ(got[0].size(), got[1].size());
    for (size_t o = 0; o < got[0].size(); ++o) {
      ASSERT_EQ(got[0][o].shape(), got[1][o].shape());
      for (int64_t i = 0; i < got[0][o].elements(); ++i)
        ASSERT_NEAR(got[1][o].data<float>()[i], got[0][o].data<float>()[i], 1e-4) << o << " " << i;
    }
  }
}

TEST(NaNTest, ANaNPixelMakesEveryOutputItReachesNaNAndNoOther) {
  // A NaN pixel through a 1x1 Conv + Relu, a depthwise 3x3 + Clip, a 3x3 Conv + HardSigmoid
  // (Winograd in fp32, VNNI/AMX or AVX-512 in int8: its row's scale NaN) and a 3x3 MaxPool, each
  // fused or vectorized: every output whose receptive field holds it (within 3 pixels) is NaN,
  // as in ONNX Runtime and PyTorch; outputs 6 or more pixels away stay numbers (a Winograd tile
  // spreads it at most a pixel further than the direct loops).
  auto model = [] {
    auto m = NewModel(13);
    auto* g = m->mutable_graph();
    std::mt19937 rng(5);
    std::vector<float> w0(48 * 32), w1(48 * 9), w2(32 * 48 * 9);
    FillUniform(rng, -0.5f, 0.5f, {&w0, &w1, &w2});
    AddFloatTensor(g, "w0", {48, 32, 1, 1}, w0);
    AddFloatTensor(g, "w1", {48, 1, 3, 3}, w1);
    AddFloatTensor(g, "w2", {32, 48, 3, 3}, w2);
    AddFloatTensor(g, "lo", {}, {0.f});
    AddFloatTensor(g, "hi", {}, {6.f});
    AddValueInfo(g->mutable_input(), "x", {1, 32, 16, 16});
    AddValueInfo(g->mutable_output(), "y", {});
    AddNode(g, "Conv", {"x", "w0"}, "a0");
    AddNode(g, "Relu", {"a0"}, "a");
    auto* dw = AddNode(g, "Conv", {"a", "w1"}, "b0");
    SetInts(dw, "pads", {1, 1, 1, 1});
    SetInt(dw, "group", 48);
    AddNode(g, "Clip", {"b0", "lo", "hi"}, "b");
    SetInts(AddNode(g, "Conv", {"b", "w2"}, "c0"), "pads", {1, 1, 1, 1});
    AddNode(g, "HardSigmoid", {"c0"}, "c");
    auto* pool = AddNode(g, "MaxPool", {"c"}, "y");
    SetInts(pool, "kernel_shape", {3, 3});
    SetInts(pool, "pads", {1, 1, 1, 1});
    return m;
  };
  Tensor x = UniformTensor({1, 32, 16, 16}, 6, -1, 1);
  x.mutable_data<float>()[(5 * 16 + 4) * 16 + 4] = std::numeric_limits<float>::quiet_NaN();
  for (bool int8 : {false, true})
    for (bool channels_last : {false, true}) {
      SCOPED_TRACE(testing::Message()
                   << (int8 ? "int8" : "fp32") << ", channels last " << channels_last);
      GraphOptions options;
      options.int8_weights = int8;
      options.channels_last = channels_last;
      auto graph = Graph::FromProto(model(), options);
      ASSERT_TRUE(graph.ok()) << graph.status().message();
      std::vector<Tensor> got;
      ASSERT_TRUE((*graph)->Run({{"x", x}}, {"y"}, &got).ok());
      ASSERT_EQ(got[0].shape(), (std::vector<int64_t>{1, 32, 16, 16}));
      for (int64_t ch = 0; ch < 32; ++ch)
        for (int64_t oy = 0; oy < 16; ++oy)
          for (int64_t ox = 0; ox < 16; ++ox) {
            const float v = got[0].data<float>()[(ch * 16 + oy) * 16 + ox];
            const int64_t distance = std::max(std::abs(oy - 4), std::abs(ox - 4));
            if (distance <= 3) {
              ASSERT_TRUE(std::isnan(v)) << ch << " " << oy << " " << ox;
            }
            if (distance >= 6) {
              ASSERT_TRUE(std::isfinite(v)) << ch << " " << oy << " " << ox;
            }
          }
    }
}

TEST(Int8ConvTest, ConvolutionsOfFewProductsPerPixelStayFp32) {
  // precision int8: a 3-channel stem (27 x 32 = 864 multiply-adds per output pixel) stays fp32,
  // where each pixel's quantization costs more than int8 saves; a 3x3 of 32 -> 64 (18,432)
  // runs in int8; the answers stay within int8's error of fp32's.
  auto model = [] {
    auto m = NewModel(13);
    auto* g = m->mutable_graph();
    std::mt19937 rng(3);
    std::vector<float> w0(32 * 3 * 9), w1(64 * 32 * 9);
    FillUniform(rng, -0.5f, 0.5f, {&w0, &w1});
    AddFloatTensor(g, "w0", {32, 3, 3, 3}, w0);
    AddFloatTensor(g, "w1", {64, 32, 3, 3}, w1);
    AddValueInfo(g->mutable_input(), "x", {1, 3, 12, 12});
    AddValueInfo(g->mutable_output(), "y", {});
    SetInts(AddNode(g, "Conv", {"x", "w0"}, "a"), "pads", {1, 1, 1, 1});
    SetInts(AddNode(g, "Conv", {"a", "w1"}, "y"), "pads", {1, 1, 1, 1});
    return m;
  };
  const Tensor x = UniformTensor({1, 3, 12, 12}, 4, -1, 1);
  std::vector<Tensor> got[2];
  for (bool int8 : {false, true}) {
    GraphOptions options;
    options.int8_weights = int8;
    auto graph = Graph::FromProto(model(), options);
    ASSERT_TRUE(graph.ok()) << graph.status().message();
    std::string packed;
    for (const std::string& line : (*graph)->pass_log())
      if (line.rfind("Conv weights packed", 0) == 0) packed = line;
    EXPECT_EQ(packed, int8 ? "Conv weights packed: 2 (1 in int8)"
                           : "Conv weights packed: 2 (1 as Winograd F(2x2, 3x3))");
    ASSERT_TRUE((*graph)->Run({{"x", x}}, {"y"}, &got[int8]).ok());
  }
  float largest = 0, worst = 0;
  for (int64_t i = 0; i < got[0][0].elements(); ++i) {
    largest = std::max(largest, std::abs(got[0][0].data<float>()[i]));
    worst = std::max(worst, std::abs(got[1][0].data<float>()[i] - got[0][0].data<float>()[i]));
  }
  EXPECT_LT(worst, 0.05f * largest);
}

TEST(Int8ConvTest, CalibratedSmoothingTamesAChannelLargeOnEveryPixel) {
  // A 3x3 convolution (32 -> 64) and a MatMul (64 -> 48) whose inputs have one channel near 20
  // and 30 on every pixel and token, the others within 1 (RapidOCR's recogniser has such
  // channels). Calibrated on one draw, the int8 graph smooths both layers and answers another
  // draw with less than half the error of the int8 graph without calibration.
  auto model = [] {
    auto m = NewModel(13);
    auto* g = m->mutable_graph();
    std::mt19937 rng(9);
    std::vector<float> w0(64 * 32 * 9), w1(64 * 48);
    FillUniform(rng, -0.5f, 0.5f, {&w0, &w1});
    AddFloatTensor(g, "w0", {64, 32, 3, 3}, w0);
    AddFloatTensor(g, "w1", {64, 48}, w1);
    AddValueInfo(g->mutable_input(), "x", {2, 32, 10, 10});
    AddValueInfo(g->mutable_input(), "t", {24, 64});
    AddValueInfo(g->mutable_output(), "y", {});
    AddValueInfo(g->mutable_output(), "z", {});
    SetInts(AddNode(g, "Conv", {"x", "w0"}, "y"), "pads", {1, 1, 1, 1});
    AddNode(g, "MatMul", {"t", "w1"}, "z");
    return m;
  };
  auto draw = [](unsigned seed) {
    Tensor x = UniformTensor({2, 32, 10, 10}, seed, -1, 1),
           t = UniformTensor({24, 64}, seed + 1, -1, 1);
    for (int64_t i = 0; i < 2 * 100; ++i)
      x.mutable_data<float>()[(i / 100 * 32 + 5) * 100 + i % 100] += 20.f;
    for (int64_t i = 0; i < 24; ++i) t.mutable_data<float>()[i * 64 + 7] += 30.f;
    return std::vector<std::pair<std::string, Tensor>>{{"x", x}, {"t", t}};
  };
  GraphOptions measure;
  measure.fuse_depthwise_blocks = false;
  auto calibration_graph = Graph::FromProto(model(), measure);
  ASSERT_TRUE(calibration_graph.ok()) << calibration_graph.status().message();
  auto stats = (*calibration_graph)->MeasureInt8Inputs(draw(21));
  ASSERT_TRUE(stats.ok()) << stats.status().message();
  ASSERT_EQ(stats->size(), 2u);
  std::multiset<int64_t> depths;  // (by the values the layers write: the Conv's is channels-last)
  for (const auto& [value, layer] : *stats) {
    depths.insert(layer.depth);
    EXPECT_EQ(layer.rows.size(), static_cast<size_t>(layer.depth * (layer.depth == 64 ? 24 : 64)))
        << value;  // the MatMul's 24 tokens; 64 of the Conv's 200 windows
  }
  EXPECT_EQ(depths, (std::multiset<int64_t>{64, 9 * 32}));
  const auto feeds = draw(50);
  std::vector<Tensor> got[3];
  for (int variant = 0; variant < 3; ++variant) {  // fp32, int8, int8 calibrated
    GraphOptions options;
    options.int8_weights = variant > 0;
    if (variant == 2) options.int8_calibration = std::make_shared<const Int8Calibration>(*stats);
    auto graph = Graph::FromProto(model(), options);
    ASSERT_TRUE(graph.ok()) << graph.status().message();
    std::string smoothed;
    for (const std::string& line : (*graph)->pass_log())
      if (line.rfind("int8 activations smoothed", 0) == 0) smoothed = line;
    EXPECT_EQ(smoothed, variant == 2
                            ? "int8 activations smoothed per channel: 2 of 2 calibrated layers"
                            : "");
    ASSERT_TRUE((*graph)->Run(feeds, {"y", "z"}, &got[variant]).ok());
  }
  for (int o = 0; o < 2; ++o) {
    SCOPED_TRACE(o == 0 ? "Conv" : "MatMul");
    double err[3] = {0, 0, 0}, norm = 0;
    for (int64_t i = 0; i < got[0][o].elements(); ++i) {
      const double want = got[0][o].data<float>()[i];
      norm += want * want;
      for (int v = 1; v < 3; ++v) {
        const double e = got[v][o].data<float>()[i] - want;
        err[v] += e * e;
      }
    }
    EXPECT_LT(std::sqrt(err[2] / norm), 0.5 * std::sqrt(err[1] / norm));
    EXPECT_LT(std::sqrt(err[1] / norm), 0.1);  // (int8 without it still runs the layer)
  }
}

TEST(ActivationKernelTest, ReluAndSigmoidMatchFloat64IncludingEdgeValues) {
  std::vector<float> x = {std::numeric_limits<float>::quiet_NaN()};  // (in the vector loop)
  for (float v = -100.f; v <= 100.f; v += 0.37f) x.push_back(v);
  const float inf = std::numeric_limits<float>::infinity();
  for (float v : {0.f, -0.f, inf, -inf, 88.f, -88.f, 1e-30f, -1e-30f, 87.5f, -87.5f})
    x.push_back(v);
  x.push_back(std::numeric_limits<float>::quiet_NaN());
  x.push_back(1.5f);  // length not a multiple of 8: the scalar tail runs too
  std::vector<float> relu(x.size()), sig(x.size());
  kernels::Relu(x.data(), relu.data(), static_cast<int64_t>(x.size()));
  kernels::Sigmoid(x.data(), sig.data(), static_cast<int64_t>(x.size()));
  for (size_t i = 0; i < x.size(); ++i) {
    const double v = x[i];
    if (std::isnan(v)) {
      EXPECT_TRUE(std::isnan(relu[i])) << i;  // NaN kept, as ONNX Runtime and PyTorch do
      EXPECT_TRUE(std::isnan(sig[i]));
      continue;
    }
    EXPECT_EQ(relu[i], v < 0 ? 0.f : x[i]) << v;
    const double want = 1.0 / (1.0 + std::exp(-v));
    EXPECT_NEAR(sig[i], want, 2e-7 + 2e-6 * want) << v;
  }
  std::vector<float> in_place = x;  // y == x is allowed
  kernels::Sigmoid(in_place.data(), in_place.data(), static_cast<int64_t>(x.size()));
  for (size_t i = 0; i + 1 < x.size(); ++i)
    if (!std::isnan(x[i])) {
      EXPECT_EQ(in_place[i], sig[i]);
    }
}

}  // namespace
}  // namespace nereid::native

namespace nereid::native {
namespace {

// ConvTranspose against its definition (in double), one and two threads: taps that tile the
// output (stride = kernel) run channels-last (ConvTransposeTiledNhwc: its GEMM per window row with
// one group, per tap with two, and the few-values form for groups of fewer than 16 values a
// pixel: 1 and 3 channels of 2x2 taps), the rest (output_padding, stride < kernel) on NCHW. With
// 'tail', an Add of a constant per channel, a BatchNormalization and a Relu after it (RapidOCR's
// detector's head) fold into its weights and bias and its epilogue.
TEST(ConvTransposeTest, TapsThatTileTheOutputAndTheRestMatchTheDefinition) {
  struct Case {
    int64_t k, stride, output_padding, groups, cog;
    bool tail;
  };
  for (const Case c :
       {Case{2, 2, 0, 2, 6, false}, Case{3, 3, 0, 2, 6, false}, Case{2, 2, 1, 2, 6, false},
        Case{3, 2, 0, 2, 6, false}, Case{2, 2, 0, 1, 6, true}, Case{2, 2, 0, 1, 1, true},
        Case{2, 2, 0, 2, 3, false}, Case{3, 2, 0, 1, 4, true}}) {
    SCOPED_TRACE(testing::Message() << "kernel " << c.k << " stride " << c.stride
                                    << " output_padding " << c.output_padding << " groups "
                                    << c.groups << " cog " << c.cog << " tail " << c.tail);
    // (4 x 12 x 80 x 80 outputs for the 2x2: past ParallelForWork's threshold, the team runs it)
    const int64_t n = 4, groups = c.groups, cig = 2, cog = c.cog, h = 40, w = 40;
    const int64_t c_out = groups * cog;
    const int64_t oh = (h - 1) * c.stride + c.k + c.output_padding;
    const int64_t ow = (w - 1) * c.stride + c.k + c.output_padding;
    std::mt19937 rng(7);
    std::vector<float> wt(groups * cig * cog * c.k * c.k), bias(c_out), shift(c_out), gamma(c_out),
        beta(c_out), mean(c_out), var(c_out);
    FillUniform(rng, -1.f, 1.f, {&wt});
    FillUniform(rng, -0.2f, 0.2f, {&bias, &shift, &beta, &mean});
    FillUniform(rng, 0.5f, 2.f, {&gamma, &var});
    auto m = NewModel(13);
    auto* g = m->mutable_graph();
    AddFloatTensor(g, "w", {groups * cig, cog, c.k, c.k}, wt);
    AddFloatTensor(g, "b", {c_out}, bias);
    AddValueInfo(g->mutable_input(), "x", {n, groups * cig, h, w});
    AddValueInfo(g->mutable_output(), "y", {});
    auto* node = AddNode(g, "ConvTranspose", {"x", "w", "b"}, c.tail ? "t" : "y");
    SetInts(node, "strides", {c.stride, c.stride});
    SetInt(node, "group", groups);
    if (c.output_padding > 0) SetInts(node, "output_padding", {c.output_padding, c.output_padding});
    if (c.tail) {
      AddFloatTensor(g, "shift", {c_out, 1, 1}, shift);
      AddFloatTensor(g, "gamma", {c_out}, gamma);
      AddFloatTensor(g, "beta", {c_out}, beta);
      AddFloatTensor(g, "mean", {c_out}, mean);
      AddFloatTensor(g, "var", {c_out}, var);
      AddNode(g, "Add", {"t", "shift"}, "s");
      AddNode(g, "BatchNormalization", {"s", "gamma", "beta", "mean", "var"}, "bn");
      AddNode(g, "Relu", {"bn"}, "y");
    }
    const Tensor x = UniformTensor({n, groups * cig, h, w}, 3, -1, 1);
    std::vector<double> want(static_cast<size_t>(n * c_out * oh * ow));
    for (int64_t b = 0; b < n; ++b)
      for (int64_t gr = 0; gr < groups; ++gr)
        for (int64_t co = 0; co < cog; ++co) {
          double* plane = &want[((b * groups + gr) * cog + co) * oh * ow];
          for (int64_t i = 0; i < oh * ow; ++i) plane[i] = bias[gr * cog + co];
          for (int64_t ci = 0; ci < cig; ++ci)
            for (int64_t iy = 0; iy < h; ++iy)
              for (int64_t ix = 0; ix < w; ++ix)
                for (int64_t ky = 0; ky < c.k; ++ky)
                  for (int64_t kx = 0; kx < c.k; ++kx)
                    plane[(iy * c.stride + ky) * ow + ix * c.stride + kx] +=
                        double{
                            x.data<float>()[((b * groups + gr) * cig + ci) * h * w + iy * w + ix]} *
                        wt[(((gr * cig + ci) * cog + co) * c.k + ky) * c.k + kx];
          if (!c.tail) continue;
          const int64_t ch = gr * cog + co;
          const double scale = gamma[ch] / std::sqrt(double{var[ch]} + 1e-5);
          for (int64_t i = 0; i < oh * ow; ++i)
            plane[i] = std::max(0.0, (plane[i] + shift[ch] - mean[ch]) * scale + beta[ch]);
        }
    auto graph = Graph::FromProto(std::move(m), GraphOptions{});
    ASSERT_TRUE(graph.ok()) << graph.status().message();
    if (c.tail) {
      const std::vector<std::string>& log = (*graph)->pass_log();
      for (const char* line :
           {"BatchNormalization folded into Conv: 1", "constant Mul/Add folded into Conv: 1",
            "Conv epilogues fused: 0 residual Add, 1 activation"})
        EXPECT_NE(std::find(log.begin(), log.end(), line), log.end()) << line;
    }
    if (c.tail) {  // (the Relu leaves a share of the values, not none or all)
      const auto kept = std::count_if(want.begin(), want.end(), [](double v) { return v > 0; });
      EXPECT_GT(kept, want.size() / 5);
      EXPECT_LT(kept, want.size() * 4 / 5);
    }
    for (int threads : {1, 2}) {
      kernels::ThreadTeam team(threads);
      kernels::ParallelScope scope(threads > 1 ? &team : nullptr);
      std::vector<Tensor> got;
      ASSERT_TRUE((*graph)->Run({{"x", x}}, {"y"}, &got).ok());
      ASSERT_EQ(got[0].shape(), (std::vector<int64_t>{n, c_out, oh, ow}));
      for (size_t i = 0; i < want.size(); ++i)
        ASSERT_NEAR(got[0].data<float>()[i], want[i], 1e-5 * (1 + std::abs(want[i])))
            << "threads " << threads << " " << i;
    }
  }
}

}  // namespace
}  // namespace nereid::native
