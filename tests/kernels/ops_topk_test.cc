// Deterministic top-k: ties to the lower index, -1 padding, NaN last, ranks consistent.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <vector>

#include "kernels/cpu/topk.h"

namespace nw::cpu {
namespace {

std::vector<int32_t> RunTopK(const std::vector<float>& s, int k) {
  std::vector<int32_t> out(static_cast<size_t>(k), 7777), scratch(s.size());
  const int n = TopK(s.data(), static_cast<int64_t>(s.size()), k, out.data(), scratch.data());
  EXPECT_EQ(n, std::min<int>(k, static_cast<int>(s.size())));
  return out;
}

TEST(TopKTest, HigherScoreFirstTiesToLowerIndex) {
  const std::vector<float> s = {1, 3, 2, 3, 1, 3};
  EXPECT_EQ(RunTopK(s, 4), (std::vector<int32_t>{1, 3, 5, 2}));
  EXPECT_EQ(RunTopK(s, 6), (std::vector<int32_t>{1, 3, 5, 2, 0, 4}));
}

TEST(TopKTest, PadsWithMinusOne) {
  const std::vector<float> s = {0.5f, -1.0f};
  EXPECT_EQ(RunTopK(s, 5), (std::vector<int32_t>{0, 1, -1, -1, -1}));
  EXPECT_EQ(RunTopK({}, 3), (std::vector<int32_t>{-1, -1, -1}));
  EXPECT_EQ(RunTopK(s, 0), (std::vector<int32_t>{}));
}

TEST(TopKTest, NanRanksLastAndInfinitiesOrder) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<float> s = {nan, -inf, 2.0f, inf, nan};
  EXPECT_EQ(RunTopK(s, 5), (std::vector<int32_t>{3, 2, 1, 0, 4}));
}

TEST(TopKTest, MatchesFullStableSortOnManyTies) {
  uint64_t state = 12345;
  for (int trial = 0; trial < 20; ++trial) {
    const int n = 1 + trial * 37;
    std::vector<float> s(static_cast<size_t>(n));
    for (float& v : s) {
      state = state * 6364136223846793005ull + 1442695040888963407ull;
      v = static_cast<float>((state >> 33) % 9);  // integers 0..8: many ties
    }
    std::vector<int32_t> order(static_cast<size_t>(n));
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
      return s[static_cast<size_t>(a)] > s[static_cast<size_t>(b)];
    });
    for (int k : {1, 5, 16, n, n + 3}) {
      const std::vector<int32_t> got = RunTopK(s, k);
      for (int j = 0; j < k; ++j) {
        const int32_t want = j < n ? order[static_cast<size_t>(j)] : -1;
        ASSERT_EQ(got[static_cast<size_t>(j)], want) << "n " << n << " k " << k << " j " << j;
      }
    }
    for (int j = 0; j < n; ++j) {
      EXPECT_EQ(RankOf(s.data(), n, order[static_cast<size_t>(j)]), j);
    }
  }
}

}  // namespace
}  // namespace nw::cpu
