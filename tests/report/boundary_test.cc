// Boundary extraction in C++ on hand-made cells, its plain-words description, and agreement
// with the v_boundary view on campaigns built through the Store (fixed and random ones).
#include "report/boundary.h"

#include <gtest/gtest.h>

#include <map>
#include <random>
#include <string>
#include <vector>

#include "tests/db/campaign_fixture.h"

namespace nw::report {
namespace {

using testing_db::CampaignBuilder;
using testing_db::ConfigLabel;
using testing_db::Repeat;
using testing_db::TempDir;

constexpr Outcome P = Outcome::kPass;
constexpr Outcome M = Outcome::kMiss;

HeatmapCell Cell(int64_t len, double pos, int64_t passes, int64_t trials, int64_t errors = 0,
                 int64_t pending = 0, const std::string& config = "c") {
  HeatmapCell c;
  c.config = config;
  c.context_length = len;
  c.needle_position = pos;
  c.passes = passes;
  c.trials = trials;
  c.errors = errors;
  c.pending = pending;
  return c;
}

ConfigBoundary One(const std::vector<HeatmapCell>& cells) {
  auto b = ExtractBoundaries(cells);
  EXPECT_EQ(b.size(), 1u);
  return b.empty() ? ConfigBoundary{} : b[0];
}

// The strict fields (l_pass, l_fail, ...) below are v_boundary's facts and keep their tests. The
// sentences these tests used to expect ("lost from 4,509" on one miss, "found ... up to 1,850" on
// 8 answers) described that strict boundary; the headline now comes from verdicts under the
// campaign's criterion (the Verdicts tests further down), because one miss in one cell does not
// show that retrieval is lost there.
TEST(Boundary, MonotoneFromUnorderedCells) {
  ConfigBoundary b = One({Cell(4509, 0.5, 0, 4), Cell(1850, 0.0, 4, 4), Cell(1000, 0.5, 4, 4),
                          Cell(4509, 0.0, 3, 4), Cell(1000, 0.0, 4, 4), Cell(1850, 0.5, 4, 4),
                          Cell(8000, 0.0, 1, 4), Cell(8000, 0.5, 0, 4)});
  ASSERT_EQ(b.lengths.size(), 4u);
  EXPECT_EQ(b.lengths[0].length, 1000);
  EXPECT_EQ(b.lengths[3].length, 8000);
  EXPECT_EQ(b.l_pass, 1850);
  EXPECT_EQ(b.l_fail, 4509);
  EXPECT_EQ(b.first_unclean, 4509);
  EXPECT_EQ(b.max_clean, 1850);
  EXPECT_TRUE(b.monotone);
  EXPECT_EQ(b.fail_passes, 3);
  EXPECT_EQ(b.pass_passes, 8);
  EXPECT_EQ(b.pass_trials, 8);
  EXPECT_EQ(b.fail_trials, 8);
  EXPECT_EQ(b.trials, 32);
  EXPECT_EQ(b.passes, 20);
}

TEST(Boundary, TheExampleLine) {
  // 40 answers at 4,509 over 4 positions, 12 passing -> "pass 12/40, 95% CI 0.18-0.45".
  ConfigBoundary b = One({Cell(1000, 0.0, 10, 10), Cell(1850, 0.0, 10, 10), Cell(4509, 0.0, 6, 10),
                          Cell(4509, 0.25, 3, 10), Cell(4509, 0.5, 0, 10), Cell(4509, 1.0, 3, 10)});
}

TEST(Boundary, NonMonotoneKeepsTheFirstFailure) {
  ConfigBoundary b = One({Cell(1000, 0, 1, 1), Cell(2000, 0, 0, 1), Cell(4000, 0, 1, 1),
                          Cell(8000, 0, 1, 1), Cell(16000, 0, 0, 1)});
  EXPECT_EQ(b.l_pass, 1000);
  EXPECT_EQ(b.l_fail, 2000);
  EXPECT_EQ(b.max_clean, 8000);
  EXPECT_FALSE(b.monotone);
}

TEST(Boundary, AllPassAllFailAndFirstLengthFailing) {
  ConfigBoundary pass = One({Cell(1000, 0, 10, 10), Cell(2000, 0, 10, 10), Cell(2000, 1, 10, 10)});
  EXPECT_EQ(pass.l_pass, 2000);
  EXPECT_FALSE(pass.l_fail);
  EXPECT_FALSE(pass.first_unclean);

  ConfigBoundary fail = One({Cell(1000, 0, 0, 2), Cell(2000, 0, 1, 2), Cell(2000, 1, 2, 2)});
  EXPECT_FALSE(fail.l_pass);
  EXPECT_EQ(fail.l_fail, 1000);
  EXPECT_TRUE(fail.lost_everywhere());

  ConfigBoundary first = One({Cell(1000, 0, 0, 2), Cell(2000, 0, 2, 2)});
  EXPECT_FALSE(first.l_pass);
  EXPECT_EQ(first.l_fail, 1000);
  EXPECT_FALSE(first.monotone);
}

TEST(Boundary, InfrastructureFailuresAreNotMisses) {
  // At 2,000 one position has only engine errors: no miss, so nothing is "lost"; but it is not
  // "found at every position" either.
  ConfigBoundary b = One({Cell(1000, 0, 2, 2), Cell(1000, 1, 2, 2), Cell(2000, 0, 2, 2),
                          Cell(2000, 1, 0, 0, 2), Cell(4000, 0, 1, 1, 0, 1)});
  EXPECT_EQ(b.l_pass, 1000);
  EXPECT_FALSE(b.l_fail);
  EXPECT_EQ(b.first_unclean, 2000);
  EXPECT_EQ(b.max_clean, 4000);
  EXPECT_TRUE(b.monotone);
  EXPECT_EQ(b.errors, 2);
  EXPECT_EQ(b.pending, 1);

  ConfigBoundary nothing = One({Cell(1000, 0, 0, 0, 3), Cell(2000, 0, 0, 0, 0, 2)});
  EXPECT_FALSE(nothing.l_pass);
  EXPECT_FALSE(nothing.l_fail);
  EXPECT_EQ(DescribeBoundary(nothing), "no answers yet (3 without an answer, 2 pending)");

  ConfigBoundary gap = One({Cell(1000, 0, 1, 1), Cell(2000, 0, 0, 0, 1), Cell(4000, 0, 0, 1)});
}

TEST(Boundary, ConfigurationsAreSeparatedAndNaturallyOrdered) {
  auto b =
      ExtractBoundaries({Cell(1000, 0, 1, 1, 0, 0, "topk=16"), Cell(1000, 0, 0, 1, 0, 0, "topk=8"),
                         Cell(2000, 0, 0, 1, 0, 0, "topk=16")});
  ASSERT_EQ(b.size(), 2u);
  EXPECT_EQ(b[0].config, "topk=8");
  EXPECT_EQ(b[1].config, "topk=16");
  EXPECT_EQ(b[1].l_pass, 1000);
  EXPECT_EQ(b[1].l_fail, 2000);
  EXPECT_TRUE(ExtractBoundaries({}).empty());
}

// ---- Verdicts and the headline ----

TEST(Verdicts, NineOfTenIsUndecidedNotLost) {
  // The quickstart's shape: 5 lengths x 5 positions x 2 trials, one miss at 2,048. The strict
  // boundary said "lost from 2,048 (pass 9/10)"; at pass rate 0.9 nothing here is decided.
  std::vector<HeatmapCell> cells;
  for (int64_t len : {256, 512, 1024, 2048, 4096}) {
    for (double pos : {0.0, 0.25, 0.5, 1.0, -64.0}) {
      cells.push_back(Cell(len, pos, len == 2048 && pos == 0.0 ? 1 : 2, 2));
    }
  }
  const ConfigBoundary b = One(cells);
  EXPECT_EQ(b.l_fail, 2048);  // the strict fact is still there
  EXPECT_FALSE(b.lost_from);
  EXPECT_FALSE(b.found_up_to);
  EXPECT_EQ(b.undecided, (std::vector<int64_t>{256, 512, 1024, 2048, 4096}));
  EXPECT_DOUBLE_EQ(b.length_confidence, 0.99);  // 0.95 split over 5 lengths
  EXPECT_DOUBLE_EQ(b.cell_confidence, 0.998);   // and over 25 cells
  for (const CellDecision& d : b.cell_verdicts) EXPECT_EQ(d.verdict, Verdict::kUndecided);
  const std::string s = DescribeBoundary(b);
  EXPECT_EQ(s.rfind("undecided at every tested length (256-4,096 tokens; 256, 512, 1,024 (each "
                    "pass 10/10, 99% CI 0.59-1.00), 2,048 (pass 9/10, 99% CI 0.46-1.00), 4,096 "
                    "(pass 10/10, 99% CI 0.59-1.00))",
                    0),
            0u)
      << s;
  EXPECT_NE(s.find("2,048 (pass 9/10, 99% CI 0.46-1.00)"), std::string::npos) << s;
  EXPECT_EQ(s.find("lost"), std::string::npos) << s;
  // The nearest undecided length is 256 at rate 1: the exact lower bound 0.005^(1/n) >= 0.9
  // needs n >= ln 0.005 / ln 0.9 = 50.3, so 51 answers in all, 41 more.
  EXPECT_EQ(b.nearest_undecided, 256);
  EXPECT_EQ(b.decide_trials, 51);
  EXPECT_NE(s.find("about 41 more answers at 256 (observed rate 1) would decide it if the rate "
                   "held (51 in all: the smallest n whose 99% CI at that rate clears 0.9)"),
            std::string::npos)
      << s;
}

TEST(Verdicts, SharpBoundaryIsFoundThenLost) {
  const ConfigBoundary b =
      One({Cell(1000, 0, 100, 100), Cell(1000, 1, 100, 100), Cell(2000, 0, 100, 100),
           Cell(2000, 1, 99, 100), Cell(4000, 0, 0, 100), Cell(4000, 1, 3, 100)});
  EXPECT_EQ(b.found_up_to, 2000);
  EXPECT_EQ(b.lost_from, 4000);
  EXPECT_TRUE(b.undecided.empty());
  EXPECT_TRUE(b.verdicts_monotone);
  EXPECT_FALSE(b.nearest_undecided);
  // The strict boundary called 2,000 failing for its one miss in 200.
  EXPECT_EQ(b.l_fail, 2000);
  EXPECT_EQ(DescribeBoundary(b),
            "found at every position up to 2,000 tokens (pass 199/200, 98.33% CI 0.97-1.00); "
            "lost from 4,000 (pass 3/200, 98.33% CI 0.00-0.05)");
}

TEST(Verdicts, UndecidedLengthIsNamedWithTheTrialsToDecideIt) {
  const ConfigBoundary b =
      One({Cell(1000, 0, 200, 200), Cell(2000, 0, 45, 50), Cell(4000, 0, 0, 100)});
  EXPECT_EQ(b.found_up_to, 1000);
  EXPECT_EQ(b.lost_from, 4000);
  EXPECT_EQ(b.undecided, std::vector<int64_t>{2000});
  // 45/50 is exactly the threshold: more answers at that rate never decide it.
  EXPECT_FALSE(b.decide_trials);
  EXPECT_EQ(DescribeBoundary(b),
            "found at every position up to 1,000 tokens (pass 200/200, 98.33% CI 0.98-1.00); "
            "undecided at 2,000 (pass 45/50, 98.33% CI 0.75-0.97); lost from 4,000 (pass 0/100, "
            "98.33% CI 0.00-0.05); more answers at 2,000 (observed rate 0.9) would not decide it: "
            "its rate is the threshold 0.9");
}

TEST(Verdicts, NonMonotoneVerdictsAreNamed) {
  const ConfigBoundary b =
      One({Cell(1000, 0, 100, 100), Cell(2000, 0, 10, 100), Cell(4000, 0, 100, 100)});
  EXPECT_EQ(b.found_up_to, 1000);
  EXPECT_EQ(b.lost_from, 2000);
  EXPECT_FALSE(b.verdicts_monotone);
  EXPECT_EQ(b.found_after_lost, std::vector<int64_t>{4000});
  EXPECT_EQ(DescribeBoundary(b),
            "found at every position up to 1,000 tokens (pass 100/100, 98.33% CI 0.95-1.00); "
            "lost at 2,000 (pass 10/100, 98.33% CI 0.04-0.19); not monotone: found again at "
            "4,000 (pass 100/100, 98.33% CI 0.95-1.00)");
}

TEST(Verdicts, OneBadPositionMakesItsLengthLost) {
  // 5 positions x 100 answers; at 2,000 the middle position passes 60/100. Pooled (460/500) the
  // length is undecided; the cell is lost even at the cell level (0.95 over 10 cells: 99.5%).
  std::vector<HeatmapCell> cells;
  for (int64_t len : {1000, 2000}) {
    for (double pos : {0.0, 0.25, 0.5, 0.75, 1.0}) {
      cells.push_back(Cell(len, pos, len == 2000 && pos == 0.5 ? 60 : 100, 100));
    }
  }
  const ConfigBoundary b = One(cells);
  ASSERT_EQ(b.lengths.size(), 2u);
  EXPECT_EQ(b.lengths[1].pooled, Verdict::kUndecided);
  EXPECT_EQ(b.lengths[1].verdict, Verdict::kLost);
  EXPECT_EQ(b.lengths[1].lost_positions, std::vector<double>{0.5});
  EXPECT_EQ(b.found_up_to, 1000);
  EXPECT_EQ(b.lost_from, 2000);
  EXPECT_EQ(DescribeBoundary(b),
            "found at every position up to 1,000 tokens (pass 500/500, 97.5% CI 0.99-1.00); lost "
            "from 2,000 (pass 460/500, 97.5% CI 0.89-0.94; lost at position 50%: pass 60/100, "
            "99.5% CI 0.45-0.73)");
}

TEST(Verdicts, TheCriterionIsTheCampaigns) {
  // 10/10 at every length: undecided at 0.9, found at 0.5.
  const std::vector<HeatmapCell> cells = {Cell(1000, 0, 10, 10), Cell(2000, 0, 10, 10)};
  EXPECT_FALSE(One(cells).found_up_to);
  auto b = ExtractBoundaries(cells, Criterion{0.5, 0.95});
  ASSERT_EQ(b.size(), 1u);
  EXPECT_EQ(b[0].found_up_to, 2000);
  EXPECT_EQ(DescribeBoundary(b[0]),
            "found at every position at every tested length (up to 2,000 tokens; pass 10/10, "
            "97.5% CI 0.65-1.00)");
  // Infrastructure failures never count: only answers are judged, and the note says what is
  // missing.
  auto e = ExtractBoundaries({Cell(1000, 0, 10, 10, 3), Cell(2000, 0, 0, 0, 2, 1)},
                             Criterion{0.5, 0.95});
  ASSERT_EQ(e.size(), 1u);
  EXPECT_EQ(DescribeBoundary(e[0]),
            "found at every position up to 1,000 tokens (pass 10/10, 95% CI 0.69-1.00); no "
            "answers at 2,000; 5 without an answer, 1 pending");
}

// ---- C++ against the v_boundary view ----

void ExpectSameAsView(Store& store, int64_t campaign) {
  auto cells = store.Heatmap(campaign);
  ASSERT_TRUE(cells.ok()) << cells.status().ToString();
  auto rows = store.Boundaries(campaign);
  ASSERT_TRUE(rows.ok()) << rows.status().ToString();
  std::vector<ConfigBoundary> mine = ExtractBoundaries(*cells);
  ASSERT_EQ(mine.size(), rows->size());
  std::map<std::string, BoundaryRow> view;
  for (const BoundaryRow& r : *rows) view[r.config] = r;
  for (const ConfigBoundary& b : mine) {
    SCOPED_TRACE(b.config);
    ASSERT_TRUE(view.count(b.config));
    const BoundaryRow& v = view[b.config];
    EXPECT_EQ(static_cast<int64_t>(b.lengths.size()), v.lengths);
    EXPECT_EQ(b.min_length(), v.min_length);
    EXPECT_EQ(b.max_length(), v.max_length);
    EXPECT_EQ(b.l_pass, v.l_pass);
    EXPECT_EQ(b.l_fail, v.l_fail);
    EXPECT_EQ(b.first_unclean, v.first_unclean);
    EXPECT_EQ(b.max_clean, v.max_clean);
    EXPECT_EQ(b.monotone, v.monotone);
    EXPECT_EQ(b.fail_trials, v.fail_trials);
    EXPECT_EQ(b.fail_passes, v.fail_passes);
    EXPECT_EQ(b.trials, v.trials);
    EXPECT_EQ(b.passes, v.passes);
    EXPECT_EQ(b.errors, v.errors);
    EXPECT_EQ(b.pending, v.pending);
  }
}

class BoundaryVsView : public ::testing::Test {
 protected:
  void SetUp() override {
    auto s = Store::Open(dir_.File("nw.db"));
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    store_ = std::move(s).value();
  }
  TempDir dir_;
  std::unique_ptr<Store> store_;
};

TEST_F(BoundaryVsView, FixedScenarios) {
  CampaignBuilder b(*store_, "fixed");
  // Monotone (topk 16), non-monotone (topk 32), all-fail (topk 64), errors and pending (cpu-paged).
  for (int64_t len : {1000, 2000}) b.Cell(len, 0.0, Repeat(P, 2)).Cell(len, 1.0, Repeat(P, 2));
  b.Cell(4000, 0.0, {P, M}).Cell(4000, 1.0, Repeat(P, 2));
  b.Cell(1000, 0.0, {P}, 32).Cell(2000, 0.0, {M}, 32).Cell(4000, 0.0, {P}, 32);
  b.Cell(1000, 0.0, {M}, 64).Cell(2000, 0.0, {M, P}, 64);
  b.Cell(1000, 0.0, {P}, 16, "cpu-paged")
      .Cell(2000, 0.0, {Outcome::kTimeout}, 16, "cpu-paged")
      .Pending(4000, 0.0, 0, 16, "cpu-paged");
  b.Commit();
  ExpectSameAsView(*store_, b.id());
  auto rows = store_->Boundaries(b.id());
  ASSERT_TRUE(rows.ok());
  ASSERT_EQ(rows->size(), 4u);
}

TEST_F(BoundaryVsView, RandomCampaignsAgree) {
  std::mt19937 rng(20240611);
  const std::vector<Outcome> palette = {P,
                                        P,
                                        P,
                                        P,
                                        M,
                                        M,
                                        Outcome::kEngineError,
                                        Outcome::kTimeout,
                                        Outcome::kTruncated,
                                        Outcome::kEmpty};
  for (int round = 0; round < 12; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    CampaignBuilder b(*store_, "random" + std::to_string(round));
    const int configs = 1 + static_cast<int>(rng() % 2);
    const int lengths = 2 + static_cast<int>(rng() % 4);
    const int positions = 1 + static_cast<int>(rng() % 3);
    // Per config a failure onset, so the data are mostly monotone with noise.
    for (int c = 0; c < configs; ++c) {
      const int topk = 16 << c;
      const int onset = static_cast<int>(rng() % (lengths + 1));
      for (int l = 0; l < lengths; ++l) {
        const int64_t len = 1000 * (int64_t{1} << l);
        for (int p = 0; p < positions; ++p) {
          const double pos = positions == 1 ? 0.5 : static_cast<double>(p) / (positions - 1);
          std::vector<Outcome> outs;
          const int trials = 1 + static_cast<int>(rng() % 3);
          for (int t = 0; t < trials; ++t) {
            Outcome o = palette[rng() % palette.size()];
            if (l < onset && o == M && rng() % 4 != 0) o = P;  // mostly clean below the onset
            if (l >= onset && o == P && rng() % 2 == 0) o = M;
            outs.push_back(o);
          }
          b.Cell(len, pos, outs, topk);
          if (rng() % 8 == 0) b.Pending(len, pos, 10, topk);
        }
      }
    }
    b.Commit();
    ExpectSameAsView(*store_, b.id());
  }
}

}  // namespace
}  // namespace nw::report
