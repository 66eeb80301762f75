// The tile set-up every linear kernel shares (linear.cu, linear_mma.cu): which rows of x a block's
// tile reads, which weight matrix, and where its outputs go, for the three shapes of linear.h
// (dense, batched, gathered through the device-built tile list).
#pragma once

#include <cstdint>

#include "kernels/cuda/linear.h"

namespace nw::cuda::detail {

template <typename W>
struct LinearTile {
  const float* x = nullptr;  // the batch's x (rows are read through xrow)
  const W* w = nullptr;      // the tile's weight matrix
  float* y = nullptr;        // the batch's y; the tile writes rows row0 ..
  int64_t row0 = 0;
};

/// Fills `tile` and xrow[0..kRows) (the x row of each tile row, -1 past the tile's rows) for the
/// block's row tile `row_tile` (an index into the gathered tile list when there is one); grid z =
/// batches. Returns false, before any barrier and the same for every thread of the block, when
/// the block has no rows; otherwise ends with a barrier. Needs blockDim.x >= kRows.
template <int kRows, typename W>
__device__ __forceinline__ bool SetUpLinearTile(const LinearParams& p, const W* w, int64_t row_tile,
                                                int32_t* xrow, LinearTile<W>* tile) {
  tile->x = p.x;
  tile->w = w;
  tile->y = p.y;
  int64_t nrows = 0;
  if (p.row_index != nullptr) {
    const int64_t t = row_tile;
    if (t >= p.max_tiles) return false;
    const int32_t e = p.tile_expert[t];
    if (e < 0) return false;
    tile->w += static_cast<int64_t>(e) * p.out * p.in;
    tile->row0 = p.tile_row0[t];
    nrows = p.tile_rows[t];
  } else {
    const int64_t b = blockIdx.z;
    tile->x += b * p.x_batch_stride;
    tile->w += b * p.w_batch_stride;
    tile->y += b * p.y_batch_stride;
    tile->row0 = row_tile * kRows;
    nrows = p.rows - tile->row0 < kRows ? p.rows - tile->row0 : kRows;
  }
  if (nrows <= 0) return false;
  if (threadIdx.x < kRows) {
    const int r = static_cast<int>(threadIdx.x);
    const int64_t at = tile->row0 + r;
    xrow[r] =
        r < nrows ? (p.row_index != nullptr ? p.row_index[at] : static_cast<int32_t>(at)) : -1;
  }
  __syncthreads();
  return true;
}

}  // namespace nw::cuda::detail
