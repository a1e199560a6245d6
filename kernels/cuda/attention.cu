#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <cstdint>

#include "cuda/attention.h"
#include "cuda/device_math.cuh"

namespace nereid::kernels::cuda {
namespace {

constexpr int kQueries = 64, kKeys = 64, kThreads = 128;

// Packed sequences: the blocks of queries each sequence gets (its longest length's).
__host__ __device__ __forceinline__ int64_t QueryTiles(const AttentionProblem& p) {
  return (p.max_sequence + kQueries - 1) / kQueries;
}

template <typename T>
__device__ __forceinline__ uint32_t Pack(float lo, float hi) {
  T pair[2] = {FromFloat<T>(lo), FromFloat<T>(hi)};
  uint32_t r;
  memcpy(&r, pair, 4);
  return r;
}

__device__ __forceinline__ uint32_t Load32(const void* p) {
  return *static_cast<const uint32_t*>(p);
}

// Four 8 x 8 tiles of 16-bit values from shared memory, transposed (ldmatrix .x4 .trans): lanes
// 8i to 8i + 7 name tile i's rows; r[i] holds, for lane (g = lane / 4, t = lane % 4), the tile's
// rows 2t and 2t + 1 of column g: an m16n8k16 B fragment from a row-major [k][n] tile.
__device__ __forceinline__ void LoadMatrixTransposed(uint32_t (&r)[4], const void* smem) {
  const auto at = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(at));
}

// kRows rows of D elements (16 bytes at a time) in the block's registers, loaded from a strided
// source and stored to shared rows 'pitch' elements apart; rows past 'valid' (>= 1) read row 0
// and become zeros. Every load is issued before any is used, so a tile costs one trip to memory,
// and a tile loaded before the work on the previous one is in flight during it.
template <typename T, int D, int kRows>
struct RowTile {
  static constexpr int kVec = 8;  // elements per 16 bytes
  static constexpr int kPer = kRows * (D / kVec) / kThreads;
  static_assert(kRows * (D / kVec) % kThreads == 0, "a tile is whole vectors per thread");
  uint4 v[kPer];
  __device__ __forceinline__ void Load(const T* src, int64_t stride, int valid) {
#pragma unroll
    for (int j = 0; j < kPer; ++j) {
      const int i = static_cast<int>(threadIdx.x) + j * kThreads;
      const int r = i / (D / kVec), c = (i % (D / kVec)) * kVec;
      const uint4 x = *reinterpret_cast<const uint4*>(src + (r < valid ? r : 0) * stride + c);
      v[j] = r < valid ? x : make_uint4(0, 0, 0, 0);
    }
  }
  __device__ __forceinline__ void Store(T* dst, int pitch) const {
#pragma unroll
    for (int j = 0; j < kPer; ++j) {
      const int i = static_cast<int>(threadIdx.x) + j * kThreads;
      const int r = i / (D / kVec), c = (i % (D / kVec)) * kVec;
      *reinterpret_cast<uint4*>(dst + r * pitch + c) = v[j];
    }
  }
};

template <typename T, int D>
__global__ void __launch_bounds__(kThreads) AttentionKernel(AttentionProblem p) {
  constexpr int kPitch = D + 8;  // padded rows: fewer bank conflicts
  __shared__ __align__(16) T sq[kQueries * kPitch];
  __shared__ __align__(16) T sk[kKeys * kPitch];
  __shared__ __align__(16) T sv[kKeys * kPitch];  // [key][d], read transposed by ldmatrix
  __shared__ float smask[kKeys];
  const int64_t row = blockIdx.z, head = blockIdx.y;
  const int64_t n = p.tokens;
  // Packed sequences: a block takes up to 64 queries of one sequence (blockIdx.x: the sequence,
  // then its tile of queries) and that sequence's keys alone. Blocks past a sequence's end, and
  // the padding's (a negative sequence after the real tokens), return at once.
  const bool packed = p.token_sequence != nullptr;
  int64_t q0 = blockIdx.x * int64_t{kQueries}, q_end = n, key_begin = 0, key_end = n;
  if (packed) {
    const int64_t tiles = QueryTiles(p);
    const int64_t s = blockIdx.x / tiles;
    key_begin = s > 0 ? p.sequence_ends[s - 1] : 0;
    key_end = p.sequence_ends[s];
    q0 = key_begin + (blockIdx.x % tiles) * int64_t{kQueries};
    if (q0 >= key_end || p.token_sequence[key_begin] < 0) return;
    q_end = key_end;
  }
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const T* q = static_cast<const T*>(p.q) + row * p.q_row + head * p.q_head + q0 * p.q_token;
  const T* kbase = static_cast<const T*>(p.k) + row * p.k_row + head * p.k_head;
  const T* vbase = static_cast<const T*>(p.v) + row * p.v_row + head * p.v_head;
  // Without a mask, its loads read the keys (any address they may read) and count as zeros.
  const T* mask = p.mask ? static_cast<const T*>(p.mask) + row * p.mask_row : kbase;
  // The queries and the first tile of keys and values in one trip; each later tile (and its mask
  // values, threads 0-63) is loaded while the one before is worked on.
  RowTile<T, D, kKeys> kt, vt;
  float mask_value = 0.f;
  auto load_keys = [&](int64_t k0) {
    const int valid = static_cast<int>(key_end - k0 < kKeys ? key_end - k0 : kKeys);
    kt.Load(kbase + k0 * p.k_token, p.k_token, valid);
    vt.Load(vbase + k0 * p.v_token, p.v_token, valid);
    const int i = static_cast<int>(threadIdx.x) < valid ? static_cast<int>(threadIdx.x) : 0;
    const float m = ToFloat(mask[k0 + i]);
    mask_value = static_cast<int>(threadIdx.x) >= valid ? -INFINITY : p.mask ? m : 0.f;
  };
  {
    RowTile<T, D, kQueries> qt;
    qt.Load(q, p.q_token, static_cast<int>(q_end - q0 < kQueries ? q_end - q0 : kQueries));
    load_keys(key_begin);
    qt.Store(sq, kPitch);
  }
  __syncthreads();
  // This warp's 16 queries as A fragments, one per 16 of d.
  uint32_t qa[D / 16][4];
  const T* qw = sq + warp * 16 * kPitch;
  for (int kk = 0; kk < D / 16; ++kk) {
    qa[kk][0] = Load32(qw + g * kPitch + kk * 16 + 2 * t);
    qa[kk][1] = Load32(qw + (g + 8) * kPitch + kk * 16 + 2 * t);
    qa[kk][2] = Load32(qw + g * kPitch + kk * 16 + 2 * t + 8);
    qa[kk][3] = Load32(qw + (g + 8) * kPitch + kk * 16 + 2 * t + 8);
  }
  float o[D / 8][4] = {};
  float running_max[2] = {-INFINITY, -INFINITY}, running_sum[2] = {0.f, 0.f};
  for (int64_t k0 = key_begin; k0 < key_end; k0 += kKeys) {
    __syncthreads();  // the previous tile is no longer read
    kt.Store(sk, kPitch);
    vt.Store(sv, kPitch);
    if (threadIdx.x < kKeys) smask[threadIdx.x] = mask_value;
    __syncthreads();
    // The next tile (the last one again after the end: loads under a branch would be sunk to
    // their use by the compiler, and nothing would be in flight).
    load_keys(k0 + kKeys < key_end ? k0 + kKeys : k0);
    // Scores of 16 queries x 64 keys: 8 tiles of 8 keys.
    float s[kKeys / 8][4] = {};
    for (int kk = 0; kk < D / 16; ++kk)
      for (int nt = 0; nt < kKeys / 8; ++nt) {
        const T* kr = sk + (nt * 8 + g) * kPitch + kk * 16 + 2 * t;
        MmaStep<T>(s[nt], qa[kk], Load32(kr), Load32(kr + 8));
      }
    // Scale and mask; each row's maximum over the tile (a row's 64 scores lie in the 4 lanes of
    // its quad).
    float tile_max[2] = {-INFINITY, -INFINITY};
    for (int nt = 0; nt < kKeys / 8; ++nt)
      for (int e = 0; e < 4; ++e) {
        const int key = nt * 8 + 2 * t + (e & 1);
        s[nt][e] = s[nt][e] * p.scale + smask[key];
        tile_max[e / 2] = fmaxf(tile_max[e / 2], s[nt][e]);
      }
    float correction[2], tile_sum[2] = {0.f, 0.f}, base[2];
    for (int r = 0; r < 2; ++r) {
      tile_max[r] = fmaxf(tile_max[r], __shfl_xor_sync(0xffffffff, tile_max[r], 1));
      tile_max[r] = fmaxf(tile_max[r], __shfl_xor_sync(0xffffffff, tile_max[r], 2));
      const float m = fmaxf(running_max[r], tile_max[r]);
      base[r] = m == -INFINITY ? 0.f : m;  // every key so far masked out: no NaN from inf - inf
      correction[r] = __expf(running_max[r] - base[r]);
      running_max[r] = m;
    }
    for (int nt = 0; nt < kKeys / 8; ++nt)
      for (int e = 0; e < 4; ++e) {
        s[nt][e] = __expf(s[nt][e] - base[e / 2]);
        tile_sum[e / 2] += s[nt][e];
      }
    for (int r = 0; r < 2; ++r) {
      tile_sum[r] += __shfl_xor_sync(0xffffffff, tile_sum[r], 1);
      tile_sum[r] += __shfl_xor_sync(0xffffffff, tile_sum[r], 2);
      running_sum[r] = running_sum[r] * correction[r] + tile_sum[r];
    }
    for (int dn = 0; dn < D / 8; ++dn)
      for (int e = 0; e < 4; ++e) o[dn][e] *= correction[e / 2];
    // o += P V: the score accumulators of two key tiles are the A fragment of 16 keys.
    for (int j = 0; j < kKeys / 16; ++j) {
      const uint32_t pa[4] = {Pack<T>(s[2 * j][0], s[2 * j][1]), Pack<T>(s[2 * j][2], s[2 * j][3]),
                              Pack<T>(s[2 * j + 1][0], s[2 * j + 1][1]),
                              Pack<T>(s[2 * j + 1][2], s[2 * j + 1][3])};
      // B fragments of 16 keys x 16 of d: lanes 0-15 name the keys' rows at d tile dn, lanes
      // 16-31 at dn + 1; transposed, each thread holds its two keys of one d.
      for (int dn = 0; dn < D / 8; dn += 2) {
        uint32_t b[4];
        LoadMatrixTransposed(b, sv + (j * 16 + (lane & 15)) * kPitch + (dn + (lane >> 4)) * 8);
        MmaStep<T>(o[dn], pa, b[0], b[1]);
        MmaStep<T>(o[dn + 1], pa, b[2], b[3]);
      }
    }
  }
  // Each query's row divided by its sum, stored through the output's strides.
  const int64_t out_row = p.out_token ? p.out_row : p.heads * n * D;
  const int64_t out_head = p.out_token ? p.out_head : n * D,
                out_token = p.out_token ? p.out_token : D;
  T* out = static_cast<T*>(p.out) + row * out_row + head * out_head;
  for (int r = 0; r < 2; ++r) {
    const int64_t query = q0 + warp * 16 + g + 8 * r;
    if (query >= q_end) continue;
    const float inv = running_sum[r] > 0.f ? 1.f / running_sum[r] : 0.f;
    for (int dn = 0; dn < D / 8; ++dn)
      *reinterpret_cast<uint32_t*>(out + query * out_token + dn * 8 + 2 * t) =
          Pack<T>(o[dn][2 * r] * inv, o[dn][2 * r + 1] * inv);
  }
}

template <typename T>
cudaError_t Launch(const AttentionProblem& p, cudaStream_t stream) {
  const int64_t blocks = p.token_sequence != nullptr ? p.sequences * QueryTiles(p)
                                                     : (p.tokens + kQueries - 1) / kQueries;
  const dim3 grid(static_cast<unsigned>(blocks), static_cast<unsigned>(p.heads),
                  static_cast<unsigned>(p.rows));
  switch (p.d) {
    case 32:
      AttentionKernel<T, 32><<<grid, kThreads, 0, stream>>>(p);
      break;
    case 64:
      AttentionKernel<T, 64><<<grid, kThreads, 0, stream>>>(p);
      break;
    default:
      return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

}  // namespace

bool AttentionSupported(const AttentionProblem& p) {
  if ((p.type != ElemType::kBF16 && p.type != ElemType::kF16) || (p.d != 32 && p.d != 64) ||
      p.rows < 0 || p.heads < 1 || p.heads > 65535 || p.tokens < 1 || p.rows > 65535 ||
      (p.token_sequence != nullptr) != (p.sequence_ends != nullptr) ||
      (p.token_sequence != nullptr && (p.rows > 1 || p.sequences < 1 || p.max_sequence < 1 ||
                                       p.sequences * QueryTiles(p) > 0x7fffffff)))
    return false;
  for (int64_t s : {p.q_row, p.q_head, p.q_token, p.k_row, p.k_head, p.k_token, p.v_row, p.v_head,
                    p.v_token, p.out_row, p.out_head, p.out_token})
    if (s % 8 != 0) return false;
  for (const void* ptr : {p.q, p.k, p.v, static_cast<const void*>(p.out)})
    if (ptr != nullptr && reinterpret_cast<uintptr_t>(ptr) % 16 != 0) return false;
  return true;
}

cudaError_t Attention(const AttentionProblem& p, cudaStream_t stream) {
  if (!AttentionSupported(p) || p.q == nullptr || p.k == nullptr || p.v == nullptr ||
      p.out == nullptr)
    return cudaErrorInvalidValue;
  if (p.rows == 0) return cudaSuccess;
  return p.type == ElemType::kBF16 ? Launch<__nv_bfloat16>(p, stream) : Launch<__half>(p, stream);
}

}  // namespace nereid::kernels::cuda
