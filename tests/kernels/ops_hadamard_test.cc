// Fast Walsh-Hadamard transform against the explicit Sylvester matrix in double.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <vector>

#include "kernels/cpu/hadamard.h"

namespace nw::cpu {
namespace {

TEST(HadamardTest, PowerOfTwo) {
  EXPECT_TRUE(IsPowerOfTwo(1));
  EXPECT_TRUE(IsPowerOfTwo(64));
  EXPECT_FALSE(IsPowerOfTwo(0));
  EXPECT_FALSE(IsPowerOfTwo(96));
}

TEST(HadamardTest, MatchesSylvesterMatrix) {
  for (int64_t n : {1, 2, 4, 8, 32, 64, 128, 512}) {
    std::vector<float> x(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i)
      x[static_cast<size_t>(i)] = static_cast<float>((i * 37 + 11) % 19) - 9.0f;
    const double scale = 1.0 / std::sqrt(static_cast<double>(n));
    std::vector<float> y = x;
    HadamardTransform(y.data(), n, static_cast<float>(scale));
    for (int64_t i = 0; i < n; ++i) {
      double want = 0;
      for (int64_t j = 0; j < n; ++j) {
        const int sign = std::popcount(static_cast<uint64_t>(i & j)) % 2 ? -1 : 1;
        want += sign * static_cast<double>(x[static_cast<size_t>(j)]);
      }
      want *= scale;
      EXPECT_NEAR(y[static_cast<size_t>(i)], want, 1e-5 * (1 + std::fabs(want)))
          << "n " << n << " i " << i;
    }
  }
}

TEST(HadamardTest, OrthonormalTransformIsItsOwnInverse) {
  const int64_t n = 128;
  std::vector<float> x(n);
  for (int64_t i = 0; i < n; ++i) x[static_cast<size_t>(i)] = std::sin(static_cast<float>(i));
  std::vector<float> y = x;
  const float s = 1.0f / std::sqrt(128.0f);
  HadamardTransform(y.data(), n, s);
  double nx = 0, ny = 0;
  for (int64_t i = 0; i < n; ++i) {
    nx += x[static_cast<size_t>(i)] * x[static_cast<size_t>(i)];
    ny += y[static_cast<size_t>(i)] * y[static_cast<size_t>(i)];
  }
  EXPECT_NEAR(nx, ny, 1e-4 * nx);
  HadamardTransform(y.data(), n, s);
  for (int64_t i = 0; i < n; ++i)
    EXPECT_NEAR(y[static_cast<size_t>(i)], x[static_cast<size_t>(i)], 1e-5);
}

TEST(HadamardTest, IntegerInputsWithUnitScaleAreExact) {
  std::vector<float> x = {1, 2, 3, 4};
  HadamardTransform(x.data(), 4, 1.0f);
  EXPECT_EQ(x, (std::vector<float>{10, -2, -4, 0}));
}

}  // namespace
}  // namespace nw::cpu
