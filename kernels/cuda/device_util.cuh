// Device helpers shared by the kernels in kernels/cuda (device code only; include from .cu).
//
// Exact arithmetic: nvcc contracts a*b+c into one FMA by default, while the CPU reference (x86-64
// without FMA) rounds the product and the sum separately. Kernels that promise the CPU's bits
// spell such expressions with the _rn intrinsics below, which are never contracted.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/quant/scalar.h"

namespace nw::cuda::detail {

inline constexpr unsigned kFullMask = 0xFFFFFFFFu;

__device__ __forceinline__ float MulRn(float a, float b) { return __fmul_rn(a, b); }
__device__ __forceinline__ float AddRn(float a, float b) { return __fadd_rn(a, b); }
__device__ __forceinline__ float SubRn(float a, float b) { return __fsub_rn(a, b); }

__device__ __forceinline__ bool IsNan(float x) { return x != x; }

/// max that propagates NaN (torch's amax): NaN if either argument is NaN.
__device__ __forceinline__ float NanMax(float a, float b) {
  if (IsNan(a) || IsNan(b)) return quant::QuietNan();
  return fmaxf(a, b);
}

/// NaN-propagating max over a warp; every lane gets the result.
__device__ __forceinline__ float WarpNanMax(float v) {
  for (int o = 16; o > 0; o >>= 1) v = NanMax(v, __shfl_xor_sync(kFullMask, v, o));
  return v;
}

/// NaN-propagating max over the lanes of an aligned group of `width` lanes (a power of two).
__device__ __forceinline__ float GroupNanMax(float v, int width) {
  for (int o = width / 2; o > 0; o >>= 1) v = NanMax(v, __shfl_xor_sync(kFullMask, v, o, width));
  return v;
}

__device__ __forceinline__ float WarpMax(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(kFullMask, v, o));
  return v;
}

__device__ __forceinline__ float WarpSum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(kFullMask, v, o);
  return v;
}

__device__ __forceinline__ double WarpSum(double v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(kFullMask, v, o);
  return v;
}

/// Block-wide sum of one double per thread (fixed tree: deterministic run to run). `shared`
/// holds blockDim.x / 32 doubles. Every thread gets the result.
__device__ __forceinline__ double BlockSum(double v, double* shared) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  v = WarpSum(v);
  __syncthreads();  // `shared` may still be read by a previous call
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  double total = 0.0;
  for (int w = 0; w < warps; ++w) total += shared[w];
  return total;
}

/// Block-wide NaN-propagating max of one float per thread; every thread gets the result.
__device__ __forceinline__ float BlockNanMax(float v, float* shared) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  v = WarpNanMax(v);
  __syncthreads();
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  float m = 0.0f;
  for (int w = 0; w < warps; ++w) m = NanMax(m, shared[w]);
  return m;
}

__device__ __forceinline__ float Bf16Round(float x) { return quant::RoundBf16(x); }

}  // namespace nw::cuda::detail
