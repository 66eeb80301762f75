// Per-row top-k on the GPU with the CPU reference's deterministic order (kernels/cpu/topk.h):
// higher score first, equal scores to the lower index, NaN below every number, -0 == +0. Row r
// selects min(k, len_r) of scores[r, 0..len_r) in rank order and pads out[r, min(k, len_r)..k)
// with -1, exactly like cpu::TopK.
//
// Algorithms, by shape:
// - k <= 512 over rows of at most 16,384 entries (V4-Flash's prefill and the segments of its
//   decode rows): the resident kernel (topk_resident.cu). One 512-thread block a row keeps the
//   row's rank keys in registers (32 a thread, read by 16-byte loads issued up front). Entries are
//   ranked by a 46-bit composite, key then lower position, so every entry is distinct and ties
//   need no special path; a radix select counts its top 11 bits, then the next 11 of the
//   threshold bin's entries, from registers, gathers the entries at or above the threshold bin
//   into shared memory when they fit 4,096, and refines the rest from the gathered ones (heavy
//   ties recount from global memory) until the threshold bin holds exactly the entries still to
//   take. A bucket sort over the selection's
//   own range (a bitonic sort where one bucket holds more than 32) puts it in rank order.
// - Larger k, or rows up to kTopKCachedLen entries with k > 512: the cached block kernel (topk.cu).
//   Scores map to 32-bit keys whose unsigned order is the rank order (NaN -> 0); a 3-pass radix
//   select (11 + 11 + 10 bits, shared-memory histograms) finds the key of the k-th entry. Rows are
//   staged in shared memory once (16-byte loads, the first radix pass counted while staging);
//   where the entries in and above the first pass's threshold bin are few, they are gathered and
//   the later passes and the selection use them alone. Otherwise, or on ties at the k-th key, an
//   ordered compaction (warps over contiguous runs, no atomics) keeps every larger key and the
//   lowest-index entries of that key, in index order. A bitonic sort of (key, ~index) puts the
//   selection in rank order.
// - Longer rows (up to 2^31 - 1) are split into kTopKSegment-entry segments, one block each (so a
//   single million-entry row spreads over 64 multiprocessors instead of one): each segment's
//   top-k set, in rank order (or index order, from the cached kernel's compaction), becomes the
//   row's candidates, then the top-k of the candidates is taken (by the resident kernel when they
//   are at most 16,384) and mapped back to row indices; either order lists equal keys by index,
//   so ties still go to the lower index. The split allocates its scratch in stream order from the
//   device's pool.
// - Many rows with a small k (at least kTopKWarpMinRows rows, or rows of at most 2,048 entries;
//   k <= kTopKWarpMaxK; rows up to kTopKCachedLen) go to a warp-per-row kernel: a value histogram
//   between the row's finite minimum and maximum, narrowed by key where one bin holds too many
//   entries, with no block barriers (prefill selects a few dozen of a few thousand compressed
//   entries per query).
// All give the same indices. Bitwise deterministic.
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

/// Which kernel takes the rows: kAuto picks by shape (above); the others force one, for
/// measuring them against each other (a forced kernel outside its limits is refused).
enum class TopKPath {
  kAuto,
  kWarpPerRow,  // k <= kTopKWarpMaxK, n <= kTopKCachedLen
  kResident,    // k <= 512 (rows longer than 16,384 are split into segments)
};

struct TopKParams {
  const float* scores = nullptr;     // [rows, stride]
  const int32_t* lengths = nullptr;  // [rows], clamped to [0, n]; null: every row has n entries
  int32_t* out = nullptr;            // [rows, out_stride]; the first k values of each row written
  int64_t rows = 0;
  int64_t n = 0;           // max entries per row, < 2^31
  int64_t stride = 0;      // 0: n
  int k = 0;               // [0, kMaxTopK]
  int64_t out_stride = 0;  // 0: k
  TopKPath path = TopKPath::kAuto;
};
Status LaunchTopK(const TopKParams& p, cudaStream_t stream);

}  // namespace nw::cuda
