// Compressor pooling on the GPU (kernels/cpu/attention.h CompressPool), for a run of consecutive
// compressed entries at once.
//
// Rows of `kv` and `score` are the compressor projections of consecutive tokens, row r holding
// token first_pos + r (score rows already include ape[token mod ratio]). Entry e pools span =
// ratio * (overlap ? 2 : 1) tokens: with overlap, token ratio*(e-1) + k for k in [0, 2*ratio),
// the first `ratio` through channels [0, dim) and the rest through [dim, 2*dim); without overlap,
// token ratio*e + k through [0, dim). A token before 0 is absent (score -inf, kv 0):
//   out[e, c] = sum_k softmax_k(score[k][c]) * kv[k][c]   (softmax over k, per channel).
// The arithmetic follows the CPU order (max, then sum of exps, then sum of kv * (e / denom) in k
// order, products and sums rounded separately); exp is evaluated in double and rounded to fp32,
// so results agree with the CPU to within the CPU's own exp rounding (about 1 ulp).
// Thread-safety: launchers are reentrant.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "common/status.h"

namespace nw::cuda {

struct CompressPoolParams {
  const float* kv = nullptr;     // [n_rows, row_stride]; (overlap ? 2 : 1) * dim values used
  const float* score = nullptr;  // [n_rows, row_stride]
  float* out = nullptr;          // [n_entries, out_stride]
  int64_t n_rows = 0;
  int64_t row_stride = 0;  // 0: (overlap ? 2 : 1) * dim
  int64_t first_pos = 0;   // token position of row 0
  int64_t first_entry = 0;
  int64_t n_entries = 0;
  int64_t out_stride = 0;  // 0: dim
  int ratio = 0;
  int dim = 0;
  bool overlap = false;
};
/// Every token an entry needs (position >= 0) must be one of the rows: InvalidArgument otherwise.
Status LaunchCompressPool(const CompressPoolParams& p, cudaStream_t stream);

}  // namespace nw::cuda
