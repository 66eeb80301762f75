// Rotary position embedding on the GPU, bit-exact with kernels/cpu/rope.{h,cc}: interleaved pairs
// (2j, 2j+1) rotated by the angle of the row's position, or by its conjugate (inverse RoPE on the
// attention output). The cos/sin table is the CPU's cpu::RopeTable uploaded as is ([position,
// pair] fp32), so the angles are the CPU's bits. (A device-built table was dropped: CUDA's double
// sin/cos of large arguments reduce through local memory, which this library's build rejects, and
// the one-off upload is cheap.)
// Thread-safety: launchers are reentrant.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "common/status.h"

namespace nw::cuda {

/// Rotates x[r, offset + 2j], x[r, offset + 2j + 1] for j < pairs (or, half_split, the pair
/// x[r, offset + j], x[r, offset + pairs + j]: the rotate_half layout), in place:
///   (a + ib) * (c + is), or * (c - is) when inverse; each product and sum rounded separately.
/// Row r uses position positions[r / rows_per_position] (rows_per_position = heads per token);
/// a position outside [0, n_positions) leaves its rows unchanged. round_bf16 rounds the rotated
/// values to bf16 (the activation rounding point after a RoPE).
struct RopeParams {
  float* x = nullptr;                  // [rows, x_stride]
  const int32_t* positions = nullptr;  // [rows / rows_per_position]
  const float* cos = nullptr;          // [n_positions, pairs]
  const float* sin = nullptr;          // [n_positions, pairs]
  int64_t rows = 0;
  int64_t x_stride = 0;  // 0: offset + 2 * pairs
  int offset = 0;
  int pairs = 0;
  int rows_per_position = 1;
  int64_t n_positions = 0;
  bool inverse = false;
  bool round_bf16 = false;
  bool half_split = false;  // pairs (j, j + pairs) instead of V4's interleaved (2j, 2j + 1)
};
Status LaunchRope(const RopeParams& p, cudaStream_t stream);

}  // namespace nw::cuda
