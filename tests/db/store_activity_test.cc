// The Store's activity views the dashboard shows (db/store_activity.cc) and the daemon's campaign
// table (db/campaign_table.h) they read: the campaign table as CampaignTable wrote it, results
// per campaign since a moment, and the latest failures (failed and lost attempts, engine errors
// and timeouts) with their job's state, configuration and campaigns, newest first; opening the
// daemon's tables (db/daemon_table.h); the statement time limit the dashboard's reads run under
// (db/sqlite.h, Store::SetStatementLimit).
#include <gtest/gtest.h>
#include <sqlite3.h>

#include <string>
#include <vector>

#include "db/campaign_table.h"
#include "db/sqlite.h"
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

TEST(StoreActivityTest, CampaignTableNeedsTheMigratedTable) {
  TempDir dir;
  const auto file = dir.File("old.db");
  sqlite3* raw = nullptr;
  ASSERT_EQ(sqlite3_open(file.c_str(), &raw), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(raw, "CREATE TABLE t (x)", nullptr, nullptr, nullptr), SQLITE_OK);
  sqlite3_close(raw);
  auto t = CampaignTable::Open(file);
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(t.status().message(),
            file.string() +
                ": no table coordinator_campaigns: the database is older than migration "
                "0004_coordinator_campaigns (open it with Store::Open, which migrates it, first)");
}

// A statement past the limit is interrupted and fails with DeadlineExceeded naming the file, the
// statement's purpose and the limit; the connection then runs the next statement normally.
TEST(StoreActivityTest, AStatementPastTheLimitIsInterrupted) {
  TempDir dir;
  const std::string file = dir.File("limit.db").string();
  auto db = db_internal::Db::Open(file, /*read_only=*/false);
  ASSERT_TRUE(db.ok()) << db.status().ToString();
  (*db)->SetStatementLimit(100);
  // Tens of seconds of work without the limit.
  const std::string slow =
      "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 2000000000) "
      "SELECT COUNT(*) FROM c";
  const std::string want =
      file + ": counting to two billion: interrupted after 100 ms (the statement time limit)";
  {
    db_internal::Query q(**db, slow, "counting to two billion");
    auto step = q.Step();
    ASSERT_FALSE(step.ok());
    EXPECT_EQ(step.status().code(), StatusCode::kDeadlineExceeded);
    EXPECT_EQ(step.status().message(), want);
  }
  const Status exec = (*db)->Exec(slow, "counting to two billion");
  EXPECT_EQ(exec.code(), StatusCode::kDeadlineExceeded);
  EXPECT_EQ(exec.message(), want);
  {
    db_internal::Query q(**db, "SELECT 41 + 1", "adding");
    auto step = q.Step();
    ASSERT_TRUE(step.ok()) << step.status().ToString();
    ASSERT_TRUE(*step);
    EXPECT_EQ(q.Int(0), 42);
  }
  (*db)->SetStatementLimit(0);
  EXPECT_EQ((*db)->statement_limit_ms(), 0);
}

// The Store's reads under a limit (the dashboard's) give their results as without one.
TEST(StoreActivityTest, StoreReadsUnderAStatementLimit) {
  TempDir dir;
  const auto file = dir.File("nw.db");
  ASSERT_TRUE(Store::Open(file).ok());
  auto table = CampaignTable::Open(file);
  ASSERT_TRUE(table.ok()) << table.status().ToString();
  ASSERT_TRUE((*table)->Put({2, "a", 3, CampaignRunState::kActive, 20, 21}).ok());
  auto reader = Store::Open(file, Store::Mode::kReadOnly);
  ASSERT_TRUE(reader.ok()) << reader.status().ToString();
  (*reader)->SetStatementLimit(10'000);
  auto controls = (*reader)->CampaignControls();
  ASSERT_TRUE(controls.ok()) << controls.status().ToString();
  ASSERT_EQ(controls->size(), 1u);
  EXPECT_EQ((*controls)[0].name, "a");
  auto failures = (*reader)->RecentFailures(10);
  ASSERT_TRUE(failures.ok()) << failures.status().ToString();
  EXPECT_TRUE(failures->empty());
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
