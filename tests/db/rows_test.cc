// db/rows.h: Columns reads consecutive columns into typed fields (NULL into nullopt), ReadRows
// and ReadOptionalRow step a statement and map its rows, stopping at a mapper's error.
#include "db/rows.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "db/sqlite.h"

namespace nw::db_internal {
namespace {

struct Row {
  std::string name;
  int64_t big = 0;
  int small = 0;
  double real = 0;
  bool flag = false;
  std::optional<int64_t> maybe_int;
  std::optional<double> maybe_real;
};

class RowsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto db = Db::Open(":memory:", /*read_only=*/false);
    ASSERT_TRUE(db.ok()) << db.status().ToString();
    db_ = std::move(db).value();
    ASSERT_TRUE(db_->Exec("CREATE TABLE t (name TEXT, big INTEGER, small INTEGER, real REAL,"
                          " flag INTEGER, maybe_int INTEGER, maybe_real REAL);"
                          "INSERT INTO t VALUES ('a', 5000000000, 7, 0.5, 1, NULL, 2.5),"
                          " ('b', -1, -2, -0.25, 0, 42, NULL)",
                          "creating the table")
                    .ok());
  }
  std::unique_ptr<Db> db_;
};

Row MapRow(const Query& q) {
  Row r;
  Columns(q).Into(r.name, r.big, r.small, r.real, r.flag, r.maybe_int, r.maybe_real);
  return r;
}

TEST_F(RowsTest, ColumnsFillFieldsInOrderWithNullAsNullopt) {
  Query q(*db_, "SELECT * FROM t ORDER BY name", "reading t");
  auto rows = ReadRows(q, MapRow);
  ASSERT_TRUE(rows.ok()) << rows.status().ToString();
  ASSERT_EQ(rows->size(), 2u);
  const Row& a = (*rows)[0];
  EXPECT_EQ(a.name, "a");
  EXPECT_EQ(a.big, 5000000000);
  EXPECT_EQ(a.small, 7);
  EXPECT_DOUBLE_EQ(a.real, 0.5);
  EXPECT_TRUE(a.flag);
  EXPECT_FALSE(a.maybe_int.has_value());
  EXPECT_EQ(a.maybe_real, 2.5);
  const Row& b = (*rows)[1];
  EXPECT_EQ(b.name, "b");
  EXPECT_EQ(b.big, -1);
  EXPECT_EQ(b.small, -2);
  EXPECT_FALSE(b.flag);
  EXPECT_EQ(b.maybe_int, 42);
  EXPECT_FALSE(b.maybe_real.has_value());
}

TEST_F(RowsTest, SkipAndStartColumnLeaveColumnsUnread) {
  Query q(*db_, "SELECT name, big, small FROM t WHERE name = 'b'", "reading t");
  auto row = ReadOptionalRow(q, [](const Query& r) {
    std::string name;
    int small = 0;
    Columns cols(r);
    cols.Into(name).Skip(1).Into(small);
    EXPECT_EQ(cols.next(), 3);
    int64_t big = 0;
    Columns(r, 1).Into(big);
    return name + " " + std::to_string(big) + " " + std::to_string(small);
  });
  ASSERT_TRUE(row.ok()) << row.status().ToString();
  EXPECT_EQ(row->value_or(""), "b -1 -2");
}

TEST_F(RowsTest, ReadOptionalRowIsNulloptWithoutARow) {
  Query q(*db_, "SELECT * FROM t WHERE name = 'none'", "reading t");
  auto row = ReadOptionalRow(q, MapRow);
  ASSERT_TRUE(row.ok()) << row.status().ToString();
  EXPECT_FALSE(row->has_value());
}

TEST_F(RowsTest, AMapperErrorStopsTheReadAndIsReturned) {
  Query q(*db_, "SELECT name FROM t ORDER BY name", "reading t");
  int calls = 0;
  auto rows = ReadRows(q, [&](const Query& r) -> Result<std::string> {
    ++calls;
    if (r.Text(0) == "a") return Status::Corruption("row a is bad");
    return r.Text(0);
  });
  EXPECT_EQ(rows.status().code(), StatusCode::kCorruption);
  EXPECT_EQ(calls, 1);
}

TEST_F(RowsTest, AStatementErrorIsReturned) {
  Query q(*db_, "SELECT no_such_column FROM t", "reading a missing column");
  auto rows = ReadRows(q, MapRow);
  ASSERT_FALSE(rows.ok());
  EXPECT_NE(rows.status().message().find("reading a missing column"), std::string::npos)
      << rows.status().ToString();
}

}  // namespace
}  // namespace nw::db_internal
