#include "kernels/cpu/topk.h"

#include <algorithm>
#include <numeric>

namespace nw::cpu {

int TopK(const float* scores, int64_t n, int k, int32_t* out, int32_t* scratch) {
  const int64_t take = std::min<int64_t>(std::max(k, 0), n);
  std::iota(scratch, scratch + n, 0);
  auto before = [scores](int32_t a, int32_t b) { return RanksBefore(scores[a], a, scores[b], b); };
  std::partial_sort(scratch, scratch + take, scratch + n, before);
  for (int64_t j = 0; j < take; ++j) out[j] = scratch[j];
  for (int64_t j = take; j < k; ++j) out[j] = -1;
  return static_cast<int>(take);
}

int64_t RankOf(const float* scores, int64_t n, int64_t i) {
  int64_t rank = 0;
  for (int64_t j = 0; j < n; ++j) {
    if (j != i && RanksBefore(scores[j], j, scores[i], i)) ++rank;
  }
  return rank;
}

}  // namespace nw::cpu
