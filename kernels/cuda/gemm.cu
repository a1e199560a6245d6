#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <type_traits>

#include "cuda/device_math.cuh"
#include "cuda/epilogue.h"
#include "cuda/gemm.h"

namespace nereid::kernels::cuda {
namespace {

// ---- GemmSmallM ---------------------------------------------------------------------------------
// Variants kWarpRows2/4: one warp computes kRows consecutive output columns (rows of w) for all m
// rows of x. Each lane walks k in 16-byte vectors, 32 lanes apart, so a warp reads 512 contiguous
// bytes of a w row per step and every byte of w once; x (m x k, small) comes through L1 and is
// reused for the kRows rows. The m x kRows dot products are reduced across the warp with shuffles,
// and lane j < kRows*M writes one element of y with the epilogue applied.
constexpr int kWarps = 4;

template <typename T>
struct Vec {
  static constexpr int kCount = 16 / sizeof(T);
  float v[kCount];
  __device__ __forceinline__ void Load(const T* p) {
    const uint4 raw = __ldg(reinterpret_cast<const uint4*>(p));
    const T* e = reinterpret_cast<const T*>(&raw);
#pragma unroll
    for (int i = 0; i < kCount; ++i) v[i] = ToFloat(e[i]);
  }
};

// The end of every small-M kernel: each of the warp's kRows x M dot products summed across the
// lanes (butterfly: afterwards every lane holds every sum), then lane (r * M + i) % 32 applies the
// epilogue and stores y[i, row0 + r].
template <int M, int kRows, typename OutT>
__device__ __forceinline__ void ReduceAndStore(float (&acc)[kRows][M], int lane, int64_t row0,
                                               int m, int64_t n, float alpha,
                                               const float* __restrict__ bias, Activation act,
                                               const OutT* residual, OutT* y) {
#pragma unroll
  for (int r = 0; r < kRows; ++r)
#pragma unroll
    for (int i = 0; i < M; ++i)
#pragma unroll
      for (int offset = 16; offset > 0; offset >>= 1)
        acc[r][i] += __shfl_xor_sync(0xffffffffu, acc[r][i], offset);
#pragma unroll
  for (int r = 0; r < kRows; ++r)
#pragma unroll
    for (int i = 0; i < M; ++i) {
      const int64_t col = row0 + r;
      if (lane == (r * M + i) % 32 && i < m && col < n) {
        float v = alpha * acc[r][i];
        if (bias != nullptr) v += bias[col];
        v = ActivateAny(act, v);
        if (residual != nullptr) v += ToFloat(residual[i * n + col]);
        y[i * n + col] = FromFloat<OutT>(v);
      }
    }
}

template <typename T, int M, int kRows, typename OutT>
__global__ __launch_bounds__(kWarps * 32) void SmallMKernel(Activation act, int m, int64_t n,
                                                            int64_t k, const T* __restrict__ x,
                                                            const T* __restrict__ w, float alpha,
                                                            const float* __restrict__ bias,
                                                            const OutT* residual, OutT* y) {
  constexpr int V = Vec<T>::kCount;
  const int lane = threadIdx.x & 31;
  const int64_t row0 = (static_cast<int64_t>(blockIdx.x) * kWarps + (threadIdx.x >> 5)) * kRows;
  if (row0 >= n) return;
  float acc[kRows][M] = {};

  const T* wr[kRows];
#pragma unroll
  for (int r = 0; r < kRows; ++r) wr[r] = w + (row0 + r < n ? row0 + r : row0) * k;

#pragma unroll 2
  for (int64_t base = static_cast<int64_t>(lane) * V; base < k; base += 32 * V) {
    Vec<T> wv[kRows];
#pragma unroll
    for (int r = 0; r < kRows; ++r) wv[r].Load(wr[r] + base);
#pragma unroll
    for (int i = 0; i < M; ++i) {
      if (i < m) {
        Vec<T> xv;
        xv.Load(x + i * k + base);
#pragma unroll
        for (int r = 0; r < kRows; ++r)
#pragma unroll
          for (int e = 0; e < V; ++e) acc[r][i] = fmaf(wv[r].v[e], xv.v[e], acc[r][i]);
      }
    }
  }
  ReduceAndStore<M, kRows>(acc, lane, row0, m, n, alpha, bias, act, residual, y);
}

// Variant kSharedX: the block (8 warps) stages x[:, k0:k0+kt] in shared memory once per tile, so
// the m rows of x are read from device memory once per block instead of once per warp; each warp
// then streams kRows rows of w against the staged tile.
constexpr int kSharedWarps = 8;
constexpr size_t kSharedXBytes = 32 << 10;

template <typename T, int M, int kRows, typename OutT>
__global__ __launch_bounds__(kSharedWarps * 32) void SmallMSharedKernel(
    Activation act, int m, int64_t n, int64_t k, int64_t kt, const T* __restrict__ x,
    const T* __restrict__ w, float alpha, const float* __restrict__ bias, const OutT* residual,
    OutT* y) {
  constexpr int V = Vec<T>::kCount;
  extern __shared__ uint4 shared_raw[];
  T* xs = reinterpret_cast<T*>(shared_raw);  // M x kt
  const int lane = threadIdx.x & 31;
  const int64_t row0 =
      (static_cast<int64_t>(blockIdx.x) * kSharedWarps + (threadIdx.x >> 5)) * kRows;
  const bool active = row0 < n;
  float acc[kRows][M] = {};
  const T* wr[kRows];
#pragma unroll
  for (int r = 0; r < kRows; ++r) wr[r] = w + (row0 + r < n ? row0 + r : (active ? row0 : 0)) * k;

  for (int64_t k0 = 0; k0 < k; k0 += kt) {
    const int64_t len = k - k0 < kt ? k - k0 : kt;
    const int64_t vecs = len / V;
    __syncthreads();
    for (int64_t idx = threadIdx.x; idx < m * vecs; idx += blockDim.x) {
      const int64_t i = idx / vecs, c = idx % vecs;
      reinterpret_cast<uint4*>(xs + i * kt)[c] =
          __ldg(reinterpret_cast<const uint4*>(x + i * k + k0) + c);
    }
    __syncthreads();
    if (!active) continue;
#pragma unroll 2
    for (int64_t base = static_cast<int64_t>(lane) * V; base < len; base += 32 * V) {
      Vec<T> wv[kRows];
#pragma unroll
      for (int r = 0; r < kRows; ++r) wv[r].Load(wr[r] + k0 + base);
#pragma unroll
      for (int i = 0; i < M; ++i) {
        if (i < m) {
          const uint4 raw = *reinterpret_cast<const uint4*>(xs + i * kt + base);
          const T* e = reinterpret_cast<const T*>(&raw);
#pragma unroll
          for (int r = 0; r < kRows; ++r)
#pragma unroll
            for (int j = 0; j < V; ++j) acc[r][i] = fmaf(wv[r].v[j], ToFloat(e[j]), acc[r][i]);
        }
      }
    }
  }
  if (!active) return;
  ReduceAndStore<M, kRows>(acc, lane, row0, m, n, alpha, bias, act, residual, y);
}

template <typename T, int M, int kRows, typename OutT>
void LaunchVariant(SmallMVariant variant, const GemmProblem& p, cudaStream_t stream) {
  const auto* x = static_cast<const T*>(p.x);
  const auto* w = static_cast<const T*>(p.w);
  const auto* res = static_cast<const OutT*>(p.residual);
  auto* y = static_cast<OutT*>(p.y);
  const int m = static_cast<int>(p.m);
  const int64_t warps = (p.n + kRows - 1) / kRows;
  if (variant == SmallMVariant::kSharedX) {
    constexpr int64_t V = 16 / sizeof(T);
    int64_t kt = static_cast<int64_t>(kSharedXBytes / (M * sizeof(T))) / (32 * V) * (32 * V);
    const int64_t k_round = (p.k + 32 * V - 1) / (32 * V) * (32 * V);
    kt = kt < k_round ? kt : k_round;
    const unsigned grid = static_cast<unsigned>((warps + kSharedWarps - 1) / kSharedWarps);
    SmallMSharedKernel<T, M, kRows, OutT><<<grid, kSharedWarps * 32, M * kt * sizeof(T), stream>>>(
        p.act, m, p.n, p.k, kt, x, w, p.alpha, p.bias, res, y);
  } else {
    const unsigned grid = static_cast<unsigned>((warps + kWarps - 1) / kWarps);
    SmallMKernel<T, M, kRows, OutT>
        <<<grid, kWarps * 32, 0, stream>>>(p.act, m, p.n, p.k, x, w, p.alpha, p.bias, res, y);
  }
}

// The kernel instantiated for the smallest M (1, 2, 4, 8, 16) that holds p.m rows.
template <typename T, int kRows, typename OutT>
void LaunchForM(SmallMVariant variant, const GemmProblem& p, cudaStream_t stream) {
  if (p.m <= 1)
    LaunchVariant<T, 1, kRows, OutT>(variant, p, stream);
  else if (p.m <= 2)
    LaunchVariant<T, 2, kRows, OutT>(variant, p, stream);
  else if (p.m <= 4)
    LaunchVariant<T, 4, kRows, OutT>(variant, p, stream);
  else if (p.m <= 8)
    LaunchVariant<T, 8, kRows, OutT>(variant, p, stream);
  else
    LaunchVariant<T, 16, kRows, OutT>(variant, p, stream);
}

template <typename T, typename OutT>
cudaError_t LaunchSmallM(const GemmProblem& p, SmallMVariant variant, cudaStream_t stream) {
  if (variant == SmallMVariant::kWarpRows2)
    LaunchForM<T, 2, OutT>(variant, p, stream);
  else
    LaunchForM<T, 4, OutT>(variant, p, stream);
  return cudaGetLastError();
}

// Outputs in fp32 or in the operands' own type (what the engine chains between layers).
template <typename T>
cudaError_t LaunchSmallMOut(const GemmProblem& p, SmallMVariant variant, cudaStream_t stream) {
  if (p.out_type == ElemType::kF32) return LaunchSmallM<T, float>(p, variant, stream);
  if constexpr (!std::is_same_v<T, float>)
    if (p.out_type == p.ab_type) return LaunchSmallM<T, T>(p, variant, stream);
  return cudaErrorInvalidValue;
}

bool Aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

cudaDataType_t CudaType(ElemType t) {
  switch (t) {
    case ElemType::kBF16:
      return CUDA_R_16BF;
    case ElemType::kF16:
      return CUDA_R_16F;
    default:
      return CUDA_R_32F;
  }
}

std::string CublasError(const char* what, cublasStatus_t status) {
  return std::string(what) + ": " + cublasGetStatusString(status);
}

}  // namespace

bool SmallMSupported(const GemmProblem& p) {
  const bool float_types =
      p.ab_type == ElemType::kF32 || p.ab_type == ElemType::kBF16 || p.ab_type == ElemType::kF16;
  const int64_t vec = 16 / static_cast<int64_t>(ElemSize(p.ab_type));
  const bool out_ok = p.out_type == ElemType::kF32 || p.out_type == p.ab_type;
  return float_types && out_ok && p.m >= 1 && p.m <= kSmallMMax && p.n >= 1 && p.k >= vec &&
         p.k % vec == 0 && Aligned16(p.x) && Aligned16(p.w);
}

const char* SmallMVariantName(SmallMVariant v) {
  switch (v) {
    case SmallMVariant::kWarpRows2:
      return "warp-rows-2";
    case SmallMVariant::kWarpRows4:
      return "warp-rows-4";
    case SmallMVariant::kSharedX:
      return "shared-x";
  }
  return "?";
}

cudaError_t GemmSmallM(const GemmProblem& p, cudaStream_t stream, SmallMVariant variant) {
  if (!SmallMSupported(p)) return cudaErrorInvalidValue;
  switch (p.ab_type) {
    case ElemType::kF32:
      return LaunchSmallMOut<float>(p, variant, stream);
    case ElemType::kBF16:
      return LaunchSmallMOut<__nv_bfloat16>(p, variant, stream);
    case ElemType::kF16:
      return LaunchSmallMOut<__half>(p, variant, stream);
    default:
      return cudaErrorInvalidValue;
  }
}

// ---- cuBLAS -------------------------------------------------------------------------------------

CublasGemm::~CublasGemm() {
  if (handle_ != nullptr) cublasDestroy(handle_);
  if (workspace_ != nullptr) cudaFree(workspace_);
}

std::string CublasGemm::Init(cudaStream_t stream) {
  // cuBLAS's recommended workspace on Hopper is 32 MiB; a workspace of our own keeps cuBLAS from
  // allocating during graph capture.
  constexpr size_t kWorkspace = 32u << 20;
  cublasStatus_t status = cublasCreate(&handle_);
  if (status != CUBLAS_STATUS_SUCCESS) return CublasError("cublasCreate", status);
  if (cudaError_t e = cudaMalloc(&workspace_, kWorkspace); e != cudaSuccess)
    return std::string("cudaMalloc (cuBLAS workspace): ") + cudaGetErrorString(e);
  if ((status = cublasSetStream(handle_, stream)) != CUBLAS_STATUS_SUCCESS)
    return CublasError("cublasSetStream", status);
  if ((status = cublasSetWorkspace(handle_, workspace_, kWorkspace)) != CUBLAS_STATUS_SUCCESS)
    return CublasError("cublasSetWorkspace", status);
  stream_ = stream;
  return "";
}

int64_t CublasGemm::AccumulatorFloats(const GemmProblem& p) {
  const bool direct = p.out_type == ElemType::kF32 && p.bias == nullptr && p.residual == nullptr &&
                      p.act == Activation::kNone;
  return direct ? 0 : p.m * p.n;
}

std::string CublasGemm::Run(const GemmProblem& p, float* acc) {
  if (handle_ == nullptr) return "cuBLAS handle not initialized";
  const bool direct = AccumulatorFloats(p) == 0;
  if (!direct && acc == nullptr) return "cuBLAS GEMM needs an accumulator buffer";
  void* out = direct ? p.y : acc;
  const float beta = 0.f;
  cublasComputeType_t compute = CUBLAS_COMPUTE_32F;
  if (p.ab_type == ElemType::kF32)
    compute = p.tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  // Row-major y (m x n) is column-major y^T (n x m) = w (n x k, i.e. column-major k x n,
  // transposed) times x^T (column-major k x m).
  cublasStatus_t status =
      cublasGemmEx(handle_, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(p.n), static_cast<int>(p.m),
                   static_cast<int>(p.k), &p.alpha, p.w, CudaType(p.ab_type), static_cast<int>(p.k),
                   p.x, CudaType(p.ab_type), static_cast<int>(p.k), &beta, out, CUDA_R_32F,
                   static_cast<int>(p.n), compute, CUBLAS_GEMM_DEFAULT);
  if (status != CUBLAS_STATUS_SUCCESS) return CublasError("cublasGemmEx", status);
  if (direct) return "";
  if (cudaError_t e =
          BiasActivation(acc, p.m, p.n, p.bias, p.act, p.residual, p.out_type, p.y, stream_);
      e != cudaSuccess)
    return std::string("epilogue kernel: ") + cudaGetErrorString(e);
  return "";
}

}  // namespace nereid::kernels::cuda
