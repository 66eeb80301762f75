// Deterministic top-k selection for the sparse-attention indexer, CPU reference.
//
// Order: higher score first; equal scores go to the lower index. NaN scores rank below every
// number (they are never preferred). Unused output slots are -1, the convention of FlashMLA and
// sglang. Thread-safety: pure functions.
#pragma once

#include <cstdint>

namespace nw::cpu {

/// Selects min(k, n) of scores[0..n) in rank order into out[0..k) and pads the rest with -1.
/// Returns the number selected. `scratch` holds n int32 values.
int TopK(const float* scores, int64_t n, int k, int32_t* out, int32_t* scratch);

/// 0-based rank of entry i among scores[0..n) in the order above: the number of entries that
/// come before it.
int64_t RankOf(const float* scores, int64_t n, int64_t i);

/// True when entry a comes before entry b in the order above.
inline bool RanksBefore(float sa, int64_t a, float sb, int64_t b) {
  const bool na = sa != sa;
  const bool nb = sb != sb;
  if (na != nb) return nb;  // a number comes before a NaN
  if (!na && sa != sb) return sa > sb;
  return a < b;
}

}  // namespace nw::cpu
