// Exact fp32 linear layers on the GPU, bit-identical to the CPU reference's dot products
// (kernels/cpu/ops.h Linear/LinearRows and kernels/cpu/vec.h Dot, which GroupedLinear uses):
//   y[t, o] = sum_i x[t, i] * w[o, i]   (w row-major [out, in], like torch Linear)
// accumulated in `lanes` interleaved partial sums (lane i % lanes for i below the largest multiple
// of lanes, the rest into lane 0, in index order), every product and sum rounded separately (no
// FMA), combined as (s0 + s1) + (s2 + s3) for 4 lanes and ((s0+s1)+(s2+s3)) + ((s4+s5)+(s6+s7))
// for 8. So the fp32 engine on the GPU computes the CPU's bits for every linear layer.
//
// Three shapes share one tiled kernel (32 rows x 64 outputs a block, 32-wide k tiles in shared
// memory):
//   dense     every row against one weight matrix;
//   batched   `batches` independent products at fixed strides (the grouped wo_a: group g reads
//             x[:, g*in ...], w[g*out ...] and writes y[:, g*out ...]);
//   gathered  a row list per weight matrix (the MoE experts): matrix e multiplies the x rows
//             rows[offsets[e] .. offsets[e+1]) (indices into x) into y rows offsets[e] ...;
//             tiles come from a device-built list (tile_expert, tile_row0), `max_tiles` bounds it.
//
// Tensor cores (w_bf16 set): y = x W^T with bf16 operands and fp32 accumulation (mma.sync
// m16n8k16), for the precision profiles with bf16 activations. x is rounded to bf16 as it is staged
// (a no-op for inputs that already hold bf16 values) or, with x_split, split into three bf16 pieces
// whose sum is x exactly; W is one bf16 piece (its values are bf16 values) or three (any fp32 W).
// Every product of pieces is exact, so with exact pieces only the fp32 summation order differs
// from the CPU, as in any bf16 GEMM. `lanes` is ignored on this path; the shapes and the tile list
// are the same. Deterministic run to run.
// Tensor cores, dense and batched products with many rows, out <= 512 and the whole W in shared
// memory (the tiny model's projections): a persistent kernel keeps W resident in each block and
// streams 32-row tiles of x through it, so x is read once and W once per block instead of once
// per tile; its products and their order are the tiled kernel's, so its outputs are the same bits.
// Thread-safety: launchers are reentrant.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "common/status.h"

namespace nw::cuda {

inline constexpr int kLinearTileRows = 32;

/// Which tensor-core kernel runs a product: kAuto chooses; the others are for tests and
/// benchmarks (kResident is InvalidArgument where it does not apply).
enum class LinearMmaKernel { kAuto, kTiled, kResident };

struct LinearParams {
  const float* x = nullptr;  // [rows, x_stride] (batched: + b * x_batch_stride)
  const float* w = nullptr;  // [out, in] (batched: + b * w_batch_stride; gathered: + e * out*in)
  float* y = nullptr;        // [rows, y_stride] (batched: + b * y_batch_stride)
  int64_t rows = 0;
  int64_t in = 0;
  int64_t out = 0;
  int64_t x_stride = 0;  // 0: in
  int64_t y_stride = 0;  // 0: out
  int lanes = 4;         // 4 (Linear) or 8 (Dot)
  // Tensor cores: W as bf16 bits, same layout as w (w may then be null); w_pieces 3: three bf16
  // pieces that sum to W exactly, w_piece_stride elements apart. x_split: x as three bf16 pieces
  // that sum to it exactly instead of rounded (for inputs that are not bf16 values); not together
  // with w_pieces 3. round_bf16: each output rounded to bf16 (round to nearest even), bit-identical
  // to a separate bf16 FakeQuant pass over y (an activation rounding point).
  const uint16_t* w_bf16 = nullptr;
  int w_pieces = 1;
  int64_t w_piece_stride = 0;
  bool x_split = false;
  bool round_bf16 = false;                              // tensor cores only
  LinearMmaKernel mma_kernel = LinearMmaKernel::kAuto;  // tensor cores only
  // Batched.
  int batches = 1;
  int64_t x_batch_stride = 0;
  int64_t w_batch_stride = 0;
  int64_t y_batch_stride = 0;
  // Gathered (row_index != null): rows = total gathered rows (y rows), x has x_rows rows.
  const int32_t* row_index = nullptr;    // [rows] x row of each y row
  const int32_t* tile_expert = nullptr;  // [max_tiles] weight matrix of each tile, -1 = none
  const int32_t* tile_row0 = nullptr;    // [max_tiles] first y row of each tile
  const int32_t* tile_rows = nullptr;    // [max_tiles] rows in the tile (<= kLinearTileRows)
  int64_t max_tiles = 0;
  int64_t x_rows = 0;
  // Tensor cores, few output tiles: the product splits k and sums the ranges' partial outputs,
  // kept here when it holds them (at least LinearSplitWorkspaceFloats() floats always do), else
  // in a buffer allocated in stream order for the launch. A caller that captures its launches
  // into a CUDA graph passes one, so that the graph allocates nothing (engine/cuda/
  // forward_graphs.h keeps no graph that does).
  float* split_workspace = nullptr;
  int64_t split_workspace_floats = 0;
};
Status LaunchLinear(const LinearParams& p, cudaStream_t stream);

/// Floats of split_workspace that hold the partial outputs of any split product on the current
/// device.
int64_t LinearSplitWorkspaceFloats();

}  // namespace nw::cuda
