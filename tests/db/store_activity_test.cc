// The Store's activity views the dashboard shows (db/store_activity.cc) and the daemon's campaign
// table (db/campaign_table.h) they read: the campaign table as CampaignTable wrote it, results
// per campaign since a moment, and the latest failures (failed and lost attempts, engine errors
// and timeouts) with their job's state, configuration and campaigns, newest first.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "db/campaign_table.h"
#include "db/store.h"
#include "tests/db/campaign_fixture.h"

namespace nw {
namespace {

using testing_db::CampaignBuilder;
using testing_db::ConfigLabel;
using testing_db::MakeSpec;
using testing_db::TempDir;

TEST(StoreActivityTest, CampaignControlsAreTheDaemonsTableReadOnly) {
  TempDir dir;
  const auto file = dir.File("nw.db");
  auto store = Store::Open(file);
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  auto empty = (*store)->CampaignControls();
  ASSERT_TRUE(empty.ok()) << empty.status().ToString();
  EXPECT_TRUE(empty->empty());

  auto table = CampaignTable::Open(file);
  ASSERT_TRUE(table.ok()) << table.status().ToString();
  ASSERT_TRUE((*table)->Put({5, "b", 1, CampaignRunState::kPaused, 10, 11}).ok());
  ASSERT_TRUE((*table)->Put({2, "a", 3, CampaignRunState::kActive, 20, 21}).ok());

  auto reader = Store::Open(file, Store::Mode::kReadOnly);
  ASSERT_TRUE(reader.ok()) << reader.status().ToString();
  auto controls = (*reader)->CampaignControls();
  ASSERT_TRUE(controls.ok()) << controls.status().ToString();
  ASSERT_EQ(controls->size(), 2u);
  EXPECT_EQ((*controls)[0].campaign_id, 2);  // by id
  EXPECT_EQ((*controls)[0].name, "a");
  EXPECT_EQ((*controls)[0].priority, 3);
  EXPECT_EQ((*controls)[0].state, CampaignRunState::kActive);
  EXPECT_EQ((*controls)[1].state, CampaignRunState::kPaused);
  EXPECT_EQ((*controls)[1].submitted_ms, 10);
  EXPECT_EQ((*controls)[1].updated_ms, 11);
}

TEST(StoreActivityTest, CampaignTableNeedsAnExistingDatabase) {
  TempDir dir;
  auto t = CampaignTable::Open(dir.File("none.db"));
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), StatusCode::kNotFound);
  EXPECT_NE(t.status().message().find("none.db"), std::string::npos);
}

TEST(StoreActivityTest, RecentResultCountsPerCampaignSinceAMoment) {
  TempDir dir;
  auto store = Store::Open(dir.File("nw.db"));
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  CampaignBuilder a(**store, "a");
  a.Cell(256, 0.5, {Outcome::kPass, Outcome::kMiss, Outcome::kPass}).Pending(512, 0.5, 0);
  a.Commit();  // results created at 4000
  CampaignBuilder b(**store, "b");
  b.Pending(256, 0.5, 0);
  b.Commit();

  auto counts = (*store)->RecentResultCounts(4000);
  ASSERT_TRUE(counts.ok()) << counts.status().ToString();
  ASSERT_EQ(counts->size(), 1u);  // b has no result
  EXPECT_EQ((*counts)[0].campaign_id, a.id());
  EXPECT_EQ((*counts)[0].results, 3);
  EXPECT_EQ((*counts)[0].first_ms, 4000);
  EXPECT_EQ((*counts)[0].last_ms, 4000);

  auto later = (*store)->RecentResultCounts(4001);
  ASSERT_TRUE(later.ok()) << later.status().ToString();
  EXPECT_TRUE(later->empty());
}

TEST(StoreActivityTest, RecentFailuresNewestFirstWithTheirJobs) {
  TempDir dir;
  auto store = Store::Open(dir.File("nw.db"));
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  CampaignBuilder c(**store, "c");
  c.Cell(256, 0.5, {Outcome::kPass, Outcome::kEngineError});  // the error committed at 4000
  c.Pending(512, 0.5, 0);
  c.Commit();
  // The pending job: a failed attempt at 5000 (retried), then a lost one at 6000.
  const std::string key = MakeSpec(512, 0.5, 0, 16, "cpu", c.id()).Key();
  ASSERT_TRUE((*store)->RecordLease(key, 1, "w2", 9000, 4500).ok());
  ASSERT_TRUE((*store)->RecordFailure(key, 1, Status::Unavailable("worker busy"), true, 5000).ok());
  ASSERT_TRUE((*store)->RecordLease(key, 2, "w3", 9000, 5500).ok());
  auto requeued = (*store)->RequeueLeased(6000);
  ASSERT_TRUE(requeued.ok()) << requeued.status().ToString();

  auto failures = (*store)->RecentFailures(10);
  ASSERT_TRUE(failures.ok()) << failures.status().ToString();
  ASSERT_EQ(failures->size(), 3u);
  const RecentFailure& lost = (*failures)[0];
  EXPECT_EQ(lost.at_ms, 6000);
  EXPECT_EQ(lost.kind, "attempt_lost");
  EXPECT_EQ(lost.job_key, key);
  EXPECT_EQ(lost.attempt, 2);
  EXPECT_EQ(lost.worker_id, "w3");
  EXPECT_EQ(lost.job_state, "queued");
  const RecentFailure& failed = (*failures)[1];
  EXPECT_EQ(failed.at_ms, 5000);
  EXPECT_EQ(failed.kind, "attempt_failed");
  EXPECT_EQ(failed.worker_id, "w2");
  EXPECT_EQ(failed.error_code, "unavailable");
  EXPECT_EQ(failed.error_message, "worker busy");
  const RecentFailure& error = (*failures)[2];
  EXPECT_EQ(error.at_ms, 4000);
  EXPECT_EQ(error.kind, "engine_error");
  EXPECT_EQ(error.error_code, "resource_exhausted");
  EXPECT_EQ(error.error_message, "simulated");
  EXPECT_EQ(error.job_state, "done");
  EXPECT_EQ(error.config, ConfigLabel());
  EXPECT_EQ(error.campaigns, "c");

  auto one = (*store)->RecentFailures(1);
  ASSERT_TRUE(one.ok()) << one.status().ToString();
  ASSERT_EQ(one->size(), 1u);
  EXPECT_EQ((*one)[0].at_ms, 6000);
}

}  // namespace
}  // namespace nw
