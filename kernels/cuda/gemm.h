// GEMMs of the native engine's GPU path, for a layer's y = epilogue(alpha * x w^T): x is m x k and
// y m x n, both row-major; w is n x k row-major (a Linear layer's weight; the engine stores every
// constant weight so, transposing MatMul's B once at load).
//
//  - GemmSmallM: Nereid's own kernel for serving batches (m <= 16): each warp streams rows of w
//    once, 16 bytes per load, with the epilogue fused into its stores.
//  - GemmSmallM kTensorCore16/32: the same streaming of w on the tensor cores (mma.sync), for
//    m <= 64: w's rows are the MMA's rows and x's rows its columns, with k permuted inside each
//    16-byte load so every load feeds the MMA fragments directly.
//  - GemmSm90: Nereid's Hopper GEMM (sm_90a: TMA, wgmma, a persistent warp-specialized grid) for
//    shapes that fill the GPU, epilogue fused.
//  - CublasGemm: cuBLAS (cublasGemmEx) with the epilogue as a second kernel; the fallback for
//    every shape the custom kernels do not cover, and the reference in bench/bench_gpu_gemm.cu.
#pragma once

#include <cublas_v2.h>

#include <string>

#include "conv_geometry.h"
#include "cuda/common.h"

namespace nereid::kernels::cuda {

struct GemmProblem {
  int64_t m = 0, n = 0, k = 0;
  ElemType ab_type = ElemType::kF32;  // x and w: kF32, kBF16, kF16, or kI8 (gemm_int8.h)
  const void* x = nullptr;
  const void* w = nullptr;
  // kI8 operands: symmetric int8 values whose real values are x[i][l] * x_scale[i] (a scale per
  // row of x) and w[j][l] * w_scale[j] (per output channel), so that
  // y[i][j] = epilogue(alpha * x_scale[i] * w_scale[j] * sum_l x[i][l] w[j][l]).
  const float* x_scale = nullptr;      // m
  const float* w_scale = nullptr;      // n
  ElemType out_type = ElemType::kF32;  // kF32, kBF16 or kF16
  void* y = nullptr;
  float alpha = 1.f;
  const float* bias = nullptr;     // n, or null
  const void* residual = nullptr;  // m x n of out_type, or null
  Activation act = Activation::kNone;
  // y = act(alpha * acc + bias + residual) instead of act(...) + residual: a convolution's order
  // (a 1x1 convolution run as a GEMM). CublasGemm takes it with any activation, GemmSm90 with
  // Relu; the small-M kernels refuse a problem with it, a residual and an activation.
  bool residual_first = false;
  // An implicit GEMM (a convolution, GemmSm90 only): x is the channels-last image 'image'
  // describes, and the GEMM's x its windows, never written out: row i is output pixel i (m = n x
  // oh x ow), column l = (ky * kw + kx) * c_in + ci (k = kh x kw x c_in), w the weights as
  // [c_out][kh][kw][c_in] (n = c_out). One group, c_in a multiple of 8 (bf16, fp16), or of 16 for
  // int8 with y in bf16, where x_scale holds one scale per image (not per row).
  bool implicit = false;
  Conv2dGeometry image;
  bool tf32 = false;  // kF32 operands on the tensor cores (TF32) instead of exact fp32
  // Scratch for kernels that need it (GemmSm90 with K splits: Sm90WorkspaceFloats).
  float* workspace = nullptr;
  int64_t workspace_floats = 0;
};

// Whether 'p' asks for its residual added before an activation (what the small-M kernels refuse).
inline bool ResidualBeforeActivation(const GemmProblem& p) {
  return p.residual_first && p.residual != nullptr && p.act != Activation::kNone;
}
// Whether the small-M kernels must refuse 'p': an implicit GEMM (which cuBLAS refuses too), or the
// residual before an activation.
inline bool Sm90Only(const GemmProblem& p) { return p.implicit || ResidualBeforeActivation(p); }

// kWarpRows2/4: each warp streams 2 or 4 rows of w and reads x through L1 (CUDA cores, m <= 16);
// kSharedX: x staged in shared memory per block and tile of k, each warp streaming 4 rows of w
// (fewer x reads for m > 1; m <= 16); kTensorCore16/32: a block of 8 warps streams 16 or 32 rows of
// w on the tensor cores, the warps splitting k (bf16, fp16, tf32, and int8 with its scales on
// m16n8k32; m <= 64, k a multiple of 32 bf16/fp16, 16 fp32 or 64 int8); the -K2/-K4/-K8 forms split
// k further over a thread-block cluster of 2, 4 or 8 blocks (Hopper), whose partial sums meet in
// distributed shared memory, so GEMMs with few output columns keep enough blocks and loads in
// flight to stream w at HBM speed. Which wins depends on the shape: the engine times them against
// cuBLAS per layer and row count. kSplitK2: a block of 4 warps streams 2 rows of w, the warps
// splitting k (CUDA cores, m <= 16; 4x the loads in flight of kWarpRows2 for GEMMs with few output
// columns).
enum class SmallMVariant {
  kWarpRows2,
  kWarpRows4,
  kSharedX,
  kTensorCore16,
  kTensorCore32,
  kSplitK2,
  kTensorCore16K2,
  kTensorCore16K4,
  kTensorCore16K8,
  kTensorCore32K2,
  kTensorCore32K4,
  kTensorCore32K8,
};
constexpr SmallMVariant kSmallMVariants[] = {
    SmallMVariant::kWarpRows2,      SmallMVariant::kWarpRows4,      SmallMVariant::kSharedX,
    SmallMVariant::kTensorCore16,   SmallMVariant::kTensorCore32,   SmallMVariant::kSplitK2,
    SmallMVariant::kTensorCore16K2, SmallMVariant::kTensorCore16K4, SmallMVariant::kTensorCore16K8,
    SmallMVariant::kTensorCore32K2, SmallMVariant::kTensorCore32K4, SmallMVariant::kTensorCore32K8};
// Whether 'v' runs on the tensor cores (the kTensorCore* family), and over how many blocks of a
// cluster it splits k (1 for every other variant).
bool SmallMTensorCore(SmallMVariant v);
int SmallMClusterSplits(SmallMVariant v);
// The largest m any GemmSmallM variant takes, and the largest the CUDA-core variants take.
constexpr int64_t kSmallMMax = 64;
constexpr int64_t kSmallMCudaCoreMax = 16;
// Whether GemmSmallM 'v' can run 'p' (m within the variant's limit, k a multiple of its vector,
// 16-byte aligned x and w, y in fp32 or in the operands' type; cluster splits need a GPU with
// thread-block clusters, compute capability 9.0 or later).
bool SmallMSupported(const GemmProblem& p, SmallMVariant v);
const char* SmallMVariantName(SmallMVariant v);
cudaError_t GemmSmallM(const GemmProblem& p, cudaStream_t stream,
                       SmallMVariant variant = SmallMVariant::kWarpRows2);

// GemmSm90's output tile: 128 x 256 (fewer operand reads per FLOP), 128 x 128 (twice the tiles,
// for shapes whose 128 x 256 tiles leave SMs idle), or 64 rows (one consumer warpgroup: no rows
// wasted at 33-64 rows, and twice the tiles again for small layers), or 128 x 64 (outputs of at
// most 64 columns only: a convolution to 64 channels wastes none); and K split 'splits' ways
// (partial sums in p.workspace, then summed by the epilogue kernel), for shapes with fewer tiles
// than SMs.
enum class Sm90Tile { k128x256, k128x128, k64x256, k64x128, k128x64 };
constexpr int kSm90MaxSplits = 8;
struct Sm90Config {
  Sm90Tile tile = Sm90Tile::k128x256;
  int splits = 1;
  std::string Name() const;
};
constexpr Sm90Config kSm90Configs[] = {
    {Sm90Tile::k128x256, 1}, {Sm90Tile::k128x128, 1}, {Sm90Tile::k128x128, 2},
    {Sm90Tile::k128x128, 4}, {Sm90Tile::k128x256, 2}, {Sm90Tile::k64x256, 1},
    {Sm90Tile::k64x128, 1},  {Sm90Tile::k64x128, 2},  {Sm90Tile::k64x128, 4},
    {Sm90Tile::k64x128, 8},  {Sm90Tile::k64x256, 2},  {Sm90Tile::k128x64, 1}};
// Workspace floats 'c' needs for 'p' (splits x m x n when split).
int64_t Sm90WorkspaceFloats(const GemmProblem& p, const Sm90Config& c);
// Whether GemmSm90 can run 'p' on the current device: an sm_90a build on a compute capability 9.0
// GPU, bf16/fp16 operands or fp32 with tf32 (y in fp32 or the operands' type), or int8 operands
// with their scales (wgmma s8 with s32 accumulators; y in fp32 or bf16), k * element size a
// multiple of 16 bytes, 16-byte aligned x and w, and the workspace a split needs.
bool Sm90Supported(const GemmProblem& p, const Sm90Config& c = {});
// The SMs of the current device if GemmSm90 can run there (an sm_90a build on a compute
// capability 9.0 GPU), else 0.
int Sm90SmCount();
cudaError_t GemmSm90(const GemmProblem& p, cudaStream_t stream, const Sm90Config& c = {});

class CublasGemm {
 public:
  CublasGemm() = default;
  ~CublasGemm();
  CublasGemm(const CublasGemm&) = delete;
  CublasGemm& operator=(const CublasGemm&) = delete;
  // Creates the handle on 'stream' with a workspace of its own, so calls can be captured in a CUDA
  // graph. Returns an error message, empty on success.
  std::string Init(cudaStream_t stream);
  // 'acc' (m x n floats) holds the accumulators when the epilogue is not the identity or y is not
  // fp32; it may be null otherwise. Returns an error message, empty on success.
  std::string Run(const GemmProblem& p, float* acc);
  // Accumulator floats Run needs for 'p' (0 when cuBLAS writes y directly).
  static int64_t AccumulatorFloats(const GemmProblem& p);

 private:
  cublasHandle_t handle_ = nullptr;
  void* workspace_ = nullptr;
  cudaStream_t stream_ = nullptr;
};

}  // namespace nereid::kernels::cuda
