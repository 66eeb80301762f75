// Campaign reports: a text snapshot of a constructed campaign read back through a read-only
// Store, colour only on request, and the Markdown and JSON renderings of the same data.
#include "report/report.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "report/html.h"
#include "report/stats.h"
#include "tests/db/campaign_fixture.h"

namespace nw::report {
namespace {

using testing_db::CampaignBuilder;
using testing_db::ConfigLabel;
using testing_db::MakeProbe;
using testing_db::Repeat;
using testing_db::TempDir;

constexpr Outcome P = Outcome::kPass;
constexpr Outcome M = Outcome::kMiss;

class ReportTest : public ::testing::Test {
 protected:
  void SetUp() override {
    file_ = dir_.File("nw.db");
    auto s = Store::Open(file_);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    CampaignBuilder b(**s, "snapshot");
    // topk=16: found up to 1,850, lost from 4,509; one engine error, one pending job; probes.
    for (int64_t len : {1000, 1850}) {
      b.Cell(len, 0.0, Repeat(P, 2)).Cell(len, 0.5, Repeat(P, 2)).Cell(len, 1.0, Repeat(P, 2));
    }
    b.Cell(4509, 0.0, {P, M})
        .WithProbes({MakeProbe(0, false, 12), MakeProbe(2, false, -1, -1)})
        .Cell(4509, 0.5, {M, M})
        .WithProbes({MakeProbe(0, false, 30), MakeProbe(2, false, -1, -1)})
        .Cell(4509, 1.0, {P, Outcome::kEngineError})
        .Pending(4509, 1.0, 2);
    b.Cell(1000, -512, {P}).WithProbes({MakeProbe(0, true, 1), MakeProbe(2, true, 4)});
    b.Cell(1850, -512, {P}).WithProbes({MakeProbe(0, true, 3), MakeProbe(2, false, 9)});
    b.Cell(4509, -512, {P}).WithProbes({MakeProbe(0, true, 2), MakeProbe(2, false, -1, -1)});
    // topk=64: found everywhere.
    for (int64_t len : {1000, 4509}) b.Cell(len, 0.0, Repeat(P, 3), 64).Cell(len, 1.0, {P}, 64);
    // cpu-paged: lost at every length; one truncated answer.
    b.Cell(1000, 0.0, {M, Outcome::kTruncated}, 16, "cpu-paged")
        .Cell(4509, 0.0, {M, P}, 16, "cpu-paged");
    b.Commit();
    campaign_id_ = b.id();
    s->reset();
    auto ro = Store::Open(file_, Store::Mode::kReadOnly);
    ASSERT_TRUE(ro.ok()) << ro.status().ToString();
    store_ = std::move(ro).value();
    auto r = LoadCampaignReport(*store_, "snapshot");
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    report_ = std::move(r).value();
  }

  TempDir dir_;
  std::filesystem::path file_;
  std::unique_ptr<Store> store_;
  int64_t campaign_id_ = 0;
  CampaignReport report_;
};

// Checked by hand: 34 jobs (22 topk=16/cpu incl. 1 pending, 8 topk=64, 4 cpu-paged); at 4,509
// the topk=16/cpu answers are 1/2 + 0/2 + 1/1 + 1/1 = 3/6, Wilson 95% [0.19, 0.81]; probe layer
// 0 median of {1, 2, 3, 12, 30} = 3, layer 2 median of the visible {4, 9} = 6.5.
constexpr const char* kExpectedText = R"txt(campaign snapshot (snapshot.yaml)
jobs: 34 total, 33 done, 0 failed, 0 leased, 1 queued
outcomes: pass 26, miss 5, truncated 1, empty 0, engine_error 1, timeout 0
without an answer: 1 engine_error: resource_exhausted: simulated
criterion: pass rate >= 0.9 at 95% confidence (found: the exact Clopper-Pearson interval lies at or above the pass rate; lost: below it; undecided: it straddles it)

topk=16 precision=fp32 backend=cpu task=niah-single haystack=noise
  undecided at every tested length (1,000-4,509 tokens; 1,000, 1,850 (each pass 7/7, 98.33% CI 0.50-1.00), 4,509 (pass 3/6, 98.33% CI 0.08-0.92)); about 39 more answers at 1,000 (observed rate 1) would decide it if the rate held (46 in all: the smallest n whose 98.33% CI at that rate clears 0.9); 1 without an answer, 1 pending
  verdict levels: lengths 98.33% CI, cells 99.58% CI (the criterion's confidence split over 3 lengths and 12 cells with answers, Bonferroni)
  outcomes: pass 17, miss 3, truncated 0, empty 0, engine_error 1, timeout 0
  without an answer: 1 engine_error: resource_exhausted: simulated
  heatmap (passes/answers and verdict; rows: context length, columns: needle position):
    length    0%   50%        100%  end-512  length verdict
     1,000  2/2?  2/2?        2/2?     1/1?  undecided
     1,850  2/2?  2/2?        2/2?     1/1?  undecided
     4,509  1/2?  0/2?  1/1 e1 p1?     1/1?  undecided
  indexer probes (needle in the top-k at the last prompt position; its rank over the question and answer positions):
    layer 0: 3/5 answers (60%), median rank 3, best 1
    layer 2: 1/5 answers (20%), median rank 6.5, best 4

topk=16 precision=fp32 backend=cpu-paged task=niah-single haystack=noise
  undecided at every tested length (1,000-4,509 tokens; 1,000 (pass 0/1, 97.5% CI 0.00-0.99), 4,509 (pass 1/2, 97.5% CI 0.01-0.99)); about 1 more answer at 1,000 (observed rate 0) would decide it if the rate held (2 in all: the smallest n whose 97.5% CI at that rate clears 0.9); 1 without an answer
  verdict levels: lengths 97.5% CI, cells 97.5% CI (the criterion's confidence split over 2 lengths and 2 cells with answers, Bonferroni)
  outcomes: pass 1, miss 2, truncated 1, empty 0, engine_error 0, timeout 0
  heatmap (passes/answers and verdict; rows: context length, columns: needle position):
    length       0%  length verdict
     1,000  0/1 e1?  undecided
     4,509     1/2?  undecided

topk=64 precision=fp32 backend=cpu task=niah-single haystack=noise
  undecided at every tested length (1,000-4,509 tokens; 1,000, 4,509 (each pass 4/4, 97.5% CI 0.33-1.00)); about 38 more answers at 1,000 (observed rate 1) would decide it if the rate held (42 in all: the smallest n whose 97.5% CI at that rate clears 0.9)
  verdict levels: lengths 97.5% CI, cells 98.75% CI (the criterion's confidence split over 2 lengths and 4 cells with answers, Bonferroni)
  outcomes: pass 8, miss 0, truncated 0, empty 0, engine_error 0, timeout 0
  heatmap (passes/answers and verdict; rows: context length, columns: needle position):
    length    0%  100%  length verdict
     1,000  3/3?  1/1?  undecided
     4,509  3/3?  1/1?  undecided

cells: passes/answers, then the cell's verdict: + found, x lost, ? undecided; eN = N runs
       without an answer (engine_error, timeout, truncated, empty: never counted as
       misses); fN = N jobs failed (retries used up, no result); pN = N jobs pending;
       - = no answers
)txt";

TEST_F(ReportTest, TextSnapshot) { EXPECT_EQ(RenderText(report_), kExpectedText); }

TEST_F(ReportTest, ColourOnlyWhenAsked) {
  const std::string plain = RenderText(report_);
  EXPECT_EQ(plain.find('\x1b'), std::string::npos);
  const std::string colour = RenderText(report_, TextOptions{.color = true});
  // The colour is the pass rate's; the mark after the counts is the cell's verdict.
  EXPECT_NE(colour.find("\x1b[32m2/2?\x1b[0m"), std::string::npos);  // all passed: green
  EXPECT_NE(colour.find("\x1b[31m0/2?\x1b[0m"), std::string::npos);  // none passed: red
  EXPECT_NE(colour.find("\x1b[33m1/2?\x1b[0m"), std::string::npos);  // some passed: yellow
  EXPECT_NE(colour.find("\x1b[1m" + ConfigLabel() + "\x1b[0m"), std::string::npos);
  // Padding is computed on the visible text, so stripping the codes gives the plain report.
  std::string stripped;
  for (size_t i = 0; i < colour.size(); ++i) {
    if (colour[i] == '\x1b') {
      while (i < colour.size() && colour[i] != 'm') ++i;
    } else {
      stripped += colour[i];
    }
  }
  EXPECT_EQ(stripped, plain);
}

TEST_F(ReportTest, MarkdownHasTheSameData) {
  const std::string md = RenderMarkdown(report_);
  EXPECT_EQ(md.rfind("# Campaign `snapshot`\n", 0), 0u) << md;
  EXPECT_NE(md.find("| pass | miss | truncated | empty | engine_error | timeout |\n"
                    "|---:|---:|---:|---:|---:|---:|\n| 26 | 5 | 1 | 0 | 1 | 0 |"),
            std::string::npos)
      << md;
  // Verdicts at pass rate 0.9: 7/7 cannot show 0.9 (the strict boundary said "found up to
  // 1,850"), and 3/6 at 4,509 cannot show it is below (exact upper bound 0.92 at 98.33 %; the
  // Wilson interval called it lost).
  EXPECT_NE(md.find("| `" + ConfigLabel() +
                    "` | undecided at every tested length (1,000-4,509 tokens; 1,000, 1,850 (each "
                    "pass 7/7, 98.33% CI 0.50-1.00), 4,509 (pass 3/6, 98.33% CI 0.08-0.92)); "
                    "about 39 more answers at 1,000"),
            std::string::npos)
      << md;
  EXPECT_NE(md.find("| length \\ position | 0% | 50% | 100% | end-512 | length verdict |\n"
                    "|---:|---:|---:|---:|---:|---|"),
            std::string::npos)
      << md;
  EXPECT_NE(md.find("| 4,509 | 1/2? | 0/2? | 1/1 e1 p1? | 1/1? | undecided |"), std::string::npos)
      << md;
  EXPECT_NE(md.find("| 26 | 5 | 1 | 0 | 1 | 0 |\n\nWithout an answer:\n\n- 1 engine_error: "
                    "resource_exhausted: simulated\n\ncriterion: pass rate >= 0.9 at 95% "
                    "confidence"),
            std::string::npos)
      << md;
  EXPECT_NE(md.find("| 0 | 3/5 (60%) | 3 | 1 |"), std::string::npos) << md;
  EXPECT_NE(md.find("| 2 | 1/5 (20%) | 6.5 | 4 |"), std::string::npos) << md;
  // One miss is not a loss (the Wilson interval called 0/1 lost: 0.00-0.83).
  EXPECT_NE(md.find("(1,000-4,509 tokens; 1,000 (pass 0/1, 97.5% CI 0.00-0.99), 4,509 (pass 1/2, "
                    "97.5% CI 0.01-0.99))"),
            std::string::npos)
      << md;
}

TEST_F(ReportTest, JsonHasTheSameData) {
  const nlohmann::json j = RenderJson(report_);
  EXPECT_EQ(j["campaign"]["name"], "snapshot");
  EXPECT_EQ(j["progress"]["total"], 34);
  EXPECT_EQ(j["progress"]["queued"], 1);
  EXPECT_EQ(j["outcomes"]["pass"], 26);
  EXPECT_EQ(j["outcomes"]["engine_error"], 1);
  ASSERT_EQ(j["configs"].size(), 3u);
  const nlohmann::json& c = j["configs"][0];
  EXPECT_EQ(c["config"], ConfigLabel());
  EXPECT_EQ(c["summary"],
            "undecided at every tested length (1,000-4,509 tokens; 1,000, 1,850 (each pass 7/7, "
            "98.33% CI 0.50-1.00), 4,509 (pass 3/6, 98.33% CI 0.08-0.92)); about 39 more answers "
            "at 1,000 (observed rate 1) would decide it if the rate held (46 in all: the smallest "
            "n whose 98.33% CI at that rate clears 0.9); 1 without an answer, 1 pending");
  EXPECT_EQ(j["criterion"]["pass_rate"], 0.9);
  EXPECT_EQ(j["criterion"]["confidence"], 0.95);
  EXPECT_EQ(c["verdicts"]["found_up_to"], nullptr);
  EXPECT_EQ(c["verdicts"]["lost_from"], nullptr);
  EXPECT_EQ(c["verdicts"]["undecided"], nlohmann::json::array({1000, 1850, 4509}));
  EXPECT_EQ(c["verdicts"]["nearest_undecided"]["length"], 1000);
  EXPECT_EQ(c["verdicts"]["nearest_undecided"]["answers_to_decide"], 46);
  EXPECT_EQ(c["lengths"][2]["verdict"], "undecided");
  // The interval next to a verdict is the exact one that decided it: 3/6 at 98.33 %.
  EXPECT_EQ(c["lengths"][2]["ci"]["method"], "clopper-pearson");
  EXPECT_NEAR(c["lengths"][2]["ci"]["hi"].get<double>(), 0.9206, 1e-4);
  EXPECT_EQ(c["cells"][9]["verdict"], "undecided");  // 4,509 at 50%: 0/2 (upper 0.954 at 99.58%)
  EXPECT_EQ(c["cells"][0]["verdict"], "undecided");
  EXPECT_EQ(c["boundary"]["l_pass"], 1850);
  EXPECT_EQ(c["boundary"]["l_fail"], 4509);
  EXPECT_EQ(c["boundary"]["monotone"], true);
  EXPECT_EQ(c["boundary"]["pass"]["length"], 1850);
  EXPECT_EQ(c["boundary"]["pass"]["passes"], 7);
  EXPECT_EQ(c["boundary"]["pass"]["trials"], 7);
  EXPECT_NEAR(c["boundary"]["pass"]["ci95"][0].get<double>(), 7.0 / (7.0 + kZ95 * kZ95), 1e-9);
  EXPECT_EQ(c["boundary"]["pass"]["ci95"][1].get<double>(), 1.0);
  EXPECT_EQ(c["boundary"]["fail"]["passes"], 3);
  EXPECT_EQ(c["boundary"]["fail"]["trials"], 6);
  EXPECT_NEAR(c["boundary"]["fail"]["ci95"][0].get<double>(), 0.187610, 1e-5);
  EXPECT_NEAR(c["boundary"]["fail"]["ci95"][1].get<double>(), 0.812390, 1e-5);
  EXPECT_EQ(c["totals"]["pending"], 1);
  EXPECT_EQ(c["cells"].size(), 12u);
  EXPECT_EQ(c["cells"][3]["position_label"], "end-512");
  EXPECT_EQ(c["lengths"].size(), 3u);
  EXPECT_EQ(c["lengths"][2]["failing"], true);
  ASSERT_EQ(c["probes"].size(), 2u);
  EXPECT_EQ(c["probes"][1]["median_rank"], 6.5);
  EXPECT_EQ(j["configs"][2]["boundary"]["l_fail"], nullptr);
  EXPECT_EQ(j["configs"][2]["boundary"]["fail"], nullptr);
  EXPECT_EQ(j["configs"][1]["boundary"]["pass"], nullptr);  // cpu-paged: lost everywhere
  EXPECT_EQ(j["configs"][2]["probes"].size(), 0u);
  // Round-trips through text.
  EXPECT_EQ(nlohmann::json::parse(j.dump()), j);
}

TEST_F(ReportTest, UnknownCampaignIsNotFound) {
  auto r = LoadCampaignReport(*store_, "nope");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kNotFound);
  EXPECT_NE(r.status().message().find("'nope'"), std::string::npos);
  EXPECT_NE(r.status().message().find(file_.string()), std::string::npos);
}

TEST(ReportEmpty, ACampaignWithoutResults) {
  CampaignRecord c;
  c.name = "empty";
  CampaignProgress p;
  p.total = 3;
  p.queued = 3;
  const CampaignReport r = BuildCampaignReport(c, p, {}, {}, {});
  EXPECT_EQ(RenderText(r),
            "campaign empty\n"
            "jobs: 3 total, 0 done, 0 failed, 0 leased, 3 queued\n"
            "outcomes: pass 0, miss 0, truncated 0, empty 0, engine_error 0, timeout 0\n"
            "criterion: pass rate >= 0.9 at 95% confidence (found: the exact Clopper-Pearson "
            "interval lies at or above the pass rate; lost: below it; undecided: it straddles "
            "it)\n"
            "\nno results yet\n");
  EXPECT_NE(RenderMarkdown(r).find("No results yet."), std::string::npos);
  EXPECT_TRUE(RenderJson(r)["configs"].empty());
}

// A job that gave up after its retries (an http server that is down) is failed with its reason
// in every format, never pending (issue 14).
TEST(ReportFailures, FailedJobsShowTheirReasonInEveryFormat) {
  TempDir dir;
  const auto file = dir.File("nw.db");
  int64_t id = 0;
  {
    auto s = Store::Open(file);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    CampaignBuilder b(**s, "down");
    b.Cell(1000, 0.0, {P}).Pending(1000, 0.5, 0).Pending(1000, 0.5, 1);
    b.Commit();
    id = b.id();
    for (int trial : {0, 1}) {
      const std::string key = testing_db::MakeSpec(1000, 0.5, trial, 16, "cpu", id).Key();
      ASSERT_TRUE((*s)->RecordLease(key, 1, "w1", 9000, 5000).ok());
      ASSERT_TRUE((*s)->RecordFailure(key, 1,
                                      Status::Unavailable("POST http://127.0.0.1:9/v1/completions: "
                                                          "connection refused"),
                                      false, 6000)
                      .ok());
    }
  }
  auto ro = Store::Open(file, Store::Mode::kReadOnly);
  ASSERT_TRUE(ro.ok());
  auto r = LoadCampaignReport(**ro, "down");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const std::string reason =
      "2 failed (retries used up): unavailable: POST http://127.0.0.1:9/v1/completions: "
      "connection refused";

  const std::string text = RenderText(*r);
  EXPECT_NE(text.find("jobs: 3 total, 1 done, 2 failed, 0 leased, 0 queued"), std::string::npos);
  EXPECT_NE(text.find("\nwithout an answer: " + reason + "\n"), std::string::npos) << text;
  EXPECT_NE(text.find("\n  without an answer: " + reason + "\n"), std::string::npos) << text;
  EXPECT_NE(text.find("- f2"), std::string::npos) << text;  // the cell: no answers, 2 failed
  EXPECT_NE(text.find("2 failed (retries used up)"), std::string::npos);
  EXPECT_EQ(text.find("2 pending"), std::string::npos) << text;
  EXPECT_EQ(text.find(" p2"), std::string::npos) << text;

  const std::string md = RenderMarkdown(*r);
  EXPECT_NE(md.find("- " + reason + "\n"), std::string::npos) << md;
  EXPECT_NE(md.find("| - f2 |"), std::string::npos) << md;

  const std::string html = RenderHtml(*r);
  EXPECT_NE(html.find("<li>" + reason + "</li>"), std::string::npos);
  EXPECT_NE(html.find("2 failed (retries used up, no result)"), std::string::npos);

  const nlohmann::json j = RenderJson(*r);
  EXPECT_EQ(j["progress"]["failed"], 2);
  ASSERT_EQ(j["failures"].size(), 1u);
  EXPECT_EQ(j["failures"][0]["kind"], "failed");
  EXPECT_EQ(j["failures"][0]["jobs"], 2);
  EXPECT_EQ(j["failures"][0]["reason"],
            "unavailable: POST http://127.0.0.1:9/v1/completions: connection refused");
  const nlohmann::json& c = j["configs"][0];
  EXPECT_EQ(c["failures"].size(), 1u);
  EXPECT_EQ(c["totals"]["failed"], 2);
  EXPECT_EQ(c["totals"]["pending"], 0);
  EXPECT_EQ(c["lengths"][0]["failed"], 2);
  EXPECT_EQ(c["cells"][1]["failed"], 2);
  EXPECT_EQ(c["cells"][1]["pending"], 0);
}

// The same cause on several workers is one reason (the coordinator names the worker).
TEST(ReportFailures, OneReasonAcrossWorkersAndConfigurations) {
  const std::string tail = ": cannot connect to http://127.0.0.1:9 (attempt 3; giving up)";
  const std::vector<FailureReason> in = {
      {"a", "failed", "unavailable: engine error on worker w-0" + tail, 2},
      {"b", "failed", "unavailable: engine error on worker w-1" + tail, 1},
      {"b", "engine_error", "resource_exhausted: simulated", 5},
      {"a", "failed", "unavailable: engine error on worker w-0" + tail, 1},
  };
  const std::vector<FailureReason> out = FailuresByReason(in);
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].kind, "engine_error");
  EXPECT_EQ(out[0].jobs, 5);
  EXPECT_EQ(out[1].kind, "failed");
  EXPECT_EQ(out[1].jobs, 4);
  EXPECT_EQ(out[1].reason, "unavailable: engine error on workers w-0, w-1" + tail);
  EXPECT_EQ(DescribeFailures(out)[1],
            "4 failed (retries used up): unavailable: engine error on workers w-0, w-1" + tail);
  // One worker keeps its name as written.
  EXPECT_EQ(FailuresByReason({in[0]})[0].reason, in[0].reason);
}

// NO_COLOR (set and not empty) and TERM=dumb turn colour off; redrawing needs a terminal that is
// not dumb.
TEST(ReportColour, NoColorAndDumbTerminalsTurnColourOff) {
  EXPECT_TRUE(ColorAllowed(true, nullptr, "xterm-256color"));
  EXPECT_TRUE(ColorAllowed(true, nullptr, nullptr));
  EXPECT_TRUE(ColorAllowed(true, "", "xterm"));  // NO_COLOR= (empty) does not count
  EXPECT_FALSE(ColorAllowed(true, "1", "xterm"));
  EXPECT_FALSE(ColorAllowed(true, "0", "xterm"));  // any non-empty value
  EXPECT_FALSE(ColorAllowed(true, nullptr, "dumb"));
  EXPECT_FALSE(ColorAllowed(false, nullptr, "xterm"));
  EXPECT_TRUE(RedrawAllowed(true, "xterm"));
  EXPECT_FALSE(RedrawAllowed(true, "dumb"));
  EXPECT_FALSE(RedrawAllowed(false, "xterm"));
}

}  // namespace
}  // namespace nw::report
