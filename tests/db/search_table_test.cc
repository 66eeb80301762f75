// SearchTable (db/search_table.h): the daemon's boundary-search definitions round-trip through
// the database (settings, optional budget, the grid's JobSpecs with their keys), are replaced on
// a second Put and removed; a damaged grid is Corruption naming the campaign; a file without the
// table is refused, not patched.
#include "db/search_table.h"

#include <gtest/gtest.h>
#include <sqlite3.h>

#include "db/store.h"
#include "tests/db/campaign_fixture.h"

namespace nw {
namespace {

using testing_db::MakeSpec;
using testing_db::TempDir;

TEST(SearchTableTest, PutFindReplaceRemove) {
  TempDir dir;
  const auto file = dir.File("s.db");
  auto store = Store::Open(file);
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  auto table = SearchTable::Open(file);
  ASSERT_TRUE(table.ok()) << table.status().ToString();

  auto none = (*table)->Find(7);
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->has_value());

  StoredSearch s;
  s.campaign_id = 7;
  s.settings = SubmitSearch{4, 2, 0.9, 0.75, 12};
  s.grid = {MakeSpec(256, 0.5, 0), MakeSpec(256, 0.5, 1), MakeSpec(512, 0.5, 0)};
  ASSERT_TRUE((*table)->Put(s, 100).ok());
  auto found = (*table)->Find(7);
  ASSERT_TRUE(found.ok()) << found.status().ToString();
  ASSERT_TRUE(found->has_value());
  EXPECT_EQ((*found)->settings, s.settings);
  ASSERT_EQ((*found)->grid.size(), 3u);
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ((*found)->grid[i].Key(), s.grid[i].Key());

  s.settings.budget.reset();
  s.grid.pop_back();
  ASSERT_TRUE((*table)->Put(s, 200).ok());
  found = (*table)->Find(7);
  ASSERT_TRUE(found.ok() && found->has_value());
  EXPECT_FALSE((*found)->settings.budget.has_value());
  EXPECT_EQ((*found)->grid.size(), 2u);

  ASSERT_TRUE((*table)->Remove(7).ok());
  ASSERT_TRUE((*table)->Remove(7).ok());  // none: fine
  found = (*table)->Find(7);
  ASSERT_TRUE(found.ok());
  EXPECT_FALSE(found->has_value());
}

TEST(SearchTableTest, ADamagedGridIsCorruptionNamingTheCampaign) {
  TempDir dir;
  const auto file = dir.File("s.db");
  ASSERT_TRUE(Store::Open(file).ok());
  auto table = SearchTable::Open(file);
  ASSERT_TRUE(table.ok());
  StoredSearch s;
  s.campaign_id = 3;
  s.grid = {MakeSpec(256, 0.5, 0)};
  ASSERT_TRUE((*table)->Put(s, 1).ok());
  sqlite3* raw = nullptr;
  ASSERT_EQ(sqlite3_open(file.c_str(), &raw), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(raw, "UPDATE coordinator_searches SET grid_json = '[{\"x\": 1}]'", nullptr,
                         nullptr, nullptr),
            SQLITE_OK);
  sqlite3_close(raw);
  auto found = (*table)->Find(3);
  ASSERT_FALSE(found.ok());
  EXPECT_EQ(found.status().code(), StatusCode::kCorruption);
  EXPECT_NE(found.status().message().find("coordinator_searches, campaign 3: grid_json[0]"),
            std::string::npos)
      << found.status().ToString();
}

TEST(SearchTableTest, AFileWithoutTheTableIsRefused) {
  TempDir dir;
  const auto file = dir.File("old.db");
  sqlite3* raw = nullptr;
  ASSERT_EQ(sqlite3_open(file.c_str(), &raw), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(raw, "CREATE TABLE t (x)", nullptr, nullptr, nullptr), SQLITE_OK);
  sqlite3_close(raw);
  auto table = SearchTable::Open(file);
  ASSERT_FALSE(table.ok());
  EXPECT_EQ(table.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(table.status().message().find("no table coordinator_searches"), std::string::npos);
  EXPECT_EQ(SearchTable::Open(dir.File("missing.db")).status().code(), StatusCode::kNotFound);
}

}  // namespace
}  // namespace nw
