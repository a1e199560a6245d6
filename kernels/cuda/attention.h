// Fused attention for the native engine's GPU path (transformer encoders): per batch row and head,
// out = softmax(q k^T * scale + mask) v in one kernel, the scores never written to memory.
#pragma once

#include "cuda/common.h"

namespace nereid::kernels::cuda {

// Q, K and V are read through element strides (the rows', the heads', the tokens'; the head
// dimension contiguous), so a projection's output [rows, tokens, heads x d] is read where it is,
// without a transposing copy; 'out' likewise through strides (by default [rows, heads, tokens,
// d], contiguous). 'mask' (of the
// element type, or null): one additive value per key and row (mask[row * mask_row + key]), as an
// encoder's padding mask broadcasts over heads and queries.
struct AttentionProblem {
  ElemType type = ElemType::kBF16;  // kBF16 or kF16
  const void* q = nullptr;
  const void* k = nullptr;
  const void* v = nullptr;
  const void* mask = nullptr;
  void* out = nullptr;
  int64_t rows = 0, heads = 0, tokens = 0, d = 0;
  int64_t q_row = 0, q_head = 0, q_token = 0;
  int64_t k_row = 0, k_head = 0, k_token = 0;
  int64_t v_row = 0, v_head = 0, v_token = 0;
  int64_t mask_row = 0;
  float scale = 1.f;  // the scores' factor (1 / the divisor of a Div)
  // Where each (row, head, token) of 'out' starts (elements; d contiguous): all 0 for
  // [rows, heads, tokens, d], or [rows, tokens, heads x d] for a context transposed back as the
  // next projection reads it.
  int64_t out_row = 0, out_head = 0, out_token = 0;
  // Sequences packed end to end (ragged batching; rows 1, 'tokens' every sequence's): token t
  // belongs to sequence token_sequence[t], which spans [ends[s - 1] (0 for the first), ends[s]);
  // each query attends to the keys of its own sequence only. Tokens after the real ones may be
  // padding (token_sequence -1): nothing attends to them and their rows of 'out' mean nothing.
  // 'sequences' entries of sequence_ends (empty ones and the padding's among them), none longer
  // than 'max_sequence' tokens except the padding's. Null: one sequence per row.
  const int32_t* token_sequence = nullptr;
  const int32_t* sequence_ends = nullptr;
  int64_t sequences = 0, max_sequence = 0;
};

// Whether Attention runs 'p' (types, d of 32 or 64 (MiniLM's, BERT's), 16-byte aligned rows: every
// pointer and stride a multiple of 8 elements); the GPU compiler checks before choosing it.
bool AttentionSupported(const AttentionProblem& p);

// FlashAttention's scheme on mma.sync: a block of 4 warps takes 64 queries of one (row, head)
// (of one sequence, packed: a block per sequence and 64 of its queries, its keys alone),
// each warp 16; key tiles of 64 pass through shared memory; each warp keeps its queries' running
// maximum and sum (the online softmax) and its part of the output in registers, the probabilities
// going from the score accumulators straight into the second product's A fragments. Scores,
// softmax and sums in fp32; the probabilities rounded to the element type for the product with V
// (as FlashAttention does).
cudaError_t Attention(const AttentionProblem& p, cudaStream_t stream);

}  // namespace nereid::kernels::cuda
