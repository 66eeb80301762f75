// WalCheckpointer (db/checkpointer.h): checkpoints happen on its thread, not in the writer's
// commits, the WAL stays bounded, and SQLite's auto-checkpoint is back once it is gone.
#include "db/checkpointer.h"

#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <string>
#include <thread>

#include "tests/db/campaign_fixture.h"

namespace nw::db_internal {
namespace {

using testing_db::TempDir;

int64_t WalFrames(Db& db) {
  // PASSIVE with no work to do just reports the WAL's size in frames.
  int log = -1, ckpt = -1;
  sqlite3_wal_checkpoint_v2(db.get(), nullptr, SQLITE_CHECKPOINT_PASSIVE, &log, &ckpt);
  return log;
}

TEST(WalCheckpointer, CheckpointsOnItsThreadAndKeepsTheWalBounded) {
  TempDir dir;
  auto db = Db::Open(dir.File("c.db").string(), /*read_only=*/false);
  ASSERT_TRUE(db.ok()) << db.status().ToString();
  Db& d = **db;
  ASSERT_TRUE(d.Exec("PRAGMA journal_mode = WAL", "wal").ok());
  ASSERT_TRUE(d.Exec("CREATE TABLE t (k INTEGER PRIMARY KEY, v TEXT)", "create").ok());
  constexpr int kPages = 16;
  auto c = WalCheckpointer::Start(d, kPages);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  {
    Query q(d, "PRAGMA wal_autocheckpoint", "reading wal_autocheckpoint");
    ASSERT_TRUE(q.Step().value());
    EXPECT_EQ(q.Int(0), 0) << "the writer's own auto-checkpoint must be off";
  }
  // Many small transactions, each dirtying a few pages (a 2 KiB value per row).
  const std::string value(2048, 'x');
  for (int i = 0; i < 400; ++i) {
    Query q(d, "INSERT INTO t (k, v) VALUES (?, ?)", "inserting");
    q.Bind(1, int64_t{i}).Bind(2, value);
    ASSERT_TRUE(q.Run().ok());
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while ((*c)->checkpoints() == 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_GT((*c)->checkpoints(), 0);
  // Without checkpoints the WAL would hold every frame written (over 400); bounded by the
  // writer's fallback at 8 x kPages plus one transaction.
  EXPECT_LT(WalFrames(d), 8 * kPages + 8);
  c->reset();
  Query q(d, "PRAGMA wal_autocheckpoint", "reading wal_autocheckpoint");
  ASSERT_TRUE(q.Step().value());
  EXPECT_EQ(q.Int(0), 1000);
}

TEST(WalCheckpointer, RejectsANonPositiveThreshold) {
  TempDir dir;
  auto db = Db::Open(dir.File("c.db").string(), false);
  ASSERT_TRUE(db.ok());
  EXPECT_EQ(WalCheckpointer::Start(**db, 0).status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace nw::db_internal
