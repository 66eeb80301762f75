// Per-row top-k on the GPU with the CPU reference's deterministic order (kernels/cpu/topk.h):
// higher score first, equal scores to the lower index, NaN below every number, -0 == +0. Row r
// selects min(k, len_r) of scores[r, 0..len_r) in rank order and pads out[r, min(k, len_r)..k)
// with -1, exactly like cpu::TopK.
//
// Algorithm: one thread block per row. Scores map to 32-bit keys whose unsigned order is the rank
// order (NaN -> 0); a 3-pass radix select (11 + 11 + 10 bits, shared-memory histograms) finds the
// key of the k-th entry. Rows up to kTopKCachedLen entries are staged in shared memory once
// (16-byte loads, the first radix pass counted while staging); where the entries in and above the
// first pass's threshold bin are few, they are gathered and the later passes and the selection use
// them alone. Otherwise, or on ties at the k-th key, an ordered compaction (warps over contiguous
// runs, no atomics) keeps every larger key and the lowest-index entries of that key, in index
// order. A bitonic sort of (key, ~index) puts the selection in rank order. Longer rows (up to
// 2^31 - 1) are split into kTopKSegment-entry segments, one block each (so a single million-entry
// row spreads over 64 multiprocessors instead of one): each segment's top-k set, in index order
// (compacted) or rank order (gathered), becomes the row's candidates, then the top-k of the
// candidates is taken and mapped back to row indices; either order lists equal keys by index, so
// ties still go to the lower index. The split allocates its
// scratch in stream order from the device's pool. Many rows with a small k (at
// least kTopKWarpMinRows rows, or rows of at most 2,048 entries; k <= kTopKWarpMaxK; rows up to
// kTopKCachedLen) go to a warp-per-row kernel instead: a value histogram between the row's finite
// minimum and maximum, narrowed by key where one bin holds too many entries, with no block
// barriers (prefill selects a few dozen of a few thousand compressed entries per query). Both give
// the same indices. Bitwise deterministic.
// Thread-safety: launchers are reentrant.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "common/status.h"

namespace nw::cuda {

inline constexpr int kMaxTopK = 2048;
inline constexpr int64_t kTopKCachedLen = 32768;
inline constexpr int64_t kTopKSegment = 16384;  // >= kMaxTopK
inline constexpr int kTopKWarpMaxK = 128;
inline constexpr int64_t kTopKWarpMinRows = 256;

struct TopKParams {
  const float* scores = nullptr;     // [rows, stride]
  const int32_t* lengths = nullptr;  // [rows], clamped to [0, n]; null: every row has n entries
  int32_t* out = nullptr;            // [rows, out_stride]; the first k values of each row written
  int64_t rows = 0;
  int64_t n = 0;           // max entries per row, < 2^31
  int64_t stride = 0;      // 0: n
  int k = 0;               // [0, kMaxTopK]
  int64_t out_stride = 0;  // 0: k
};
Status LaunchTopK(const TopKParams& p, cudaStream_t stream);

}  // namespace nw::cuda
