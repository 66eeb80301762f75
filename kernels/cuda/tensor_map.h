// Tensor maps for the Hopper bulk tensor copy engine (TMA): the host side. A kernel takes the map
// by value as a `const __grid_constant__ CUtensorMap` parameter and copies boxes of the tensor into
// shared memory with cp.async.bulk.tensor (kernels/cuda/hopper.cuh).
//
// The driver's cuTensorMapEncodeTiled is reached through the runtime's driver entry point, so
// nothing links libcuda directly.
#pragma once

#include <cuda.h>

#include <cstdint>

#include "common/status.h"

namespace nw::cuda {

/// A 2-D map over a row-major bf16 matrix [rows, cols] at `base` (16-byte aligned, rows of
/// `cols` elements, cols * 2 a multiple of 16), copied in boxes of box_rows x 64 columns
/// (128 bytes a row) with the 128-byte swizzle that wgmma's SW128 K-major operands read: the
/// 16-byte chunk c of box row r lands at chunk c ^ (r % 8) of that row's 128 bytes. Rows past
/// `rows` (and columns past `cols`) are filled with zeros. InvalidArgument for a bad shape or
/// alignment, Internal when the driver refuses.
Result<CUtensorMap> Bf16RowsSw128Map(const void* base, uint64_t rows, uint64_t cols,
                                     uint32_t box_rows);

}  // namespace nw::cuda
