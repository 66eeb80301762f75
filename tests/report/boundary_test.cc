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
  EXPECT_EQ(
      DescribeBoundary(b),
      "found at every position up to 1,850 tokens (pass 8/8, 95% CI 0.68-1.00); lost from 4,509 "
      "(pass 3/8, 95% CI 0.14-0.69)");
}

TEST(Boundary, TheExampleLine) {
  // 40 answers at 4,509 over 4 positions, 12 passing -> "pass 12/40, 95% CI 0.18-0.45".
  ConfigBoundary b = One({Cell(1000, 0.0, 10, 10), Cell(1850, 0.0, 10, 10), Cell(4509, 0.0, 6, 10),
                          Cell(4509, 0.25, 3, 10), Cell(4509, 0.5, 0, 10), Cell(4509, 1.0, 3, 10)});
  EXPECT_EQ(DescribeBoundary(b),
            "found at every position up to 1,850 tokens (pass 10/10, 95% CI 0.72-1.00); lost from "
            "4,509 (pass 12/40, 95% CI 0.18-0.45)");
}

TEST(Boundary, NonMonotoneKeepsTheFirstFailure) {
  ConfigBoundary b = One({Cell(1000, 0, 1, 1), Cell(2000, 0, 0, 1), Cell(4000, 0, 1, 1),
                          Cell(8000, 0, 1, 1), Cell(16000, 0, 0, 1)});
  EXPECT_EQ(b.l_pass, 1000);
  EXPECT_EQ(b.l_fail, 2000);
  EXPECT_EQ(b.max_clean, 8000);
  EXPECT_FALSE(b.monotone);
  EXPECT_EQ(
      DescribeBoundary(b),
      "found at every position up to 1,000 tokens (pass 1/1, 95% CI 0.21-1.00); lost from 2,000 "
      "(pass 0/1, 95% CI 0.00-0.79); not monotone: found at every position again at 8,000");
}

TEST(Boundary, AllPassAllFailAndFirstLengthFailing) {
  ConfigBoundary pass = One({Cell(1000, 0, 10, 10), Cell(2000, 0, 10, 10), Cell(2000, 1, 10, 10)});
  EXPECT_EQ(pass.l_pass, 2000);
  EXPECT_FALSE(pass.l_fail);
  EXPECT_FALSE(pass.first_unclean);
  EXPECT_EQ(DescribeBoundary(pass),
            "found at every position at every tested length (up to 2,000 tokens; pass 30/30, 95% "
            "CI 0.89-1.00)");

  ConfigBoundary fail = One({Cell(1000, 0, 0, 2), Cell(2000, 0, 1, 2), Cell(2000, 1, 2, 2)});
  EXPECT_FALSE(fail.l_pass);
  EXPECT_EQ(fail.l_fail, 1000);
  EXPECT_TRUE(fail.lost_everywhere());
  EXPECT_EQ(DescribeBoundary(fail),
            "lost at every tested length (1,000-2,000 tokens; pass 3/6, 95% CI 0.19-0.81)");

  ConfigBoundary first = One({Cell(1000, 0, 0, 2), Cell(2000, 0, 2, 2)});
  EXPECT_FALSE(first.l_pass);
  EXPECT_EQ(first.l_fail, 1000);
  EXPECT_FALSE(first.monotone);
  EXPECT_EQ(DescribeBoundary(first),
            "lost from 1,000, the shortest tested length (pass 0/2, 95% CI 0.00-0.66); not "
            "monotone: found at every position again at 2,000");
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
  EXPECT_EQ(
      DescribeBoundary(b),
      "found at every position up to 1,000 tokens (pass 4/4, 95% CI 0.51-1.00); no misses, but "
      "some positions have no answers from 2,000 (2 without an answer, 1 pending)");

  ConfigBoundary nothing = One({Cell(1000, 0, 0, 0, 3), Cell(2000, 0, 0, 0, 0, 2)});
  EXPECT_FALSE(nothing.l_pass);
  EXPECT_FALSE(nothing.l_fail);
  EXPECT_EQ(DescribeBoundary(nothing), "no answers yet (3 without an answer, 2 pending)");

  ConfigBoundary gap = One({Cell(1000, 0, 1, 1), Cell(2000, 0, 0, 0, 1), Cell(4000, 0, 0, 1)});
  EXPECT_EQ(
      DescribeBoundary(gap),
      "found at every position up to 1,000 tokens (pass 1/1, 95% CI 0.21-1.00); lost from 4,000 "
      "(pass 0/1, 95% CI 0.00-0.79); some positions have no answers from 2,000");
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
