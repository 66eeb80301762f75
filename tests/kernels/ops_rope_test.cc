// RoPE / YaRN tables and the interleaved rotation, against direct formulas in double.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <numbers>
#include <vector>

#include "kernels/cpu/rope.h"

namespace nw::cpu {
namespace {

// Inverse frequency of pair j, straight from the YaRN definition, in double.
double DirectFreq(const RopeParams& p, int j) {
  const double f = 1.0 / std::pow(p.base, 2.0 * j / p.rope_dim);
  if (p.original_seq_len <= 0) return f;
  auto cd = [&](double rot) {
    return p.rope_dim * std::log(p.original_seq_len / (rot * 2 * std::numbers::pi)) /
           (2 * std::log(p.base));
  };
  const double low = std::max(std::floor(cd(p.beta_fast)), 0.0);
  double high = std::min(std::ceil(cd(p.beta_slow)), p.rope_dim - 1.0);
  if (low == high) high += 0.001;
  const double ramp = std::clamp((j - low) / (high - low), 0.0, 1.0);
  return f / p.factor * ramp + f * (1.0 - ramp);
}

RopeParams V4Compressed() {
  RopeParams p;
  p.rope_dim = 64;
  p.base = 160000;
  p.original_seq_len = 65536;
  p.factor = 16;
  p.beta_fast = 32;
  p.beta_slow = 1;
  return p;
}

RopeParams V4Plain() {
  RopeParams p;
  p.rope_dim = 64;
  p.base = 10000;
  return p;
}

TEST(RopeTest, FrequenciesMatchDirectFormula) {
  for (const RopeParams& p : {V4Plain(), V4Compressed()}) {
    const std::vector<float> f = RopeFrequencies(p);
    ASSERT_EQ(f.size(), 32u);
    for (int j = 0; j < 32; ++j) {
      const double want = DirectFreq(p, j);
      EXPECT_NEAR(f[static_cast<size_t>(j)], want, 2e-6 * want) << "pair " << j;
    }
  }
}

TEST(RopeTest, YarnKeepsHighFrequenciesAndScalesLowOnes) {
  // For V4's table the correction range is [15, 25]: pairs <= 15 keep the base frequency, pairs
  // >= 25 are divided by the factor (16), the ones between are blended.
  const std::vector<float> yarn = RopeFrequencies(V4Compressed());
  RopeParams no_yarn = V4Compressed();
  no_yarn.original_seq_len = 0;
  const std::vector<float> base = RopeFrequencies(no_yarn);
  for (int j = 0; j <= 15; ++j)
    EXPECT_EQ(yarn[static_cast<size_t>(j)], base[static_cast<size_t>(j)]);
  for (int j = 25; j < 32; ++j) {
    EXPECT_NEAR(yarn[static_cast<size_t>(j)], base[static_cast<size_t>(j)] / 16.0f,
                1e-6f * base[static_cast<size_t>(j)]);
  }
  for (int j = 16; j < 25; ++j) {
    EXPECT_LT(yarn[static_cast<size_t>(j)], base[static_cast<size_t>(j)]);
    EXPECT_GT(yarn[static_cast<size_t>(j)], base[static_cast<size_t>(j)] / 16.0f);
  }
}

TEST(RopeTest, EqualCorrectionBoundsGetTheEpsilonSpan) {
  // beta_fast == beta_slow makes low == high (up to floor/ceil) and must not divide by zero.
  RopeParams p = V4Compressed();
  p.beta_fast = 4;
  p.beta_slow = 4;
  const std::vector<float> f = RopeFrequencies(p);
  for (int j = 0; j < 32; ++j) {
    EXPECT_TRUE(std::isfinite(f[static_cast<size_t>(j)]));
    EXPECT_NEAR(f[static_cast<size_t>(j)], DirectFreq(p, j), 2e-6 * DirectFreq(p, j));
  }
}

TEST(RopeTest, TableMatchesDirectAngles) {
  for (const RopeParams& p : {V4Plain(), V4Compressed()}) {
    const RopeTable table(p, 5000);
    ASSERT_EQ(table.pairs(), 32);
    for (int64_t t : {0, 1, 2, 3, 127, 128, 1000, 4095, 4999}) {
      for (int j = 0; j < 32; ++j) {
        const double angle = static_cast<double>(t) * DirectFreq(p, j);
        // The angle is an fp32 product, so allow its rounding (relative 2^-23) plus a little.
        const double tol = 2e-6 + angle * 3e-7;
        EXPECT_NEAR(table.cos(t)[j], std::cos(angle), tol) << "t " << t << " pair " << j;
        EXPECT_NEAR(table.sin(t)[j], std::sin(angle), tol) << "t " << t << " pair " << j;
      }
    }
  }
}

TEST(RopeTest, ApplyRopeIsInterleavedComplexRotation) {
  const RopeTable table(V4Compressed(), 300);
  std::vector<float> x(64);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>((i * 7) % 11) - 5.0f;
  for (int64_t t : {1, 17, 299}) {
    std::vector<float> y = x;
    ApplyRope(y.data(), 32, table.cos(t), table.sin(t), false);
    for (int j = 0; j < 32; ++j) {
      const double c = table.cos(t)[j], s = table.sin(t)[j];
      const double a = x[2 * static_cast<size_t>(j)], b = x[2 * static_cast<size_t>(j) + 1];
      EXPECT_NEAR(y[2 * static_cast<size_t>(j)], a * c - b * s, 1e-5);
      EXPECT_NEAR(y[2 * static_cast<size_t>(j) + 1], a * s + b * c, 1e-5);
    }
    // The inverse rotation (conjugate) undoes it.
    ApplyRope(y.data(), 32, table.cos(t), table.sin(t), true);
    for (size_t i = 0; i < x.size(); ++i) EXPECT_NEAR(y[i], x[i], 1e-5);
  }
}

TEST(RopeTest, PositionZeroIsExactIdentity) {
  const RopeTable table(V4Plain(), 1);
  std::vector<float> x = {1.5f, -2.25f, 3.0f, 0.125f};
  std::vector<float> y = x;
  ApplyRope(y.data(), 2, table.cos(0), table.sin(0), false);
  EXPECT_EQ(x, y);
}

TEST(RopeTest, RotationPreservesRelativePosition) {
  // <R(t) q, R(s) k> depends only on t - s.
  const RopeTable table(V4Compressed(), 600);
  std::vector<float> q(64), k(64);
  for (size_t i = 0; i < 64; ++i) {
    q[i] = static_cast<float>(i % 5) - 2.0f;
    k[i] = static_cast<float>((i * 3) % 7) - 3.0f;
  }
  auto score = [&](int64_t t, int64_t s) {
    std::vector<float> a = q, b = k;
    ApplyRope(a.data(), 32, table.cos(t), table.sin(t), false);
    ApplyRope(b.data(), 32, table.cos(s), table.sin(s), false);
    double dot = 0;
    for (size_t i = 0; i < 64; ++i) dot += static_cast<double>(a[i]) * b[i];
    return dot;
  };
  EXPECT_NEAR(score(10, 3), score(507, 500), 1e-3);
  EXPECT_NEAR(score(128, 0), score(256, 128), 1e-3);
}

}  // namespace
}  // namespace nw::cpu
