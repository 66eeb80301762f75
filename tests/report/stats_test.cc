// Wilson score intervals against hand-computed values, and the number formats of the reports.
#include "report/stats.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

namespace nw::report {
namespace {

// Hand values: p = k/n, z = 1.959964, center = (p + z^2/2n) / (1 + z^2/n),
// half = z sqrt(p(1-p)/n + z^2/4n^2) / (1 + z^2/n). E.g. 10/10: z^2/n = 0.384146, so the lower
// bound is 1 / 1.384146 = 0.722467.
struct WilsonCase {
  int64_t k, n;
  double lo, hi;
};

TEST(Wilson, MatchesHandComputedTwoSided95) {
  const std::vector<WilsonCase> cases = {
      {10, 10, 0.722467, 1.0},      {0, 10, 0.0, 0.277533},       {5, 10, 0.236593, 0.763407},
      {12, 40, 0.180748, 0.454300}, {1, 4, 0.045587, 0.699358},   {3, 4, 0.300642, 0.954413},
      {1, 1, 0.206549, 1.0},        {95, 100, 0.888250, 0.978456}};
  for (const auto& c : cases) {
    const Interval ci = WilsonInterval(c.k, c.n);
    EXPECT_NEAR(ci.lo, c.lo, 1e-6) << c.k << "/" << c.n;
    EXPECT_NEAR(ci.hi, c.hi, 1e-6) << c.k << "/" << c.n;
  }
  // The brief's anchor: all-pass n=10, two-sided 95% -> 0.7225.
  EXPECT_EQ(FormatFraction(WilsonInterval(10, 10).lo), "0.72");
  EXPECT_NEAR(WilsonInterval(10, 10).lo, 0.7225, 5e-5);
  // The example line of the report: 12/40 -> "0.18-0.45".
  EXPECT_EQ(FormatFraction(WilsonInterval(12, 40).lo), "0.18");
  EXPECT_EQ(FormatFraction(WilsonInterval(12, 40).hi), "0.45");
}

TEST(Wilson, EdgesAndSymmetry) {
  const Interval none = WilsonInterval(0, 0);
  EXPECT_EQ(none.lo, 0.0);
  EXPECT_EQ(none.hi, 1.0);
  EXPECT_EQ(WilsonInterval(7, 7).hi, 1.0);
  EXPECT_EQ(WilsonInterval(0, 7).lo, 0.0);
  for (int64_t n : {1, 2, 9, 40, 1000}) {
    for (int64_t k = 0; k <= n; k += std::max<int64_t>(1, n / 7)) {
      const Interval a = WilsonInterval(k, n), b = WilsonInterval(n - k, n);
      EXPECT_NEAR(a.lo, 1.0 - b.hi, 1e-12);
      EXPECT_LE(a.lo, static_cast<double>(k) / n);
      EXPECT_GE(a.hi, static_cast<double>(k) / n);
    }
  }
  // A wider z gives a wider interval; more trials a narrower one.
  EXPECT_LT(WilsonInterval(10, 10, 2.5758).lo, WilsonInterval(10, 10).lo);
  EXPECT_GT(WilsonInterval(100, 100).lo, WilsonInterval(10, 10).lo);
}

TEST(Format, Thousands) {
  EXPECT_EQ(FormatThousands(0), "0");
  EXPECT_EQ(FormatThousands(999), "999");
  EXPECT_EQ(FormatThousands(1000), "1,000");
  EXPECT_EQ(FormatThousands(1850), "1,850");
  EXPECT_EQ(FormatThousands(131072), "131,072");
  EXPECT_EQ(FormatThousands(1234567), "1,234,567");
  EXPECT_EQ(FormatThousands(-4509), "-4,509");
  EXPECT_EQ(FormatThousands(INT64_MIN), "-9,223,372,036,854,775,808");
}

TEST(Format, PositionsNumbersPercent) {
  EXPECT_EQ(FormatPosition(0.0), "0%");
  EXPECT_EQ(FormatPosition(0.5), "50%");
  EXPECT_EQ(FormatPosition(1.0), "100%");
  EXPECT_EQ(FormatPosition(1.0 / 3), "33.3%");
  EXPECT_EQ(FormatPosition(0.125), "12.5%");
  EXPECT_EQ(FormatPosition(-512), "end-512");
  EXPECT_EQ(FormatNumber(4.0), "4");
  EXPECT_EQ(FormatNumber(17.5), "17.5");
  EXPECT_EQ(FormatNumber(2.25, 2), "2.25");
  EXPECT_EQ(FormatNumber(-0.01), "0");
  EXPECT_EQ(FormatFraction(0.0), "0.00");
  EXPECT_EQ(FormatFraction(1.0), "1.00");
  EXPECT_EQ(FormatPercent(38, 40), "95%");
  EXPECT_EQ(FormatPercent(0, 0), "-");
}

TEST(Format, NaturalOrder) {
  std::vector<std::string> v = {"topk=64 x", "topk=8 x", "topk=16 x", "topk=16 a",
                                "b",         "a10",      "a9"};
  std::sort(v.begin(), v.end(), NaturalLess);
  EXPECT_EQ(v, (std::vector<std::string>{"a9", "a10", "b", "topk=8 x", "topk=16 a", "topk=16 x",
                                         "topk=64 x"}));
  EXPECT_FALSE(NaturalLess("x", "x"));
}

}  // namespace
}  // namespace nw::report
