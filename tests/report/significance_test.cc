// The gate's statistics against known values: normal quantiles, Wilson one-sided bounds for
// all-pass n = 10/50/100 (the harness-anchors §4 table), exact McNemar p-values computed by hand
// from binomial coefficients, Newcombe's published worked examples, and Holm's adjustment.
#include "report/significance.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace nw::report {
namespace {

TEST(Normal, QuantilesAndCdf) {
  EXPECT_NEAR(NormalQuantile(0.975), 1.959963984540054, 1e-12);
  EXPECT_NEAR(NormalQuantile(0.95), 1.644853626951472, 1e-12);
  EXPECT_NEAR(NormalQuantile(0.5), 0.0, 1e-15);
  EXPECT_NEAR(NormalQuantile(0.01), -2.326347874040841, 1e-12);  // the tail branch
  EXPECT_NEAR(NormalQuantile(0.999), 3.090232306167814, 1e-11);
  EXPECT_NEAR(OneSidedZ(0.05), 1.644853626951472, 1e-12);
  EXPECT_NEAR(OneSidedZ(0.025), kZ95, 1e-12);
  for (double p : {1e-9, 0.001, 0.02, 0.3, 0.5, 0.77, 0.98, 0.999999}) {
    EXPECT_NEAR(NormalCdf(NormalQuantile(p)), p, 1e-13 + 1e-12 * p) << p;
  }
  EXPECT_TRUE(std::isinf(NormalQuantile(0.0)));
  EXPECT_TRUE(std::isinf(NormalQuantile(1.0)));
}

// All n trials passed: the Wilson lower bound is n / (n + z^2).
TEST(Wilson, AllPassLowerBoundsOneSidedAndTwoSided) {
  // One-sided 95% (z = 1.644854), the numbers harness-anchors §4 quotes via vLLM's gate formula.
  EXPECT_NEAR(WilsonLowerOneSided(5, 5, 0.05), 0.649, 5e-4);
  EXPECT_NEAR(WilsonLowerOneSided(10, 10, 0.05), 0.787, 5e-4);
  EXPECT_NEAR(WilsonLowerOneSided(20, 20, 0.05), 0.881, 5e-4);
  EXPECT_NEAR(WilsonLowerOneSided(50, 50, 0.05), 0.949, 5e-4);
  EXPECT_NEAR(WilsonLowerOneSided(100, 100, 0.05), 0.974, 5e-4);
  EXPECT_NEAR(WilsonLowerOneSided(500, 500, 0.05), 0.995, 5e-4);
  EXPECT_NEAR(WilsonLowerOneSided(10, 10, 0.05),
              10.0 / (10.0 + 1.644853626951472 * 1.644853626951472), 1e-12);
  // Two-sided 95% (z = 1.959964): 10/10 -> 0.7225, 50/50 -> 0.9287, 100/100 -> 0.9630.
  EXPECT_NEAR(WilsonInterval(10, 10).lo, 0.7225, 5e-5);
  EXPECT_NEAR(WilsonInterval(50, 50).lo, 0.9287, 5e-5);
  EXPECT_NEAR(WilsonInterval(100, 100).lo, 0.9630, 5e-5);
  // The upper one-sided bound mirrors the lower one.
  EXPECT_NEAR(WilsonUpperOneSided(0, 10, 0.05), 1.0 - 0.787058, 1e-6);
  EXPECT_EQ(WilsonUpperOneSided(10, 10, 0.05), 1.0);
}

TEST(Binomial, UpperTail) {
  EXPECT_DOUBLE_EQ(BinomialUpperTail(0, 10, 0.5), 1.0);
  EXPECT_DOUBLE_EQ(BinomialUpperTail(11, 10, 0.5), 0.0);
  EXPECT_NEAR(BinomialUpperTail(10, 10, 0.5), 1.0 / 1024, 1e-15);
  EXPECT_NEAR(BinomialUpperTail(8, 10, 0.5), (45.0 + 10 + 1) / 1024, 1e-15);
  // P(X >= 2), X ~ Bin(3, 0.2) = 3 * 0.04 * 0.8 + 0.008 = 0.104.
  EXPECT_NEAR(BinomialUpperTail(2, 3, 0.2), 0.104, 1e-14);
  // Large n stays finite and sums to the complement: P(X >= 501) for Bin(1000, 1/2).
  const double t = BinomialUpperTail(501, 1000, 0.5);
  // Symmetry around 500: P(X >= 500) = P(X <= 500) = 1 - P(X >= 501).
  EXPECT_NEAR(t + BinomialUpperTail(500, 1000, 0.5), 1.0, 1e-12);
  EXPECT_GT(t, 0.47);
  EXPECT_LT(t, 0.5);
}

// Exact McNemar p-values by hand: P(X >= b), X ~ Bin(b + c, 1/2).
TEST(McNemar, ExactPValuesByHand) {
  EXPECT_NEAR(McNemarExactOneSided(5, 0), 1.0 / 32, 1e-14);      // 0.03125
  EXPECT_NEAR(McNemarExactOneSided(7, 1), 9.0 / 256, 1e-14);     // (C(8,7)+C(8,8))/2^8
  EXPECT_NEAR(McNemarExactOneSided(6, 2), 37.0 / 256, 1e-14);    // (28+8+1)/256
  EXPECT_NEAR(McNemarExactOneSided(3, 3), 42.0 / 64, 1e-14);     // (20+15+6+1)/64
  EXPECT_NEAR(McNemarExactOneSided(10, 2), 79.0 / 4096, 1e-14);  // (66+12+1)/4096
  EXPECT_NEAR(McNemarExactOneSided(0, 4), 1.0, 1e-14);           // only improvements
  EXPECT_NEAR(McNemarExactOneSided(1, 0), 0.5, 1e-14);
  EXPECT_NEAR(McNemarExactOneSided(0, 0), 1.0, 1e-14);  // no discordant pairs
  EXPECT_NEAR(McNemarExactTwoSided(5, 0), 2.0 / 32, 1e-14);
  EXPECT_NEAR(McNemarExactTwoSided(10, 2), 2 * 79.0 / 4096, 1e-14);
  EXPECT_NEAR(McNemarExactTwoSided(0, 4), 2.0 / 16, 1e-14);
  EXPECT_NEAR(McNemarExactTwoSided(3, 3), 1.0, 1e-14);
  // Five lost passes and nothing else is the smallest all-one-way count significant at 0.05.
  EXPECT_GT(McNemarExactOneSided(4, 0), 0.05);
  EXPECT_LT(McNemarExactOneSided(5, 0), 0.05);
}

// Newcombe (1998), Statistics in Medicine 17:873-890, Table II, method 10 (hybrid score).
TEST(Newcombe, PublishedExamples) {
  struct Case {
    int64_t k1, n1, k2, n2;
    double lo, hi;
  };
  const std::vector<Case> cases = {{56, 70, 48, 80, 0.0524, 0.3339},
                                   {9, 10, 3, 10, 0.1705, 0.8090},
                                   {6, 7, 2, 7, 0.0582, 0.8062},
                                   {5, 56, 0, 29, -0.0381, 0.1926}};
  for (const Case& c : cases) {
    const Interval d = NewcombeDifference(c.k1, c.n1, c.k2, c.n2, kZ95);
    EXPECT_NEAR(d.lo, c.lo, 6e-4) << c.k1 << "/" << c.n1 << " - " << c.k2 << "/" << c.n2;
    EXPECT_NEAR(d.hi, c.hi, 6e-4) << c.k1 << "/" << c.n1 << " - " << c.k2 << "/" << c.n2;
  }
}

TEST(Newcombe, OneSidedPValueInvertsTheInterval) {
  // At the p-value, the one-sided lower bound of the difference is exactly 0.
  const double p = NewcombeOneSidedP(56, 70, 48, 80);
  EXPECT_GT(p, 0.0);
  EXPECT_LT(p, 0.025);  // the two-sided 95% interval above excludes 0
  EXPECT_NEAR(NewcombeDifference(56, 70, 48, 80, OneSidedZ(p)).lo, 0.0, 1e-9);
  // Equal rates: 0.5; a reversed difference: the complement.
  EXPECT_DOUBLE_EQ(NewcombeOneSidedP(5, 10, 10, 20), 0.5);
  EXPECT_NEAR(NewcombeOneSidedP(48, 80, 56, 70), 1.0 - p, 1e-12);
  // 10/10 vs 5/10 is a clear drop; 10/10 vs 9/10 is not.
  EXPECT_LT(NewcombeOneSidedP(10, 10, 5, 10), 0.05);
  EXPECT_GT(NewcombeOneSidedP(10, 10, 9, 10), 0.05);
  EXPECT_DOUBLE_EQ(NewcombeOneSidedP(3, 0, 1, 4), 1.0);  // no trials on one side
}

TEST(Holm, StepDownAdjustment) {
  // m = 4: sorted 0.01, 0.02, 0.03, 0.5 -> 0.04, 0.06, 0.06 (monotone), 0.5; input order kept.
  const std::vector<double> adj = HolmAdjust({0.03, 0.01, 0.5, 0.02});
  ASSERT_EQ(adj.size(), 4u);
  EXPECT_DOUBLE_EQ(adj[1], 0.04);
  EXPECT_DOUBLE_EQ(adj[3], 0.06);
  EXPECT_DOUBLE_EQ(adj[0], 0.06);
  EXPECT_DOUBLE_EQ(adj[2], 0.5);
  EXPECT_DOUBLE_EQ(HolmAdjust({0.4, 0.4})[0], 0.8);
  EXPECT_DOUBLE_EQ(HolmAdjust({0.9, 0.8})[0], 1.0);  // capped at 1
  EXPECT_TRUE(HolmAdjust({}).empty());
}

}  // namespace
}  // namespace nw::report
