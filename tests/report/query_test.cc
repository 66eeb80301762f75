// nw query: read-only SQL. Every write path (DML, DDL incl. temp objects, ATTACH/DETACH,
// transactions, savepoints, writing PRAGMAs, ANALYZE/REINDEX/VACUUM/VACUUM INTO, extension
// loading, a second statement) is refused and leaves the database and the file system as they
// were; reads of tables, views, read-only PRAGMAs and recursive CTEs work; the table, CSV and
// JSON formats.
#include "report/query.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "report/query_writer.h"
#include "tests/db/campaign_fixture.h"

namespace nw::report {
namespace {

using testing_db::CampaignBuilder;
using testing_db::ConfigLabel;
using testing_db::Repeat;
using testing_db::TempDir;

constexpr Outcome P = Outcome::kPass;
constexpr Outcome M = Outcome::kMiss;

class QueryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    file_ = dir_.File("nw.db");
    auto s = Store::Open(file_);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    CampaignBuilder b(**s, "q");
    b.Cell(1000, 0.0, Repeat(P, 2)).Cell(1000, 1.0, Repeat(P, 2));
    b.Cell(2000, 0.0, {P, M}).Cell(2000, 1.0, Repeat(P, 2));
    b.Commit();
  }

  // A fingerprint of everything a write could change: row counts and the schema.
  std::string Fingerprint() {
    auto r = RunReadOnlyQuery(
        file_,
        "SELECT (SELECT count(*) FROM campaigns) || '/' || (SELECT count(*) FROM jobs) || '/' ||"
        " (SELECT count(*) FROM results) || '/' || (SELECT count(*) FROM workers) || '/' ||"
        " (SELECT group_concat(name || ':' || sql, ';') FROM sqlite_schema) || '/' ||"
        " (SELECT group_concat(state, ',') FROM jobs)");
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    if (!r.ok() || r->rows.empty()) return "";
    return r->rows[0][0].text;
  }

  TempDir dir_;
  std::filesystem::path file_;
};

TEST_F(QueryTest, ReadsTablesAndViews) {
  auto r = RunReadOnlyQuery(file_,
                            "SELECT config, l_pass, l_fail, fail_passes, fail_trials, monotone"
                            " FROM v_boundary");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->columns, (std::vector<std::string>{"config", "l_pass", "l_fail", "fail_passes",
                                                  "fail_trials", "monotone"}));
  ASSERT_EQ(r->rows.size(), 1u);
  EXPECT_EQ(r->rows[0][0].text, ConfigLabel());
  EXPECT_EQ(r->rows[0][1].integer, 1000);
  EXPECT_EQ(r->rows[0][2].integer, 2000);
  EXPECT_EQ(r->rows[0][3].integer, 3);
  EXPECT_EQ(r->rows[0][4].integer, 4);

  auto heat = RunReadOnlyQuery(file_,
                               "SELECT pass_rate FROM v_heatmap ORDER BY context_length,"
                               " needle_position");
  ASSERT_TRUE(heat.ok()) << heat.status().ToString();
  ASSERT_EQ(heat->rows.size(), 4u);
  EXPECT_EQ(heat->rows[2][0].type, SqlValue::Type::kReal);
  EXPECT_DOUBLE_EQ(heat->rows[2][0].real, 0.5);
}

TEST_F(QueryTest, ReadOnlyPragmasCtesAndTrailingComments) {
  auto info = RunReadOnlyQuery(file_, "PRAGMA table_info(jobs)");
  ASSERT_TRUE(info.ok()) << info.status().ToString();
  EXPECT_GT(info->rows.size(), 10u);
  auto version = RunReadOnlyQuery(file_, "PRAGMA user_version");
  ASSERT_TRUE(version.ok()) << version.status().ToString();
  EXPECT_EQ(version->rows.at(0).at(0).integer, Store::LatestSchemaVersion());
  // The table-valued pragma functions are refused (connecting them asks the authorizer for a
  // write to sqlite_master); the PRAGMA statements above are the way to read the same.
  auto tvf = RunReadOnlyQuery(file_, "SELECT name FROM pragma_table_info('results') LIMIT 1");
  ASSERT_FALSE(tvf.ok());
  EXPECT_EQ(tvf.status().code(), StatusCode::kInvalidArgument);
  auto cte =
      RunReadOnlyQuery(file_,
                       "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 5)"
                       " SELECT sum(x) AS s FROM c;  -- the sum\n");
  ASSERT_TRUE(cte.ok()) << cte.status().ToString();
  EXPECT_EQ(cte->rows.at(0).at(0).integer, 15);
  auto fn = RunReadOnlyQuery(file_, "SELECT upper('a'), json_array(1, 2), abs(-3)");
  ASSERT_TRUE(fn.ok()) << fn.status().ToString();
  EXPECT_EQ(fn->rows.at(0).at(1).text, "[1,2]");
}

TEST_F(QueryTest, RefusesEveryWritePath) {
  const std::string before = Fingerprint();
  ASSERT_FALSE(before.empty());
  const std::string attach_file = dir_.File("attached.db").string();
  const std::string vacuum_file = dir_.File("copy.db").string();
  const std::vector<std::string> writes = {
      "INSERT INTO campaigns (name, created_ms, updated_ms) VALUES ('x', 1, 1)",
      "INSERT OR IGNORE INTO workers (id, first_seen_ms, last_seen_ms) VALUES ('w', 1, 1)",
      "REPLACE INTO workers (id, first_seen_ms, last_seen_ms) VALUES ('w', 1, 1)",
      "INSERT INTO results SELECT * FROM results",
      "UPDATE jobs SET state = 'queued'",
      "UPDATE jobs SET state = 'queued' RETURNING key",
      "DELETE FROM results",
      "DELETE FROM results RETURNING id",
      "WITH x AS (SELECT 1) DELETE FROM results",
      "CREATE TABLE t (a)",
      "CREATE TABLE t AS SELECT * FROM jobs",
      "CREATE TEMP TABLE t (a)",
      "CREATE TEMP VIEW v AS SELECT 1",
      "CREATE VIEW v AS SELECT 1",
      "CREATE INDEX i ON jobs (seed)",
      "CREATE TRIGGER tr AFTER INSERT ON jobs BEGIN SELECT 1; END",
      "CREATE VIRTUAL TABLE vt USING fts5(a)",
      "DROP TABLE results",
      "DROP VIEW v_heatmap",
      "DROP INDEX jobs_by_state",
      "DROP TABLE IF EXISTS nothing_here",
      "ALTER TABLE jobs ADD COLUMN x",
      "ALTER TABLE jobs RENAME TO j2",
      "ATTACH DATABASE '" + attach_file + "' AS other",
      "DETACH DATABASE other",
      "BEGIN",
      "BEGIN IMMEDIATE",
      "COMMIT",
      "ROLLBACK",
      "SAVEPOINT s",
      "RELEASE s",
      "PRAGMA user_version = 7",
      "PRAGMA journal_mode = DELETE",
      "PRAGMA query_only = OFF",
      "PRAGMA query_only = 0",
      "PRAGMA writable_schema = ON",
      "PRAGMA foreign_keys = OFF",
      "PRAGMA wal_checkpoint(TRUNCATE)",
      "PRAGMA optimize",
      "PRAGMA incremental_vacuum",
      "PRAGMA schema_version = 1",
      "SELECT * FROM pragma_user_version",
      "ANALYZE",
      "REINDEX",
      "VACUUM",
      "VACUUM INTO '" + vacuum_file + "'",
      "SELECT load_extension('/nonexistent/x')",
      "SELECT 1; DELETE FROM results",
      "SELECT 1; SELECT 2",
      "",
      "   -- only a comment",
  };
  for (const std::string& sql : writes) {
    auto r = RunReadOnlyQuery(file_, sql);
    EXPECT_FALSE(r.ok()) << "not refused: " << sql;
    if (!r.ok()) {
      EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument)
          << sql << ": " << r.status().ToString();
    }
  }
  EXPECT_EQ(Fingerprint(), before);
  EXPECT_FALSE(std::filesystem::exists(attach_file));
  EXPECT_FALSE(std::filesystem::exists(vacuum_file));
  // The database is still a healthy, writable needlework database.
  auto s = Store::Open(file_);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  auto c = (*s)->FindCampaign("q");
  ASSERT_TRUE(c.ok() && c->has_value());
}

TEST_F(QueryTest, RefusalsSayWhat) {
  auto del = RunReadOnlyQuery(file_, "DELETE FROM results");
  ASSERT_FALSE(del.ok());
  EXPECT_NE(del.status().message().find("refused: DELETE results"), std::string::npos)
      << del.status().message();
  auto pragma = RunReadOnlyQuery(file_, "PRAGMA user_version = 7");
  ASSERT_FALSE(pragma.ok());
  EXPECT_NE(pragma.status().message().find("refused: PRAGMA user_version = 7"), std::string::npos)
      << pragma.status().message();
  auto two = RunReadOnlyQuery(file_, "SELECT 1; SELECT 2");
  ASSERT_FALSE(two.ok());
  EXPECT_NE(two.status().message().find("exactly one statement"), std::string::npos);
  auto bad = RunReadOnlyQuery(file_, "SELEC 1");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("SQL error"), std::string::npos);
  auto missing = RunReadOnlyQuery(dir_.File("absent.db"), "SELECT 1");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_FALSE(std::filesystem::exists(dir_.File("absent.db")));
}

// The statement's connection is opened through db/'s one SQLite wrapper, without following a
// symbolic link to the database (SQLITE_OPEN_NOFOLLOW), and its open errors name the file.
TEST_F(QueryTest, RefusesADatabaseReachedThroughASymbolicLink) {
  const std::filesystem::path link = dir_.File("link.db");
  std::filesystem::create_symlink(file_, link);
  auto r = RunReadOnlyQuery(link, "SELECT 1");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kIoError) << r.status().ToString();
  EXPECT_NE(r.status().message().find(link.string() + ": opening read-only"), std::string::npos)
      << r.status().ToString();
  EXPECT_TRUE(RunReadOnlyQuery(file_, "SELECT 1").ok());
}

TEST_F(QueryTest, TimeoutAndRowLimit) {
  QueryOptions o;
  o.timeout_ms = 100;
  auto r = RunReadOnlyQuery(
      file_,
      "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT count(*)"
      " FROM c",
      o);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kDeadlineExceeded);
  QueryOptions limit;
  limit.max_rows = 3;
  auto rows = RunReadOnlyQuery(file_, "SELECT key FROM jobs", limit);
  ASSERT_FALSE(rows.ok());
  EXPECT_EQ(rows.status().code(), StatusCode::kResourceExhausted);
}

TEST_F(QueryTest, Formats) {
  auto r = RunReadOnlyQuery(file_,
                            "SELECT 1 AS a, 2.5 AS b, 'x,\"y\"' AS c, NULL AS d, x'00ff' AS e,"
                            " 'two\nlines' AS a UNION ALL SELECT -20, 0.1, 'plain', 7, NULL, 'z'");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(FormatQueryCsv(*r),
            "a,b,c,d,e,a\n"
            "1,2.5,\"x,\"\"y\"\"\",,00ff,\"two\nlines\"\n"
            "-20,0.1,plain,7,,z\n");
  EXPECT_EQ(FormatQueryTable(*r),
            "  a    b  c         d  e        a\n"
            "---  ---  -----  ----  -------  ----------\n"
            "  1  2.5  x,\"y\"  NULL  x'00ff'  two\\nlines\n"
            "-20  0.1  plain     7  NULL     z\n"
            "(2 rows)\n");
  EXPECT_EQ(FormatQueryJson(*r).dump(),
            "[{\"a\":1,\"b\":2.5,\"c\":\"x,\\\"y\\\"\",\"d\":null,\"e\":{\"hex\":\"00ff\"},"
            "\"a:2\":\"two\\nlines\"},"
            "{\"a\":-20,\"b\":0.1,\"c\":\"plain\",\"d\":7,\"e\":null,\"a:2\":\"z\"}]");
  auto empty = RunReadOnlyQuery(file_, "SELECT key FROM jobs WHERE 0");
  ASSERT_TRUE(empty.ok());
  EXPECT_EQ(FormatQueryTable(*empty), "key\n---\n(0 rows)\n");
  EXPECT_EQ(FormatQueryJson(*empty).dump(), "[]");
}

// Rows reach the sink while the statement runs: an endless result is read row by row and stops
// when the sink says so (collecting it first could never finish).
TEST_F(QueryTest, StreamsRowsToTheSink) {
  class FirstFive final : public QueryRowSink {
   public:
    Status Columns(const std::vector<std::string>& c) override {
      columns = c;
      return Status::Ok();
    }
    Status Row(const std::vector<SqlValue>& row) override {
      seen.push_back(row.at(0).integer);
      if (seen.size() == 5) return Status::Cancelled("enough");
      return Status::Ok();
    }
    std::vector<std::string> columns;
    std::vector<int64_t> seen;
  } sink;
  auto r = StreamReadOnlyQuery(
      file_, "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT x FROM c", {},
      sink);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kCancelled);
  EXPECT_EQ(sink.columns, std::vector<std::string>{"x"});
  EXPECT_EQ(sink.seen, (std::vector<int64_t>{1, 2, 3, 4, 5}));
  // max_rows: the first rows are handed on, then ResourceExhausted.
  std::ostringstream csv;
  auto w = QueryWriter::Create(QueryFormat::kCsv, csv);
  QueryOptions three;
  three.max_rows = 3;
  auto limited = StreamReadOnlyQuery(file_,
                                     "SELECT 7 UNION ALL SELECT 8 UNION ALL SELECT 9 "
                                     "UNION ALL SELECT 10",
                                     three, *w);
  ASSERT_FALSE(limited.ok());
  EXPECT_EQ(limited.status().code(), StatusCode::kResourceExhausted);
  w->Finish();
  EXPECT_EQ(csv.str(), "7\n7\n8\n9\n");
  auto counted = StreamReadOnlyQuery(file_, "SELECT key FROM jobs", {}, *w);
  ASSERT_TRUE(counted.ok()) << counted.status().ToString();
  EXPECT_EQ(*counted, 8);
}

// The streaming writers print what the whole-result formatters print; the table sizes its
// columns from its window of rows and keeps those widths after it.
TEST_F(QueryTest, StreamingWritersMatchTheFormatters) {
  const std::string sql =
      "SELECT 1 AS a, 2.5 AS b, 'x,\"y\"' AS c, NULL AS d, x'00ff' AS e, 'two\nlines' AS a"
      " UNION ALL SELECT -20, 0.1, 'plain', 7, NULL, 'z'";
  auto all = RunReadOnlyQuery(file_, sql);
  ASSERT_TRUE(all.ok()) << all.status().ToString();
  auto written = [&](QueryFormat f, size_t window) {
    std::ostringstream out;
    auto w = QueryWriter::Create(f, out, window);
    auto n = StreamReadOnlyQuery(file_, sql, {}, *w);
    EXPECT_TRUE(n.ok()) << n.status().ToString();
    w->Finish();
    return out.str();
  };
  EXPECT_EQ(written(QueryFormat::kCsv, kQueryTableWindow), FormatQueryCsv(*all));
  EXPECT_EQ(written(QueryFormat::kTable, kQueryTableWindow), FormatQueryTable(*all));
  EXPECT_EQ(
      written(QueryFormat::kJson, kQueryTableWindow),
      FormatQueryJson(*all).dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n");
  // A window of one row: widths from the first row, the wider second row sticks out.
  EXPECT_EQ(written(QueryFormat::kTable, 1),
            "a    b  c         d  e        a\n"
            "-  ---  -----  ----  -------  ----------\n"
            "1  2.5  x,\"y\"  NULL  x'00ff'  two\\nlines\n"
            "-20  0.1  plain     7  NULL     z\n"
            "(2 rows)\n");
  std::ostringstream empty;
  auto w = QueryWriter::Create(QueryFormat::kJson, empty);
  ASSERT_TRUE(StreamReadOnlyQuery(file_, "SELECT key FROM jobs WHERE 0", {}, *w).ok());
  w->Finish();
  EXPECT_EQ(empty.str(), "[]\n");
  EXPECT_FALSE(ParseQueryFormat("xml").ok());
}

}  // namespace
}  // namespace nw::report
