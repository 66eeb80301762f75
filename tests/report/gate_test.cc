// The release gate on constructed baselines and candidates built through the Store: paired
// regressions (exact McNemar p-values checked by hand), improvements that never fail, the
// tolerance, unpaired (Newcombe/Wilson) cells, infrastructure failures that are not misses,
// insufficient data with and without --strict, boundary shifts, ambiguous configuration
// pairing, frozen baselines, the flaky reruns with a scripted Rerunner, and the renderings.
#include "report/gate.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <functional>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "report/significance.h"
#include "tests/db/campaign_fixture.h"

namespace nw::report {
namespace {

using testing_db::MakeResult;
using testing_db::MakeSpec;
using testing_db::TempDir;

constexpr Outcome P = Outcome::kPass;
constexpr Outcome M = Outcome::kMiss;
constexpr Outcome E = Outcome::kEngineError;

std::vector<Outcome> N(int n, Outcome o) { return std::vector<Outcome>(static_cast<size_t>(n), o); }
std::vector<Outcome> Cat(std::vector<Outcome> a, const std::vector<Outcome>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// One side of a gate: a campaign whose jobs are (length, position, trial) design points.
class Side {
 public:
  Side(Store& store, const std::string& name) : store_(store), name_(name) {
    auto id = store_.UpsertCampaign(name, name + ".yaml", "", 1000);
    EXPECT_TRUE(id.ok());
    id_ = id.ok() ? *id : 0;
  }
  // One job per outcome at (len, pos), trials numbered from first_trial.
  Side& Add(int64_t len, double pos, const std::vector<Outcome>& outcomes, int topk = 16,
            int first_trial = 0, const std::string& precision = "fp32", bool probe = false,
            const std::optional<HttpBackendSpec>& http = std::nullopt) {
    int trial = first_trial;
    for (Outcome o : outcomes) {
      JobSpec s = MakeSpec(len, pos, trial++, topk, http ? "http" : "cpu", id_);
      s.http = http;
      s.precision.name = precision;
      s.probe = probe;
      s.fault = fault_;
      specs_.push_back(s);
      JobResult r = MakeResult(s, 1, o);
      // The same design point gets the same prompt hash on both sides.
      r.prompt_hash = "prompt-" + std::to_string(len) + "-" + std::to_string(pos) + "-" +
                      std::to_string(trial - 1);
      results_.push_back(r);
    }
    return *this;
  }
  // The same outcomes at every position of `positions`.
  Side& Row(int64_t len, const std::vector<double>& positions, const std::vector<Outcome>& outcomes,
            int topk = 16, int first_trial = 0) {
    for (double pos : positions) Add(len, pos, outcomes, topk, first_trial);
    return *this;
  }
  Side& Commit() {
    EXPECT_TRUE(store_.AddJobs(id_, specs_, 2000).ok());
    for (const JobSpec& s : specs_)
      EXPECT_TRUE(store_.RecordLease(s.Key(), 1, "w", 9000, 3000).ok());
    Status st = store_.CommitResults(results_, 4000);
    EXPECT_TRUE(st.ok()) << st.ToString();
    return *this;
  }
  std::vector<CampaignSample> Samples() {
    auto s = store_.CampaignSamples(id_, false);
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    return s.ok() ? *s : std::vector<CampaignSample>{};
  }
  int64_t id() const { return id_; }
  // Jobs added from now on replay `fault` (docs/faults.md).
  Side& WithFault(const std::string& fault) {
    fault_ = fault;
    return *this;
  }

 private:
  std::string fault_ = "none";
  Store& store_;
  std::string name_;
  int64_t id_ = 0;
  std::vector<JobSpec> specs_;
  std::vector<JobResult> results_;
};

const std::vector<double> kPositions = {0.0, 0.5};

class GateFixture : public ::testing::Test {
 protected:
  void SetUp() override {
    auto s = Store::Open(dir_.File("nw.db"));
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    store_ = std::move(s).value();
  }

  GateReport Gate(Side& base, Side& cand, GateOptions o = {}) {
    auto r = RunGate(base.Samples(), cand.Samples(), o);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? *r : GateReport{};
  }

  TempDir dir_;
  std::unique_ptr<Store> store_;
};

// Baseline topk=16 finds the needle at 1,000, 2,000 and 4,000 (10 trials x 2 positions each);
// the candidate (topk=8) loses it everywhere at 4,000.
TEST_F(GateFixture, PairedRegressionFailsWithExitOne) {
  Side base(*store_, "base"), cand(*store_, "cand");
  for (int64_t len : {1000, 2000, 4000}) base.Row(len, kPositions, N(10, P));
  cand.Row(1000, kPositions, N(10, P), 8).Row(2000, kPositions, N(10, P), 8);
  cand.Row(4000, kPositions, N(10, M), 8);
  base.Commit();
  cand.Commit();
  // Boundary verdicts at pass rate 0.5: 20/20 per length is decided found there (at 0.9 it is
  // undecided, and the baseline would have no found-up-to to compare with).
  GateOptions o;
  o.criterion = Criterion{0.5, 0.95};
  const GateReport r = Gate(base, cand, o);
  EXPECT_EQ(r.axes_under_test, std::vector<std::string>{"topk"});
  EXPECT_EQ(r.axis_values.at("topk"), std::make_pair(std::string("16"), std::string("8")));
  ASSERT_EQ(r.pairs.size(), 1u);
  EXPECT_NE(r.pairs[0].candidate_config.find("topk=8 "), std::string::npos);
  EXPECT_NE(r.pairs[0].baseline_config.find("topk=16 "), std::string::npos);
  ASSERT_EQ(r.cells.size(), 3u);
  EXPECT_EQ(r.cells[0].length, 1000);
  EXPECT_EQ(r.cells[0].test.verdict, GateVerdict::kPass);
  EXPECT_EQ(r.cells[1].test.verdict, GateVerdict::kPass);
  const auto& t = r.cells[2].test;
  EXPECT_EQ(t.method, GateMethod::kMcNemar);
  EXPECT_EQ(t.pairs, 20);
  EXPECT_EQ(t.same_prompt_pairs, 20);
  EXPECT_EQ(t.lost, 20);
  EXPECT_EQ(t.gained, 0);
  EXPECT_DOUBLE_EQ(t.drop, 1.0);
  EXPECT_DOUBLE_EQ(t.p_regression, 1.0 / (1 << 20));
  // Holm over the 3 tested cells (no boundary shift: 4,000 is not below 4,000): 3 x 2^-20.
  EXPECT_EQ(r.tests, 3);
  EXPECT_DOUBLE_EQ(t.p_adjusted, 3.0 / (1 << 20));
  EXPECT_EQ(t.verdict, GateVerdict::kRegression);
  EXPECT_EQ(r.regressions, 1);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_FALSE(r.shifts[0].shifted);
  EXPECT_EQ(r.shifts[0].baseline_l_pass, 4000);
  EXPECT_EQ(r.shifts[0].candidate_l_fail, 4000);
  EXPECT_EQ(r.shifts[0].test.verdict, GateVerdict::kPass);
}

// McNemar p-values by hand through the whole gate: 7 lost and 1 gained of 10 pairs at one length
// gives P(X >= 7 | Bin(8, 1/2)) = 9/256 = 0.0352 -- significant alone, and alone in the family
// when the other lengths have too few trials.
TEST_F(GateFixture, McNemarHandValuesAndHolm) {
  Side base(*store_, "base"), cand(*store_, "cand");
  base.Add(2000, 0.0, Cat(N(8, P), N(2, M)));  // trials 0-7 pass, 8-9 miss
  cand.Add(2000, 0.0, Cat(Cat(N(7, M), N(1, P)), {P, M}), 8);
  // trial: 0-6 lost (P->M), 7 stays P, 8 gained (M->P), 9 stays M.
  base.Add(1000, 0.0, N(3, P));
  cand.Add(1000, 0.0, N(3, P), 8);
  base.Commit();
  cand.Commit();
  const GateReport r = Gate(base, cand);
  ASSERT_EQ(r.cells.size(), 2u);
  EXPECT_EQ(r.cells[0].length, 1000);
  EXPECT_EQ(r.cells[0].test.verdict, GateVerdict::kInsufficient);
  EXPECT_NE(
      r.cells[0].test.reason.find("too few answers: baseline 3, candidate 3, pairs 3 (min 10)"),
      std::string::npos)
      << r.cells[0].test.reason;
  const auto& t = r.cells[1].test;
  EXPECT_EQ(t.lost, 7);
  EXPECT_EQ(t.gained, 1);
  EXPECT_NEAR(t.p_regression, 9.0 / 256, 1e-15);
  EXPECT_DOUBLE_EQ(t.drop, 0.6);
  // The boundary: baseline lost from 2,000 (two misses), candidate lost from 2,000: no shift.
  EXPECT_FALSE(r.shifts[0].shifted);
  EXPECT_EQ(r.tests, 1);
  EXPECT_NEAR(t.p_adjusted, 9.0 / 256, 1e-15);
  EXPECT_EQ(t.verdict, GateVerdict::kRegression);
  EXPECT_EQ(r.exit_code, 1);
  // A stricter alpha lets it pass.
  GateOptions strict_alpha;
  strict_alpha.alpha = 0.01;
  const GateReport r2 = Gate(base, cand, strict_alpha);
  EXPECT_EQ(r2.cells[1].test.verdict, GateVerdict::kPass);
  EXPECT_EQ(r2.exit_code, 0);
}

TEST_F(GateFixture, ImprovementsNeverFail) {
  Side base(*store_, "base"), cand(*store_, "cand");
  base.Row(1000, kPositions, N(10, P)).Row(4000, kPositions, N(10, M));
  cand.Row(1000, kPositions, N(10, P), 32).Row(4000, kPositions, N(10, P), 32);
  base.Commit();
  cand.Commit();
  const GateReport r = Gate(base, cand);
  ASSERT_EQ(r.cells.size(), 2u);
  EXPECT_EQ(r.cells[1].test.verdict, GateVerdict::kImproved);
  EXPECT_EQ(r.cells[1].test.gained, 20);
  EXPECT_DOUBLE_EQ(r.cells[1].test.drop, -1.0);
  EXPECT_DOUBLE_EQ(r.cells[1].test.p_regression, 1.0);
  EXPECT_EQ(r.improvements, 1);
  EXPECT_EQ(r.regressions, 0);
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_EQ(r.decision, "pass");
}

TEST_F(GateFixture, ToleranceAndNoise) {
  Side base(*store_, "base"), cand(*store_, "cand");
  // One lost pair of 20: not significant.
  base.Row(1000, kPositions, N(10, P));
  cand.Add(1000, 0.0, N(10, P), 8).Add(1000, 0.5, Cat(N(9, P), {M}), 8);
  // 10 lost of 20 (drop 0.5): significant, p = 2^-10.
  base.Row(2000, kPositions, N(10, P));
  cand.Add(2000, 0.0, N(10, P), 8).Add(2000, 0.5, N(10, M), 8);
  base.Commit();
  cand.Commit();
  const GateReport r = Gate(base, cand);
  EXPECT_EQ(r.cells[0].test.verdict, GateVerdict::kPass);
  EXPECT_DOUBLE_EQ(r.cells[0].test.p_regression, 0.5);
  EXPECT_EQ(r.cells[1].test.verdict, GateVerdict::kRegression);
  EXPECT_EQ(r.exit_code, 1);
  GateOptions wide;
  wide.tolerance = 0.6;  // a drop of 0.5 is tolerated even though it is significant
  const GateReport r2 = Gate(base, cand, wide);
  EXPECT_EQ(r2.cells[1].test.verdict, GateVerdict::kPass);
  EXPECT_NE(r2.cells[1].test.reason.find("within tolerance"), std::string::npos);
  EXPECT_EQ(r2.exit_code, 0);
}

// Different trial numbers: nothing pairs, so the Wilson-based (Newcombe) test decides.
TEST_F(GateFixture, UnpairedUsesNewcombe) {
  Side base(*store_, "base"), cand(*store_, "cand");
  base.Add(1000, 0.0, N(12, P));
  cand.Add(1000, 0.0, Cat(N(4, P), N(8, M)), 8, /*first_trial=*/100);
  base.Commit();
  cand.Commit();
  const GateReport r = Gate(base, cand);
  ASSERT_EQ(r.cells.size(), 1u);
  const auto& t = r.cells[0].test;
  EXPECT_EQ(t.pairs, 0);
  EXPECT_EQ(t.method, GateMethod::kNewcombe);
  EXPECT_DOUBLE_EQ(t.p_regression, NewcombeOneSidedP(12, 12, 4, 12));
  EXPECT_LT(t.p_regression, 0.001);
  EXPECT_EQ(t.verdict, GateVerdict::kRegression);
  EXPECT_EQ(r.exit_code, 1);
  // 12/12 vs 11/12 is not evidence of a drop.
  Side cand2(*store_, "cand2");
  cand2.Add(1000, 0.0, Cat(N(11, P), {M}), 8, 100).Commit();
  const GateReport r2 = Gate(base, cand2);
  EXPECT_EQ(r2.cells[0].test.method, GateMethod::kNewcombe);
  EXPECT_EQ(r2.cells[0].test.verdict, GateVerdict::kPass);
  EXPECT_EQ(r2.exit_code, 0);
}

// Two candidate jobs of one design point (with and without probes; probe is not an axis) pair
// with the one baseline job only once; the second counts unpaired.
TEST_F(GateFixture, EachBaselineJobPairsOnce) {
  Side base(*store_, "base"), cand(*store_, "cand");
  base.Add(1000, 0.0, N(10, P));
  cand.Add(1000, 0.0, N(10, M), 8).Add(1000, 0.0, N(10, M), 8, 0, "fp32", /*probe=*/true);
  base.Commit();
  cand.Commit();
  const GateReport r = Gate(base, cand);
  ASSERT_EQ(r.cells.size(), 1u);
  EXPECT_EQ(r.cells[0].test.pairs, 10);
  EXPECT_EQ(r.cells[0].test.lost, 10);
  EXPECT_EQ(r.cells[0].test.candidate.trials, 20);
  EXPECT_EQ(r.exit_code, 1);
}

// Engine errors are not misses: a candidate that crashes is not a retrieval regression, but it
// leaves the cell without evidence.
TEST_F(GateFixture, InfrastructureFailuresAreNotMisses) {
  Side base(*store_, "base"), cand(*store_, "cand");
  base.Row(1000, kPositions, N(10, P)).Row(4000, kPositions, N(10, P));
  cand.Row(1000, kPositions, N(10, P), 8).Row(4000, kPositions, N(10, E), 8);
  base.Commit();
  cand.Commit();
  const GateReport r = Gate(base, cand);
  ASSERT_EQ(r.cells.size(), 2u);
  const auto& t = r.cells[1].test;
  EXPECT_EQ(t.verdict, GateVerdict::kInsufficient);
  EXPECT_EQ(t.candidate.errors, 20);
  EXPECT_EQ(t.candidate.trials, 0);
  EXPECT_EQ(t.lost, 0);
  EXPECT_EQ(r.regressions, 0);
  EXPECT_EQ(r.exit_code, 0);  // 1,000 was tested and passed
  GateOptions strict;
  strict.strict = true;
  EXPECT_EQ(Gate(base, cand, strict).exit_code, 2);
}

TEST_F(GateFixture, NothingTestableIsNotAPass) {
  Side base(*store_, "base"), cand(*store_, "cand");
  base.Row(1000, kPositions, N(2, P));
  cand.Row(1000, kPositions, N(2, M), 8);
  base.Commit();
  cand.Commit();
  const GateReport r = Gate(base, cand);
  EXPECT_EQ(r.tests, 0);
  EXPECT_EQ(r.insufficient, 1);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.decision.find("not enough evidence"), std::string::npos);
  GateOptions few;
  few.min_trials = 4;  // 4 pairs now suffice: 4 lost -> p = 1/16, not significant
  const GateReport r2 = Gate(base, cand, few);
  EXPECT_EQ(r2.tests, 1);
  EXPECT_DOUBLE_EQ(r2.cells[0].test.p_regression, 1.0 / 16);
  EXPECT_EQ(r2.exit_code, 0);
}

// Per-length cells with too few trials each, but the boundary moved down: the shift test compares
// the candidate's answers at its L_fail with the baseline's at the same length.
TEST_F(GateFixture, BoundaryShift) {
  Side base(*store_, "base"), cand(*store_, "cand");
  const std::vector<double> five = {0.0, 0.25, 0.5, 0.75, 1.0};
  for (int64_t len : {1000, 2000, 4000}) base.Row(len, five, N(2, P));
  base.Row(8000, five, N(2, M));
  cand.Row(1000, five, N(2, P), 8).Row(2000, five, N(2, M), 8);
  cand.Row(4000, five, N(2, M), 8).Row(8000, five, N(2, M), 8);
  base.Commit();
  cand.Commit();
  GateOptions o;
  o.by = GateGranularity::kCell;  // 2 trials per cell: every cell is insufficient
  // The shift needs both positions decided. At pass rate 0.9, 10/10 per length is undecided (the
  // old strict boundary called it found); at 0.5 the baseline is found up to 4,000 and the
  // candidate's 0/10 at 2,000 is lost.
  o.criterion = Criterion{0.5, 0.95};
  const GateReport r = Gate(base, cand, o);
  EXPECT_EQ(r.cells.size(), 20u);
  EXPECT_EQ(r.insufficient, 20);
  ASSERT_EQ(r.shifts.size(), 1u);
  const BoundaryShift& s = r.shifts[0];
  EXPECT_TRUE(s.shifted);
  EXPECT_EQ(s.baseline_l_pass, 4000);
  EXPECT_EQ(s.candidate_l_fail, 2000);
  EXPECT_EQ(s.reference_length, 2000);
  EXPECT_EQ(s.test.method, GateMethod::kMcNemar);
  EXPECT_EQ(s.test.lost, 10);
  EXPECT_DOUBLE_EQ(s.test.p_regression, 1.0 / 1024);
  EXPECT_EQ(s.test.verdict, GateVerdict::kRegression);
  EXPECT_EQ(r.tests, 1);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(s.summary.find("candidate lost from 2,000, below the baseline's found-up-to 4,000"),
            std::string::npos);
  // At the default criterion nothing is decided found on the baseline: no shift is claimed.
  o.criterion = Criterion{};
  const GateReport strict = Gate(base, cand, o);
  EXPECT_FALSE(strict.shifts[0].shifted);
  EXPECT_EQ(strict.shifts[0].test.verdict, GateVerdict::kPass);
  EXPECT_FALSE(strict.shifts[0].baseline_l_pass);
  EXPECT_EQ(strict.exit_code, 2);  // nothing testable: not enough evidence
}

// The candidate undecided below the baseline's found-up-to is not a shift: insufficient, with
// the answers that would decide it; never a regression.
TEST_F(GateFixture, UndecidedCandidateIsNotAShift) {
  Side base(*store_, "base"), cand(*store_, "cand");
  for (int64_t len : {1000, 2000, 4000}) base.Row(len, kPositions, N(10, P));
  cand.Row(1000, kPositions, N(10, P), 8);
  cand.Row(2000, kPositions, Cat(N(6, P), N(4, M)), 8);  // 12/20: undecided at 0.5
  cand.Row(4000, kPositions, N(10, P), 8);
  base.Commit();
  cand.Commit();
  GateOptions o;
  o.criterion = Criterion{0.5, 0.95};
  const GateReport r = Gate(base, cand, o);
  const BoundaryShift& s = r.shifts[0];
  EXPECT_FALSE(s.shifted);
  EXPECT_EQ(s.baseline_l_pass, 4000);
  EXPECT_FALSE(s.candidate_l_fail);
  EXPECT_EQ(s.test.verdict, GateVerdict::kInsufficient);
  EXPECT_NE(s.summary.find("the candidate is undecided at 2,000, below the baseline's "
                           "found-up-to 4,000: not a shift until decided"),
            std::string::npos)
      << s.summary;
  // The cell at 2,000 (8 lost pairs of 20) is a regression on its own test; the shift adds none.
  EXPECT_EQ(r.regressions, 1);
  EXPECT_EQ(r.cells[1].test.verdict, GateVerdict::kRegression);
}

TEST_F(GateFixture, PairingConfigurations) {
  // Baseline topk 16 and 32, candidate topk 8: ambiguous.
  Side base(*store_, "base"), cand(*store_, "cand");
  base.Row(1000, kPositions, N(10, P), 16).Row(1000, kPositions, N(10, P), 32);
  cand.Row(1000, kPositions, N(10, P), 8);
  base.Commit();
  cand.Commit();
  auto r = RunGate(base.Samples(), cand.Samples(), GateOptions{});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("matches 2 baseline configurations"), std::string::npos)
      << r.status().message();

  // Baseline {16, 32} against candidate {16, 32} in another precision: paired by topk.
  Side cand2(*store_, "cand2");
  cand2.Add(1000, 0.0, N(10, P), 16, 0, "fp8").Add(1000, 0.5, N(10, P), 16, 0, "fp8");
  cand2.Add(1000, 0.0, N(10, M), 32, 0, "fp8").Add(1000, 0.5, N(10, M), 32, 0, "fp8");
  cand2.Commit();
  auto r2 = RunGate(base.Samples(), cand2.Samples(), GateOptions{});
  ASSERT_TRUE(r2.ok()) << r2.status().ToString();
  EXPECT_EQ(r2->axes_under_test, std::vector<std::string>{"precision"});
  ASSERT_EQ(r2->pairs.size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    const bool is16 = r2->pairs[i].baseline_config.find("topk=16 ") != std::string::npos;
    EXPECT_EQ(is16, r2->pairs[i].candidate_config.find("topk=16 ") != std::string::npos);
    EXPECT_NE(r2->pairs[i].candidate_config.find("precision=fp8"), std::string::npos);
  }
  EXPECT_EQ(r2->regressions, 1);  // topk=32 lost everything in fp8
  EXPECT_EQ(r2->exit_code, 1);

  // An empty side and invalid options are bad input.
  auto empty = RunGate({}, cand.Samples(), GateOptions{});
  EXPECT_EQ(empty.status().code(), StatusCode::kInvalidArgument);
  GateOptions bad;
  bad.alpha = 0;
  EXPECT_EQ(RunGate(base.Samples(), cand.Samples(), bad).status().code(),
            StatusCode::kInvalidArgument);
}

// A fault is an axis like precision: the clean engine against a faulted one pairs by the other
// axes, the fault is the axis under test and is in the candidate's label.
TEST_F(GateFixture, AFaultIsAnAxisUnderTest) {
  Side base(*store_, "base"), cand(*store_, "cand");
  base.Row(1000, kPositions, N(10, P)).Row(2000, kPositions, N(10, P));
  cand.WithFault("partial-block-mod4");
  cand.Row(1000, kPositions, N(10, P)).Row(2000, kPositions, N(10, M));
  base.Commit();
  cand.Commit();
  const GateReport r = Gate(base, cand);
  EXPECT_EQ(r.axes_under_test, std::vector<std::string>{"fault"});
  EXPECT_EQ(r.axis_values.at("fault"),
            std::make_pair(std::string("none"), std::string("partial-block-mod4")));
  ASSERT_EQ(r.pairs.size(), 1u);
  EXPECT_EQ(r.pairs[0].baseline_config.find("fault="), std::string::npos);
  EXPECT_NE(r.pairs[0].candidate_config.find(" fault=partial-block-mod4"), std::string::npos);
  EXPECT_EQ(r.exit_code, 1);
}

// Two http servers are two configurations, named by server and model in the labels and in
// what is under test (issue 14).
TEST_F(GateFixture, HttpServersAreNamedInLabelsAndAxes) {
  auto server = [](const std::string& url) {
    HttpBackendSpec h;
    h.url = url;
    h.model = "tiny";
    h.tokenizer_digest = "abc";
    return h;
  };
  Side base(*store_, "base"), cand(*store_, "cand");
  for (double pos : kPositions) {
    base.Add(1000, pos, N(10, P), 16, 0, "fp32", false, server("http://10.0.0.1:8000"));
    cand.Add(1000, pos, N(10, M), 16, 0, "fp32", false, server("http://10.0.0.2:8000"));
  }
  base.Commit();
  cand.Commit();
  const GateReport r = Gate(base, cand);
  EXPECT_EQ(r.axes_under_test, std::vector<std::string>{"backend"});
  EXPECT_EQ(r.axis_values.at("backend"),
            std::make_pair(std::string("http:tiny@http://10.0.0.1:8000"),
                           std::string("http:tiny@http://10.0.0.2:8000")));
  ASSERT_EQ(r.pairs.size(), 1u);
  EXPECT_NE(r.pairs[0].baseline_config.find("backend=http:tiny@http://10.0.0.1:8000 "),
            std::string::npos);
  EXPECT_NE(r.pairs[0].candidate_config.find("backend=http:tiny@http://10.0.0.2:8000 "),
            std::string::npos);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(
      RenderGateText(r).find("http:tiny@http://10.0.0.1:8000 -> http:tiny@http://10.0.0.2:8000"),
      std::string::npos)
      << RenderGateText(r);
}

// The gate against a frozen baseline: rerunning the baseline campaign afterwards does not move it.
TEST_F(GateFixture, FrozenBaselineDoesNotMove) {
  Side base(*store_, "base"), cand(*store_, "cand");
  base.Row(1000, kPositions, N(10, P));
  cand.Row(1000, kPositions, N(10, M), 8);
  base.Commit();
  cand.Commit();
  ASSERT_TRUE(store_->SetBaseline("release", base.id(), "", 5000).ok());
  // Rerun every baseline job: now they all miss.
  for (const CampaignSample& s : base.Samples()) {
    ASSERT_TRUE(store_->RequeueJobs({s.job.key}, 6000).ok());
    ASSERT_TRUE(store_->RecordLease(s.job.key, 2, "w", 9000, 6000).ok());
    ASSERT_TRUE(store_->CommitResults({MakeResult(s.job.spec, 2, M)}, 6001).ok());
  }
  auto live = RunGate(base.Samples(), cand.Samples(), GateOptions{});
  ASSERT_TRUE(live.ok());
  EXPECT_EQ(live->exit_code, 0);  // both miss everywhere now
  auto frozen = store_->BaselineSamples("release", false);
  ASSERT_TRUE(frozen.ok());
  auto gated = RunGate(*frozen, cand.Samples(), GateOptions{});
  ASSERT_TRUE(gated.ok());
  EXPECT_EQ(gated->exit_code, 1);  // against what the baseline was when it was set
}

// A scripted Rerunner: each call returns, per job, the outcome the script gives for (job, run).
class ScriptedRerunner : public Rerunner {
 public:
  explicit ScriptedRerunner(std::function<Outcome(const JobSpec&, int)> script)
      : script_(std::move(script)) {}
  Result<std::map<std::string, std::pair<int64_t, JobResult>>> RunOnce(
      const std::vector<JobSpec>& jobs) override {
    std::map<std::string, std::pair<int64_t, JobResult>> out;
    for (const JobSpec& s : jobs) {
      out[s.Key()] = {next_id_++, MakeResult(s, 2 + calls_, script_(s, calls_))};
      ++jobs_run_;
    }
    ++calls_;
    return out;
  }
  int calls() const { return calls_; }
  int jobs_run() const { return jobs_run_; }

 private:
  std::function<Outcome(const JobSpec&, int)> script_;
  int calls_ = 0;
  int jobs_run_ = 0;
  int64_t next_id_ = 100000;
};

TEST_F(GateFixture, FlakyRerunsClearAFalseRegression) {
  Side base(*store_, "base"), cand(*store_, "cand");
  base.Row(1000, kPositions, N(10, P)).Row(2000, kPositions, N(10, P));
  cand.Row(1000, kPositions, N(10, P), 8).Row(2000, kPositions, N(10, M), 8);
  base.Commit();
  cand.Commit();
  // Every rerun passes: each rerun job is miss, pass, pass -> flaky, majority pass.
  ScriptedRerunner rerun([](const JobSpec&, int) { return P; });
  auto r = RunGateWithReruns(base.Samples(), cand.Samples(), GateOptions{}, 2, rerun, *store_,
                             "base -> cand", 7000);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(rerun.calls(), 2);
  EXPECT_EQ(rerun.jobs_run(), 40);  // only the 20 lost pairs of the regressed cell, twice
  ASSERT_EQ(r->cells.size(), 2u);
  const auto& t = r->cells[1].test;
  EXPECT_EQ(t.verdict, GateVerdict::kFlaky);
  EXPECT_EQ(t.rerun_jobs.size(), 20u);
  EXPECT_EQ(t.flaky_jobs.size(), 20u);
  EXPECT_EQ(r->flaky, 1);
  EXPECT_EQ(r->regressions, 0);
  EXPECT_EQ(r->exit_code, 0);
  EXPECT_EQ(r->rerun_times, 2);
  // The verdicts are in the database.
  auto v = store_->FlakyVerdicts(t.rerun_jobs[0]);
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  ASSERT_EQ(v->size(), 1u);
  EXPECT_EQ((*v)[0].verdict, "flaky");
  EXPECT_EQ((*v)[0].runs, 3);
  EXPECT_EQ((*v)[0].passes, 2);
  EXPECT_EQ((*v)[0].misses, 1);
  EXPECT_EQ((*v)[0].gate, "base -> cand");
  EXPECT_EQ((*v)[0].result_ids.size(), 3u);
  EXPECT_EQ((*v)[0].decided_ms, 7000);
}

TEST_F(GateFixture, FlakyRerunsKeepARealRegression) {
  Side base(*store_, "base"), cand(*store_, "cand");
  base.Row(1000, kPositions, N(10, P)).Row(2000, kPositions, N(10, P));
  cand.Row(1000, kPositions, N(10, P), 8).Row(2000, kPositions, N(10, M), 8);
  base.Commit();
  cand.Commit();
  // Position 0 passes once in three reruns (flaky, majority miss); position 0.5 never passes.
  ScriptedRerunner rerun(
      [](const JobSpec& s, int run) { return s.needle_position == 0.0 && run == 1 ? P : M; });
  auto r = RunGateWithReruns(base.Samples(), cand.Samples(), GateOptions{}, 3, rerun, *store_,
                             "base -> cand", 7000);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const auto& t = r->cells[1].test;
  EXPECT_EQ(t.verdict, GateVerdict::kRegression);
  EXPECT_EQ(t.flaky_jobs.size(), 10u);
  EXPECT_NE(t.reason.find("still regressed after 3 reruns of 20 jobs (10 flaky)"),
            std::string::npos)
      << t.reason;
  EXPECT_EQ(r->exit_code, 1);
  const std::string stable = t.rerun_jobs.back();
  auto v = store_->FlakyVerdicts(stable);
  ASSERT_TRUE(v.ok());
  ASSERT_EQ(v->size(), 1u);
  EXPECT_EQ((*v)[0].verdict, "stable_miss");
  EXPECT_EQ((*v)[0].runs, 4);
  // No regression, no reruns.
  ScriptedRerunner idle([](const JobSpec&, int) { return P; });
  auto clean = RunGateWithReruns(base.Samples(), base.Samples(), GateOptions{}, 3, idle, *store_,
                                 "base -> base", 7000);
  ASSERT_TRUE(clean.ok());
  EXPECT_EQ(idle.calls(), 0);
  EXPECT_EQ(clean->exit_code, 0);
}

TEST_F(GateFixture, Renderings) {
  Side base(*store_, "base"), cand(*store_, "cand");
  base.Row(1000, kPositions, N(10, P)).Row(2000, kPositions, N(10, P));
  // The baseline has 10 trials per position at 4,000 so that it is decided found there (at pass
  // rate 0.5); with 2, as before verdicts, 4/4 is undecided and no shift would be claimed.
  base.Row(4000, kPositions, N(10, P));
  cand.Row(1000, kPositions, N(10, P), 8).Row(2000, kPositions, N(10, M), 8);
  cand.Row(4000, kPositions, N(2, M), 8);
  base.Commit();
  cand.Commit();
  GateOptions o;
  o.criterion = Criterion{0.5, 0.95};
  GateReport r = Gate(base, cand, o);
  r.baseline_name = "release-1";
  r.baseline_source = "baseline release-1 (campaign base)";
  r.candidate_name = "cand";
  const std::string text = RenderGateText(r);
  if (std::getenv("NW_GATE_DUMP")) std::cout << text << RenderGateMarkdown(r) << RenderGateJUnit(r);
  EXPECT_EQ(text.rfind("gate: baseline release-1 (campaign base)  ->  candidate cand\n"
                       "under test: topk 16 -> 8\n"
                       "rule: one-sided, alpha 0.05 (Holm over 3 tests), tolerance 0.05, min "
                       "trials 10, cells by length\n",
                       0),
            0u)
      << text;
  EXPECT_NE(text.find("length 2,000"), std::string::npos);
  EXPECT_NE(text.find("REGRESSION: exact McNemar on 20 pairs: 20 lost, 0 gained"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("INSUFFICIENT: too few answers"), std::string::npos);
  EXPECT_NE(text.find("boundary shift: REGRESSION: candidate lost from 2,000, below the "
                      "baseline's found-up-to 4,000"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("result: FAIL (regression): 2 regressed, 0 improved, 1 insufficient, 0 "
                      "flaky; exit 1\n"),
            std::string::npos)
      << text;

  const std::string md = RenderGateMarkdown(r);
  EXPECT_EQ(
      md.rfind("# Gate: `cand` against `release-1`\n\n**Result: fail: regression** (exit 1)", 0),
      0u)
      << md;
  EXPECT_NE(md.find("| length 2,000 | 20/20 | 0/20 | 20 | 20 | 0 | +1.00 |"), std::string::npos)
      << md;

  const auto j = RenderGateJson(r);
  EXPECT_EQ(j["exit_code"], 1);
  EXPECT_EQ(j["counts"]["regressions"], 2);
  EXPECT_EQ(j["under_test"][0]["axis"], "topk");
  EXPECT_EQ(j["pairs"][0]["cells"][1]["verdict"], "regression");
  EXPECT_EQ(j["pairs"][0]["cells"][1]["method"], "mcnemar");
  EXPECT_EQ(j["pairs"][0]["boundary_shift"]["shifted"], true);

  const std::string xml = RenderGateJUnit(r);
  EXPECT_EQ(xml.rfind("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuites name=\"nw gate "
                      "release-1 -&gt; cand\" tests=\"4\" failures=\"2\" errors=\"0\" "
                      "skipped=\"1\">\n",
                      0),
            0u)
      << xml;
  EXPECT_NE(xml.find("<testcase classname=\"" + r.pairs[0].candidate_config +
                     "\" name=\"length 2,000\"><failure message=\"regression: exact McNemar"),
            std::string::npos)
      << xml;
  EXPECT_NE(xml.find("name=\"length 4,000\"><skipped message=\"insufficient: too few answers"),
            std::string::npos);
  EXPECT_NE(xml.find("name=\"boundary shift\"><failure"), std::string::npos);
  r.options.strict = true;
  const std::string strict_xml = RenderGateJUnit(r);
  EXPECT_NE(strict_xml.find("failures=\"3\" errors=\"0\" skipped=\"0\""), std::string::npos);
}

}  // namespace
}  // namespace nw::report
