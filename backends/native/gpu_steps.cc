#include "gpu_steps.h"

#include <algorithm>

#include "cuda/attention.h"
#include "cuda/conv.h"
#include "cuda/elementwise.h"
#include "cuda/epilogue.h"
#include "cuda/gemm_int8.h"
#include "cuda/tensor_ops.h"
#include "gpu_graphs.h"

namespace nereid::native {

Status LaunchStep(const GpuModel& m, const Step& s, int64_t rows, const StepBuffers& b,
                  cudaStream_t stream) {
  auto ptr = [&](const Operand& o) {
    return o.value >= 0 ? static_cast<const void*>(b.buf(o.value)) : o.constant;
  };
  const ValueSpec& out = m.values[s.out];
  const int64_t count = rows * out.row_elems;
  switch (s.kind) {
    case Step::kGemm:
      return Internal("a GEMM step is the instance's to run (its tuner picks the kernel)");
    case Step::kBinary: {
      auto n = [&](const Operand& o) { return o.value >= 0 ? count : o.count; };
      CUDA_RETURN(kc::Binary(s.op, out.type, ptr(s.a), n(s.a), ptr(s.b), n(s.b), b.buf(s.out),
                             count, stream),
                  "elementwise kernel");
      break;
    }
    case Step::kBroadcast: {
      kc::BroadcastShape shape = s.broadcast;
      shape.dims[0] = rows;
      CUDA_RETURN(
          kc::BinaryBroadcast(s.op, out.type, ptr(s.a), ptr(s.b), shape, b.buf(s.out), stream),
          "elementwise kernel");
      break;
    }
    case Step::kSoftmax:
      CUDA_RETURN(kc::Softmax(out.type, b.buf(s.in), b.buf(s.out), rows * s.outer, s.k, stream),
                  "softmax kernel");
      break;
    case Step::kLrn:
      CUDA_RETURN(kc::LrnNhwc(out.type, b.buf(s.in), b.buf(s.out), rows * out.dims[1] * out.dims[2],
                              out.dims[0], s.n, s.lrn_alpha, s.lrn_beta, s.lrn_bias, stream),
                  "LRN kernel");
      break;
    case Step::kStridedCopy: {
      int64_t dims[kc::kMaxTransposeRank];
      std::copy(s.dims.begin(), s.dims.end(), dims);
      dims[0] = rows;
      const size_t size = kc::ElemSize(out.type);
      CUDA_RETURN(kc::StridedCopy(size, static_cast<const uint8_t*>(b.buf(s.in)) + s.offset * size,
                                  b.buf(s.out), static_cast<int>(s.dims.size()), dims,
                                  s.strides.data(), stream),
                  "strided copy kernel");
      break;
    }
    case Step::kLayerNorm:
      CUDA_RETURN(kc::LayerNorm(out.type, b.buf(s.in), b.buf(s.out), rows * s.outer, s.k,
                                static_cast<const float*>(s.w), s.bias, s.epsilon,
                                s.mean_out >= 0 ? b.buf(s.mean_out) : nullptr,
                                s.inv_std_out >= 0 ? b.buf(s.inv_std_out) : nullptr, stream),
                  "layer norm kernel");
      break;
    case Step::kBatchedMatMul:
      CUDA_RETURN(kc::BatchedMatMul(out.type, b.buf(s.a.value), b.buf(s.b.value), b.buf(s.out),
                                    rows * s.outer, s.m, s.n, s.k, stream),
                  "batched matmul kernel");
      break;
    case Step::kResize:
      CUDA_RETURN(
          kc::ResizeNhwc(out.type, b.buf(s.in), rows, s.window.h, s.window.w, s.window.c_in,
                         s.taps_y, s.window.oh, s.taps_x, s.window.ow, b.buf(s.out), stream),
          "resize kernel");
      break;
    case Step::kConvTranspose: {
      kernels::Conv2dGeometry g = s.window;
      g.n = rows;
      CUDA_RETURN(
          kc::ConvTransposeNhwc(out.type, g, b.buf(s.in), s.w, s.bias, b.buf(s.out), stream),
          "ConvTranspose kernel");
      break;
    }
    case Step::kConcat: {
      const size_t size = kc::ElemSize(out.type);
      int64_t block = 0, at = 0;
      for (const auto& part : s.parts) block += part.second;
      for (const auto& [value, inner] : s.parts) {
        CUDA_RETURN(cudaMemcpy2DAsync(static_cast<uint8_t*>(b.buf(s.out)) + at * size, block * size,
                                      b.buf(value), inner * size, inner * size,
                                      static_cast<size_t>(rows * s.outer), cudaMemcpyDeviceToDevice,
                                      stream),
                    "concat copy");
        at += inner;
      }
      break;
    }
    case Step::kActivation:
      CUDA_RETURN(kc::ActivateLikeConv(s.conv.act, s.conv.act_a, s.conv.act_b, out.type,
                                       b.buf(s.in), b.buf(s.out), count, stream),
                  "activation kernel");
      break;
    case Step::kUnary:
      CUDA_RETURN(kc::Unary(s.act, out.type, b.buf(s.in), b.buf(s.out), count, stream),
                  "activation kernel");
      break;
    case Step::kConvert:
      CUDA_RETURN(
          kc::Convert(m.values[s.in].type, b.buf(s.in), out.type, b.buf(s.out), count, stream),
          "conversion kernel");
      break;
    case Step::kConv: {
      kc::ConvProblem p = s.conv;
      p.g.n = rows;
      p.x = b.buf(s.in), p.y = b.buf(s.out);
      if (p.int8) {  // the image quantized per row (per image) first
        const ValueSpec& in = m.values[s.in];
        CUDA_RETURN(kc::QuantizeLongRowsInt8(in.type, p.x, rows, in.row_elems,
                                             static_cast<int8_t*>(b.quantized), b.row_scale,
                                             b.absmax, stream),
                    "int8 quantization");
        p.x = b.quantized;
        p.x_scale = b.row_scale;
      }
      p.residual = s.residual >= 0 ? b.buf(s.residual) : nullptr;
      p.workspace = b.conv_workspace;
      CUDA_RETURN(kc::Conv2dNhwc(p, stream), "convolution kernel");
      break;
    }
    case Step::kPool: {
      kernels::Conv2dGeometry g = s.window;
      g.n = rows;
      CUDA_RETURN(kc::Pool2dNhwc(s.pool, g, s.pad_bottom, s.pad_right, s.count_include_pad,
                                 out.type, b.buf(s.in), b.buf(s.out), stream),
                  "pooling kernel");
      break;
    }
    case Step::kGather: {
      const ValueSpec& idx = m.values[s.in];
      CUDA_RETURN(kc::GatherRows(out.type, s.w, s.n, s.k, idx.type, b.buf(s.in),
                                 rows * idx.row_elems, b.buf(s.out), stream),
                  "gather kernel");
      break;
    }
    case Step::kAttention: {
      kc::AttentionProblem p = s.attention;
      const size_t size = kc::ElemSize(out.type);
      p.rows = rows;
      p.q = static_cast<const uint8_t*>(b.buf(s.a.value)) + s.q_offset * size;
      p.k = static_cast<const uint8_t*>(b.buf(s.b.value)) + s.k_offset * size;
      p.v = static_cast<const uint8_t*>(b.buf(s.in)) + s.v_offset * size;
      p.mask = s.mask >= 0 ? b.buf(s.mask) : nullptr;
      p.out = b.buf(s.out);
      if (s.token_sequence >= 0) {  // a ragged plan: one row of every sequence's tokens
        p.rows = 1, p.tokens = rows;
        p.token_sequence = static_cast<const int32_t*>(b.buf(s.token_sequence));
        p.sequence_ends = static_cast<const int32_t*>(b.buf(s.sequence_ends));
        p.sequences = m.ragged_sequences, p.max_sequence = m.ragged_max_length;
      }
      CUDA_RETURN(kc::Attention(p, stream), "attention kernel");
      break;
    }
    case Step::kReduce:
      if (s.sequence_ends >= 0) {  // each sequence's tokens pooled (rows: the sequences)
        CUDA_RETURN(kc::GlobalPoolNhwc(s.pool, rows, 0, s.k, out.type, b.buf(s.in), b.buf(s.out),
                                       stream, static_cast<const int32_t*>(b.buf(s.sequence_ends))),
                    "reduction kernel");
        break;
      }
      CUDA_RETURN(kc::GlobalPoolNhwc(s.pool, rows * s.outer, s.m, s.k, out.type, b.buf(s.in),
                                     b.buf(s.out), stream),
                  "reduction kernel");
      break;
    case Step::kGlobalPool: {
      const ValueSpec& in = m.values[s.in];
      CUDA_RETURN(kc::GlobalPoolNhwc(s.pool, rows, in.dims[1] * in.dims[2], in.dims[0], out.type,
                                     b.buf(s.in), b.buf(s.out), stream),
                  "pooling kernel");
      break;
    }
    case Step::kLayout: {
      if (s.space_to_depth) {
        kernels::Conv2dGeometry g = s.window;
        g.n = rows;
        CUDA_RETURN(
            kc::SpaceToDepth(out.type, b.buf(s.in), g, b.buf(s.out), stream, m.values[s.in].type),
            "layout kernel");
        break;
      }
      const int64_t c = s.layout_c, hw = out.dims[1] * out.dims[2];
      CUDA_RETURN(s.to_last
                      ? kc::ChannelsLast(out.type, b.buf(s.in), rows, c, hw, b.buf(s.out), stream,
                                         out.dims[0])
                      : kc::ChannelsFirst(out.type, b.buf(s.in), rows, c, hw, b.buf(s.out), stream),
                  "layout kernel");
      break;
    }
  }
  return Status::Ok();
}

}  // namespace nereid::native
