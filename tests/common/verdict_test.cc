// Verdicts against a criterion on constructed counts: the Wilson interval at or above the
// threshold is found, below it lost, straddling it undecided; how many answers would decide.
#include "common/verdict.h"

#include <gtest/gtest.h>

namespace nw {
namespace {

TEST(Verdict, ConstructedCounts) {
  const Criterion c;  // pass_rate 0.9, confidence 0.95
  // 9/10 passed: the rate is the threshold and the interval (0.60-0.98) straddles it. The old
  // strict boundary called this length "lost"; it is undecided.
  EXPECT_EQ(Decide(9, 10, c), Verdict::kUndecided);
  // 50/50: lower bound 50 / (50 + 1.96^2) = 0.929 >= 0.9.
  EXPECT_EQ(Decide(50, 50, c), Verdict::kFound);
  // 0/20: upper bound 3.84 / 23.84 = 0.161 < 0.9.
  EXPECT_EQ(Decide(0, 20, c), Verdict::kLost);
  // 10/10 is not enough to show >= 0.9 (lower 0.72); 34/34 is not (0.8985), 35/35 is (0.9011).
  EXPECT_EQ(Decide(10, 10, c), Verdict::kUndecided);
  EXPECT_EQ(Decide(34, 34, c), Verdict::kUndecided);
  EXPECT_EQ(Decide(35, 35, c), Verdict::kFound);
  // One miss in 50 (49/50, lower 0.895) is undecided, not lost.
  EXPECT_EQ(Decide(49, 50, c), Verdict::kUndecided);
  // 40/50 (0.8, upper 0.89) is lost.
  EXPECT_EQ(Decide(40, 50, c), Verdict::kLost);
  EXPECT_EQ(Decide(0, 0, c), Verdict::kNoAnswers);
  // A lower threshold and confidence decide sooner.
  EXPECT_EQ(Decide(10, 10, 0.5, 0.95), Verdict::kFound);
  EXPECT_EQ(Decide(9, 10, 0.5, 0.9), Verdict::kFound);
}

TEST(Verdict, TrialsToDecide) {
  const Criterion c;
  // 10/10 at rate 1: n / (n + z^2) >= 0.9 needs n >= 9 z^2 = 34.57, so 35 in all.
  EXPECT_EQ(TrialsToDecide(10, 10, c.pass_rate, c.confidence), 35);
  // The observed rate is the threshold: no number of answers at that rate decides it.
  EXPECT_FALSE(TrialsToDecide(9, 10, c.pass_rate, c.confidence).has_value());
  // Already decided: the answers it has.
  EXPECT_EQ(TrialsToDecide(0, 20, c.pass_rate, c.confidence), 20);
  // 49/50 (0.98): the first n whose interval at 0.98 clears 0.9; check it against Decide on
  // whole counts near it (rounding aside, the same n).
  const auto n = TrialsToDecide(49, 50, c.pass_rate, c.confidence);
  ASSERT_TRUE(n.has_value());
  EXPECT_GT(*n, 50);
  EXPECT_LT(*n, 200);
  // 8/10 (0.8, below): the upper bound falls below 0.9 eventually.
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
