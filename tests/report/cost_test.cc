// The per-token cost model of `nw plan` and `nw run`'s ETA (report/cost.h): jobs weigh their
// prompt tokens times their backend's cost per token; the ETA calibrates on this run's finished
// work, falls back to the history spread over the workers, and is unknown without either.
#include "report/cost.h"

#include <gtest/gtest.h>

#include "tests/db/campaign_fixture.h"

namespace nw::report {
namespace {

using testing_db::MakeSpec;

TEST(JobCostModel, JobsWeighTheirTokensTimesTheirBackendsCost) {
  const JobCostModel m({{"cpu", 2.0, 10}, {"cpu-paged", 4.0, 3}});
  EXPECT_DOUBLE_EQ(m.Cost(MakeSpec(1000, 0.5)), 2000.0);
  EXPECT_DOUBLE_EQ(m.Cost(MakeSpec(1000, 0.5, 0, 16, "cpu-paged")), 4000.0);
  // A backend without history is weighted by the mean of those with one.
  EXPECT_FALSE(m.HasHistory("cuda"));
  EXPECT_DOUBLE_EQ(m.MsPerToken("cuda"), 3.0);
  // Without any history every token costs 1 ms: still a 64K job weighs 256 times a 256 one.
  const JobCostModel none({});
  EXPECT_DOUBLE_EQ(none.Cost(MakeSpec(65536, 0.5)) / none.Cost(MakeSpec(256, 0.5)), 256.0);
}

TEST(JobCostModel, EtaCalibratesOnThisRunsFinishedWork) {
  JobCostModel m({{"cpu", 1.0, 5}});
  const JobSpec small = MakeSpec(1000, 0.5, 0), big = MakeSpec(9000, 0.5, 1);
  m.AddPending("small", small);
  m.AddPending("big", big);
  m.AddPending("big", big);  // twice counts once
  EXPECT_EQ(m.left_jobs(), 2);
  EXPECT_DOUBLE_EQ(m.left_ms(), 10000.0);
  // Nothing finished yet: the history's 10 s spread over 2 workers.
  ASSERT_TRUE(m.EtaSeconds(0, 2).has_value());
  EXPECT_DOUBLE_EQ(*m.EtaSeconds(0, 2), 5.0);
  // The small job took 3 s of wall time: the big one, 9 times the work, needs 27 s more. A
  // count-based ETA would have said 3 s.
  m.Finished("small");
  m.Finished("unknown-key");  // ignored
  EXPECT_DOUBLE_EQ(m.finished_ms(), 1000.0);
  ASSERT_TRUE(m.EtaSeconds(3.0, 2).has_value());
  EXPECT_DOUBLE_EQ(*m.EtaSeconds(3.0, 2), 27.0);
  m.Finished("big");
  EXPECT_DOUBLE_EQ(*m.EtaSeconds(30.0, 2), 0.0);
  // A finished job added again (a search asking for it) is not pending again.
  m.AddPending("small", small);
  EXPECT_EQ(m.left_jobs(), 0);
}

TEST(JobCostModel, EtaIsUnknownWithoutHistoryUntilSomethingFinishes) {
  JobCostModel m({{"cpu", 1.0, 5}});
  m.AddPending("a", MakeSpec(1000, 0.5, 0, 16, "cuda"));
  m.AddPending("b", MakeSpec(1000, 0.5, 1));
  EXPECT_FALSE(m.left_all_known());
  EXPECT_FALSE(m.EtaSeconds(0, 2).has_value());
  m.Finished("b");
  ASSERT_TRUE(m.EtaSeconds(4.0, 2).has_value());
  EXPECT_DOUBLE_EQ(*m.EtaSeconds(4.0, 2), 4.0);  // the same weight left as finished
}

}  // namespace
}  // namespace nw::report
