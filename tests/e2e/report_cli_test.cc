// End to end through the real `nw` binary on a database built through the Store: nw report
// --format html, nw query (reads, refusals, formats), nw export (CSV, JSON Lines, --out),
// nw baseline (set, list, rm) and nw gate's exit codes (0 pass, 1 regression, 2 not enough
// evidence, 4 bad input), its JUnit and Markdown files.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "db/store.h"
#include "tests/db/campaign_fixture.h"
#include "tests/support/shell.h"
#include "tests/support/temp_dir.h"

namespace nw {
namespace {

namespace fs = std::filesystem;
using testing_db::CampaignBuilder;
using testing_db::Repeat;
using testing_db::TempDir;

constexpr Outcome P = Outcome::kPass;
constexpr Outcome M = Outcome::kMiss;

using test_support::CommandResult;
using test_support::Sh;

class ReportCliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    db_ = dir_.File("nw.db");
    auto s = Store::Open(db_);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    // base (topk 16): found up to 2,000, lost at 4,000; worse (topk 8): lost from 2,000;
    // better (topk 32): found at 4,000 too; tiny (topk 8, 2 trials at 1,000): too little.
    CampaignBuilder base(**s, "base"), worse(**s, "worse"), better(**s, "better");
    CampaignBuilder tiny(**s, "tiny");
    for (double pos : {0.0, 0.5}) {
      base.Cell(1000, pos, Repeat(P, 10)).Cell(2000, pos, Repeat(P, 10));
      base.Cell(4000, pos, Repeat(M, 10));
      worse.Cell(1000, pos, Repeat(P, 10), 8).Cell(2000, pos, Repeat(M, 10), 8);
      worse.Cell(4000, pos, Repeat(M, 10), 8);
      better.Cell(1000, pos, Repeat(P, 10), 32).Cell(2000, pos, Repeat(P, 10), 32);
      better.Cell(4000, pos, Repeat(P, 10), 32);
      tiny.Cell(1000, pos, Repeat(M, 2), 8);
    }
    base.Commit();
    worse.Commit();
    better.Commit();
    tiny.Commit();
    // base states a criterion in its stored YAML (the others use the defaults, 0.9 / 95 %).
    ASSERT_TRUE((*s)->UpsertCampaign("base", "base.yaml",
                                     "name: base\ncriterion: {pass_rate: 0.75}\n", 2000)
                    .ok());
  }

  std::string Nw(const std::string& args) const {
    return std::string(NW_BIN) + " --db " + db_.string() + " " + args;
  }

  TempDir dir_;
  fs::path db_;
};

TEST_F(ReportCliTest, ReportHtml) {
  CommandResult r = Sh(Nw("report base --format html"));
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_EQ(r.out.rfind("<!DOCTYPE html>", 0), 0u);
  EXPECT_NE(r.out.find("<svg class=\"heatmap\""), std::string::npos);
  // base's own criterion (pass rate 0.75): 20/20 at 98.33 % (0.95 over 3 lengths) has exact
  // lower bound 0.0083^(1/20) = 0.79, found.
  EXPECT_NE(r.out.find("found at every position up to 2,000 tokens (pass 20/20, 98.33% CI "
                       "0.79-1.00); lost from 4,000"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("Criterion: pass rate &gt;= 0.75 at 95% confidence"), std::string::npos);
  // The default criterion (0.9) cannot call 20/20 found; the strict boundary used to.
  CommandResult w = Sh(Nw("report worse"));
  ASSERT_EQ(w.exit_code, 0) << w.out;
  EXPECT_NE(w.out.find("undecided at 1,000 (pass 20/20, 98.33% CI 0.79-1.00); lost from 2,000 "
                       "(pass 0/20, 98.33% CI 0.00-0.21)"),
            std::string::npos)
      << w.out;
  EXPECT_EQ(Sh(Nw("report base --format pdf")).exit_code, 2);
}

TEST_F(ReportCliTest, Query) {
  CommandResult r =
      Sh(Nw("query \"SELECT c.name, b.l_pass, b.l_fail FROM v_boundary b JOIN "
            "campaigns c ON c.id = b.campaign_id ORDER BY c.name\" --format csv"));
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_EQ(r.out,
            "name,l_pass,l_fail\n"
            "base,2000,4000\n"
            "better,4000,\n"
            "tiny,,1000\n"
            "worse,1000,2000\n");
  CommandResult j = Sh(Nw("query \"SELECT COUNT(*) AS n FROM jobs\" --format json"));
  ASSERT_EQ(j.exit_code, 0) << j.out;
  EXPECT_EQ(nlohmann::json::parse(j.out)[0]["n"], 60 * 3 + 4);
  CommandResult t = Sh(Nw("query \"SELECT name FROM campaigns ORDER BY id LIMIT 1\""));
  EXPECT_EQ(t.out, "name\n----\nbase\n(1 row)\n");
  for (const char* bad :
       {"DELETE FROM results", "UPDATE jobs SET state = 'queued'", "DROP TABLE jobs",
        "PRAGMA user_version = 9", "SELECT 1; SELECT 2", "ATTACH DATABASE 'x.db' AS x"}) {
    CommandResult b = Sh(Nw(std::string("query \"") + bad + "\""));
    EXPECT_EQ(b.exit_code, 2) << bad << ": " << b.out;
    EXPECT_NE(b.out.find("nw query: invalid_argument"), std::string::npos) << b.out;
  }
  CommandResult n = Sh(Nw("query \"SELECT COUNT(*) FROM results\" --format csv"));
  EXPECT_EQ(n.out, "COUNT(*)\n184\n");  // nothing was deleted
  EXPECT_EQ(Sh(Nw("query \"SELECT 1\" --format xml")).exit_code, 2);
}

// Rows stream: an endless result prints its first --max-rows rows as a whole document (CSV rows,
// a closed JSON array, a table with its count) and exits 2 saying why; --timeout-ms likewise.
TEST_F(ReportCliTest, QueryStreamsUnderRowAndTimeLimits) {
  const std::string endless =
      "\"WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT x FROM c\"";
  CommandResult csv = Sh(Nw("query " + endless + " --format csv --max-rows 3 --timeout-ms 0"));
  EXPECT_EQ(csv.exit_code, 2) << csv.out;
  EXPECT_EQ(csv.out.rfind("x\n1\n2\n3\n", 0), 0u) << csv.out;
  EXPECT_NE(csv.out.find("nw query: resource_exhausted: more than 3 rows"), std::string::npos)
      << csv.out;
  CommandResult json = Sh(Nw("query " + endless + " --format json --max-rows 2"));
  EXPECT_EQ(json.exit_code, 2) << json.out;
  const std::string doc = json.out.substr(0, json.out.find("nw query:"));
  auto parsed = nlohmann::json::parse(doc, nullptr, false);
  ASSERT_FALSE(parsed.is_discarded()) << json.out;
  EXPECT_EQ(parsed, nlohmann::json::parse(R"([{"x":1},{"x":2}])"));
  CommandResult table = Sh(Nw("query " + endless + " --max-rows 2"));
  EXPECT_EQ(table.exit_code, 2) << table.out;
  EXPECT_EQ(table.out.rfind("x\n-\n1\n2\n(2 rows)\n", 0), 0u) << table.out;
  CommandResult slow = Sh(Nw("query " + endless + " --format csv --timeout-ms 200"));
  EXPECT_EQ(slow.exit_code, 2);
  EXPECT_EQ(slow.out.rfind("x\n1\n2\n", 0), 0u) << slow.out.substr(0, 200);
  EXPECT_NE(slow.out.find("nw query: deadline_exceeded: query interrupted after 200 ms"),
            std::string::npos);
  EXPECT_EQ(Sh(Nw("query \"SELECT 1\" --max-rows -1")).exit_code, 2);
}

TEST_F(ReportCliTest, Export) {
  CommandResult csv = Sh(Nw("export tiny --format csv"));
  ASSERT_EQ(csv.exit_code, 0) << csv.out;
  EXPECT_EQ(csv.out.rfind("campaign,job_key,config,", 0), 0u);
  EXPECT_EQ(std::count(csv.out.begin(), csv.out.end(), '\n'), 5);  // header + 4 jobs
  const fs::path out = dir_.File("tiny.jsonl");
  CommandResult jl = Sh(Nw("export tiny --format jsonl --out " + out.string()));
  ASSERT_EQ(jl.exit_code, 0) << jl.out;
  std::ifstream in(out);
  int lines = 0;
  for (std::string line; std::getline(in, line); ++lines) {
    EXPECT_EQ(nlohmann::json::parse(line)["outcome"], "miss");
  }
  EXPECT_EQ(lines, 4);
  EXPECT_EQ(Sh(Nw("export nope")).exit_code, 2);
  EXPECT_EQ(Sh(Nw("export tiny --format xlsx")).exit_code, 2);
  EXPECT_FALSE(fs::exists(dir_.File("bad.csv")));
  EXPECT_EQ(Sh(Nw("export nope --out " + dir_.File("bad.csv").string())).exit_code, 2);
  EXPECT_FALSE(fs::exists(dir_.File("bad.csv")));
  EXPECT_FALSE(fs::exists(dir_.File("bad.csv.tmp")));
}

TEST_F(ReportCliTest, BaselineAndGateExitCodes) {
  CommandResult set = Sh(Nw("baseline set release-1 base --note first"));
  ASSERT_EQ(set.exit_code, 0) << set.out;
  EXPECT_NE(set.out.find("baseline 'release-1' = campaign 'base': 60 jobs, 60 with results"),
            std::string::npos)
      << set.out;
  CommandResult list = Sh(Nw("baseline list"));
  EXPECT_NE(list.out.find("release-1"), std::string::npos) << list.out;
  EXPECT_EQ(Sh(Nw("baseline set x nope")).exit_code, 2);

  // A regression: exit 1, with JUnit and Markdown files.
  const fs::path junit = dir_.File("gate.xml"), md = dir_.File("gate.md");
  CommandResult worse = Sh(Nw("gate --baseline release-1 --candidate worse --junit " +
                              junit.string() + " --summary " + md.string()));
  EXPECT_EQ(worse.exit_code, 1) << worse.out;
  EXPECT_NE(worse.out.find("under test: topk 16 -> 8"), std::string::npos) << worse.out;
  EXPECT_NE(worse.out.find("result: FAIL (regression)"), std::string::npos) << worse.out;
  EXPECT_NE(test_support::ReadFileText(junit).find("tests=\"4\" failures=\"1\""), std::string::npos)
      << test_support::ReadFileText(junit);
  EXPECT_EQ(test_support::ReadFileText(md).rfind("# Gate: `worse` against `release-1`", 0), 0u);
  // An improvement: exit 0.
  CommandResult better = Sh(Nw("gate --baseline release-1 --candidate better --format json"));
  EXPECT_EQ(better.exit_code, 0) << better.out;
  const auto j = nlohmann::json::parse(better.out);
  EXPECT_EQ(j["counts"]["improvements"], 1);
  EXPECT_EQ(j["decision"], "pass");
  // Nothing testable: exit 2; with --min-trials 4 the 4 lost pairs are tested (p = 1/16): 0.
  EXPECT_EQ(Sh(Nw("gate --baseline base --candidate tiny")).exit_code, 2);
  EXPECT_EQ(Sh(Nw("gate --baseline base --candidate tiny --min-trials 4")).exit_code, 0);
  // --strict: cells the candidate did not test are insufficient.
  EXPECT_EQ(Sh(Nw("gate --baseline base --candidate tiny --min-trials 4 --strict")).exit_code, 2);
  // Bad input: exit 4.
  EXPECT_EQ(Sh(Nw("gate --baseline nope --candidate worse")).exit_code, 4);
  EXPECT_EQ(Sh(Nw("gate --baseline base --candidate worse --by week")).exit_code, 4);
  EXPECT_EQ(Sh(Nw("gate --baseline base --candidate worse --alpha 2")).exit_code, 4);
  // The baseline is frozen: removing it leaves the campaign.
  EXPECT_EQ(Sh(Nw("baseline rm release-1")).exit_code, 0);
  EXPECT_EQ(Sh(Nw("baseline rm release-1")).exit_code, 2);
  EXPECT_EQ(Sh(Nw("gate --baseline base --candidate worse")).exit_code, 1);
}

// Baselines are replaced only when asked, named like campaigns, and never shadow a campaign
// silently (issue 14).
TEST_F(ReportCliTest, BaselineNamesReplaceAndShadowing) {
  ASSERT_EQ(Sh(Nw("baseline set release-2 base")).exit_code, 0);
  CommandResult again = Sh(Nw("baseline set release-2 better"));
  EXPECT_EQ(again.exit_code, 2) << again.out;
  EXPECT_NE(again.out.find("baseline 'release-2' exists; replacing it needs --replace"),
            std::string::npos)
      << again.out;
  // Still the first campaign's.
  EXPECT_NE(Sh(Nw("baseline list")).out.find("release-2               base"), std::string::npos);
  CommandResult replaced = Sh(Nw("baseline set release-2 better --replace"));
  EXPECT_EQ(replaced.exit_code, 0) << replaced.out;
  EXPECT_NE(replaced.out.find("= campaign 'better'"), std::string::npos) << replaced.out;
  for (const std::string& bad :
       std::vector<std::string>{"Release", "_x", "a/b", std::string(65, 'a')}) {
    CommandResult r = Sh(Nw("baseline set '" + bad + "' base"));
    EXPECT_EQ(r.exit_code, 2) << bad << ": " << r.out;
    EXPECT_NE(r.out.find("like a campaign name"), std::string::npos) << r.out;
  }
  CommandResult shadow = Sh(Nw("baseline set worse base"));
  EXPECT_EQ(shadow.exit_code, 2) << shadow.out;
  EXPECT_NE(shadow.out.find("'worse' is a campaign's name"), std::string::npos) << shadow.out;

  // A campaign created after its name became a baseline's: the gate says which one it read.
  {
    auto s = Store::Open(db_);
    ASSERT_TRUE(s.ok());
    CampaignBuilder late(**s, "release-2");
    late.Cell(1000, 0.0, Repeat(P, 10));
    late.Commit();
  }
  CommandResult gate = Sh(Nw("gate --baseline release-2 --candidate better"));
  EXPECT_NE(gate.out.find("nw gate: note: baseline release-2 (campaign better) (a campaign is also "
                          "named 'release-2'; --baseline reads the baseline first)"),
            std::string::npos)
      << gate.out;
  EXPECT_EQ(gate.exit_code, 0) << gate.out;
}

}  // namespace
}  // namespace nw
