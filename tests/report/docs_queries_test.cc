// Every SQL example in docs/reports.md and docs/schema.md runs through nw query's read-only
// runner against a database holding the campaigns, baseline and flaky verdict they name, so the
// documented queries stay valid and stay read-only. Some answers are checked too.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "report/query.h"
#include "tests/db/campaign_fixture.h"

namespace nw::report {
namespace {

using testing_db::CampaignBuilder;
using testing_db::Repeat;
using testing_db::TempDir;

constexpr Outcome P = Outcome::kPass;
constexpr Outcome M = Outcome::kMiss;

// The statements of every ```sql block (a block may hold several, each ending in ';').
std::vector<std::string> SqlExamples(const std::string& doc) {
  std::ifstream in(std::string(NW_SOURCE_DIR) + "/docs/" + doc);
  EXPECT_TRUE(in.good()) << doc;
  std::vector<std::string> out;
  std::string line, stmt;
  bool in_sql = false;
  while (std::getline(in, line)) {
    if (!in_sql) {
      in_sql = line == "```sql";
      continue;
    }
    if (line == "```") {
      if (stmt.find_first_not_of(" \n") != std::string::npos) out.push_back(stmt);
      stmt.clear();
      in_sql = false;
      continue;
    }
    stmt += line + "\n";
    if (!line.empty() && line.back() == ';') {
      out.push_back(stmt);
      stmt.clear();
    }
  }
  return out;
}

class DocsQueriesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    file_ = dir_.File("nw.db");
    auto s = Store::Open(file_);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    Store& store = **s;
    for (const char* name : {"sweep", "nightly-old", "nightly-new"}) {
      CampaignBuilder b(store, name);
      const bool worse = std::string(name) == "nightly-new";
      b.Cell(1000, 0.0, Repeat(P, 2)).Cell(1000, 1.0, Repeat(P, 2));
      b.Cell(2000, 0.0, worse ? std::vector<Outcome>{M, M} : std::vector<Outcome>{P, M});
      b.Cell(2000, 1.0, {P, Outcome::kTimeout});
      b.Commit();
      if (std::string(name) == "nightly-old") {
        ASSERT_TRUE(store.SetBaseline("release-1", b.id(), "", 5000).ok());
      }
    }
    auto jobs = store.CampaignJobs(1);
    ASSERT_TRUE(jobs.ok() && !jobs->empty());
    FlakyVerdict v;
    v.job_key = jobs->front().key;
    v.gate = "release-1 -> sweep";
    v.runs = 3;
    v.passes = 2;
    v.misses = 1;
    v.verdict = "flaky";
    ASSERT_TRUE(store.RecordFlakyVerdicts({v}).ok());
  }

  TempDir dir_;
  std::filesystem::path file_;
};

TEST_F(DocsQueriesTest, ReportsDocExamplesRun) {
  const auto examples = SqlExamples("reports.md");
  ASSERT_GE(examples.size(), 8u);
  for (const std::string& sql : examples) {
    auto r = RunReadOnlyQuery(file_, sql);
    EXPECT_TRUE(r.ok()) << sql << "\n" << r.status().ToString();
  }
}

TEST_F(DocsQueriesTest, SchemaDocExamplesRun) {
  const auto examples = SqlExamples("schema.md");
  ASSERT_GE(examples.size(), 5u);
  for (const std::string& sql : examples) {
    auto r = RunReadOnlyQuery(file_, sql);
    EXPECT_TRUE(r.ok()) << sql << "\n" << r.status().ToString();
  }
}

TEST_F(DocsQueriesTest, RegressionAndFlakyExamplesAnswer) {
  const auto examples = SqlExamples("reports.md");
  const std::string* regressed = nullptr;
  const std::string* flaky = nullptr;
  for (const std::string& sql : examples) {
    if (sql.find("'nightly-new'") != std::string::npos) regressed = &sql;
    if (sql.find("v_flaky_jobs") != std::string::npos) flaky = &sql;
  }
  ASSERT_NE(regressed, nullptr);
  ASSERT_NE(flaky, nullptr);
  auto r = RunReadOnlyQuery(file_, *regressed);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->rows.size(), 1u);  // 2,000: 2/3 answers passed before, 1/3 now
  EXPECT_EQ(r->rows[0][1].integer, 2000);
  EXPECT_EQ(r->rows[0][2].text, "2/3");
  EXPECT_EQ(r->rows[0][3].text, "1/3");
  auto f = RunReadOnlyQuery(file_, *flaky);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  ASSERT_EQ(f->rows.size(), 1u);
  EXPECT_EQ(f->rows[0][4].text, "2/3");
}

}  // namespace
}  // namespace nw::report
