// Row-wise RMSNorm and the Walsh-Hadamard transform on the GPU (kernels/cpu/ops.h RmsNorm and
// kernels/cpu/hadamard.h HadamardTransform).
//
// RmsNorm: y = (x * r) * w with r = 1 / sqrt(fp32(sum(double(x)^2) / n) + eps) (fp32 sqrt and
// division, IEEE). The sum of squares runs in double in a fixed tree, so it is deterministic but
// ordered differently from the CPU's sequential double sum: results equal the CPU's except when
// the two double sums round to different floats (at most 1 ulp of r).
// Hadamard: the same butterfly stages as the CPU (stride 1, 2, 4, ...), so the bits are equal.
// round_bf16 rounds each output to bf16 (an activation rounding point). In place allowed.
// Thread-safety: launchers are reentrant.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "common/status.h"

namespace nw::cuda {

struct RmsNormParams {
  const float* x = nullptr;  // [rows, x_stride]
  const float* w = nullptr;  // [cols] or null (weightless)
  float* y = nullptr;        // [rows, y_stride]; may equal x (same stride)
  int64_t rows = 0;
  int cols = 0;
  int64_t x_stride = 0;  // 0: cols
  int64_t y_stride = 0;  // 0: cols
  float eps = 1e-6f;
  bool round_bf16 = false;
};
Status LaunchRmsNorm(const RmsNormParams& p, cudaStream_t stream);

inline constexpr int kMaxHadamardSize = 8192;

struct HadamardParams {
  const float* x = nullptr;  // [rows, x_stride]
  float* y = nullptr;        // [rows, y_stride]; may equal x (same stride)
  int64_t rows = 0;
  int n = 0;  // power of two, at most kMaxHadamardSize
  int64_t x_stride = 0;
  int64_t y_stride = 0;
  float scale = 1.0f;
  bool round_bf16 = false;
};
Status LaunchHadamard(const HadamardParams& p, cudaStream_t stream);

}  // namespace nw::cuda
