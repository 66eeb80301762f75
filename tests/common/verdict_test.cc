// Verdicts against a criterion on constructed counts: the exact (Clopper-Pearson) interval at or
// above the threshold is found, below it lost, straddling it undecided; how many answers would
// decide. The expected bounds are computed here independently of Boost: closed forms where they
// exist (k = 0 or k = n) and otherwise bisection on the binomial distribution function.
#include "common/verdict.h"

#include <gtest/gtest.h>

#include <cmath>

namespace nw {
namespace {

// P(X <= k) for X ~ Binomial(n, p), summed term by term in logs.
double BinomCdf(int k, int n, double p) {
  if (k < 0) return 0.0;
  if (k >= n) return 1.0;
  if (p <= 0.0) return 1.0;
  if (p >= 1.0) return 0.0;
  double sum = 0.0;
  for (int i = 0; i <= k; ++i) {
    const double log_term = std::lgamma(n + 1.0) - std::lgamma(i + 1.0) - std::lgamma(n - i + 1.0) +
                            i * std::log(p) + (n - i) * std::log1p(-p);
    sum += std::exp(log_term);
  }
  return sum;
}

// The p in [0, 1] where the decreasing function f crosses `target`, by bisection.
template <typename F>
double Crossing(F f, double target) {
  double a = 0.0, b = 1.0;
  for (int i = 0; i < 200; ++i) {
    const double m = (a + b) / 2;
    if (f(m) > target) {
      a = m;
    } else {
      b = m;
    }
  }
  return (a + b) / 2;
}

// Clopper-Pearson from its definition: lo solves P(X >= k | p) = alpha/2, hi solves
// P(X <= k | p) = alpha/2.
Interval ExactByBisection(int k, int n, double confidence) {
  const double half = (1.0 - confidence) / 2.0;
  Interval out{0.0, 1.0};
  // P(X <= k - 1) falls as p grows; P(X >= k) = alpha/2 is P(X <= k - 1) = 1 - alpha/2.
  if (k > 0) out.lo = Crossing([&](double p) { return BinomCdf(k - 1, n, p); }, 1.0 - half);
  if (k < n) out.hi = Crossing([&](double p) { return BinomCdf(k, n, p); }, half);
  return out;
}

TEST(ClopperPearson, MatchesTheDefinitionAndClosedForms) {
  // Closed forms: 0/n has hi = 1 - (alpha/2)^(1/n); n/n has lo = (alpha/2)^(1/n).
  const Interval zero_one = ClopperPearsonInterval(0, 1, 0.95);
  EXPECT_DOUBLE_EQ(zero_one.lo, 0.0);
  EXPECT_NEAR(zero_one.hi, 0.975, 1e-12);
  const Interval one_one = ClopperPearsonInterval(1, 1, 0.95);
  EXPECT_NEAR(one_one.lo, 0.025, 1e-12);
  EXPECT_DOUBLE_EQ(one_one.hi, 1.0);
  EXPECT_NEAR(ClopperPearsonInterval(0, 2, 0.95).hi, 1.0 - std::sqrt(0.025), 1e-12);  // 0.8419
  EXPECT_NEAR(ClopperPearsonInterval(0, 1, 0.9).hi, 0.95, 1e-12);
  EXPECT_NEAR(ClopperPearsonInterval(0, 3, 0.9).hi, 1.0 - std::cbrt(0.05), 1e-12);    // 0.6316
  EXPECT_NEAR(ClopperPearsonInterval(10, 10, 0.95).lo, std::pow(0.025, 0.1), 1e-12);  // 0.6915
  EXPECT_NEAR(ClopperPearsonInterval(10, 10, 0.9).lo, std::pow(0.05, 0.1), 1e-12);    // 0.7411
  // Everything else against bisection on the binomial distribution function.
  struct Case {
    int k, n;
    double confidence;
  };
  for (const Case c :
       {Case{0, 1, 0.95}, Case{1, 1, 0.9}, Case{0, 2, 0.95}, Case{1, 2, 0.95}, Case{10, 10, 0.95},
        Case{49, 50, 0.95}, Case{49, 50, 0.9}, Case{0, 3, 0.9}, Case{9, 10, 0.95},
        Case{45, 50, 0.99}, Case{3, 200, 0.9833}, Case{199, 200, 0.9833}, Case{7, 8, 0.95}}) {
    SCOPED_TRACE(std::to_string(c.k) + "/" + std::to_string(c.n) + " at " +
                 std::to_string(c.confidence));
    const Interval want = ExactByBisection(c.k, c.n, c.confidence);
    const Interval got = ClopperPearsonInterval(c.k, c.n, c.confidence);
    EXPECT_NEAR(got.lo, want.lo, 1e-9);
    EXPECT_NEAR(got.hi, want.hi, 1e-9);
  }
  // Known published values: 49/50 at 95 % is [0.8935, 0.9995].
  const Interval t = ClopperPearsonInterval(49, 50, 0.95);
  EXPECT_NEAR(t.lo, 0.8935, 5e-5);
  EXPECT_NEAR(t.hi, 0.9995, 5e-5);
  // No answers or no level: no information.
  EXPECT_DOUBLE_EQ(ClopperPearsonInterval(0, 0, 0.95).lo, 0.0);
  EXPECT_DOUBLE_EQ(ClopperPearsonInterval(0, 0, 0.95).hi, 1.0);
  EXPECT_DOUBLE_EQ(ClopperPearsonInterval(3, 4, 1.0).hi, 1.0);
}

TEST(Verdict, TinyCountsAreNotDecidedOnEvidenceThatCannotSupportIt) {
  const Criterion c;  // pass_rate 0.9, confidence 0.95
  // One miss: [0, 0.975] straddles 0.9. (Wilson's [0, 0.79] called this lost.)
  EXPECT_EQ(Decide(0, 1, c), Verdict::kUndecided);
  EXPECT_EQ(Decide(0, 1, 0.9, 0.9), Verdict::kUndecided);  // [0, 0.95]
  // One pass: [0.025, 1].
  EXPECT_EQ(Decide(1, 1, c), Verdict::kUndecided);
  // Two misses: [0, 0.842] lies below 0.9 at 95 %; at 99 % [0, 0.929] does not.
  EXPECT_EQ(Decide(0, 2, c), Verdict::kLost);
  EXPECT_EQ(Decide(0, 2, 0.9, 0.99), Verdict::kUndecided);
  // Three misses at 90 %: [0, 0.632].
  EXPECT_EQ(Decide(0, 3, 0.9, 0.9), Verdict::kLost);
  // 10/10: lower 0.6915 at 95 %, 0.7411 at 90 %: undecided at both.
  EXPECT_EQ(Decide(10, 10, c), Verdict::kUndecided);
  EXPECT_EQ(Decide(10, 10, 0.9, 0.9), Verdict::kUndecided);
  // 49/50: lower 0.8935 at 95 % (undecided); at 90 % the lower bound is 0.9092 (found).
  EXPECT_EQ(Decide(49, 50, c), Verdict::kUndecided);
  EXPECT_GT(ExactByBisection(49, 50, 0.9).lo, 0.9);
  EXPECT_EQ(Decide(49, 50, 0.9, 0.9), Verdict::kFound);
}

TEST(Verdict, ConstructedCounts) {
  const Criterion c;
  // 9/10 passed: the rate is the threshold and the interval (0.555-0.997) straddles it.
  EXPECT_EQ(Decide(9, 10, c), Verdict::kUndecided);
  // All passing: found from 36 answers (0.025^(1/36) = 0.9026; 35/35 is 0.89997).
  EXPECT_LT(std::pow(0.025, 1.0 / 35), 0.9);
  EXPECT_GE(std::pow(0.025, 1.0 / 36), 0.9);
  EXPECT_EQ(Decide(35, 35, c), Verdict::kUndecided);
  EXPECT_EQ(Decide(36, 36, c), Verdict::kFound);
  EXPECT_EQ(Decide(50, 50, c), Verdict::kFound);
  EXPECT_EQ(Decide(0, 20, c), Verdict::kLost);
  // 40/50 (0.8): upper bound 0.8997 < 0.9, lost; 41/50 (upper 0.914) is not.
  EXPECT_LT(ExactByBisection(40, 50, 0.95).hi, 0.9);
  EXPECT_EQ(Decide(40, 50, c), Verdict::kLost);
  EXPECT_GT(ExactByBisection(41, 50, 0.95).hi, 0.9);
  EXPECT_EQ(Decide(41, 50, c), Verdict::kUndecided);
  EXPECT_EQ(Decide(0, 0, c), Verdict::kNoAnswers);
  // A lower threshold and confidence decide sooner.
  EXPECT_EQ(Decide(10, 10, 0.5, 0.95), Verdict::kFound);
  EXPECT_EQ(Decide(9, 10, 0.5, 0.9), Verdict::kFound);
  // Every verdict agrees with the interval computed from the definition, over a sweep.
  for (int n = 1; n <= 40; ++n) {
    for (int k = 0; k <= n; ++k) {
      const Interval e = ExactByBisection(k, n, 0.95);
      const Verdict want = e.lo >= 0.9  ? Verdict::kFound
                           : e.hi < 0.9 ? Verdict::kLost
                                        : Verdict::kUndecided;
      EXPECT_EQ(Decide(k, n, c), want) << k << "/" << n;
    }
  }
}

TEST(Verdict, TrialsToDecide) {
  const Criterion c;
  // 10/10 at rate 1: 0.025^(1/n) >= 0.9 needs n >= ln 0.025 / ln 0.9 = 35.01, so 36 in all.
  EXPECT_EQ(TrialsToDecide(10, 10, c.pass_rate, c.confidence), 36);
  // At the length level of 5 lengths (99 %): ln 0.005 / ln 0.9 = 50.3, so 51.
  EXPECT_EQ(TrialsToDecide(10, 10, c.pass_rate, 0.99), 51);
  // The observed rate is the threshold: no number of answers at that rate decides it.
  EXPECT_FALSE(TrialsToDecide(9, 10, c.pass_rate, c.confidence).has_value());
  // Already decided: the answers it has.
  EXPECT_EQ(TrialsToDecide(0, 20, c.pass_rate, c.confidence), 20);
  // One miss: two in all decide it lost (0/2 is [0, 0.842]).
  EXPECT_EQ(TrialsToDecide(0, 1, c.pass_rate, c.confidence), 2);
  // 49/50 (0.98): the first n whose interval with 0.98 n passes (fractional) clears 0.9; at
  // n = 100 (98/100, whole) Decide agrees with the interval.
  const auto n = TrialsToDecide(49, 50, c.pass_rate, c.confidence);
  ASSERT_TRUE(n.has_value());
  EXPECT_GT(*n, 50);
  EXPECT_LT(*n, 200);
  const auto at = [](int64_t t) {
    return ClopperPearsonInterval(0.98 * static_cast<double>(t), static_cast<double>(t), 0.95).lo;
  };
  EXPECT_GE(at(*n), 0.9);
  EXPECT_LT(at(*n - 1), 0.9);
  EXPECT_EQ(Decide(98, 100, c) == Verdict::kFound, *n <= 100);
  // 8/10 (0.8, below): the upper bound falls below 0.9; Decide agrees at the whole count there
  // and not at the whole counts 10 answers before.
  const auto m = TrialsToDecide(8, 10, c.pass_rate, c.confidence);
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(Decide(*m * 8 / 10, *m, c), Verdict::kLost);
  EXPECT_NE(Decide((*m - 10) * 8 / 10, *m - 10, c), Verdict::kLost);
}

TEST(Verdict, LevelsAndValidation) {
  EXPECT_NEAR(TwoSidedZFor(0.95), 1.959964, 1e-6);
  EXPECT_NEAR(TwoSidedZFor(0.99), 2.575829, 1e-6);
  EXPECT_DOUBLE_EQ(BonferroniConfidence(0.95, 1), 0.95);
  EXPECT_DOUBLE_EQ(BonferroniConfidence(0.95, 5), 0.99);
  EXPECT_TRUE(Criterion{}.Validate().ok());
  EXPECT_FALSE((Criterion{1.0, 0.95}).Validate().ok());
  EXPECT_FALSE((Criterion{0.9, 0.4}).Validate().ok());
  EXPECT_EQ(Criterion{}.ToString(), "pass rate >= 0.9 at 95% confidence");
  EXPECT_EQ(VerdictName(Verdict::kUndecided), "undecided");
}

}  // namespace
}  // namespace nw
