// The GPU kernels of attention-shaped models (kernels/cuda/tensor_ops.h) against float64
// references on the host, per element type: LayerNorm, BatchedMatMul, StridedCopy, and a text
// encoder's embedding gather, mean pooling (GlobalPoolNhwc's sum over a middle axis) and mask
// conversion (Convert from INT64).
#include "cuda/tensor_ops.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "cuda/attention.h"
#include "cuda/conv.h"
#include "cuda/elementwise.h"
#include "gpu_test_util.h"

namespace nereid::gpu_test {
namespace {

namespace kc = kernels::cuda;

// What 16-bit storage rounds: the reference reads the rounded input, the output adds one rounding.
double Tolerance(ElemType t) { return t == ElemType::kF32 ? 1e-5 : 1e-2; }

TEST(CudaTensorOps, LayerNormMatchesFloat64Reference) {
  NEREID_REQUIRE_GPU();
  // 300 and 1000: a row longer than the block's 256 threads; 120: RapidOCR's recogniser's width;
  // 384 and 768: MiniLM's and BERT's (a warp per row, 16-byte vectors: 1 to 8 a lane, 2048 the
  // most in bf16, 4096 past it); 300 and 1: not whole vectors (a block per row).
  for (ElemType t : {ElemType::kF32, ElemType::kBF16, ElemType::kF16})
    for (int64_t n : {1, 120, 300, 384, 768, 1000, 2048, 4096})
      for (bool affine : {true, false}) {
        SCOPED_TRACE(testing::Message()
                     << "type " << static_cast<int>(t) << ", n " << n << ", affine " << affine);
        const int64_t rows = 7;
        const std::vector<float> x = Random(rows * n, 11 + n, -4.f, 4.f);
        const std::vector<float> scale = Random(n, 12), bias = Random(n, 13);
        const std::vector<double> xr = Rounded(x, t);
        DeviceBuffer dx(Encode(x, t)), dy(rows * n * kc::ElemSize(t));
        DeviceBuffer ds(Encode(scale, ElemType::kF32)), db(Encode(bias, ElemType::kF32));
        DeviceBuffer dmean(rows * kc::ElemSize(t)), dinv(rows * kc::ElemSize(t));
        CUDA_OK(kc::LayerNorm(t, dx.get(), dy.get(), rows, n,
                              affine ? static_cast<const float*>(ds.get()) : nullptr,
                              affine ? static_cast<const float*>(db.get()) : nullptr, 1e-5f,
                              dmean.get(), dinv.get(), nullptr));
        CUDA_OK(cudaDeviceSynchronize());
        std::vector<double> ref(rows * n), ref_mean(rows), ref_inv(rows);
        for (int64_t r = 0; r < rows; ++r) {
          double mean = 0, var = 0;
          for (int64_t i = 0; i < n; ++i) mean += xr[r * n + i];
          mean /= n;
          for (int64_t i = 0; i < n; ++i) var += (xr[r * n + i] - mean) * (xr[r * n + i] - mean);
          const double inv = 1 / std::sqrt(var / n + 1e-5);
          ref_mean[r] = mean, ref_inv[r] = inv;
          for (int64_t i = 0; i < n; ++i) {
            const double v = (xr[r * n + i] - mean) * inv;
            ref[r * n + i] = affine ? v * scale[i] + bias[i] : v;
          }
        }
        EXPECT_LT(RelativeError(Decode(dy.Read(), t), ref), Tolerance(t));
        EXPECT_LT(RelativeError(Decode(dmean.Read(), t), ref_mean), Tolerance(t));
        EXPECT_LT(RelativeError(Decode(dinv.Read(), t), ref_inv), Tolerance(t));
      }
}

// The norm of a GEMM's sum taken from its accumulators equals, bit for bit, the epilogue's
// rounded sum normalized by LayerNorm: the sum made in the same order (accumulator + bias, then +
// residual) and rounded as the epilogue rounds it.
TEST(CudaTensorOps, LayerNormOfSumEqualsTheEpilogueThenTheNorm) {
  NEREID_REQUIRE_GPU();
  for (ElemType t : {ElemType::kF32, ElemType::kBF16, ElemType::kF16})
    for (int64_t n : {64, 384, 768, 2048})
      for (bool with_bias : {true, false}) {
        if (!kc::LayerNormOfSumSupported(t, n)) {
          EXPECT_EQ(t, ElemType::kF32) << n;  // fp32 rows up to 1,024 values
          continue;
        }
        SCOPED_TRACE(testing::Message()
                     << "type " << static_cast<int>(t) << ", n " << n << ", bias " << with_bias);
        const int64_t rows = 37;
        const std::vector<float> acc = Random(rows * n, 21 + n, -4.f, 4.f);
        const std::vector<float> residual = Random(rows * n, 22, -2.f, 2.f);
        const std::vector<float> bias = Random(n, 23), scale = Random(n, 24), shift = Random(n, 25);
        const std::vector<double> res = Rounded(residual, t);
        std::vector<float> sum(rows * n);
        for (int64_t i = 0; i < rows * n; ++i) {
          float v = acc[i];
          if (with_bias) v += bias[i % n];
          sum[i] = v + static_cast<float>(res[i]);
        }
        DeviceBuffer dacc(Encode(acc, ElemType::kF32)), dres(Encode(residual, t));
        DeviceBuffer dsum(Encode(sum, t)), dbias(Encode(bias, ElemType::kF32));
        DeviceBuffer dscale(Encode(scale, ElemType::kF32)), dshift(Encode(shift, ElemType::kF32));
        DeviceBuffer want(rows * n * kc::ElemSize(t)), got(rows * n * kc::ElemSize(t));
        const auto* fscale = static_cast<const float*>(dscale.get());
        const auto* fshift = static_cast<const float*>(dshift.get());
        CUDA_OK(kc::LayerNorm(t, dsum.get(), want.get(), rows, n, fscale, fshift, 1e-5f, nullptr,
                              nullptr, nullptr));
        CUDA_OK(kc::LayerNormOfSum(t, static_cast<const float*>(dacc.get()),
                                   with_bias ? static_cast<const float*>(dbias.get()) : nullptr,
                                   dres.get(), got.get(), rows, n, fscale, fshift, 1e-5f, nullptr));
        CUDA_OK(cudaDeviceSynchronize());
        EXPECT_EQ(got.Read(), want.Read());
      }
  EXPECT_FALSE(kc::LayerNormOfSumSupported(ElemType::kBF16, 300));   // not whole vectors
  EXPECT_FALSE(kc::LayerNormOfSumSupported(ElemType::kBF16, 4096));  // 16 vectors a lane
  DeviceBuffer a(64 * 4 + 16), r(64 * 2 + 16), y(64 * 2);
  EXPECT_EQ(kc::LayerNormOfSum(ElemType::kBF16, static_cast<const float*>(a.get()), nullptr,
                               static_cast<const uint8_t*>(r.get()) + 2, y.get(), 1, 64, nullptr,
                               nullptr, 1e-5f, nullptr),
            cudaErrorInvalidValue);  // a residual off 16 bytes
}

TEST(CudaTensorOps, BatchedMatMulMatchesFloat64Reference) {
  NEREID_REQUIRE_GPU();
  struct Shape {
    int64_t batch, m, n, k;
  };
  // Attention's products (40 x 15 by 15 x 40, 40 x 40 by 40 x 15), tiles cut at every edge, one
  // product, and more products than a grid's z dimension holds.
  const Shape shapes[] = {{16, 40, 40, 15}, {16, 40, 15, 40}, {3, 17, 33, 19},
                          {1, 1, 1, 1},     {1, 64, 64, 64},  {70000, 2, 3, 4}};
  for (ElemType t : {ElemType::kF32, ElemType::kBF16, ElemType::kF16})
    for (const Shape& s : shapes) {
      SCOPED_TRACE(testing::Message() << "type " << static_cast<int>(t) << ", " << s.batch << " x "
                                      << s.m << "x" << s.k << " by " << s.k << "x" << s.n);
      const std::vector<float> a = Random(s.batch * s.m * s.k, 21),
                               b = Random(s.batch * s.k * s.n, 22);
      const std::vector<double> ar = Rounded(a, t), br = Rounded(b, t);
      DeviceBuffer da(Encode(a, t)), db(Encode(b, t)), dc(s.batch * s.m * s.n * kc::ElemSize(t));
      CUDA_OK(kc::BatchedMatMul(t, da.get(), db.get(), dc.get(), s.batch, s.m, s.n, s.k, nullptr));
      CUDA_OK(cudaDeviceSynchronize());
      std::vector<double> ref(s.batch * s.m * s.n);
      for (int64_t p = 0; p < s.batch; ++p)
        for (int64_t i = 0; i < s.m; ++i)
          for (int64_t j = 0; j < s.n; ++j) {
            double sum = 0;
            for (int64_t q = 0; q < s.k; ++q)
              sum += ar[(p * s.m + i) * s.k + q] * br[(p * s.k + q) * s.n + j];
            ref[(p * s.m + i) * s.n + j] = sum;
          }
      EXPECT_LT(RelativeError(Decode(dc.Read(), t), ref), Tolerance(t));
    }
}

TEST(CudaTensorOps, StridedCopyReadsATransposedSlice) {
  NEREID_REQUIRE_GPU();
  // x [2, 5, 3, 4, 6] (rows, seq, q/k/v, heads, d) -> its part 1 as [2, 4, 5, 6]: what attention's
  // Transpose(2, 0, 3, 1, 4) -> Slice(axis 0, 1:2) -> Squeeze compiles to.
  const int64_t R = 2, S = 5, P = 3, H = 4, D = 6;
  std::vector<float> x(R * S * P * H * D);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i);
  DeviceBuffer dx(Encode(x, ElemType::kF32)), dy(R * H * S * D * 4);
  const int64_t dims[] = {R, H, S, D};
  const int64_t strides[] = {S * P * H * D, D, P * H * D, 1};
  const size_t offset = 1 * H * D;
  CUDA_OK(kc::StridedCopy(4, static_cast<const float*>(dx.get()) + offset, dy.get(), 4, dims,
                          strides, nullptr));
  CUDA_OK(cudaDeviceSynchronize());
  const std::vector<double> y = Decode(dy.Read(), ElemType::kF32);
  for (int64_t r = 0; r < R; ++r)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t s = 0; s < S; ++s)
        for (int64_t d = 0; d < D; ++d)
          ASSERT_EQ(y[((r * H + h) * S + s) * D + d], x[(((r * S + s) * P + 1) * H + h) * D + d]);
  EXPECT_EQ(kc::StridedCopy(4, dx.get(), dy.get(), 7, dims, strides, nullptr),
            cudaErrorInvalidValue);  // rank over 6
  const int64_t negative[] = {R, H, S, -1};
  EXPECT_EQ(kc::StridedCopy(4, dx.get(), dy.get(), 4, negative, strides, nullptr),
            cudaErrorInvalidValue);
  EXPECT_EQ(kc::LayerNorm(ElemType::kF32, dx.get(), dy.get(), 1, 0, nullptr, nullptr, 1e-5f,
                          nullptr, nullptr, nullptr),
            cudaErrorInvalidValue);  // an empty row
  EXPECT_EQ(kc::BatchedMatMul(ElemType::kI32, dx.get(), dx.get(), dy.get(), 1, 2, 2, 2, nullptr),
            cudaErrorInvalidValue);
  cudaGetLastError();
}

TEST(CudaTensorOps, GatherRowsReadsTheTableByIdsAndNeverOutsideIt) {
  NEREID_REQUIRE_GPU();
  const int64_t rows = 9, width = 300;  // a row wider than a block
  const std::vector<float> table = Random(rows * width, 21);
  // ids from the end (-1, -9), the first and last rows, and two outside the table (9, -10).
  const std::vector<int64_t> ids = {3, -1, 0, 8, -9, 9, -10, 4};
  for (ElemType t : {ElemType::kF32, ElemType::kBF16, ElemType::kF16})
    for (ElemType it : {ElemType::kI64, ElemType::kI32}) {
      SCOPED_TRACE(testing::Message()
                   << "type " << static_cast<int>(t) << ", index " << static_cast<int>(it));
      std::vector<uint8_t> idx_bytes(ids.size() * kc::ElemSize(it));
      for (size_t i = 0; i < ids.size(); ++i) {
        if (it == ElemType::kI64)
          std::memcpy(idx_bytes.data() + i * 8, &ids[i], 8);
        else {
          const auto v = static_cast<int32_t>(ids[i]);
          std::memcpy(idx_bytes.data() + i * 4, &v, 4);
        }
      }
      DeviceBuffer dt(Encode(table, t)), di(idx_bytes);
      DeviceBuffer dy(std::vector<uint8_t>(ids.size() * width * kc::ElemSize(t), 0xff));
      CUDA_OK(kc::GatherRows(t, dt.get(), rows, width, it, di.get(),
                             static_cast<int64_t>(ids.size()), dy.get(), nullptr));
      CUDA_OK(cudaDeviceSynchronize());
      const std::vector<double> y = Decode(dy.Read(), t), tr = Rounded(table, t);
      for (size_t i = 0; i < ids.size(); ++i) {
        const int64_t row = ids[i] < 0 ? ids[i] + rows : ids[i];
        const bool inside = row >= 0 && row < rows;
        for (int64_t c = 0; c < width; ++c)
          ASSERT_EQ(y[i * width + c], inside ? tr[row * width + c] : 0.0) << i << " " << c;
      }
    }
  DeviceBuffer dt(Encode(table, ElemType::kF32)), dy(width * 4);
  EXPECT_EQ(kc::GatherRows(ElemType::kF32, dt.get(), rows, width, ElemType::kF32, dt.get(), 1,
                           dy.get(), nullptr),
            cudaErrorInvalidValue);  // indices must be integers
  cudaGetLastError();
}

TEST(CudaTensorOps, SumOverAMiddleAxisAndIntegerMasksConverted) {
  NEREID_REQUIRE_GPU();
  // [70000 x 3, 5]: more images than a grid's y (65535) holds.
  const int64_t n = 70000, hw = 3, c = 5;
  const std::vector<float> x = Random(n * hw * c, 31);
  for (kc::PoolKind kind : {kc::PoolKind::kSum, kc::PoolKind::kAverage, kc::PoolKind::kMax}) {
    DeviceBuffer dx(Encode(x, ElemType::kF32)), dy(n * c * 4);
    CUDA_OK(kc::GlobalPoolNhwc(kind, n, hw, c, ElemType::kF32, dx.get(), dy.get(), nullptr));
    CUDA_OK(cudaDeviceSynchronize());
    const std::vector<double> y = Decode(dy.Read(), ElemType::kF32);
    std::vector<double> ref(n * c);
    for (int64_t i = 0; i < n; ++i)
      for (int64_t ch = 0; ch < c; ++ch) {
        double acc = kind == kc::PoolKind::kMax ? -INFINITY : 0;
        for (int64_t p = 0; p < hw; ++p) {
          const double v = x[(i * hw + p) * c + ch];
          acc = kind == kc::PoolKind::kMax ? std::max(acc, v) : acc + v;
        }
        ref[i * c + ch] = kind == kc::PoolKind::kAverage ? acc / hw : acc;
      }
    EXPECT_LT(RelativeError(y, ref), 1e-6) << static_cast<int>(kind);
  }
  // A mask of INT64 0/1 (and a large id) to each float type.
  const std::vector<int64_t> mask = {0, 1, 1, 0, 1, 1 << 20};
  std::vector<uint8_t> bytes(mask.size() * 8);
  std::memcpy(bytes.data(), mask.data(), bytes.size());
  for (ElemType t : {ElemType::kF32, ElemType::kBF16, ElemType::kF16}) {
    DeviceBuffer dm(bytes), dy(mask.size() * kc::ElemSize(t));
    CUDA_OK(kc::Convert(ElemType::kI64, dm.get(), t, dy.get(), static_cast<int64_t>(mask.size()),
                        nullptr));
    CUDA_OK(cudaDeviceSynchronize());
    const std::vector<double> y = Decode(dy.Read(), t);
    for (size_t i = 0; i < mask.size(); ++i)
      EXPECT_EQ(y[i], t == ElemType::kF16 && mask[i] > 65504 ? INFINITY : double(mask[i])) << i;
  }
}

TEST(CudaTensorOps, FusedAttentionMatchesFloat64Reference) {
  NEREID_REQUIRE_GPU();
  // Q, K and V as an encoder's projections leave them: [rows, tokens, heads x d], read through
  // strides; a padding mask per row (the last keys at the type's lowest), or none; 77 tokens: a
  // partial key and query tile; 130: three tiles.
  for (ElemType t : {ElemType::kBF16, ElemType::kF16})
    for (int64_t d : {32, 64})
      for (int64_t tokens : {77, 130})
        for (bool masked : {true, false}) {
          SCOPED_TRACE(testing::Message() << "type " << static_cast<int>(t) << ", d " << d
                                          << ", tokens " << tokens << ", masked " << masked);
          const int64_t rows = 2, heads = 3, width = heads * d;
          const std::vector<float> q = Random(rows * tokens * width, 41, -2.f, 2.f);
          const std::vector<float> k = Random(rows * tokens * width, 42, -2.f, 2.f);
          const std::vector<float> v = Random(rows * tokens * width, 43);
          const float lowest = t == ElemType::kBF16 ? -3.38e38f : -65504.f;
          std::vector<float> mask(rows * tokens, 0.f);
          for (int64_t key = tokens - 9; key < tokens && masked; ++key)
            mask[1 * tokens + key] = lowest;
          const std::vector<double> qr = Rounded(q, t), kr = Rounded(k, t), vr = Rounded(v, t);
          DeviceBuffer dq(Encode(q, t)), dk(Encode(k, t)), dv(Encode(v, t)), dm(Encode(mask, t));
          DeviceBuffer dy(rows * heads * tokens * d * kc::ElemSize(t));
          kc::AttentionProblem p;
          p.type = t, p.q = dq.get(), p.k = dk.get(), p.v = dv.get();
          p.mask = masked ? dm.get() : nullptr;
          p.out = dy.get();
          p.rows = rows, p.heads = heads, p.tokens = tokens, p.d = d;
          p.q_row = p.k_row = p.v_row = tokens * width;
          p.q_head = p.k_head = p.v_head = d;
          p.q_token = p.k_token = p.v_token = width;
          p.mask_row = tokens;
          p.scale = 1.f / std::sqrt(static_cast<float>(d));
          ASSERT_TRUE(kc::AttentionSupported(p));
          CUDA_OK(kc::Attention(p, nullptr));
          CUDA_OK(cudaDeviceSynchronize());
          std::vector<double> ref(rows * heads * tokens * d);
          std::vector<double> scores(tokens);
          for (int64_t r = 0; r < rows; ++r)
            for (int64_t h = 0; h < heads; ++h)
              for (int64_t i = 0; i < tokens; ++i) {
                double top = -INFINITY, sum = 0;
                for (int64_t j = 0; j < tokens; ++j) {
                  double acc = 0;
                  for (int64_t e = 0; e < d; ++e)
                    acc += qr[(r * tokens + i) * width + h * d + e] *
                           kr[(r * tokens + j) * width + h * d + e];
                  scores[j] = acc * p.scale + Rounded({mask[r * tokens + j]}, t)[0];
                  top = std::max(top, scores[j]);
                }
                for (double& s : scores) sum += s = std::exp(s - top);
                for (int64_t e = 0; e < d; ++e) {
                  double acc = 0;
                  for (int64_t j = 0; j < tokens; ++j)
                    acc += scores[j] / sum * vr[(r * tokens + j) * width + h * d + e];
                  ref[((r * heads + h) * tokens + i) * d + e] = acc;
                }
              }
          // The probabilities are rounded to the type before their product with V.
          const std::vector<double> y = Decode(dy.Read(), t);
          EXPECT_LT(RelativeError(y, ref), t == ElemType::kBF16 ? 2e-2 : 4e-3);
          // The same written as [rows, tokens, heads x d] (a context transposed back): the same
          // values in their places.
          DeviceBuffer dz(rows * heads * tokens * d * kc::ElemSize(t));
          p.out = dz.get();
          p.out_row = tokens * width, p.out_head = d, p.out_token = width;
          CUDA_OK(kc::Attention(p, nullptr));
          CUDA_OK(cudaDeviceSynchronize());
          const std::vector<double> z = Decode(dz.Read(), t);
          for (int64_t r = 0; r < rows; ++r)
            for (int64_t h = 0; h < heads; ++h)
              for (int64_t i = 0; i < tokens; ++i)
                for (int64_t e = 0; e < d; ++e)
                  ASSERT_EQ(z[(r * tokens + i) * width + h * d + e],
                            y[((r * heads + h) * tokens + i) * d + e]);
        }
  kc::AttentionProblem bad;
  bad.type = ElemType::kF32, bad.heads = 1, bad.tokens = 1, bad.d = 64;
  EXPECT_FALSE(kc::AttentionSupported(bad));  // fp32 runs the unfused ops
  bad.type = ElemType::kBF16, bad.d = 48;
  EXPECT_FALSE(kc::AttentionSupported(bad));
}

// Sequences packed end to end (a ragged plan: rows 1, each token's sequence and each sequence's
// end given): each query attends to its own sequence's keys only, as if each sequence ran alone.
// Lengths 5, 70, 1, 64, 33 and 3 padding tokens (a sequence of their own): blocks of 64 queries
// that span several sequences, a sequence of one token, one starting mid-tile. The same lengths'
// rows pooled per sequence (GlobalPoolNhwc with ends): sums, means and maxima of each one's rows;
// the sequences after the last empty (0).
TEST(CudaTensorOps, PackedSequencesAttendAndPoolWithinTheirOwnTokens) {
  NEREID_REQUIRE_GPU();
  const std::vector<int32_t> lengths = {5, 70, 1, 64, 33, 3};
  std::vector<int32_t> sequence, ends;
  for (size_t s = 0; s < lengths.size(); ++s) {
    for (int32_t i = 0; i < lengths[s]; ++i) sequence.push_back(static_cast<int32_t>(s));
    ends.push_back(static_cast<int32_t>(sequence.size()));
  }
  const int64_t real = static_cast<int64_t>(sequence.size());
  // Padding: two blocks of queries of it, one shared with real ones.
  sequence.resize(real + 90, -1);
  const int64_t tokens = static_cast<int64_t>(sequence.size());
  auto bytes = [](const std::vector<int32_t>& v) {
    std::vector<uint8_t> b(v.size() * 4);
    std::memcpy(b.data(), v.data(), b.size());
    return b;
  };
  DeviceBuffer dseq(bytes(sequence)), dends(bytes(ends));
  for (ElemType t : {ElemType::kBF16, ElemType::kF16})
    for (int64_t d : {32, 64}) {
      SCOPED_TRACE(testing::Message() << "type " << static_cast<int>(t) << ", d " << d);
      const int64_t heads = 2, width = 3 * heads * d;  // Q, K and V side by side per token
      const std::vector<float> qkv = Random(tokens * width, 51, -2.f, 2.f);
      std::vector<float> mask(tokens, 0.f);
      mask[8] = mask[9] = t == ElemType::kBF16 ? -3.38e38f : -65504.f;  // masked keys
      const std::vector<double> r = Rounded(qkv, t);
      DeviceBuffer dx(Encode(qkv, t)), dm(Encode(mask, t));
      DeviceBuffer dy(tokens * heads * d * kc::ElemSize(t));
      kc::AttentionProblem p;
      p.type = t, p.mask = dm.get(), p.out = dy.get();
      const size_t size = kc::ElemSize(t);
      p.q = dx.get();
      p.k = static_cast<const uint8_t*>(dx.get()) + heads * d * size;
      p.v = static_cast<const uint8_t*>(dx.get()) + 2 * heads * d * size;
      p.rows = 1, p.heads = heads, p.tokens = tokens, p.d = d;
      p.q_head = p.k_head = p.v_head = d;
      p.q_token = p.k_token = p.v_token = width;
      p.out_head = d, p.out_token = heads * d;
      p.token_sequence = static_cast<const int32_t*>(dseq.get());
      p.sequence_ends = static_cast<const int32_t*>(dends.get());
      p.sequences = static_cast<int64_t>(ends.size()), p.max_sequence = 70;
      p.scale = 1.f / std::sqrt(static_cast<float>(d));
      ASSERT_TRUE(kc::AttentionSupported(p));
      CUDA_OK(kc::Attention(p, nullptr));
      CUDA_OK(cudaDeviceSynchronize());
      // The real tokens' rows (the padding's hold nothing anyone reads).
      std::vector<double> y = Decode(dy.Read(), t);
      y.resize(real * heads * d);
      std::vector<double> ref(real * heads * d);
      for (int64_t i = 0; i < real; ++i) {
        const int32_t s = sequence[i];
        const int64_t begin = s > 0 ? ends[s - 1] : 0, end = ends[s];
        for (int64_t h = 0; h < heads; ++h) {
          std::vector<double> scores(end - begin);
          double top = -INFINITY, sum = 0;
          for (int64_t j = begin; j < end; ++j) {
            double acc = 0;
            for (int64_t e = 0; e < d; ++e)
              acc += r[i * width + h * d + e] * r[j * width + heads * d + h * d + e];
            scores[j - begin] = acc * p.scale + Rounded({mask[j]}, t)[0];
            top = std::max(top, scores[j - begin]);
          }
          for (double& v : scores) sum += v = std::exp(v - top);
          for (int64_t e = 0; e < d; ++e) {
            double acc = 0;
            for (int64_t j = begin; j < end; ++j)
              acc += scores[j - begin] / sum * r[j * width + 2 * heads * d + h * d + e];
            ref[(i * heads + h) * d + e] = acc;
          }
        }
      }
      EXPECT_LT(RelativeError(y, ref), t == ElemType::kBF16 ? 2e-2 : 4e-3);
    }
  // Pooling each sequence's rows of 7 values; 8 sequences asked for, the last 2 empty.
  const int64_t c = 7, count = 8;
  std::vector<int32_t> pool_ends = ends;
  pool_ends.resize(count, ends.back());
  DeviceBuffer dpe(bytes(pool_ends));
  const std::vector<float> x = Random(tokens * c, 52);
  for (kc::PoolKind kind : {kc::PoolKind::kSum, kc::PoolKind::kAverage, kc::PoolKind::kMax}) {
    DeviceBuffer dx(Encode(x, ElemType::kF32)), dy(count * c * 4);
    CUDA_OK(kc::GlobalPoolNhwc(kind, count, 0, c, ElemType::kF32, dx.get(), dy.get(), nullptr,
                               static_cast<const int32_t*>(dpe.get())));
    CUDA_OK(cudaDeviceSynchronize());
    const std::vector<double> y = Decode(dy.Read(), ElemType::kF32);
    for (int64_t s = 0; s < count; ++s)
      for (int64_t ch = 0; ch < c; ++ch) {
        const int64_t begin = s > 0 ? pool_ends[s - 1] : 0, end = pool_ends[s];
        double acc = kind == kc::PoolKind::kMax && end > begin ? -INFINITY : 0;
        for (int64_t i = begin; i < end; ++i)
          acc = kind == kc::PoolKind::kMax ? std::max(acc, double(x[i * c + ch]))
                                           : acc + x[i * c + ch];
        if (kind == kc::PoolKind::kAverage && end > begin) acc /= static_cast<double>(end - begin);
        EXPECT_NEAR(y[s * c + ch], acc, 1e-5) << s << " " << ch << " " << static_cast<int>(kind);
      }
  }
}

}  // namespace
}  // namespace nereid::gpu_test
