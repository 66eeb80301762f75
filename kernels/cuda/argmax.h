// Row-wise argmax on the GPU with the CPU engine's order (engine/cpu/generate.cc Argmax): the
// first index of the largest value; NaN ranks below every number (a row of NaNs gives 0); -0 and
// +0 are equal. Deterministic: the reduction compares (value, index) pairs with a total order.
// Thread-safety: launchers are reentrant.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "common/status.h"

namespace nw::cuda {

struct ArgmaxParams {
  const float* x = nullptr;  // [rows, x_stride]
  int32_t* index = nullptr;  // [rows]
  float* value = nullptr;    // [rows] or null: x[r, index[r]]
  int64_t rows = 0;
  int64_t n = 0;         // values per row, in [1, 2^31)
  int64_t x_stride = 0;  // 0: n
};
Status LaunchArgmax(const ArgmaxParams& p, cudaStream_t stream);

}  // namespace nw::cuda
