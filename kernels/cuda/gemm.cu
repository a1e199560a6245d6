#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <type_traits>

#include "cuda/device_math.cuh"
#include "cuda/epilogue.h"
#include "cuda/gemm.h"

namespace nereid::kernels::cuda {
namespace {

// ---- GemmSmallM ---------------------------------------------------------------------------------
// One warp computes kRows consecutive output columns (rows of w) for all m rows of x. Each lane
// walks k in 16-byte vectors, 32 lanes apart, so a warp reads 512 contiguous bytes of a w row per
// step and every byte of w once; x (m x k, small) comes through L1 and is reused for the kRows rows.
// The m x kRows dot products are reduced across the warp with shuffles, and lane j < kRows*M writes
// one element of y with the epilogue applied.
constexpr int kWarps = 4;
constexpr int kRows = 2;

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

template <typename T, int M, Activation A, typename OutT>
__global__ __launch_bounds__(kWarps * 32) void SmallMKernel(int m, int64_t n, int64_t k,
                                                            const T* __restrict__ x,
                                                            const T* __restrict__ w, float alpha,
                                                            const float* __restrict__ bias,
                                                            const OutT* residual, OutT* y) {
  constexpr int V = Vec<T>::kCount;
  const int lane = threadIdx.x & 31;
  const int64_t row0 = (static_cast<int64_t>(blockIdx.x) * kWarps + (threadIdx.x >> 5)) * kRows;
  if (row0 >= n) return;
  float acc[kRows][M];
#pragma unroll
  for (int r = 0; r < kRows; ++r)
#pragma unroll
    for (int i = 0; i < M; ++i) acc[r][i] = 0.f;

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
  // Butterfly reduction: afterwards every lane holds every sum.
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
        v = Activate<A>(v);
        if (residual != nullptr) v += ToFloat(residual[i * n + col]);
        y[i * n + col] = FromFloat<OutT>(v);
      }
    }
}

template <typename T, typename OutT>
cudaError_t LaunchSmallM(const GemmProblem& p, cudaStream_t stream) {
  const int64_t warps = (p.n + kRows - 1) / kRows;
  const unsigned grid = static_cast<unsigned>((warps + kWarps - 1) / kWarps);
  const auto* x = static_cast<const T*>(p.x);
  const auto* w = static_cast<const T*>(p.w);
  const auto* res = static_cast<const OutT*>(p.residual);
  auto* y = static_cast<OutT*>(p.y);
  const int m = static_cast<int>(p.m);
  auto launch = [&](auto a) {
    constexpr Activation A = decltype(a)::value;
    if (m <= 1)
      SmallMKernel<T, 1, A, OutT><<<grid, kWarps * 32, 0, stream>>>(m, p.n, p.k, x, w, p.alpha, p.bias, res, y);
    else if (m <= 2)
      SmallMKernel<T, 2, A, OutT><<<grid, kWarps * 32, 0, stream>>>(m, p.n, p.k, x, w, p.alpha, p.bias, res, y);
    else if (m <= 4)
      SmallMKernel<T, 4, A, OutT><<<grid, kWarps * 32, 0, stream>>>(m, p.n, p.k, x, w, p.alpha, p.bias, res, y);
    else if (m <= 8)
      SmallMKernel<T, 8, A, OutT><<<grid, kWarps * 32, 0, stream>>>(m, p.n, p.k, x, w, p.alpha, p.bias, res, y);
    else
      SmallMKernel<T, 16, A, OutT><<<grid, kWarps * 32, 0, stream>>>(m, p.n, p.k, x, w, p.alpha, p.bias, res, y);
  };
  NEREID_DISPATCH_ACTIVATION(p.act, launch);
  return cudaGetLastError();
}

template <typename T>
cudaError_t LaunchSmallMOut(const GemmProblem& p, cudaStream_t stream) {
  switch (p.out_type) {
    case ElemType::kF32: return LaunchSmallM<T, float>(p, stream);
    case ElemType::kBF16: return LaunchSmallM<T, __nv_bfloat16>(p, stream);
    case ElemType::kF16: return LaunchSmallM<T, __half>(p, stream);
    default: return cudaErrorInvalidValue;
  }
}

bool Aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

cudaDataType_t CudaType(ElemType t) {
  switch (t) {
    case ElemType::kBF16: return CUDA_R_16BF;
    case ElemType::kF16: return CUDA_R_16F;
    default: return CUDA_R_32F;
  }
}

std::string CublasError(const char* what, cublasStatus_t status) {
  return std::string(what) + ": " + cublasGetStatusString(status);
}

}  // namespace

bool SmallMSupported(const GemmProblem& p) {
  const bool float_types = p.ab_type == ElemType::kF32 || p.ab_type == ElemType::kBF16 ||
                           p.ab_type == ElemType::kF16;
  const int64_t vec = 16 / static_cast<int64_t>(ElemSize(p.ab_type));
  return float_types && p.m >= 1 && p.m <= kSmallMMax && p.n >= 1 && p.k >= vec &&
         p.k % vec == 0 && Aligned16(p.x) && Aligned16(p.w);
}

cudaError_t GemmSmallM(const GemmProblem& p, cudaStream_t stream) {
  if (!SmallMSupported(p)) return cudaErrorInvalidValue;
  switch (p.ab_type) {
    case ElemType::kF32: return LaunchSmallMOut<float>(p, stream);
    case ElemType::kBF16: return LaunchSmallMOut<__nv_bfloat16>(p, stream);
    case ElemType::kF16: return LaunchSmallMOut<__half>(p, stream);
    default: return cudaErrorInvalidValue;
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
  const bool direct = p.out_type == ElemType::kF32 && p.bias == nullptr &&
                      p.residual == nullptr && p.act == Activation::kNone;
  return direct ? 0 : p.m * p.n;
}

std::string CublasGemm::Run(const GemmProblem& p, float* acc) {
  if (handle_ == nullptr) return "cuBLAS handle not initialized";
  const bool direct = AccumulatorFloats(p) == 0;
  if (!direct && acc == nullptr) return "cuBLAS GEMM needs an accumulator buffer";
  void* out = direct ? p.y : acc;
  const float beta = 0.f;
  cublasComputeType_t compute = CUBLAS_COMPUTE_32F;
  if (p.ab_type == ElemType::kF32) compute = p.tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  // Row-major y (m x n) is column-major y^T (n x m) = w (n x k, i.e. column-major k x n, transposed)
  // times x^T (column-major k x m).
  cublasStatus_t status = cublasGemmEx(
      handle_, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(p.n), static_cast<int>(p.m),
      static_cast<int>(p.k), &p.alpha, p.w, CudaType(p.ab_type), static_cast<int>(p.k), p.x,
      CudaType(p.ab_type), static_cast<int>(p.k), &beta, out, CUDA_R_32F, static_cast<int>(p.n),
      compute, CUBLAS_GEMM_DEFAULT);
  if (status != CUBLAS_STATUS_SUCCESS) return CublasError("cublasGemmEx", status);
  if (direct) return "";
  if (cudaError_t e = BiasActivation(acc, p.m, p.n, p.bias, p.act, p.residual, p.out_type, p.y,
                                     stream_);
      e != cudaSuccess)
    return std::string("epilogue kernel: ") + cudaGetErrorString(e);
  return "";
}

}  // namespace nereid::kernels::cuda
