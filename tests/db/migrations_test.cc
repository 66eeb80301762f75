// Schema migrations: embedding, applying on a fresh file, idempotent re-open, refusing newer or
// changed schemas, and rolling back a failing migration without touching the file.
#include <gtest/gtest.h>
#include <sqlite3.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "db/store.h"
#include "tests/db/campaign_fixture.h"
#include "tests/support/temp_dir.h"

namespace nw {
namespace {

using testing_db::TempDir;

// A raw connection for looking at the file behind the Store's back.
class RawDb {
 public:
  explicit RawDb(const std::filesystem::path& p) {
    EXPECT_EQ(sqlite3_open_v2(p.c_str(), &db_, SQLITE_OPEN_READONLY, nullptr), SQLITE_OK);
  }
  ~RawDb() { sqlite3_close_v2(db_); }
  RawDb(const RawDb&) = delete;
  RawDb& operator=(const RawDb&) = delete;

  // First column of the first row as text ("" when no row).
  std::string One(const std::string& sql) {
    sqlite3_stmt* st = nullptr;
    EXPECT_EQ(sqlite3_prepare_v2(db_, sql.c_str(), -1, &st, nullptr), SQLITE_OK)
        << sql << ": " << sqlite3_errmsg(db_);
    std::string out;
    if (st != nullptr && sqlite3_step(st) == SQLITE_ROW && sqlite3_column_text(st, 0) != nullptr) {
      out = reinterpret_cast<const char*>(sqlite3_column_text(st, 0));
    }
    sqlite3_finalize(st);
    return out;
  }
  bool HasTable(const std::string& name) {
    return One("SELECT count(*) FROM sqlite_master WHERE name = '" + name + "'") == "1";
  }

 private:
  sqlite3* db_ = nullptr;
};

std::vector<SchemaMigration> WithExtra(const std::string& sql) {
  std::vector<SchemaMigration> m = Store::EmbeddedMigrations();
  const int v = static_cast<int>(m.size()) + 1;
  char name[32];
  std::snprintf(name, sizeof(name), "%04d_extra", v);
  m.push_back(SchemaMigration{v, name, sql});
  return m;
}

TEST(Migrations, EmbeddedListMatchesTheSqlFilesInOrder) {
  const auto& m = Store::EmbeddedMigrations();
  ASSERT_GE(m.size(), 2u);
  EXPECT_EQ(Store::LatestSchemaVersion(), static_cast<int>(m.size()));
  const std::filesystem::path dir = std::filesystem::path(NW_SOURCE_DIR) / "db" / "migrations";
  std::vector<std::filesystem::path> files;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    if (e.path().extension() == ".sql") files.push_back(e.path());
  }
  std::sort(files.begin(), files.end());
  ASSERT_EQ(files.size(), m.size());
  for (size_t i = 0; i < m.size(); ++i) {
    EXPECT_EQ(m[i].version, static_cast<int>(i) + 1);
    EXPECT_EQ(m[i].name, files[i].stem().string());
    // The embedded text is the file's text, byte for byte (regenerated when a .sql changes).
    EXPECT_EQ(m[i].sql, test_support::ReadFileText(files[i])) << files[i];
  }
  EXPECT_EQ(m[0].name, "0001_initial");
  EXPECT_NE(m[0].sql.find("CREATE TABLE jobs"), std::string::npos);
}

TEST(Migrations, FreshFileGetsEveryTableViewAndPragma) {
  TempDir dir;
  const auto file = dir.File("nw.db");
  {
    auto store = Store::Open(file);
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    auto v = (*store)->SchemaVersion();
    ASSERT_TRUE(v.ok());
    EXPECT_EQ(*v, Store::LatestSchemaVersion());
    EXPECT_EQ((*store)->path(), file);
    EXPECT_EQ((*store)->mode(), Store::Mode::kReadWrite);
  }
  RawDb raw(file);
  for (const char* t :
       {"campaigns", "jobs", "campaign_jobs", "attempts", "results", "probes", "workers",
        "schema_version", "coordinator_campaigns", "v_job_config", "v_results", "v_campaign_jobs",
        "v_heatmap", "v_length_status", "v_boundary", "v_probe_summary", "v_job_failures"}) {
    EXPECT_TRUE(raw.HasTable(t)) << t;
  }
  EXPECT_EQ(raw.One("PRAGMA journal_mode"), "wal");
  EXPECT_EQ(raw.One("PRAGMA user_version"), std::to_string(Store::LatestSchemaVersion()));
  EXPECT_EQ(raw.One("SELECT count(*) FROM schema_version"),
            std::to_string(Store::LatestSchemaVersion()));
  EXPECT_EQ(raw.One("SELECT name FROM schema_version WHERE version = 1"), "0001_initial");
  EXPECT_EQ(raw.One("SELECT length(sha256) FROM schema_version WHERE version = 2"), "64");
}

TEST(Migrations, ReopenIsIdempotentAndKeepsData) {
  TempDir dir;
  const auto file = dir.File("nw.db");
  {
    auto store = Store::Open(file);
    ASSERT_TRUE(store.ok());
    ASSERT_TRUE((*store)->UpsertCampaign("c", "c.yaml", "x", 5).ok());
  }
  for (int i = 0; i < 2; ++i) {
    auto store = Store::Open(file);
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    EXPECT_EQ(*(*store)->SchemaVersion(), Store::LatestSchemaVersion());
    auto c = (*store)->FindCampaign("c");
    ASSERT_TRUE(c.ok());
    ASSERT_TRUE(c->has_value());
    EXPECT_EQ((*c)->source_path, "c.yaml");
  }
  RawDb raw(file);
  EXPECT_EQ(raw.One("SELECT count(*) FROM schema_version"),
            std::to_string(Store::LatestSchemaVersion()));
}

TEST(Migrations, UpgradesAnOlderDatabase) {
  TempDir dir;
  const auto file = dir.File("nw.db");
  std::vector<SchemaMigration> first = {Store::EmbeddedMigrations()[0]};
  {
    auto store = Store::OpenWithMigrations(file, Store::Mode::kReadWrite, first);
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    EXPECT_EQ(*(*store)->SchemaVersion(), 1);
  }
  {
    RawDb raw(file);
    EXPECT_FALSE(raw.HasTable("v_heatmap"));
  }
  // A read-only open cannot migrate.
  auto ro = Store::Open(file, Store::Mode::kReadOnly);
  ASSERT_FALSE(ro.ok());
  EXPECT_EQ(ro.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(ro.status().message().find(file.string()), std::string::npos);
  EXPECT_NE(ro.status().message().find("read-only"), std::string::npos);

  auto store = Store::Open(file);
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  EXPECT_EQ(*(*store)->SchemaVersion(), Store::LatestSchemaVersion());
  RawDb raw(file);
  EXPECT_TRUE(raw.HasTable("v_heatmap"));
}

// Before migration 0004 the coordinator daemon created coordinator_campaigns itself, on its own
// connection, in a database at schema version 3. Such a file must migrate with its rows intact,
// and a file without the table (never served by a daemon) gets it.
TEST(Migrations, CoordinatorCampaignsFromTheOldDaemonAreKept) {
  TempDir dir;
  const auto served = dir.File("served.db");
  const auto plain = dir.File("plain.db");
  const std::vector<SchemaMigration> old(Store::EmbeddedMigrations().begin(),
                                         Store::EmbeddedMigrations().begin() + 3);
  ASSERT_EQ(old.back().name, "0003_baselines");
  int64_t campaign_id = 0;
  for (const auto& file : {served, plain}) {
    auto store = Store::OpenWithMigrations(file, Store::Mode::kReadWrite, old);
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    auto id = (*store)->UpsertCampaign("sweep", "sweep.yaml", "name: sweep", 5);
    ASSERT_TRUE(id.ok());
    campaign_id = *id;
  }
  {
    // What the old daemon did (coordinator/campaign_table.cc before 0004), byte for byte.
    sqlite3* raw = nullptr;
    ASSERT_EQ(sqlite3_open_v2(served.c_str(), &raw, SQLITE_OPEN_READWRITE, nullptr), SQLITE_OK);
    const std::string sql =
        "CREATE TABLE IF NOT EXISTS coordinator_campaigns (\n"
        "  campaign_id  INTEGER PRIMARY KEY,\n"
        "  name         TEXT    NOT NULL,\n"
        "  priority     INTEGER NOT NULL DEFAULT 0,\n"
        "  state        TEXT    NOT NULL CHECK (state IN ('active', 'paused', 'cancelled')),\n"
        "  submitted_ms INTEGER NOT NULL,\n"
        "  updated_ms   INTEGER NOT NULL\n"
        ");\n"
        "INSERT INTO coordinator_campaigns VALUES (" +
        std::to_string(campaign_id) + ", 'sweep', 7, 'paused', 100, 200);";
    EXPECT_EQ(sqlite3_exec(raw, sql.c_str(), nullptr, nullptr, nullptr), SQLITE_OK)
        << sqlite3_errmsg(raw);
    sqlite3_close_v2(raw);
  }
  {
    RawDb raw(plain);
    EXPECT_FALSE(raw.HasTable("coordinator_campaigns"));
  }
  for (const auto& file : {served, plain}) {
    auto store = Store::Open(file);
    ASSERT_TRUE(store.ok()) << file << ": " << store.status().ToString();
    EXPECT_EQ(*(*store)->SchemaVersion(), Store::LatestSchemaVersion());
  }
  RawDb s(served);
  EXPECT_EQ(s.One("SELECT name FROM schema_version WHERE version = 4"),
            "0004_coordinator_campaigns");
  EXPECT_EQ(s.One("SELECT priority || ' ' || state || ' ' || submitted_ms || ' ' || updated_ms"
                  " FROM coordinator_campaigns WHERE name = 'sweep'"),
            "7 paused 100 200");
  EXPECT_EQ(s.One("SELECT count(*) FROM coordinator_campaigns"), "1");
  RawDb p(plain);
  EXPECT_TRUE(p.HasTable("coordinator_campaigns"));
  EXPECT_EQ(p.One("SELECT count(*) FROM coordinator_campaigns"), "0");
  // The same columns either way.
  const std::string cols =
      "SELECT group_concat(name || ':' || type || ':' || \"notnull\" || ':' || pk, ',')"
      " FROM pragma_table_info('coordinator_campaigns')";
  EXPECT_EQ(s.One(cols), p.One(cols));
  EXPECT_EQ(p.One(cols),
            "campaign_id:INTEGER:0:1,name:TEXT:1:0,priority:INTEGER:1:0,state:TEXT:1:0,"
            "submitted_ms:INTEGER:1:0,updated_ms:INTEGER:1:0");
}

TEST(Migrations, RefusesADatabaseNewerThanTheBuild) {
  TempDir dir;
  const auto file = dir.File("nw.db");
  {
    auto store = Store::OpenWithMigrations(file, Store::Mode::kReadWrite,
                                           WithExtra("CREATE TABLE future (x INTEGER);"));
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    EXPECT_EQ(*(*store)->SchemaVersion(), Store::LatestSchemaVersion() + 1);
  }
  for (Store::Mode mode : {Store::Mode::kReadWrite, Store::Mode::kReadOnly}) {
    auto store = Store::Open(file, mode);
    ASSERT_FALSE(store.ok());
    EXPECT_EQ(store.status().code(), StatusCode::kFailedPrecondition);
    const std::string msg = store.status().message();
    EXPECT_NE(msg.find(file.string()), std::string::npos) << msg;
    EXPECT_NE(msg.find("newer than this build"), std::string::npos) << msg;
    EXPECT_NE(msg.find(std::to_string(Store::LatestSchemaVersion() + 1)), std::string::npos);
  }
}

TEST(Migrations, FailingMigrationLeavesTheFileUntouched) {
  TempDir dir;
  const auto file = dir.File("nw.db");
  {
    auto store = Store::Open(file);
    ASSERT_TRUE(store.ok());
    ASSERT_TRUE((*store)->UpsertCampaign("keep", "k.yaml", "x", 5).ok());
  }
  const std::string before = test_support::ReadFileText(file);
  ASSERT_FALSE(before.empty());
  {
    // The first statement succeeds, the second fails: both must be undone.
    auto store = Store::OpenWithMigrations(
        file, Store::Mode::kReadWrite,
        WithExtra("CREATE TABLE half_done (x INTEGER);\n"
                  "INSERT INTO campaigns (name, created_ms, updated_ms) VALUES ('ghost', 1, 1);\n"
                  "INSERT INTO no_such_table VALUES (1);\n"));
    ASSERT_FALSE(store.ok());
    const std::string msg = store.status().message();
    EXPECT_NE(msg.find(file.string()), std::string::npos) << msg;
    EXPECT_NE(msg.find("_extra.sql"), std::string::npos) << msg;
    EXPECT_NE(msg.find("no_such_table"), std::string::npos) << msg;
  }
  EXPECT_EQ(test_support::ReadFileText(file), before);
  {
    RawDb raw(file);
    EXPECT_FALSE(raw.HasTable("half_done"));
    EXPECT_EQ(raw.One("SELECT count(*) FROM campaigns WHERE name = 'ghost'"), "0");
    EXPECT_EQ(raw.One("SELECT max(version) FROM schema_version"),
              std::to_string(Store::LatestSchemaVersion()));
  }
  auto store = Store::Open(file);
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  auto c = (*store)->FindCampaign("keep");
  ASSERT_TRUE(c.ok());
  EXPECT_TRUE(c->has_value());
}

TEST(Migrations, FailingFirstMigrationLeavesAFreshFileEmpty) {
  TempDir dir;
  const auto file = dir.File("nw.db");
  std::vector<SchemaMigration> bad = {
      {1, "0001_bad", "CREATE TABLE a (x INTEGER);\nCREATE TABLE a (y INTEGER);\n"}};
  auto store = Store::OpenWithMigrations(file, Store::Mode::kReadWrite, bad);
  ASSERT_FALSE(store.ok());
  EXPECT_NE(store.status().message().find("0001_bad.sql"), std::string::npos);
  RawDb raw(file);
  EXPECT_FALSE(raw.HasTable("a"));
  EXPECT_FALSE(raw.HasTable("schema_version"));
}

TEST(Migrations, TransactionControlInsideAMigrationIsRefused) {
  TempDir dir;
  const auto file = dir.File("nw.db");
  std::vector<SchemaMigration> bad = {
      {1, "0001_commits", "CREATE TABLE a (x INTEGER);\n-- sneaky\nCOMMIT;\nCREATE TABLE b (y);"}};
  auto store = Store::OpenWithMigrations(file, Store::Mode::kReadWrite, bad);
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(store.status().message().find("COMMIT"), std::string::npos);
  RawDb raw(file);
  EXPECT_FALSE(raw.HasTable("a"));
}

TEST(Migrations, AnAppliedMigrationThatChangedIsRefused) {
  TempDir dir;
  const auto file = dir.File("nw.db");
  {
    std::vector<SchemaMigration> v1 = {{1, "0001_a", "CREATE TABLE a (x INTEGER);"}};
    auto store = Store::OpenWithMigrations(file, Store::Mode::kReadWrite, v1);
    ASSERT_TRUE(store.ok());
  }
  std::vector<SchemaMigration> edited = {{1, "0001_a", "CREATE TABLE a (x INTEGER, y TEXT);"}};
  auto store = Store::OpenWithMigrations(file, Store::Mode::kReadWrite, edited);
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(store.status().message().find("must never change"), std::string::npos);
}

TEST(Migrations, InvalidListsAreRejected) {
  TempDir dir;
  std::vector<SchemaMigration> gap = {{1, "0001_a", "CREATE TABLE a (x);"},
                                      {3, "0003_c", "CREATE TABLE c (x);"}};
  auto s1 = Store::OpenWithMigrations(dir.File("a.db"), Store::Mode::kReadWrite, gap);
  ASSERT_FALSE(s1.ok());
  EXPECT_EQ(s1.status().code(), StatusCode::kInvalidArgument);
  std::vector<SchemaMigration> empty_sql = {{1, "0001_a", "-- nothing\n"}};
  auto s2 = Store::OpenWithMigrations(dir.File("b.db"), Store::Mode::kReadWrite, empty_sql);
  ASSERT_FALSE(s2.ok());
  EXPECT_EQ(s2.status().code(), StatusCode::kInvalidArgument);
}

TEST(Migrations, ReadOnlyOpenOfAMissingFileFailsWithoutCreatingIt) {
  TempDir dir;
  const auto file = dir.File("missing.db");
  auto store = Store::Open(file, Store::Mode::kReadOnly);
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), StatusCode::kNotFound);
  EXPECT_NE(store.status().message().find(file.string()), std::string::npos);
  EXPECT_FALSE(std::filesystem::exists(file));
}

TEST(Migrations, AFileThatIsNotADatabaseIsReportedAsCorrupt) {
  TempDir dir;
  const auto file = dir.File("junk.db");
  {
    std::ofstream out(file, std::ios::binary);
    out << std::string(4096, 'x');
  }
  auto store = Store::Open(file);
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), StatusCode::kCorruption) << store.status().ToString();
  EXPECT_NE(store.status().message().find(file.string()), std::string::npos);
}

TEST(Migrations, InMemoryDatabaseWorks) {
  auto store = Store::Open(":memory:");
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  EXPECT_EQ(*(*store)->SchemaVersion(), Store::LatestSchemaVersion());
}

}  // namespace
}  // namespace nw
