// nw export: CSV (RFC 4180 quoting, parsed back here) and JSON Lines (one parseable object per
// line, columns in order, null for pending jobs, probes) of a constructed campaign.
#include "report/export.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "tests/db/campaign_fixture.h"

namespace nw::report {
namespace {

using testing_db::CampaignBuilder;
using testing_db::ConfigLabel;
using testing_db::MakeProbe;
using testing_db::MakeResult;
using testing_db::MakeSpec;
using testing_db::TempDir;

constexpr Outcome P = Outcome::kPass;
constexpr Outcome M = Outcome::kMiss;

// RFC 4180 records (quoted fields may hold commas, quotes and newlines).
std::vector<std::vector<std::string>> ParseCsv(const std::string& text) {
  std::vector<std::vector<std::string>> rows(1);
  std::string field;
  bool quoted = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (quoted) {
      if (c == '"' && i + 1 < text.size() && text[i + 1] == '"') {
        field += '"';
        ++i;
      } else if (c == '"') {
        quoted = false;
      } else {
        field += c;
      }
    } else if (c == '"') {
      quoted = true;
    } else if (c == ',') {
      rows.back().push_back(field);
      field.clear();
    } else if (c == '\n') {
      rows.back().push_back(field);
      field.clear();
      rows.emplace_back();
    } else {
      field += c;
    }
  }
  if (rows.back().empty()) rows.pop_back();
  return rows;
}

class ExportTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto s = Store::Open(dir_.File("nw.db"));
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    store_ = std::move(s).value();
    CampaignBuilder b(*store_, "exp");
    b.Cell(1000, 0.5, {P}).WithProbes({MakeProbe(0, true, 2), MakeProbe(3, false, -1, -1)});
    b.Cell(2000, 1.0, {Outcome::kEngineError});
    b.Pending(2000, 1.0, 1);
    b.Commit();
    // One more job whose answer needs quoting, and is not valid UTF-8 at the end.
    JobSpec odd = MakeSpec(4000, 0.0, 0, 16, "cpu", b.id());
    ASSERT_TRUE(store_->AddJobs(b.id(), {odd}, 5000).ok());
    ASSERT_TRUE(store_->RecordLease(odd.Key(), 1, "w9", 9000, 5000).ok());
    JobResult r = MakeResult(odd, 1, M);
    r.generated_text = "it is \"42\", or\nmaybe 7\xff";
    ASSERT_TRUE(store_->CommitResults({r}, 6000).ok());
  }

  TempDir dir_;
  std::unique_ptr<Store> store_;
};

TEST_F(ExportTest, Csv) {
  std::ostringstream out;
  auto n = ExportCampaign(*store_, "exp", ExportFormat::kCsv, out);
  ASSERT_TRUE(n.ok()) << n.status().ToString();
  EXPECT_EQ(*n, 4);
  const auto rows = ParseCsv(out.str());
  ASSERT_EQ(rows.size(), 5u) << out.str();
  EXPECT_EQ(rows[0], ExportColumns());
  auto col = [&](const std::string& name) {
    for (size_t i = 0; i < rows[0].size(); ++i) {
      if (rows[0][i] == name) return i;
    }
    ADD_FAILURE() << "no column " << name;
    return size_t{0};
  };
  for (const auto& row : rows) ASSERT_EQ(row.size(), ExportColumns().size());
  EXPECT_EQ(rows[1][col("campaign")], "exp");
  EXPECT_EQ(rows[1][col("config")], ConfigLabel());
  EXPECT_EQ(rows[1][col("context_length")], "1000");
  EXPECT_EQ(rows[1][col("needle_position")], "0.5");
  EXPECT_EQ(rows[1][col("outcome")], "pass");
  EXPECT_EQ(rows[1][col("state")], "done");
  EXPECT_EQ(rows[1][col("prefill_ms")], "10.5");
  EXPECT_EQ(rows[1][col("retryable")], "0");
  EXPECT_EQ(rows[2][col("outcome")], "engine_error");
  EXPECT_EQ(rows[2][col("error_code")], "resource_exhausted");
  // The pending job: spec columns filled, result columns empty.
  EXPECT_EQ(rows[3][col("state")], "queued");
  EXPECT_EQ(rows[3][col("trial")], "1");
  EXPECT_EQ(rows[3][col("outcome")], "");
  EXPECT_EQ(rows[3][col("result_id")], "");
  // Quotes, commas and newlines survive the round trip.
  EXPECT_EQ(rows[4][col("generated_text")], "it is \"42\", or\nmaybe 7\xff");
  EXPECT_EQ(rows[4][col("worker_id")], "w1");
}

TEST_F(ExportTest, JsonLines) {
  std::ostringstream out;
  auto n = ExportCampaign(*store_, "exp", ExportFormat::kJsonl, out);
  ASSERT_TRUE(n.ok()) << n.status().ToString();
  std::istringstream in(out.str());
  std::vector<nlohmann::ordered_json> lines;
  for (std::string line; std::getline(in, line);) {
    ASSERT_NO_THROW(lines.push_back(nlohmann::ordered_json::parse(line))) << line;
  }
  ASSERT_EQ(lines.size(), 4u);
  std::vector<std::string> keys;
  for (const auto& [k, v] : lines[0].items()) keys.push_back(k);
  std::vector<std::string> expected = ExportColumns();
  expected.push_back("probes");
  EXPECT_EQ(keys, expected);
  EXPECT_EQ(lines[0]["context_length"], 1000);
  EXPECT_EQ(lines[0]["needle_position"], 0.5);
  EXPECT_EQ(lines[0]["retryable"], false);
  ASSERT_EQ(lines[0]["probes"].size(), 2u);
  EXPECT_EQ(lines[0]["probes"][1]["layer"], 3);
  EXPECT_EQ(lines[0]["probes"][0]["in_topk_last"], true);
  EXPECT_TRUE(lines[2]["outcome"].is_null());
  EXPECT_TRUE(lines[2]["result_id"].is_null());
  EXPECT_EQ(lines[2]["probes"].size(), 0u);
  // Invalid UTF-8 becomes U+FFFD instead of failing the export.
  EXPECT_EQ(lines[3]["generated_text"], "it is \"42\", or\nmaybe 7\xef\xbf\xbd");
}

TEST_F(ExportTest, Errors) {
  std::ostringstream out;
  auto missing = ExportCampaign(*store_, "nope", ExportFormat::kCsv, out);
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(out.str().empty());
  EXPECT_EQ(ParseExportFormat("jsonl").value(), ExportFormat::kJsonl);
  EXPECT_EQ(ParseExportFormat("csv").value(), ExportFormat::kCsv);
  EXPECT_EQ(ParseExportFormat("xlsx").status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace nw::report
