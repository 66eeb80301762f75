// RMSNorm and Hadamard on the GPU; see norm.h. Rows of at most kWarpMaxCols values get one warp
// each (no block barriers: the V4 model's rows of 64 to 1,024 values); longer rows one block each
// (grid-stride over rows). Both keep the same arithmetic (the Hadamard's butterflies; RMSNorm's
// double sum of exact squares, whose order only decides how it rounds at the last double bit).
#include <algorithm>
#include <string>

#include "kernels/cuda/common.h"
#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/norm.h"

namespace nw::cuda {
namespace {

constexpr int kThreads = 128;
constexpr int kWarps = kThreads / 32;
constexpr int kWarpMaxCols = 1024;

__global__ void __launch_bounds__(kThreads) RmsNormWarpKernel(RmsNormParams p) {
  const int lane = threadIdx.x & 31;
  for (int64_t r = static_cast<int64_t>(blockIdx.x) * kWarps + (threadIdx.x >> 5); r < p.rows;
       r += static_cast<int64_t>(gridDim.x) * kWarps) {
    const float* x = p.x + r * p.x_stride;
    float* y = p.y + r * p.y_stride;
    double ss = 0.0;
    for (int i = lane; i < p.cols; i += 32) {
      const double v = x[i];
      ss += v * v;  // exact: a float squared fits in a double
    }
    ss = detail::WarpSum(ss);
    const float mean = static_cast<float>(ss / static_cast<double>(p.cols));
    const float inv = 1.0f / sqrtf(detail::AddRn(mean, p.eps));
    for (int i = lane; i < p.cols; i += 32) {  // in place: a lane rewrites only what it read
      float v = detail::MulRn(x[i], inv);
      if (p.w != nullptr) v = detail::MulRn(v, p.w[i]);
      y[i] = p.round_bf16 ? quant::RoundBf16(v) : v;
    }
  }
}

// The Hadamard butterflies of one row in the warp's slice of shared memory.
__global__ void __launch_bounds__(kThreads) HadamardWarpKernel(HadamardParams p) {
  __shared__ float rows_buf[kWarps][kWarpMaxCols];
  const int lane = threadIdx.x & 31, half = p.n / 2;
  float* buf = rows_buf[threadIdx.x >> 5];
  for (int64_t r = static_cast<int64_t>(blockIdx.x) * kWarps + (threadIdx.x >> 5); r < p.rows;
       r += static_cast<int64_t>(gridDim.x) * kWarps) {
    const float* x = p.x + r * p.x_stride;
    float* y = p.y + r * p.y_stride;
    for (int i = lane; i < p.n; i += 32) buf[i] = x[i];
    __syncwarp();
    for (int h = 1; h < p.n; h *= 2) {
      for (int q = lane; q < half; q += 32) {
        const int j = (q / h) * 2 * h + (q % h);
        const float a = buf[j], b = buf[j + h];
        buf[j] = detail::AddRn(a, b);
        buf[j + h] = detail::SubRn(a, b);
      }
      __syncwarp();
    }
    for (int i = lane; i < p.n; i += 32) {
      const float v = detail::MulRn(buf[i], p.scale);
      y[i] = p.round_bf16 ? quant::RoundBf16(v) : v;
    }
    __syncwarp();  // buf is refilled for the next row
  }
}

__global__ void __launch_bounds__(kThreads) RmsNormKernel(RmsNormParams p) {
  __shared__ double partial[kThreads / 32];
  for (int64_t r = blockIdx.x; r < p.rows; r += gridDim.x) {
    const float* x = p.x + r * p.x_stride;
    float* y = p.y + r * p.y_stride;
    double ss = 0.0;
    for (int i = threadIdx.x; i < p.cols; i += kThreads) {
      const double v = x[i];
      ss += v * v;  // exact: a float squared fits in a double
    }
    ss = detail::BlockSum(ss, partial);
    const float mean = static_cast<float>(ss / static_cast<double>(p.cols));
    const float inv = 1.0f / sqrtf(detail::AddRn(mean, p.eps));
    for (int i = threadIdx.x; i < p.cols; i += kThreads) {
      float v = detail::MulRn(x[i], inv);
      if (p.w != nullptr) v = detail::MulRn(v, p.w[i]);
      y[i] = p.round_bf16 ? quant::RoundBf16(v) : v;
    }
  }
}

__global__ void __launch_bounds__(kThreads) HadamardKernel(HadamardParams p) {
  extern __shared__ float buf[];
  const int half = p.n / 2;
  for (int64_t r = blockIdx.x; r < p.rows; r += gridDim.x) {
    const float* x = p.x + r * p.x_stride;
    float* y = p.y + r * p.y_stride;
    for (int i = threadIdx.x; i < p.n; i += kThreads) buf[i] = x[i];
    __syncthreads();
    for (int h = 1; h < p.n; h *= 2) {
      for (int q = threadIdx.x; q < half; q += kThreads) {
        const int j = (q / h) * 2 * h + (q % h);
        const float a = buf[j], b = buf[j + h];
        buf[j] = detail::AddRn(a, b);
        buf[j + h] = detail::SubRn(a, b);
      }
      __syncthreads();
    }
    for (int i = threadIdx.x; i < p.n; i += kThreads) {
      const float v = detail::MulRn(buf[i], p.scale);
      y[i] = p.round_bf16 ? quant::RoundBf16(v) : v;
    }
    __syncthreads();  // buf is refilled for the next row
  }
}

unsigned RowBlocks(int64_t rows) {
  return static_cast<unsigned>(std::clamp<int64_t>(rows, 1, 32LL * MultiprocessorCount()));
}
unsigned WarpRowBlocks(int64_t rows) { return RowBlocks((rows + kWarps - 1) / kWarps); }

Status Strides(int64_t* xs, int64_t* ys, int64_t width, const char* what) {
  if (*xs == 0) *xs = width;
  if (*ys == 0) *ys = width;
  if (*xs < width || *ys < width) {
    return Status::InvalidArgument(std::string(what) + ": stride below the row width");
  }
  return Status::Ok();
}

}  // namespace

Status LaunchRmsNorm(const RmsNormParams& params, cudaStream_t stream) {
  RmsNormParams p = params;
  if (p.rows < 0 || p.cols < 0) return Status::InvalidArgument("RmsNorm: negative size");
  if (p.rows == 0 || p.cols == 0) return Status::Ok();
  if (p.x == nullptr || p.y == nullptr) return Status::InvalidArgument("RmsNorm: null pointer");
  NW_RETURN_IF_ERROR(Strides(&p.x_stride, &p.y_stride, p.cols, "RmsNorm"));
  if (p.x == p.y && p.x_stride != p.y_stride) {
    return Status::InvalidArgument("RmsNorm in place needs equal strides");
  }
  if (p.cols <= kWarpMaxCols) {
    RmsNormWarpKernel<<<WarpRowBlocks(p.rows), kThreads, 0, stream>>>(p);
    return NW_CUDA_LAUNCH_STATUS("RmsNormWarpKernel");
  }
  RmsNormKernel<<<RowBlocks(p.rows), kThreads, 0, stream>>>(p);
  return NW_CUDA_LAUNCH_STATUS("RmsNormKernel");
}

Status LaunchHadamard(const HadamardParams& params, cudaStream_t stream) {
  HadamardParams p = params;
  if (p.rows < 0) return Status::InvalidArgument("Hadamard: negative rows");
  if (p.n < 1 || p.n > kMaxHadamardSize || (p.n & (p.n - 1)) != 0) {
    return Status::InvalidArgument("Hadamard: n must be a power of two in [1, 8192], got " +
                                   std::to_string(p.n));
  }
  if (p.rows == 0) return Status::Ok();
  if (p.x == nullptr || p.y == nullptr) return Status::InvalidArgument("Hadamard: null pointer");
  NW_RETURN_IF_ERROR(Strides(&p.x_stride, &p.y_stride, p.n, "Hadamard"));
  if (p.x == p.y && p.x_stride != p.y_stride) {
    return Status::InvalidArgument("Hadamard in place needs equal strides");
  }
  if (p.n <= kWarpMaxCols) {
    HadamardWarpKernel<<<WarpRowBlocks(p.rows), kThreads, 0, stream>>>(p);
    return NW_CUDA_LAUNCH_STATUS("HadamardWarpKernel");
  }
  const size_t smem = static_cast<size_t>(p.n) * sizeof(float);
  HadamardKernel<<<RowBlocks(p.rows), kThreads, smem, stream>>>(p);
  return NW_CUDA_LAUNCH_STATUS("HadamardKernel");
}

}  // namespace nw::cuda
