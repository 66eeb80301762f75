// The read-side views on constructed campaigns: v_heatmap cells (infrastructure failures are not
// misses), v_boundary (monotone, non-monotone, all-pass, all-fail, cells without answers),
// outcome counts, v_probe_summary medians, and the spec columns broken out of the JSON.
#include <gtest/gtest.h>
#include <sqlite3.h>

#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "db/store.h"
#include "tests/db/campaign_fixture.h"

namespace nw {
namespace {

using testing_db::CampaignBuilder;
using testing_db::ConfigLabel;
using testing_db::MakeProbe;
using testing_db::MakeSpec;
using testing_db::Repeat;
using testing_db::TempDir;

constexpr Outcome P = Outcome::kPass;
constexpr Outcome M = Outcome::kMiss;

class ViewsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto s = Store::Open(dir_.File("nw.db"));
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    store_ = std::move(s).value();
  }

  BoundaryRow Boundary(int64_t campaign, const std::string& config = ConfigLabel()) {
    auto rows = store_->Boundaries(campaign);
    EXPECT_TRUE(rows.ok()) << rows.status().ToString();
    if (rows.ok()) {
      for (const auto& r : *rows) {
        if (r.config == config) return r;
      }
    }
    ADD_FAILURE() << "no boundary row for " << config;
    return {};
  }

  TempDir dir_;
  std::unique_ptr<Store> store_;
};

TEST_F(ViewsTest, HeatmapCountsAnswersAndKeepsInfrastructureFailuresApart) {
  CampaignBuilder b(*store_, "c");
  b.Cell(1000, 0.0, {P, P, M})
      .Cell(1000, 0.5,
            {P, Outcome::kEngineError, Outcome::kTimeout, Outcome::kTruncated, Outcome::kEmpty})
      .Pending(1000, 0.5, 9);
  b.Commit();
  auto cells = store_->Heatmap(b.id());
  ASSERT_TRUE(cells.ok()) << cells.status().ToString();
  ASSERT_EQ(cells->size(), 2u);
  const HeatmapCell& c0 = (*cells)[0];
  EXPECT_EQ(c0.config, ConfigLabel());
  EXPECT_EQ(c0.context_length, 1000);
  EXPECT_DOUBLE_EQ(c0.needle_position, 0.0);
  EXPECT_EQ(c0.trials, 3);
  EXPECT_EQ(c0.passes, 2);
  EXPECT_EQ(c0.errors, 0);
  EXPECT_EQ(c0.pending, 0);
  const HeatmapCell& c1 = (*cells)[1];
  EXPECT_DOUBLE_EQ(c1.needle_position, 0.5);
  EXPECT_EQ(c1.trials, 1);  // engine_error, timeout, truncated, empty are not misses
  EXPECT_EQ(c1.passes, 1);
  EXPECT_EQ(c1.errors, 4);
  EXPECT_EQ(c1.pending, 1);

  auto outcomes = store_->OutcomeCounts(b.id());
  ASSERT_TRUE(outcomes.ok());
  std::map<Outcome, int64_t> by;
  for (const auto& o : *outcomes) {
    EXPECT_EQ(o.config, ConfigLabel());
    by[o.outcome] += o.count;
  }
  EXPECT_EQ(by[P], 3);
  EXPECT_EQ(by[M], 1);
  EXPECT_EQ(by[Outcome::kEngineError], 1);
  EXPECT_EQ(by[Outcome::kTimeout], 1);
  EXPECT_EQ(by[Outcome::kTruncated], 1);
  EXPECT_EQ(by[Outcome::kEmpty], 1);

  auto p = store_->Progress(b.id());
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->total, 9);
  EXPECT_EQ(p->done, 8);
  EXPECT_EQ(p->queued, 1);
  EXPECT_EQ(p->pass, 3);
  EXPECT_EQ(p->miss, 1);
  EXPECT_EQ(p->other, 4);
}

TEST_F(ViewsTest, HeatmapSeparatesConfigurationsAndCampaigns) {
  CampaignBuilder a(*store_, "a");
  a.Cell(1000, 0.0, {P}).Cell(1000, 0.0, {M}, 32).Cell(1000, 0.0, {M}, 16, "cpu-paged");
  a.Commit();
  CampaignBuilder other(*store_, "other");
  other.Cell(8000, 0.0, {M});
  other.Commit();
  auto cells = store_->Heatmap(a.id());
  ASSERT_TRUE(cells.ok());
  ASSERT_EQ(cells->size(), 3u);
  std::map<std::string, int64_t> passes;
  for (const auto& c : *cells) {
    EXPECT_EQ(c.context_length, 1000);
    passes[c.config] = c.passes;
  }
  EXPECT_EQ(passes.at(ConfigLabel(16)), 1);
  EXPECT_EQ(passes.at(ConfigLabel(32)), 0);
  EXPECT_EQ(passes.at(ConfigLabel(16, "cpu-paged")), 0);
}

TEST_F(ViewsTest, BoundaryMonotone) {
  CampaignBuilder b(*store_, "c");
  for (int64_t len : {1000, 2000}) {
    for (double pos : {0.0, 0.5, 1.0}) b.Cell(len, pos, Repeat(P, 2));
  }
  b.Cell(4000, 0.0, Repeat(P, 2)).Cell(4000, 0.5, {P, M}).Cell(4000, 1.0, Repeat(P, 2));
  b.Cell(8000, 0.0, Repeat(M, 2)).Cell(8000, 0.5, Repeat(M, 2)).Cell(8000, 1.0, {P, M});
  b.Commit();
  BoundaryRow r = Boundary(b.id());
  EXPECT_EQ(r.lengths, 4);
  EXPECT_EQ(r.min_length, 1000);
  EXPECT_EQ(r.max_length, 8000);
  EXPECT_EQ(r.l_pass, 2000);
  EXPECT_EQ(r.l_fail, 4000);
  EXPECT_EQ(r.first_unclean, 4000);
  EXPECT_EQ(r.max_clean, 2000);
  EXPECT_TRUE(r.monotone);
  EXPECT_EQ(r.fail_trials, 6);
  EXPECT_EQ(r.fail_passes, 5);
  EXPECT_EQ(r.trials, 24);
  EXPECT_EQ(r.passes, 18);
  EXPECT_EQ(r.errors, 0);
}

TEST_F(ViewsTest, BoundaryNonMonotoneReportsTheFirstFailure) {
  CampaignBuilder b(*store_, "c");
  b.Cell(1000, 0.0, {P}).Cell(1000, 1.0, {P});
  b.Cell(2000, 0.0, {M}).Cell(2000, 1.0, {P});
  b.Cell(4000, 0.0, {P}).Cell(4000, 1.0, {P});
  b.Commit();
  BoundaryRow r = Boundary(b.id());
  EXPECT_EQ(r.l_pass, 1000);
  EXPECT_EQ(r.l_fail, 2000);
  EXPECT_EQ(r.max_clean, 4000);
  EXPECT_FALSE(r.monotone);
  EXPECT_EQ(r.fail_trials, 2);
  EXPECT_EQ(r.fail_passes, 1);
}

TEST_F(ViewsTest, BoundaryAllPassAndAllFail) {
  CampaignBuilder pass(*store_, "pass");
  pass.Cell(1000, 0.0, {P}).Cell(2000, 0.0, {P}).Cell(2000, 0.5, {P});
  pass.Commit();
  BoundaryRow r = Boundary(pass.id());
  EXPECT_EQ(r.l_pass, 2000);
  EXPECT_FALSE(r.l_fail.has_value());
  EXPECT_FALSE(r.first_unclean.has_value());
  EXPECT_TRUE(r.monotone);
  EXPECT_EQ(r.fail_trials, 0);

  CampaignBuilder fail(*store_, "fail");
  fail.Cell(1000, 0.0, {M}).Cell(2000, 0.0, {P, M});
  fail.Commit();
  r = Boundary(fail.id());
  EXPECT_FALSE(r.l_pass.has_value());
  EXPECT_EQ(r.l_fail, 1000);
  EXPECT_EQ(r.first_unclean, 1000);
  EXPECT_FALSE(r.max_clean.has_value());
  EXPECT_TRUE(r.monotone);
  EXPECT_EQ(r.fail_trials, 1);
  EXPECT_EQ(r.fail_passes, 0);
}

TEST_F(ViewsTest, BoundaryPositionsWithoutAnswersAreNeitherFoundNorLost) {
  CampaignBuilder b(*store_, "c");
  b.Cell(1000, 0.0, {P}).Cell(1000, 1.0, {P});
  // At 2000 one position only produced engine errors: no miss, but not "found everywhere".
  b.Cell(2000, 0.0, {P}).Cell(2000, 1.0, Repeat(Outcome::kEngineError, 2));
  b.Cell(4000, 0.0, {P}).Pending(4000, 1.0, 0);
  b.Commit();
  BoundaryRow r = Boundary(b.id());
  EXPECT_EQ(r.l_pass, 1000);
  EXPECT_FALSE(r.l_fail.has_value());
  EXPECT_EQ(r.first_unclean, 2000);
  EXPECT_EQ(r.max_clean, 1000);
  EXPECT_TRUE(r.monotone);
  EXPECT_EQ(r.errors, 2);
  EXPECT_EQ(r.pending, 1);
}

TEST_F(ViewsTest, ProbeSummaryPerLayer) {
  CampaignBuilder b(*store_, "c");
  // Layer 0: in top-k at the last position for 3 of 4 answers; median ranks 1, 3, 5, 10 -> 4.
  // Layer 1: never visible.
  b.Cell(1000, 0.0, {P}).WithProbes({MakeProbe(0, true, 1), MakeProbe(1, false, -1, -1)});
  b.Cell(1000, 0.5, {P}).WithProbes({MakeProbe(0, true, 3), MakeProbe(1, false, -1, -1)});
  b.Cell(2000, 0.0, {M}).WithProbes({MakeProbe(0, false, 10, 7), MakeProbe(1, false, -1, -1)});
  b.Cell(2000, 0.5, {P}).WithProbes({MakeProbe(0, true, 5), MakeProbe(1, false, -1, -1)});
  // Not an answer: its probes are left out.
  b.Cell(4000, 0.0, {Outcome::kEngineError}).WithProbes({MakeProbe(0, true, 0)});
  b.Commit();
  auto stats = store_->ProbeStats(b.id());
  ASSERT_TRUE(stats.ok()) << stats.status().ToString();
  ASSERT_EQ(stats->size(), 2u);
  const LayerProbeStats& l0 = (*stats)[0];
  EXPECT_EQ(l0.config, ConfigLabel());
  EXPECT_EQ(l0.layer, 0);
  EXPECT_EQ(l0.answers, 4);
  EXPECT_EQ(l0.passes, 3);
  EXPECT_EQ(l0.in_topk_last, 3);
  EXPECT_EQ(l0.pass_in_topk_last, 3);
  EXPECT_EQ(l0.visible, 4);
  ASSERT_TRUE(l0.median_rank.has_value());
  EXPECT_DOUBLE_EQ(*l0.median_rank, 4.0);
  EXPECT_DOUBLE_EQ(l0.mean_in_topk_fraction, (0.75 * 3 + 0.25) / 4);
  EXPECT_EQ(l0.best_rank, 1);
  const LayerProbeStats& l1 = (*stats)[1];
  EXPECT_EQ(l1.layer, 1);
  EXPECT_EQ(l1.answers, 4);
  EXPECT_EQ(l1.in_topk_last, 0);
  EXPECT_EQ(l1.visible, 0);
  EXPECT_FALSE(l1.median_rank.has_value());
  EXPECT_FALSE(l1.best_rank.has_value());
}

TEST_F(ViewsTest, ProbeSummaryOddCountMedian) {
  CampaignBuilder b(*store_, "c");
  b.Cell(1000, 0.0, {P}).WithProbes({MakeProbe(2, true, 8)});
  b.Cell(1000, 0.5, {P}).WithProbes({MakeProbe(2, true, 2)});
  b.Cell(1000, 1.0, {M}).WithProbes({MakeProbe(2, false, 40)});
  b.Commit();
  auto stats = store_->ProbeStats(b.id());
  ASSERT_TRUE(stats.ok());
  ASSERT_EQ(stats->size(), 1u);
  EXPECT_DOUBLE_EQ(*(*stats)[0].median_rank, 8.0);
}

TEST_F(ViewsTest, SpecColumnsAreBrokenOutForSql) {
  JobSpec s = MakeSpec(4509, -512, 3, 64, "cpu-paged");
  s.precision.name = "custom";
  s.precision.kv = NumFormat::kBf16;
  auto id = store_->UpsertCampaign("c", "", "", 1);
  ASSERT_TRUE(id.ok());
  ASSERT_TRUE(store_->AddJobs(*id, {s}, 1).ok());
  sqlite3* raw = nullptr;
  ASSERT_EQ(sqlite3_open_v2(dir_.File("nw.db").c_str(), &raw, SQLITE_OPEN_READONLY, nullptr),
            SQLITE_OK);
  sqlite3_stmt* st = nullptr;
  ASSERT_EQ(sqlite3_prepare_v2(raw,
                               "SELECT context_length, needle_position, topk, precision,"
                               " precision_json, backend, trial, task, haystack, config"
                               " FROM v_job_config",
                               -1, &st, nullptr),
            SQLITE_OK);
  ASSERT_EQ(sqlite3_step(st), SQLITE_ROW);
  EXPECT_EQ(sqlite3_column_int64(st, 0), 4509);
  EXPECT_DOUBLE_EQ(sqlite3_column_double(st, 1), -512);
  EXPECT_EQ(sqlite3_column_int(st, 2), 64);
  auto text = [&](int c) {
    return std::string(reinterpret_cast<const char*>(sqlite3_column_text(st, c)));
  };
  EXPECT_EQ(text(3), "custom");
  EXPECT_EQ(nlohmann::json::parse(text(4)), s.precision.ToJson());
  EXPECT_EQ(text(5), "cpu-paged");
  EXPECT_EQ(sqlite3_column_int(st, 6), 3);
  EXPECT_EQ(text(7), "niah-single");
  EXPECT_EQ(text(8), "noise");
  EXPECT_EQ(text(9), "topk=64 precision=custom backend=cpu-paged task=niah-single haystack=noise");
  sqlite3_finalize(st);
  sqlite3_close_v2(raw);
}

// Migration 0007: a job that gave up (retries used up, no result) is failed, not pending, in
// v_heatmap, v_length_status and v_boundary, and v_job_failures says why, next to engine errors
// and timeouts (with their results' errors).
TEST_F(ViewsTest, FailedJobsAreNotPendingAndSayWhy) {
  CampaignBuilder b(*store_, "c");
  b.Cell(1000, 0.0, {P, Outcome::kEngineError})
      .Pending(1000, 0.0, 7)   // gives up below
      .Pending(1000, 0.0, 8)   // gives up below, same reason
      .Pending(1000, 0.0, 9);  // stays queued
  b.Commit();
  for (int trial : {7, 8}) {
    const std::string key = MakeSpec(1000, 0.0, trial, 16, "cpu", b.id()).Key();
    ASSERT_TRUE(store_->RecordLease(key, 1, "w1", 9000, 5000).ok());
    ASSERT_TRUE(store_
                    ->RecordFailure(key, 1, Status::Unavailable("connect 127.0.0.1:9: refused"),
                                    /*will_retry=*/false, 6000)
                    .ok());
  }
  auto cells = store_->Heatmap(b.id());
  ASSERT_TRUE(cells.ok()) << cells.status().ToString();
  ASSERT_EQ(cells->size(), 1u);
  EXPECT_EQ((*cells)[0].trials, 1);
  EXPECT_EQ((*cells)[0].errors, 1);
  EXPECT_EQ((*cells)[0].failed, 2);
  EXPECT_EQ((*cells)[0].pending, 1);
  const BoundaryRow row = Boundary(b.id());
  EXPECT_EQ(row.failed, 2);
  EXPECT_EQ(row.pending, 1);

  auto reasons = store_->FailureReasons(b.id());
  ASSERT_TRUE(reasons.ok()) << reasons.status().ToString();
  ASSERT_EQ(reasons->size(), 2u);
  EXPECT_EQ((*reasons)[0].config, ConfigLabel());
  EXPECT_EQ((*reasons)[0].kind, "failed");
  EXPECT_EQ((*reasons)[0].reason, "unavailable: connect 127.0.0.1:9: refused");
  EXPECT_EQ((*reasons)[0].jobs, 2);
  EXPECT_EQ((*reasons)[1].kind, "engine_error");
  EXPECT_EQ((*reasons)[1].reason, "resource_exhausted: simulated");
  EXPECT_EQ((*reasons)[1].jobs, 1);
}

// Migration 0007: an http job's label names its server and model (and api when chat), so two
// servers are two configurations; db/store.h ConfigLabel builds the same string.
TEST_F(ViewsTest, HttpConfigurationsAreNamedByServerAndModel) {
  auto http_job = [](const std::string& url, const std::string& model, const std::string& api) {
    JobSpec s = MakeSpec(1000, 0.5, 0, 16, "http");
    HttpBackendSpec h;
    h.url = url;
    h.model = model;
    h.api = api;
    h.tokenizer = "/t/tokenizer.json";
    h.tokenizer_digest = "abc";
    s.http = h;
    return s;
  };
  const std::vector<JobSpec> jobs = {http_job("http://10.0.0.1:8000", "tiny-v4", "completions"),
                                     http_job("http://10.0.0.2:8000/v1", "tiny-v4", "completions"),
                                     http_job("http://10.0.0.1:8000", "big", "chat"),
                                     MakeSpec(1000, 0.5, 0, 16, "cpu")};
  auto id = store_->UpsertCampaign("c", "", "", 1);
  ASSERT_TRUE(id.ok());
  ASSERT_TRUE(store_->AddJobs(*id, jobs, 1).ok());
  auto samples = store_->CampaignSamples(*id, false);
  ASSERT_TRUE(samples.ok()) << samples.status().ToString();
  ASSERT_EQ(samples->size(), 4u);
  std::map<std::string, std::string> label_of;  // key -> v_job_config label
  for (const CampaignSample& s : *samples) label_of[s.job.key] = s.config;
  for (const JobSpec& j : jobs) EXPECT_EQ(label_of[j.Key()], ConfigLabel(j));
  EXPECT_EQ(label_of[jobs[0].Key()],
            "topk=16 precision=fp32 backend=http:tiny-v4@http://10.0.0.1:8000 task=niah-single "
            "haystack=noise");
  EXPECT_EQ(BackendLabel(jobs[1]), "http:tiny-v4@http://10.0.0.2:8000/v1");
  EXPECT_EQ(BackendLabel(jobs[2]), "http-chat:big@http://10.0.0.1:8000");
  EXPECT_EQ(label_of[jobs[3].Key()], ConfigLabel());
  auto cells = store_->Heatmap(*id);
  ASSERT_TRUE(cells.ok());
  EXPECT_EQ(cells->size(), 4u);  // four configurations, one cell each
}

// Migration 0009: sampling parameters join an http label (they change the answers); https URLs,
// streaming and the CA file do not change it beyond the URL; results carry their streaming
// latency through the store.
TEST_F(ViewsTest, HttpSamplingIsNamedAndStreamingLatencyIsStored) {
  auto http_job = [](const std::string& url, const HttpSampling& sampling, bool stream) {
    JobSpec s = MakeSpec(1000, 0.5, 0, 16, "http");
    HttpBackendSpec h;
    h.url = url;
    h.model = "tiny";
    h.tokenizer = "/t/tokenizer.json";
    h.tokenizer_digest = "abc";
    h.sampling = sampling;
    h.stream = stream;
    s.http = h;
    return s;
  };
  HttpSampling sampled;
  sampled.temperature = 0.7;
  sampled.seed = 7;
  HttpSampling min_tokens;
  min_tokens.min_tokens = 3;
  const std::vector<JobSpec> jobs = {http_job("http://10.0.0.1:8000", {}, false),
                                     http_job("http://10.0.0.1:8000", sampled, false),
                                     http_job("https://10.0.0.1:8443", min_tokens, true)};
  auto id = store_->UpsertCampaign("c", "", "", 1);
  ASSERT_TRUE(id.ok());
  ASSERT_TRUE(store_->AddJobs(*id, jobs, 1).ok());
  auto samples = store_->CampaignSamples(*id, false);
  ASSERT_TRUE(samples.ok()) << samples.status().ToString();
  std::map<std::string, std::string> label_of;
  for (const CampaignSample& s : *samples) label_of[s.job.key] = s.config;
  for (const JobSpec& j : jobs) EXPECT_EQ(label_of[j.Key()], ConfigLabel(j));
  EXPECT_EQ(label_of[jobs[0].Key()],
            "topk=16 precision=fp32 backend=http:tiny@http://10.0.0.1:8000 task=niah-single "
            "haystack=noise");
  EXPECT_EQ(label_of[jobs[1].Key()],
            "topk=16 precision=fp32 backend=http:tiny@http://10.0.0.1:8000 task=niah-single "
            "haystack=noise sampling={\"seed\":7,\"temperature\":0.7}");
  EXPECT_EQ(label_of[jobs[2].Key()],
            "topk=16 precision=fp32 backend=http:tiny@https://10.0.0.1:8443 task=niah-single "
            "haystack=noise sampling={\"min_tokens\":3}");

  // A streamed result keeps its figures; a plain one has none.
  for (size_t i = 1; i < jobs.size(); ++i) {
    const Status lease = store_->RecordLease(jobs[i].Key(), 1, "w", 100000, 2000);
    ASSERT_TRUE(lease.ok()) << lease.ToString();
  }
  JobResult plain;
  plain.job_key = jobs[1].Key();
  plain.attempt = 1;
  plain.outcome = Outcome::kPass;
  JobResult streamed = plain;
  streamed.job_key = jobs[2].Key();
  streamed.stream = StreamTiming{12.5, 3.25, 3.0, 7.5, 4};
  ASSERT_TRUE(store_->CommitResults({plain, streamed}, 3000).ok());
  auto results = store_->Results(*id);
  ASSERT_TRUE(results.ok()) << results.status().ToString();
  ASSERT_EQ(results->size(), 2u);
  for (const JobResult& r : *results) {
    if (r.job_key == streamed.job_key) {
      ASSERT_TRUE(r.stream.has_value());
      EXPECT_TRUE(*r.stream == *streamed.stream);
    } else {
      EXPECT_FALSE(r.stream.has_value());
    }
  }
  auto with = store_->CampaignSamples(*id, false);
  ASSERT_TRUE(with.ok());
  int seen = 0;
  for (const CampaignSample& s : *with) {
    if (s.job.key != streamed.job_key) continue;
    ASSERT_TRUE(s.result && s.result->stream);
    EXPECT_EQ(s.result->stream->itl_p95_ms, 7.5);
    ++seen;
  }
  EXPECT_EQ(seen, 1);
}

}  // namespace
}  // namespace nw
