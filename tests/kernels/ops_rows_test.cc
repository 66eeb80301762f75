// The weight-stationary row kernels (LinearRows, GroupedLinearRows) against their row-by-row
// counterparts (Linear, GroupedLinear): bit-identical for every row count (the 4-row and 1-row
// paths, blocks of 16) and every input width (the 4-wide loop and its tail).
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "kernels/cpu/attention.h"
#include "kernels/cpu/ops.h"

namespace nw::cpu {
namespace {

std::vector<float> Random(size_t n, uint64_t seed) {
  std::vector<float> v(n);
  uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
  for (float& x : v) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    x = static_cast<float>(static_cast<double>(s >> 40) * 0x1p-24 * 2.0 - 1.0);
  }
  return v;
}

TEST(LinearRowsTest, BitIdenticalToLinearForEveryShape) {
  for (int64_t rows : {1, 2, 3, 4, 5, 7, 8, 15, 16, 17, 33}) {
    for (int64_t in : {1, 3, 4, 5, 8, 13, 64, 129}) {
      const int64_t out = 11;
      const auto x = Random(static_cast<size_t>(rows * in), 1 + static_cast<uint64_t>(rows * in));
      const auto w = Random(static_cast<size_t>(out * in), 7 + static_cast<uint64_t>(in));
      std::vector<float> a(static_cast<size_t>(rows * out)), b(a.size());
      Linear(x.data(), rows, in, w.data(), out, a.data());
      LinearRows(x.data(), rows, in, w.data(), out, b.data());
      EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0)
          << rows << " rows, in " << in;
    }
  }
}

TEST(GroupedLinearRowsTest, BitIdenticalToGroupedLinearPerRow) {
  const int groups = 3;
  const int64_t group_in = 37, rank = 5;
  for (int64_t rows : {1, 4, 9}) {
    const auto x = Random(static_cast<size_t>(rows * groups * group_in), 3);
    const auto w = Random(static_cast<size_t>(groups * rank * group_in), 4);
    std::vector<float> a(static_cast<size_t>(rows * groups * rank)), b(a.size());
    for (int64_t t = 0; t < rows; ++t) {
      GroupedLinear(x.data() + t * groups * group_in, w.data(), groups, group_in, rank,
                    a.data() + t * groups * rank);
    }
    GroupedLinearRows(x.data(), rows, w.data(), groups, group_in, rank, b.data());
    EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0) << rows << " rows";
  }
}

}  // namespace
}  // namespace nw::cpu
