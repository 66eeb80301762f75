// LineSearch (coordinator/search/boundary_search.h) against constructed pass/fail oracles.
#include "coordinator/search/boundary_search.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <random>
#include <vector>

namespace nw::search {
namespace {

using Oracle = std::function<TrialOutcome(size_t length_index, int trial)>;

struct Outcome {
  LineVerdict verdict;
  std::vector<Probe> probes;  // every probe, in the order issued
};

// Runs the search to the end against the oracle; `reverse` observes each batch backwards.
Outcome Drive(size_t lengths, const LineSearchOptions& o, const Oracle& oracle,
              bool reverse = false) {
  auto s = LineSearch::Create(lengths, o);
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  Outcome out;
  for (int round = 0; round < 10'000; ++round) {
    std::vector<Probe> batch = s->Next();
    if (batch.empty()) break;
    out.probes.insert(out.probes.end(), batch.begin(), batch.end());
    if (reverse) std::reverse(batch.begin(), batch.end());
    for (const Probe& p : batch) {
      EXPECT_TRUE(s->Observe(p.length_index, p.trial, oracle(p.length_index, p.trial)).ok());
    }
  }
  EXPECT_TRUE(s->finished());
  EXPECT_EQ(s->pending(), 0);
  out.verdict = s->Verdict();
  return out;
}

Oracle PassUpTo(int last_passing) {
  return [last_passing](size_t i, int) {
    return static_cast<int>(i) <= last_passing ? TrialOutcome::kPass : TrialOutcome::kMiss;
  };
}

// pass_rate 0.5 by default here: at 95 % both verdicts then need 6 answers (the exact lower bound
// of k/k is 0.025^(1/k) >= 0.5 and the upper bound of 0/k is 1 - 0.025^(1/k) < 0.5 for
// k >= ln 0.025 / ln 0.5 = 5.32), so small pools decide.
LineSearchOptions Opts(int first, int max, double pass_rate = 0.5) {
  LineSearchOptions o;
  o.first_trials = first;
  o.max_trials = max;
  o.pass_rate = pass_rate;
  return o;
}

TEST(BoundarySearchTest, MonotoneBoundaryIsFoundAtEveryPlace) {
  for (size_t n : {1u, 2u, 5u, 6u, 16u}) {
    for (int b = -1; b < static_cast<int>(n); ++b) {  // b: the longest passing index
      const Outcome r = Drive(n, Opts(1, 10), PassUpTo(b));
      SCOPED_TRACE("n=" + std::to_string(n) + " b=" + std::to_string(b));
      if (b == static_cast<int>(n) - 1) {
        EXPECT_EQ(r.verdict.state, LineState::kAllPass);
        EXPECT_EQ(r.verdict.pass_index, n - 1);
        EXPECT_FALSE(r.verdict.fail_index.has_value());
      } else if (b == -1) {
        EXPECT_EQ(r.verdict.state, LineState::kAllFail);
        EXPECT_EQ(r.verdict.fail_index, 0u);
        EXPECT_FALSE(r.verdict.pass_index.has_value());
      } else {
        EXPECT_EQ(r.verdict.state, LineState::kConverged);
        EXPECT_EQ(r.verdict.pass_index, static_cast<size_t>(b));
        EXPECT_EQ(r.verdict.fail_index, static_cast<size_t>(b + 1));
      }
      // Fewer jobs than the grid (lengths x 10 trials), and every probe a real grid trial.
      EXPECT_LT(r.verdict.jobs, static_cast<int64_t>(n) * 10);
      EXPECT_EQ(r.verdict.jobs, static_cast<int64_t>(r.probes.size()));
      for (const Probe& p : r.probes) {
        EXPECT_LT(p.length_index, n);
        EXPECT_LT(p.trial, 10);
      }
    }
  }
}

TEST(BoundarySearchTest, ExactJobCountForACleanBoundary) {
  // 6 lengths, passing up to index 2. Bisection: 2 (pass), 4 (fail), 3 (fail) = 3 jobs. Then one
  // more trial on each side per round until both are decided at pass rate 0.5 and 95 %: 6/6 is
  // found and 0/6 lost (5/5 and 0/5 are not: 0.025^(1/5) = 0.478): 5 rounds of 2 = 10 jobs.
  // Total 13, against 60 for the grid.
  const Outcome r = Drive(6, Opts(1, 10), PassUpTo(2));
  EXPECT_EQ(r.verdict.state, LineState::kConverged);
  EXPECT_EQ(r.verdict.jobs, 13);
  ASSERT_GE(r.probes.size(), 3u);
  EXPECT_EQ(r.probes[0], (Probe{2, 0}));
  EXPECT_EQ(r.probes[1], (Probe{4, 0}));
  EXPECT_EQ(r.probes[2], (Probe{3, 0}));
  // Trials run in order at each length: 0, 1, 2, 3.
  std::vector<int> at2;
  for (const Probe& p : r.probes) {
    if (p.length_index == 2) at2.push_back(p.trial);
  }
  EXPECT_EQ(at2, (std::vector<int>{0, 1, 2, 3, 4, 5}));
}

TEST(BoundarySearchTest, PoolTooSmallToDecideEndsUndecided) {
  // 3 trials each side: 3/3 is [0.29, 1] and 0/3 [0, 0.71] (exact, 95 %): both straddle 0.5.
  const Outcome r = Drive(6, Opts(1, 3), PassUpTo(2));
  EXPECT_EQ(r.verdict.state, LineState::kUndecided);
  EXPECT_EQ(r.verdict.pass_verdict, nw::Verdict::kUndecided);
  EXPECT_EQ(r.verdict.fail_verdict, nw::Verdict::kUndecided);
  EXPECT_EQ(r.verdict.pass_index, 2u);
  EXPECT_EQ(r.verdict.fail_index, 3u);
  EXPECT_EQ(r.verdict.jobs, 3 + 4);
  // A lower confidence decides them: at 70 % 3/3 is [0.15^(1/3) = 0.53, 1] and 0/3 [0, 0.47]
  // (at 80 % not yet: 0.1^(1/3) = 0.46).
  LineSearchOptions o = Opts(1, 3);
  o.confidence = 0.8;
  EXPECT_EQ(Drive(6, o, PassUpTo(2)).verdict.state, LineState::kUndecided);
  o.confidence = 0.7;
  EXPECT_EQ(Drive(6, o, PassUpTo(2)).verdict.state, LineState::kConverged);
  // At the default criterion (pass rate 0.9) a 10-trial pool cannot show found (10/10 has lower
  // bound 0.69): the line ends undecided with the failing side decided lost. The old search
  // called this "converged" once 4/4 and 0/4 intervals separated, which overstated the found
  // side.
  const Outcome strict = Drive(6, Opts(1, 10, 0.9), PassUpTo(2));
  EXPECT_EQ(strict.verdict.state, LineState::kUndecided);
  EXPECT_EQ(strict.verdict.pass_verdict, nw::Verdict::kUndecided);
  EXPECT_EQ(strict.verdict.fail_verdict, nw::Verdict::kLost);
  EXPECT_EQ(strict.verdict.pass_index, 2u);
  EXPECT_EQ(strict.verdict.fail_index, 3u);
}

TEST(BoundarySearchTest, AllPassAndAllFailCostTheBisectionAndOneDecision) {
  // ceil(log2(n + 1)) probes of first_trials each, then the end length is taken to a decided
  // verdict (6 answers at pass rate 0.5): 4 more trials there.
  const Outcome pass = Drive(16, Opts(2, 10), PassUpTo(15));
  EXPECT_EQ(pass.verdict.state, LineState::kAllPass);
  EXPECT_EQ(pass.verdict.pass_verdict, nw::Verdict::kFound);
  EXPECT_EQ(pass.verdict.jobs, 2 * 5 + 4);
  const Outcome fail = Drive(16, Opts(2, 10), PassUpTo(-1));
  EXPECT_EQ(fail.verdict.state, LineState::kAllFail);
  EXPECT_EQ(fail.verdict.fail_verdict, nw::Verdict::kLost);
  EXPECT_EQ(fail.verdict.jobs, 2 * 4 + 4);  // indexes 7, 3, 1, 0, then 0 four times more
}

TEST(BoundarySearchTest, NonMonotoneEndsAtARealTransition) {
  // Passes at 0, 1, 4, 5; fails at 2, 3 (works again at longer lengths).
  auto oracle = [](size_t i, int) {
    return (i == 2 || i == 3) ? TrialOutcome::kMiss : TrialOutcome::kPass;
  };
  const Outcome r = Drive(6, Opts(1, 10), oracle);
  EXPECT_EQ(r.verdict.state, LineState::kConverged);
  ASSERT_TRUE(r.verdict.pass_index && r.verdict.fail_index);
  EXPECT_EQ(*r.verdict.fail_index, *r.verdict.pass_index + 1);
  EXPECT_EQ(oracle(*r.verdict.pass_index, 0), TrialOutcome::kPass);
  EXPECT_EQ(oracle(*r.verdict.fail_index, 0), TrialOutcome::kMiss);
  EXPECT_EQ(*r.verdict.fail_index, 2u);  // the first loss, as the grid reports it
  // Failing only in the middle, where bisection does not look: it reports all-pass, which is the
  // documented limit (the grid sees it).
  auto hidden = [](size_t i, int) { return i == 1 ? TrialOutcome::kMiss : TrialOutcome::kPass; };
  EXPECT_EQ(Drive(7, Opts(1, 10), hidden).verdict.state, LineState::kAllPass);
}

TEST(BoundarySearchTest, BudgetStopsTheLine) {
  LineSearchOptions o = Opts(2, 10);
  o.budget = 3;
  const Outcome r = Drive(16, o, PassUpTo(6));
  EXPECT_EQ(r.verdict.state, LineState::kBudget);
  EXPECT_EQ(r.verdict.jobs, 3);
  // A budget that suffices changes nothing.
  o.budget = 1000;
  const Outcome big = Drive(16, o, PassUpTo(6));
  EXPECT_EQ(big.verdict.state, LineState::kConverged);
  EXPECT_LT(big.verdict.jobs, 1000);
}

TEST(BoundarySearchTest, NoisyNearTheBoundary) {
  // Lengths 0..3 pass, 5.. fail, 4 passes each trial with probability 0.5 (fixed per trial).
  // Criterion: pass rate 0.75 at 95 %. Length 3 is found after 13 passes (0.025^(1/13) >= 0.75);
  // length 4's true rate 0.5 is below 0.75, so "lost from 4" is the right answer; a 20-trial pool
  // decides it (upper bound below 0.75) unless its trials come out unusually well.
  int converged = 0, right = 0, wrong_converged = 0;
  const int kPool = 20;
  for (uint32_t seed = 1; seed <= 200; ++seed) {
    std::mt19937 rng(seed);
    std::vector<bool> noisy(kPool);
    for (int t = 0; t < kPool; ++t) noisy[t] = (rng() & 1) != 0;
    auto oracle = [&noisy](size_t i, int t) {
      if (i < 4) return TrialOutcome::kPass;
      if (i > 4) return TrialOutcome::kMiss;
      return noisy[static_cast<size_t>(t)] ? TrialOutcome::kPass : TrialOutcome::kMiss;
    };
    const Outcome r = Drive(8, Opts(1, kPool, 0.75), oracle);
    ASSERT_TRUE(r.verdict.pass_index && r.verdict.fail_index) << seed;
    EXPECT_EQ(*r.verdict.fail_index, *r.verdict.pass_index + 1);
    EXPECT_TRUE(*r.verdict.fail_index == 4 || *r.verdict.fail_index == 5) << seed;
    if (r.verdict.state == LineState::kConverged) {
      ++converged;
      // Converged means both sides decided: found below, lost above.
      EXPECT_EQ(r.verdict.pass_verdict, nw::Verdict::kFound);
      EXPECT_EQ(r.verdict.fail_verdict, nw::Verdict::kLost);
      if (*r.verdict.fail_index == 4) {
        ++right;
      } else {
        ++wrong_converged;  // length 4 decided FOUND at 0.75 though its true rate is 0.5
      }
    } else {
      EXPECT_EQ(r.verdict.state, LineState::kUndecided) << seed;
    }
    EXPECT_LE(r.verdict.jobs, 8 * kPool);
  }
  // Measured on these 200 seeds: 133 converge, all of them right (the exact interval decides
  // later than Wilson's did, which converged 150+); a decided verdict is wrong only when the
  // 95 % interval misses.
  EXPECT_GE(right, 125) << converged;
  EXPECT_LE(wrong_converged, 5);
}

TEST(BoundarySearchTest, DecisionsDoNotDependOnTheOrderOfOutcomes) {
  auto oracle = [](size_t i, int t) {
    if (i < 5) return TrialOutcome::kPass;
    if (i == 5) return t % 3 == 2 ? TrialOutcome::kMiss : TrialOutcome::kPass;
    return TrialOutcome::kMiss;
  };
  const Outcome a = Drive(12, Opts(3, 12, 0.9), oracle, /*reverse=*/false);
  const Outcome b = Drive(12, Opts(3, 12, 0.9), oracle, /*reverse=*/true);
  EXPECT_EQ(a.probes, b.probes);
  EXPECT_EQ(a.verdict.fail_index, b.verdict.fail_index);
  EXPECT_EQ(a.verdict.fail_index, 5u);
}

TEST(BoundarySearchTest, NoAnswersAreNotMisses) {
  // Length 2 answers nothing on its first two trials (engine errors), then passes.
  auto oracle = [](size_t i, int t) {
    if (i == 2 && t < 2) return TrialOutcome::kNoAnswer;
    return i <= 3 ? TrialOutcome::kPass : TrialOutcome::kMiss;
  };
  const Outcome r = Drive(6, Opts(1, 10), oracle);
  EXPECT_EQ(r.verdict.state, LineState::kConverged);
  EXPECT_EQ(r.verdict.pass_index, 3u);
  // A length whose whole pool gives no answer stops the line.
  auto dead = [](size_t i, int) { return i == 2 ? TrialOutcome::kNoAnswer : TrialOutcome::kPass; };
  EXPECT_EQ(Drive(6, Opts(1, 3), dead).verdict.state, LineState::kNoAnswers);
}

TEST(BoundarySearchTest, RejectsBadInput) {
  EXPECT_FALSE(LineSearch::Create(0, Opts(1, 1)).ok());
  EXPECT_FALSE(LineSearch::Create(3, Opts(0, 1)).ok());
  EXPECT_FALSE(LineSearch::Create(3, Opts(3, 2)).ok());
  LineSearchOptions o = Opts(1, 2);
  o.budget = 0;
  EXPECT_FALSE(LineSearch::Create(3, o).ok());
  auto s = LineSearch::Create(3, Opts(1, 2));
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->Observe(1, 0, TrialOutcome::kPass).code(), StatusCode::kInvalidArgument);
  const std::vector<Probe> first = s->Next();
  ASSERT_EQ(first.size(), 1u);
  EXPECT_TRUE(s->Next().empty());  // waits for the pending trial
  ASSERT_TRUE(s->Observe(first[0].length_index, 0, TrialOutcome::kPass).ok());
  EXPECT_EQ(s->Observe(first[0].length_index, 0, TrialOutcome::kPass).code(),
            StatusCode::kFailedPrecondition);
}

TEST(BoundarySearchTest, DecidesWithTheExactInterval) {
  // A single miss is not a decided loss at 0.9 / 95 % (0/1 is [0, 0.975]); two misses are
  // (0/2 is [0, 0.842]). The search's verdicts are nw::Decide's.
  LineSearchOptions o = Opts(1, 2, 0.9);
  const Outcome one = Drive(3, Opts(1, 1, 0.9), PassUpTo(-1));
  EXPECT_EQ(one.verdict.state, LineState::kUndecided);
  EXPECT_EQ(one.verdict.fail_verdict, nw::Verdict::kUndecided);
  const Outcome two = Drive(3, o, PassUpTo(-1));
  EXPECT_EQ(two.verdict.state, LineState::kAllFail);
  EXPECT_EQ(two.verdict.fail_verdict, nw::Verdict::kLost);
  o.confidence = 1.0;
  EXPECT_FALSE(LineSearch::Create(3, o).ok());
}

}  // namespace
}  // namespace nw::search
